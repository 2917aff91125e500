#!/usr/bin/env bash
# tofu-run --backend nccl under mpirun: one process per GPU, regions over NCCL. Where this
# machine has at least two GPUs: verified steps of the zoo's small models and an ONNX model
# at k = 2 (each process compares the tiles it holds with an unpartitioned step on its GPU;
# the processes together move exactly the planned bytes). Elsewhere (CI has no GPU) the NCCL
# runs are skipped, saying why, and what is checked is that the job fails at once with every
# process naming its rank and the reason, never hanging.
set -uo pipefail
run="$(realpath "$1")"
fail=0
tmp=$(mktemp -d /tmp/tofu-nccl-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# One kernel cache for the whole run where tools/test.sh gives one (kernels compiled once).
export TOFU_KERNEL_CACHE="${TOFU_TEST_KERNEL_CACHE:-$tmp/kernels}"
export TMPDIR=/tmp # Open MPI's socket names do not fit under Bazel's long TMPDIR
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
mpi=(mpirun --oversubscribe --bind-to none)

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi

if [ "$gpus" -lt 2 ]; then
  # Two processes and fewer than two GPUs: both say why, and the job ends non-zero at once.
  start=$SECONDS
  timeout 120 "${mpi[@]}" -np 2 "$run" --backend nccl --model mlp --steps 2 >"$tmp/out.txt" 2>"$tmp/err.txt"
  status=$?
  reason=$(grep -Eo "rank [01] of 2: mlp: (no usable CUDA device: [^ ]*|[0-9]+ processes on this machine but [0-9]+ GPUs)" "$tmp/err.txt" | head -1)
  if [ "$status" -eq 0 ] || [ "$status" -eq 124 ] || [ -z "$reason" ]; then
    echo "FAILED: --backend nccl with $gpus GPUs: exit $status after $((SECONDS - start)) s" >&2
    cat "$tmp/out.txt" "$tmp/err.txt" >&2
    fail=1
  else
    echo "skipped the NCCL runs: this machine has $gpus GPUs (they need one per process, at least 2);"
    echo "  the job failed as it should: tofu-run: $reason"
  fi
else
  cases=(
    "--model mlp"
    "--model wresnet-50-1-i32-c4-k10"
    "--model gpt-1-16-2-4"
    "--model rnn-2-256"
    "--onnx tests/onnx/mlp.onnx --optimizer adam"
  )
  for c in "${cases[@]}"; do
    if ! timeout 600 "${mpi[@]}" -np 2 "$run" --backend nccl $c --steps 2 --verify --format=json \
         >"$tmp/out.json" 2>"$tmp/err.txt"; then
      echo "FAILED: mpirun -np 2 tofu-run --backend nccl $c --verify" >&2
      cat "$tmp/out.json" "$tmp/err.txt" >&2
      fail=1
      continue
    fi
    python3 - "$tmp/out.json" <<'PY' || { echo "FAILED: the figures of $c" >&2; fail=1; }
import json, sys
j = json.load(open(sys.argv[1]))
assert j["processes"] == 2, j["processes"]
assert j["verify"]["passed"], j["verify"]
assert j["bytes_moved"] == j["predicted_bytes"] > 0, (j["bytes_moved"], j["predicted_bytes"])
PY
  done
fi

if [ "$fail" -ne 0 ]; then
  echo "tofu_run_nccl_test: FAILED" >&2
  exit 1
fi
echo "tofu_run_nccl_test: all passed"
