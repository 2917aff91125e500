#!/usr/bin/env bash
# The step-time estimate against measured steps: calibrates this machine (tofu-run
# --calibrate, into a temporary file), then runs each model on the CPU engine at batch 32 on
# 1, 2 and 4 workers (threads sharing the cores) and on 2 MPI processes, and prints per run
# the median measured step, the estimate (planner/step_time.h) and their ratio, then the
# worst ratio either way. A benchmark: it prints a table, it asserts nothing.
#
#   bench/step_time_bench.sh [--steps N] [--models "mlp gpt-2-256-4-64 ..."] [--batch B]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=6
batch=32
models="mlp wresnet-50-1-i32-c8-k10 gpt-2-256-4-64 rnn-2-256 resnet18-train"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift ;;
    --models) models="$2"; shift ;;
    --batch) batch="$2"; shift ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "step_time_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

tools/setup.sh
bazel build -c opt //tofu_run:tofu-run >/dev/null 2>&1 || bazel build -c opt //tofu_run:tofu-run
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp bazel-bin/tofu_run/tofu-run "$tmp/tofu-run" # the operator library: ops/ here
run="$tmp/tofu-run"
export TOFU_CPU_MODEL="$tmp/cpu-model.json"
echo "step_time_bench: calibrating" >&2
"$run" --calibrate >"$tmp/calibration.txt"

case " $models " in
  *" resnet18-train "*)
    /usr/bin/python3 bench/resnet18_train_onnx.py "$tmp/resnet18_train.onnx" 2>/dev/null
    ;;
esac

if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
mpi=(mpirun --oversubscribe --bind-to none)
for m in $models; do
  case "$m" in
    resnet18-train) src="--onnx $tmp/resnet18_train.onnx" ;;
    *) src="--model $m" ;;
  esac
  echo "step_time_bench: $m" >&2
  common="$src --batch $batch --lr 0.01 --steps $steps --format=json"
  "$run" $src --batch "$batch" --workers 1 --steps 1 >/dev/null # compiles the kernels
  for k in 1 2 4; do
    "$run" $common --workers "$k" >"$tmp/$m.k$k.json"
  done
  "${mpi[@]}" -np 2 "$run" --backend mpi $common >"$tmp/$m.mpi2.json"
done

python3 - "$tmp" "$models" "$batch" "$steps" <<'PY'
import json, os, sys
tmp, models, batch, steps = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4]
print(open(os.path.join(tmp, "calibration.txt")).read().split("\n\n", 1)[1].rsplit("\n\n", 1)[0])
print()
print("| model | workers | measured step | estimated | measured / estimated | estimate: compute | communication |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
ms = lambda s: f"{s * 1e3:.1f} ms"
worst = []
for m in models:
    for run, label in (("k1", "1 thread"), ("k2", "2 threads"), ("k4", "4 threads"), ("mpi2", "2 MPI processes")):
        p = os.path.join(tmp, f"{m}.{run}.json")
        if not os.path.exists(p):
            continue
        j = json.load(open(p))
        med = j["median_step_seconds"]
        e = j["estimated_step"]
        w = e["workers"][e["slowest_worker"]]
        compute = w["forward_seconds"] + w["backward_seconds"] + w["update_seconds"]
        r = med / e["seconds"]
        worst.append((max(r, 1 / r), m, label, r))
        print(f"| {m} | {label} | {ms(med)} | {ms(e['seconds'])} | {r:.2f} | {ms(compute)} | {ms(w['communication_seconds'])} |")
w = max(worst)
print(f"\nbatch {batch}, median of {steps} steps, {os.cpu_count()} cores; worst: {w[1]} on {w[2]}, "
      f"measured / estimated {w[3]:.2f}")
PY
