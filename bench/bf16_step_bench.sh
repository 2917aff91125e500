#!/usr/bin/env bash
# The bf16 training-step benchmark: tofu-run's median step time and planned peak on the CPU
# engine with --precision bf16 against fp32, for the zoo models and torchvision's resnet18
# (training mode), at k = 1 and 2 workers (threads; the machine's cores shared among them).
# Issue 53's goal on a CPU without bfloat16 arithmetic: bf16 at most 1.3x fp32's time.
# Prints a markdown table.
#
#   bench/bf16_step_bench.sh [--steps N] [--batch B] [--models "mlp gpt-2-256-4-64 ..."]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=6
batch=32
models="mlp wresnet-50-1-i32-c8-k10 gpt-2-256-4-64 rnn-2-256 resnet18-train"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift ;;
    --batch) batch="$2"; shift ;;
    --models) models="$2"; shift ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bf16_step_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

tools/setup.sh
bazel build -c opt //tofu_run:tofu-run >/dev/null 2>&1 || bazel build -c opt //tofu_run:tofu-run
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp bazel-bin/tofu_run/tofu-run "$tmp/tofu-run"

case " $models " in
  *" resnet18-train "*) /usr/bin/python3 bench/resnet18_train_onnx.py "$tmp/resnet18_train.onnx" 2>/dev/null ;;
esac

for m in $models; do
  case "$m" in
    resnet18-train) src="--onnx $tmp/resnet18_train.onnx" ;;
    *) src="--model $m" ;;
  esac
  export TOFU_KERNEL_CACHE="$tmp/cache-$m"
  for p in fp32 bf16; do
    echo "bf16_step_bench: $m $p" >&2
    "$tmp/tofu-run" $src --batch "$batch" --workers 1 --steps 1 --precision $p --format=json >/dev/null # compiles the kernels
    for k in 1 2; do
      "$tmp/tofu-run" $src --batch "$batch" --lr 0.01 --steps "$steps" --workers "$k" --precision $p \
        --format=json >"$tmp/$m.$p.k$k.json"
    done
  done
done

python3 - "$tmp" "$models" "$batch" "$steps" <<'PY'
import json, os, sys
tmp, models, batch, steps = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4]
load = lambda n: json.load(open(os.path.join(tmp, n)))
ms = lambda s: f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.1f} s"
mib = lambda b: f"{b / 2**20:.1f} MiB"
print("| model | k | fp32 step | bf16 step | bf16 / fp32 time | fp32 peak per worker | bf16 peak | bf16 / fp32 peak |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for m in models:
    for k in (1, 2):
        f, b = load(f"{m}.fp32.k{k}.json"), load(f"{m}.bf16.k{k}.json")
        tf, tb = f["median_step_seconds"], b["median_step_seconds"]
        pf, pb = max(f["worker_peak_bytes"]), max(b["worker_peak_bytes"])
        print(f"| {m} | {k} | {ms(tf)} | {ms(tb)} | {tb / tf:.2f} | {mib(pf)} | {mib(pb)} | {pb / pf:.2f} |")
print(f"\nbatch {batch}, median of {steps} steps, {os.cpu_count()} cores shared by the k workers; "
      f"peak = the largest worker's arena (the memory plan's peak)")
PY
