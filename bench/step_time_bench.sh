#!/usr/bin/env bash
# The step-time estimate against measured steps: calibrates this machine (tofu-run
# --calibrate, into a temporary file), then runs each model on the CPU engine at batch 32:
# tofu's plan on 1, 2 and 4 workers (threads sharing the cores) and on 2 MPI processes, and
# each other plan kind of --kinds on 2 threads and on 2 MPI processes (data-parallel,
# megatron, zero3, and 2 pipeline stages of 1 worker over 4 microbatches under 1f1b and
# gpipe). It prints per run the median measured step, the estimate (planner/step_time.h)
# and their ratio, then the median of |estimated / measured - 1|, the runs within 1.25x and
# the worst ratio. A run that fails is listed as failed. A benchmark: it prints a table, it
# asserts nothing.
#
#   bench/step_time_bench.sh [--steps N] [--models "mlp gpt-2-256-4-64 ..."] [--batch B]
#                            [--kinds "data-parallel megatron zero3 1f1b gpipe"]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=6
batch=32
models="mlp wresnet-50-1-i32-c8-k10 gpt-2-256-4-64 rnn-2-256 resnet18-train"
kinds="data-parallel megatron zero3 1f1b gpipe"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift ;;
    --models) models="$2"; shift ;;
    --batch) batch="$2"; shift ;;
    --kinds) kinds="$2"; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
    "$run" $common --workers "$k" >"$tmp/$m.tofu.k$k.json" || rm -f "$tmp/$m.tofu.k$k.json"
  done
  "${mpi[@]}" -np 2 "$run" --backend mpi $common >"$tmp/$m.tofu.mpi2.json" ||
    rm -f "$tmp/$m.tofu.mpi2.json"
  for kind in $kinds; do
    case "$kind" in
      1f1b|gpipe) plan="--stages 2 --microbatches 4 --schedule $kind" ;;
      *) plan="--algo $kind" ;;
    esac
    echo "step_time_bench: $m $kind" >&2
    "$run" $common $plan --workers 2 >"$tmp/$m.$kind.k2.json" 2>"$tmp/err.txt" ||
      { rm -f "$tmp/$m.$kind.k2.json"; tail -1 "$tmp/err.txt" >&2; }
    "${mpi[@]}" -np 2 "$run" --backend mpi $common $plan >"$tmp/$m.$kind.mpi2.json" 2>"$tmp/err.txt" ||
      { rm -f "$tmp/$m.$kind.mpi2.json"; tail -1 "$tmp/err.txt" >&2; }
  done
done

python3 - "$tmp" "$models" "$batch" "$steps" "tofu $kinds" <<'PY'
import json, os, statistics, sys
tmp, models, batch, steps, kinds = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4], sys.argv[5].split()
print(open(os.path.join(tmp, "calibration.txt")).read().split("\n\n", 1)[1].rsplit("\n\n", 1)[0])
print()
print("| model | plan | workers | measured step | estimated | measured / estimated | estimate: compute | communication |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
ms = lambda s: f"{s * 1e3:.1f} ms"
names = {"1f1b": "2 stages, 1f1b (M = 4)", "gpipe": "2 stages, gpipe (M = 4)"}
worst = []
for m in models:
    for kind in kinds:
        for run, label in (("k1", "1 thread"), ("k2", "2 threads"), ("k4", "4 threads"), ("mpi2", "2 MPI processes")):
            if kind != "tofu" and run in ("k1", "k4"):
                continue
            p = os.path.join(tmp, f"{m}.{kind}.{run}.json")
            if not os.path.exists(p):
                print(f"| {m} | {names.get(kind, kind)} | {label} | failed | | | | |")
                continue
            j = json.load(open(p))
            med = j["median_step_seconds"]
            e = j["estimated_step"]
            w = e["workers"][e["slowest_worker"]]
            compute = w["forward_seconds"] + w["backward_seconds"] + w["update_seconds"]
            r = med / e["seconds"]
            worst.append((max(r, 1 / r), m, f"{names.get(kind, kind)} on {label}", r))
            print(f"| {m} | {names.get(kind, kind)} | {label} | {ms(med)} | {ms(e['seconds'])} | {r:.2f} | {ms(compute)} | {ms(w['communication_seconds'])} |")
w = max(worst)
err = statistics.median(abs(1 / x[3] - 1) for x in worst)
within = sum(1 for x in worst if x[0] <= 1.25)
print(f"\nbatch {batch}, median of {steps} steps, {os.cpu_count()} cores; median |estimated / measured - 1| "
      f"{err:.2f}; {within} of {len(worst)} runs within 1.25x; worst: {w[1]}, {w[2]}, measured / estimated {w[3]:.2f}")
PY
