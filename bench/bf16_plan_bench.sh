#!/usr/bin/env bash
# bf16 against fp32 in the plan (issue 53): for the paper's large models, each training step
# (SGD) planned by tofu-plan in fp32 and with --precision bf16, on 8 workers without a budget
# to speak of (the plan of least communication) and no recomputation:
# - the planned peak per worker (the memory planner's arena) and the tiles live at it by
#   role, activations and gradients apart;
# - the communication per step, every worker counted;
# - with --fit 80GB (74.51 GiB per worker), the workers each precision needs.
# Issue 53's goal: bf16 at most 0.55x fp32's peak where activations dominate it. A
# benchmark: it prints a markdown table and asserts nothing.
#
#   bench/bf16_plan_bench.sh [--workers K] [--skip-fit] [--models "NAME:BATCH ..."]
set -euo pipefail
cd "$(dirname "$0")/.."
workers=8
fit=1
models="wresnet-152-10:8 rnn-10-8K:512 gpt-12-768-12-1024:8 gpt-48-6144-48-2048:8"
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers="$2"; shift ;;
    --skip-fit) fit=0 ;;
    --models) models="$2"; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bf16_plan_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

tools/setup.sh
bazel build //tofu_plan:tofu-plan >/dev/null 2>&1 || bazel build //tofu_plan:tofu-plan
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp bazel-bin/tofu_plan/tofu-plan "$tmp/" # ops/: found here
plan="$tmp/tofu-plan"

for mb in $models; do
  m=${mb%%:*} b=${mb##*:}
  for p in fp32 bf16; do
    echo "bf16_plan_bench: $m batch $b, $p" >&2
    common=(--model "$m" --batch "$b" --train --optimizer sgd --recompute none --precision "$p"
            --format=json)
    # A budget no plan reaches: the plan of least communication, memory-planned.
    "$plan" "${common[@]}" --workers "$workers" --memory-per-worker 1000TB >"$tmp/$m-$p.json"
    if [ "$fit" = 1 ]; then
      "$plan" "${common[@]}" --fit 80GB >"$tmp/$m-$p-fit.json" 2>/dev/null ||
        echo '{}' >"$tmp/$m-$p-fit.json"
    else
      echo '{}' >"$tmp/$m-$p-fit.json"
    fi
  done
done

python3 - "$tmp" "$workers" $models <<'PY'
import json, sys
tmp, k, models = sys.argv[1], sys.argv[2], sys.argv[3:]
G = 2.0 ** 30
print()
print(f"| model | batch | k | fp32 peak per worker | bf16 peak | bf16 / fp32 peak "
      f"| activations at the peak, fp32 | bf16 | gradients at the peak, fp32 | bf16 "
      f"| weights at the peak (fp32 both) | fp32 communication | bf16 "
      f"| bf16 / fp32 communication | `--fit 80GB` workers, fp32 | bf16 |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
      "| ---: | ---: | ---: |")
for mb in models:
    m, b = mb.split(":")
    run = {p: json.load(open(f"{tmp}/{m}-{p}.json")) for p in ("fp32", "bf16")}
    fit = {p: json.load(open(f"{tmp}/{m}-{p}-fit.json")) for p in ("fp32", "bf16")}
    peak = {p: run[p]["memory"]["planned_peak_bytes"] for p in run}
    tiles = {p: run[p]["memory"]["live_tiles_at_most"] for p in run}
    comm = {p: run[p]["communication_bytes"] for p in run}
    workers = {p: fit[p].get("fit", {}).get("workers") for p in fit}
    def gib(x):
        return f"{x / G:.2f} GiB"
    def w(p):
        return str(workers[p]) if workers[p] else "-"
    print(f"| {m} | {b} | {k} | {gib(peak['fp32'])} | {gib(peak['bf16'])} "
          f"| {peak['bf16'] / peak['fp32']:.2f}x "
          f"| {gib(tiles['fp32']['activations'])} | {gib(tiles['bf16']['activations'])} "
          f"| {gib(tiles['fp32']['gradients'])} | {gib(tiles['bf16']['gradients'])} "
          f"| {gib(tiles['fp32']['weights'])} "
          f"| {comm['fp32'] / G:.1f} GiB | {comm['bf16'] / G:.1f} GiB "
          f"| {comm['bf16'] / comm['fp32']:.2f}x | {w('fp32')} | {w('bf16')} |")
PY
