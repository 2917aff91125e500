#!/usr/bin/env bash
# The paper's Figures 8 and 9, estimated: the training throughput of WResNet and RNN on 8
# GPUs relative to the ideal (one GPU's throughput times 8, as if its memory had no limit),
# for tofu's plan and the baselines' (data-parallel, spartan, all-row, equal-chop, icml18),
# today's (zero3: FSDP's full sharding; megatron: Megatron-LM's tensor parallelism) and the
# paper's SmallBatch (one worker's largest batch within 12 GB, its throughput times 8),
# each plan's step estimated on an H100 model (planner/step_time.h: data-sheet peak rates,
# NVLink between every pair of workers, no overlap). Memory is not checked: every plan runs
# the paper's global batch (WResNet 128, RNN 512). These are estimates of a roofline model,
# not measurements. Prints two markdown tables.
#
#   bench/paper_throughput_bench.sh [--device h100|a100|FILE] [--workers K]
set -euo pipefail
cd "$(dirname "$0")/.."
device=h100
workers=8
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device="$2"; shift ;;
    --workers) workers="$2"; shift ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

table() { # title batch models...
  local title="$1" batch="$2"; shift 2
  echo
  echo "$title (global batch $batch, $workers workers, estimated on $device): throughput / ideal"
  echo
  echo "| model | ideal samples/s | $(echo $algos | sed 's/ / | /g') | smallbatch ($smallbatch_memory) |"
  echo "| --- | ---: |$(for a in $algos; do printf ' ---: |'; done) ---: |"
  for m in "$@"; do
    echo "paper_throughput_bench: $m" >&2
    one=$(run "$m" "$batch" 1 tofu)
    row="| $m | $(python3 -c "print(f'{$workers * $batch / $one:.0f}')") |"
    for a in $algos; do
      t=$(run "$m" "$batch" "$workers" "$a")
      if [ "$t" = "-" ]; then row="$row - |"; else
        row="$row $(python3 -c "print(f'{$one / ($workers * $t):.2f}')") |"; fi
    done
    echo "$row $(smallbatch "$m" "$batch" "$workers" "$one") |"
  done
}

table "WResNet (Figure 8)" 128 \
  wresnet-50-4 wresnet-50-6 wresnet-50-8 wresnet-50-10 \
  wresnet-101-4 wresnet-101-6 wresnet-101-8 wresnet-101-10 \
  wresnet-152-4 wresnet-152-6 wresnet-152-8 wresnet-152-10
table "RNN (Figure 9)" 512 \
  rnn-6-4K rnn-6-6K rnn-6-8K rnn-8-4K rnn-8-6K rnn-8-8K rnn-10-4K rnn-10-6K rnn-10-8K
