#!/usr/bin/env bash
# The paper's Figures 8 and 9, estimated: the training throughput of WResNet and RNN on 8
# GPUs relative to the ideal (one GPU's throughput times 8, as if its memory had no limit),
# for tofu's plan and the baselines' (data-parallel, spartan, all-row, equal-chop, icml18),
# today's (zero3: FSDP's full sharding; megatron: Megatron-LM's tensor parallelism) and the
# paper's other three: SmallBatch (one worker's largest batch within 12 GB, its throughput
# times 8), Swapping (one worker's whole batch within 12 GB, tensors swapped over its PCIe
# link, times 8) and, for RNN only as in the paper, operator placement (its layers
# round-robin on the 8, pipelined over 8 microbatches). Each plan's step is estimated on an
# H100 model (planner/step_time.h: data-sheet peak rates, NVLink between every pair of
# workers, no overlap). Memory is not checked but by smallbatch and swap: every plan runs
# the paper's global batch (WResNet 128, RNN 512). These are estimates of a roofline model,
# not measurements. Prints two markdown tables.
#
#   bench/paper_throughput_bench.sh [--device h100|a100|FILE] [--workers K] [--columns LIST]
#
# --columns: the columns to fill, by commas (default all: tofu, the baselines, placement,
# smallbatch, swap); the others print '.'.
set -euo pipefail
cd "$(dirname "$0")/.."
device=h100
workers=8
columns=all
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device="$2"; shift ;;
    --workers) workers="$2"; shift ;;
    --columns) columns=",$2,"; shift ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "paper_throughput_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
tools/setup.sh >/dev/null
bazel build -c opt //tofu_plan:tofu-plan >/dev/null 2>&1 || bazel build -c opt //tofu_plan:tofu-plan
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp bazel-bin/tofu_plan/tofu-plan "$tmp/tofu-plan" # the operator library: ops/ here
algos="tofu data-parallel spartan allrow equalchop icml18 zero3 megatron"
# SmallBatch (the paper's): one worker trains the largest batch that fits the paper's 12 GB
# GPU (the memory planner's peak), and 8 are credited with 8 times its samples a second.
smallbatch_memory=12GB
wanted() { [ "$columns" = all ] || [[ "$columns" == *",$1,"* ]]; }

run() { # model batch workers algo -> seconds (or "-" where the search fails)
  "$tmp/tofu-plan" --model "$1" --batch "$2" --train --optimizer sgd --workers "$3" --algo "$4" \
    --device "$device" --format=json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["step_time"]["seconds"])' 2>/dev/null ||
    echo "-"
}

smallbatch() { # model batch workers one-worker-step -> throughput / ideal (the batch found)
  if "$tmp/tofu-plan" --model "$1" --batch "$2" --train --optimizer sgd --workers "$3" \
       --algo smallbatch --memory-per-worker "$smallbatch_memory" --device "$device" \
       --format=json >"$tmp/sb.json" 2>/dev/null; then
    python3 - "$tmp/sb.json" "$3" "$2" "$4" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
k, batch, one = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
print(f"{j['samples_per_second'] / (k * batch / one):.2f} (batch {j['batch']})")
PY
  else
    echo "-"
  fi
}

# Swapping (the paper's): one worker trains the global batch within 12 GB, swapping over its
# host link; where a node alone needs more than 12 GB, the batch is halved until none does
# (the paper's "largest batch that fits"), and 8 are credited with 8 times its samples a second.
swap() { # model batch workers one-worker-step -> throughput / ideal (the batch, bytes moved)
  local b="$2"
  while [ "$b" -ge 1 ]; do
    if "$tmp/tofu-plan" --model "$1" --batch "$b" --train --optimizer sgd --workers "$3" \
         --algo swap --memory-per-worker "$smallbatch_memory" --device "$device" \
         --format=json >"$tmp/sw.json" 2>/dev/null; then
      python3 - "$tmp/sw.json" "$3" "$2" "$4" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
k, batch, one = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
moved = (j["bytes_to_device"] + j["bytes_to_host"]) / 2**30
print(f"{j['samples_per_second'] / (k * batch / one):.2f} (batch {j['batch']}, {moved:.0f} GiB moved)")
PY
      return
    fi
    b=$((b / 2))
  done
  echo "-"
}

table() { # title batch placement(yes|no) models...
  local title="$1" batch="$2" placement="$3"; shift 3
  local cols="$algos"
  [ "$placement" = yes ] && cols="$cols placement"
  echo
  echo "$title (global batch $batch, $workers workers, estimated on $device): throughput / ideal"
  echo
  echo "| model | ideal samples/s | $(echo $cols | sed 's/ / | /g') | smallbatch ($smallbatch_memory) | swap ($smallbatch_memory) |"
  echo "| --- | ---: |$(for a in $cols; do printf ' ---: |'; done) ---: | ---: |"
  for m in "$@"; do
    echo "paper_throughput_bench: $m" >&2
    one=$(run "$m" "$batch" 1 tofu)
    row="| $m | $(python3 -c "print(f'{$workers * $batch / $one:.0f}')") |"
    for a in $cols; do
      if ! wanted "$a"; then row="$row . |"; continue; fi
      t=$(run "$m" "$batch" "$workers" "$a")
      if [ "$t" = "-" ]; then row="$row - |"; else
        row="$row $(python3 -c "print(f'{$one / ($workers * $t):.2f}')") |"; fi
    done
    if wanted smallbatch; then row="$row $(smallbatch "$m" "$batch" "$workers" "$one") |"; else row="$row . |"; fi
    if wanted swap; then row="$row $(swap "$m" "$batch" "$workers" "$one") |"; else row="$row . |"; fi
    echo "$row"
  done
}

# Operator placement for RNN only: the paper skips it for WResNet, whose layers run one
# after another.
table "WResNet (Figure 8)" 128 no \
  wresnet-50-4 wresnet-50-6 wresnet-50-8 wresnet-50-10 \
  wresnet-101-4 wresnet-101-6 wresnet-101-8 wresnet-101-10 \
  wresnet-152-4 wresnet-152-6 wresnet-152-8 wresnet-152-10
table "RNN (Figure 9)" 512 yes \
  rnn-6-4K rnn-6-6K rnn-6-8K rnn-8-4K rnn-8-6K rnn-8-8K rnn-10-4K rnn-10-6K rnn-10-8K
