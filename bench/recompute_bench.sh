#!/usr/bin/env bash
# Recomputation (planner/recompute.h), two tables. A benchmark: it prints tables, it asserts
# nothing.
#
# 1. Workers needed at 80 GB each and the estimated step on H100s (nodes of 8 on NVLink,
#    InfiniBand between them: --topology, so the counts are 1 to 8, then 16, 24, ...), for
#    the paper's large models (tofu-plan --train --optimizer sgd --fit 80GB): without
#    recomputation, with it
#    (auto), and with it in bf16; beside them, on paper, ZeRO-3 with activation
#    checkpointing: SGD's float32 weights and gradients (8 bytes per parameter) sharded over
#    k, every layer's input kept whole on every worker, and one layer's activations while it
#    is recomputed (the formulas per model family are in the Python below).
# 2. This machine: each model on 2 workers (threads, then MPI processes) at a budget of 0.6x
#    its planned peak without recomputation (tofu-run --memory-per-worker, --recompute auto),
#    and the GPT at 0.95x too (its vocabulary-sized logits, which the backward pass reads
#    first, set its peak), verified against the unpartitioned step and against the step
#    without recomputation; the arena of each worker, the measured median step with and
#    without, and the estimated overhead (tofu-plan --device cpu, on the calibrated model).
#
#   bench/recompute_bench.sh [--steps N] [--skip-fit] [--skip-run]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=12
fit=1
runs=1
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift ;;
    --skip-fit) fit=0 ;;
    --skip-run) runs=0 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "recompute_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

tools/setup.sh
bazel build -c opt //tofu_run:tofu-run //tofu_plan:tofu-plan >/dev/null 2>&1 ||
  bazel build -c opt //tofu_run:tofu-run //tofu_plan:tofu-plan
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp bazel-bin/tofu_run/tofu-run bazel-bin/tofu_plan/tofu-plan "$tmp/" # ops/: found here
run="$tmp/tofu-run"
plan="$tmp/tofu-plan"

# H100 SXM nodes of 8: NVLink 4 within a node (450 GB/s each way), 400 Gbit/s InfiniBand per
# GPU between nodes; up to 16 nodes.
machine="16x8:50GB/s@5us,450GB/s@3us"
if [ "$fit" = 1 ]; then
  echo
  echo "| model | batch | fp32: workers | est. step | fp32 + recomputation: workers | est. step | recomputed | bf16 + recomputation: workers | est. step | ZeRO-3 + checkpointing (paper): workers | --fit time (s) |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for mb in "rnn-10-8K 512" "wresnet-152-10 8" "gpt-48-6144-48-2048 8"; do
    set -- $mb
    m=$1 b=$2
    echo "recompute_bench: $m" >&2
    common=(--model "$m" --batch "$b" --train --optimizer sgd --fit 80GB --device h100
      --topology "$machine" --format=json)
    start=$SECONDS
    "$plan" "${common[@]}" --recompute none >"$tmp/none.json" 2>/dev/null || echo '{}' >"$tmp/none.json"
    "$plan" "${common[@]}" --recompute auto >"$tmp/auto.json" 2>/dev/null || echo '{}' >"$tmp/auto.json"
    took=$((SECONDS - start))
    "$plan" "${common[@]}" --recompute auto --precision bf16 >"$tmp/bf16.json" 2>/dev/null ||
      echo '{}' >"$tmp/bf16.json"
    "$plan" --model "$m" --batch "$b" --train --optimizer sgd --dump-json >"$tmp/graph.json"
    python3 - "$tmp" "$m" "$b" "$took" <<'PY'
import json, math, sys
tmp, m, b, took = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def load(n):
    try:
        return json.load(open(f"{tmp}/{n}.json"))
    except Exception:
        return {}
def cell(p):
    if not p.get("workers"):
        return "-", "-"
    return str(p["workers"]), f'{1e3 * p["step_time"]["seconds"]:.1f} ms'
none, auto, bf16 = load("none"), load("auto"), load("bf16")
g = json.load(open(f"{tmp}/graph.json"))
# ZeRO-3 with activation checkpointing, on paper (docs/benchmarks.md gives the formula): SGD's
# float32 weights and gradients sharded over k (8 bytes per parameter / k), every layer's input
# kept whole on every worker (the checkpoints), and one layer's activations while it is
# recomputed.
params = sum(math.prod(t.get("shape", [])) for t in g["tensors"] if t.get("role") == "weight")
parts = m.split("-")
if m.startswith("gpt"):
    L, h, a, s = (int(x) for x in parts[1:5])
    checkpoints = L * b * s * h * 4
    layer = b * s * h * (68 + 10 * a * s / h)  # Megatron's per-layer activations, float32
elif m.startswith("rnn"):
    L, H = int(parts[1]), int(parts[2].replace("K", "")) * (1024 if parts[2].endswith("K") else 1)
    T = 20
    checkpoints = L * T * b * H * 4          # each layer's input at every step
    layer = T * b * H * 4 * 12               # one layer's gates, cell and output over the steps
else:  # wresnet: a bottleneck block's input per block; one block's activations
    acts = sorted((math.prod(t.get("shape", [])) * 4 for t in g["tensors"]
                   if t.get("role") == "activation"), reverse=True)
    blocks = {50: 16, 101: 33, 152: 50}[int(parts[1])]
    checkpoints = sum(acts[:blocks])
    layer = 10 * acts[0]
zero = next((k for k in range(1, 4097)
             if 8 * params / k + checkpoints + layer <= 80e9), None)
rec = auto.get("recompute", {})
dropped = (f'{len(rec["dropped"])} of {rec.get("candidates", "-")}' if rec.get("dropped")
           else "none needed" if rec else "-")
n, ns = cell(none)
a, as_ = cell(auto)
f, fs = cell(bf16)
print(f"| {m} | {b} | {n} | {ns} | {a} | {as_} | {dropped} | {f} | {fs} | {zero or '> 4096'} | {took} |")
PY
  done
fi

if [ "$runs" = 1 ]; then
  export TOFU_CPU_MODEL="$tmp/cpu-model.json"
  echo "recompute_bench: calibrating" >&2
  "$run" --calibrate >/dev/null
  if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  mpi=(mpirun --oversubscribe --bind-to none)
  echo
  echo "| model | batch | workers | budget (x plain peak) | largest arena | plain arena | verify | recomputing = plain | measured step | plain step | measured overhead | estimated overhead | recomputed |"
  echo "| --- | ---: | --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"
  for mb in "wresnet-50-1-i32-c8-k10 32 0.6" "gpt-2-256-4-64 16 0.6" "gpt-2-256-4-64 16 0.95"; do
    set -- $mb
    m=$1 b=$2 factor=$3
    echo "recompute_bench: $m" >&2
    common=(--model "$m" --batch "$b" --workers 2 --lr 0.01 --format=json)
    # The plan without recomputation's planned peak (reported beside sqrt's).
    "$plan" --model "$m" --batch "$b" --train --optimizer sgd --workers 2 --recompute sqrt \
      --format=json >"$tmp/plain-plan.json" 2>/dev/null
    peak=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['recompute']['planned_peak_bytes_without'])" "$tmp/plain-plan.json")
    budget=$(python3 -c "print(int($peak * $factor))")
    "$plan" --model "$m" --batch "$b" --train --optimizer sgd --workers 2 --memory-per-worker "$budget" \
      --device cpu --format=json >"$tmp/est.json" 2>/dev/null || echo '{}' >"$tmp/est.json"
    "$run" "${common[@]}" --steps 1 >/dev/null # compiles the kernels
    for how in threads mpi; do
      if [ "$how" = threads ]; then pre=(); be=(); else pre=("${mpi[@]}" -np 2); be=(--backend mpi); fi
      "${pre[@]}" "$run" "${be[@]}" "${common[@]}" --steps "$steps" >"$tmp/plain.json" 2>/dev/null ||
        echo '{}' >"$tmp/plain.json"
      "${pre[@]}" "$run" "${be[@]}" "${common[@]}" --steps "$steps" --memory-per-worker "$budget" \
        --verify >"$tmp/rec.json" 2>/dev/null || echo '{}' >"$tmp/rec.json"
      python3 - "$tmp" "$m" "$b" "$how" "$budget" "$factor" <<'PY'
import json, statistics, sys
tmp, m, b, how, budget, factor = sys.argv[1:7]
budget = int(budget)
def load(n):
    try:
        return json.load(open(f"{tmp}/{n}.json"))
    except Exception:
        return {}
plain, rec, est = load("plain"), load("rec"), load("est")
def arena(r):
    return max(r["worker_peak_bytes"]) if r.get("worker_peak_bytes") else 0
def med(r):
    return statistics.median(r["step_seconds"][1:] or r["step_seconds"]) if r.get("step_seconds") else 0
mib = lambda x: f"{x / 2**20:.1f} MiB"
v = rec.get("verify", {})
same = v.get("recomputing_against_plain", {})
r = est.get("recompute", {})
eo = (f'{100 * (r["estimated_seconds"] / r["estimated_seconds_without"] - 1):+.1f}%'
      if r.get("estimated_seconds_without") else "-")
mo = f"{100 * (med(rec) / med(plain) - 1):+.1f}%" if med(plain) and med(rec) else "-"
if not rec:  # the run refused the budget: no plan fits it
    print(f"| {m} | {b} | 2 {how} | {factor}x: {budget / 2**20:.1f} MiB | no plan fits | "
          f"{arena(plain) / 2**20:.1f} MiB | - | - | - | {1e3 * med(plain):.1f} ms | - | - | - |")
    sys.exit(0)
print(f'| {m} | {b} | 2 {how} | {factor}x: {mib(budget)} | {mib(arena(rec))} | {mib(arena(plain))} | '
      f'{v.get("verdict", "-")} | {"bit-identical" if same.get("bit_identical") else same.get("tensors_differing", "-")} | '
      f'{1e3 * med(rec):.1f} ms | {1e3 * med(plain):.1f} ms | {mo} | {eo} | '
      f'{len(rec.get("recompute", {}).get("dropped", []))} of {rec.get("recompute", {}).get("candidates", "-")} |')
PY
    done
  done
fi
