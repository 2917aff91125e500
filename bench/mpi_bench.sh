#!/usr/bin/env bash
# Threads against processes: the median step time and the bytes moved per step of tofu-run at
# k = 2 and 4 workers, as threads of one process (--backend cpu) and as one process per
# worker under mpirun (--backend mpi) over each transport: one-sided gets from the owners' RMA
# windows, and matched sends and receives. The machine's cores are shared among the workers
# either way (each worker runs cores / k OpenMP threads). Prints a markdown table; every run's
# bytes must equal the plan's prediction.
#
#   bench/mpi_bench.sh [--steps N] [--models "mlp wresnet-50-1-i32-c8-k10 ..."] [--workers "2 4"]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=20
models="mlp wresnet-50-1-i32-c8-k10 gpt-2-32-4-16 rnn-2-256"
ks="2 4"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift ;;
    --models) models="$2"; shift ;;
    --workers) ks="$2"; shift ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "mpi_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

tools/setup.sh
bazel build -c opt //tofu_run:tofu-run >/dev/null 2>&1 || bazel build -c opt //tofu_run:tofu-run
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp bazel-bin/tofu_run/tofu-run "$tmp/tofu-run"
run="$tmp/tofu-run"
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
mpi=(mpirun --oversubscribe --bind-to none)

# figures FILE: "median_ms bytes ok" from a JSON report.
figures() {
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.2f %d %s" % (1e3 * j["median_step_seconds"], j["bytes_moved"], "equal" if j["bytes_moved"] == j["predicted_bytes"] else "DIFFERENT"))' "$1"
}

echo "| model | k | threads ms | processes, get ms | processes, sendrecv ms | get / threads | sendrecv / threads | bytes moved per step | = plan |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
for m in $models; do
  for k in $ks; do
    common=(--model "$m" --format=json)
    # Kernels compiled once, outside the timed runs.
    "$run" "${common[@]}" --workers "$k" --steps 1 >/dev/null
    common+=(--steps "$steps")
    "$run" "${common[@]}" --workers "$k" >"$tmp/t.json"
    "${mpi[@]}" -np "$k" "$run" --backend mpi --mpi-transport get "${common[@]}" >"$tmp/g.json"
    "${mpi[@]}" -np "$k" "$run" --backend mpi --mpi-transport sendrecv "${common[@]}" >"$tmp/s.json"
    read -r tms tb tok <<<"$(figures "$tmp/t.json")"
    read -r gms gb gok <<<"$(figures "$tmp/g.json")"
    read -r sms sb sok <<<"$(figures "$tmp/s.json")"
    ok=$([ "$tok $gok $sok" = "equal equal equal" ] && [ "$tb" = "$gb" ] && [ "$gb" = "$sb" ] && echo yes || echo NO)
    python3 -c 'import sys; m,k,t,g,s,b,ok=sys.argv[1:]; t,g,s=float(t),float(g),float(s); print(f"| {m} | {k} | {t:.2f} | {g:.2f} | {s:.2f} | {g/t:.2f} | {s/t:.2f} | {int(b):,} | {ok} |")' \
      "$m" "$k" "$tms" "$gms" "$sms" "$tb" "$ok"
  done
done
