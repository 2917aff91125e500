#!/usr/bin/env bash
# tofu-run end to end: partitioned steps verified against the unpartitioned ones, and errors.
set -uo pipefail
run="$1"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export TOFU_KERNEL_CACHE="$tmp/kernels"
for args in "--model wresnet-50-1-i32-c4-k10 --workers 4" "--model gpt-1-16-2-4 --batch 2 --workers 3" \
            "--onnx tests/onnx/mlp.onnx --workers 2 --optimizer adam"; do
  if ! $run $args --verify >"$tmp/out.txt" 2>"$tmp/err.txt"; then
    echo "FAILED: tofu-run $args --verify" >&2; cat "$tmp/out.txt" "$tmp/err.txt" >&2; fail=1; continue
  fi
  grep -q "^verify: PASSED" "$tmp/out.txt" || { echo "FAILED: no PASSED for $args" >&2; fail=1; }
  grep -q "(the plan predicts [0-9]*: equal)" "$tmp/out.txt" || { echo "FAILED: bytes for $args" >&2; fail=1; }
done
# Training on compiled kernels: the loss falls, JSON carries the per-step figures.
if ! $run --model wresnet-50-1-i32-c4-k10 --workers 2 --steps 3 --format=json >"$tmp/out.json" 2>"$tmp/err.txt"; then
  echo "FAILED: tofu-run --steps 3 --format=json" >&2; cat "$tmp/err.txt" >&2; fail=1
else
  python3 - "$tmp/out.json" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
for key in ("step_seconds", "loss", "worker_peak_bytes", "bytes_moved", "compile_seconds"):
    assert key in j, key
assert len(j["step_seconds"]) == 3 and len(j["loss"]) == 3, j
assert len(j["worker_peak_bytes"]) == 2
assert j["bytes_moved"] == j["predicted_bytes"], j
PY
fi
# The reference executor (every op in the interpreter) stays available.
if ! $run --model gpt-1-16-2-4 --batch 2 --workers 2 --kernels interp --verify >"$tmp/out.txt" 2>"$tmp/err.txt" ||
   ! grep -q "^verify: PASSED" "$tmp/out.txt"; then
  echo "FAILED: --kernels interp --verify" >&2; cat "$tmp/out.txt" "$tmp/err.txt" >&2; fail=1
fi
expect_error() { # expected message, args...
  local msg="$1"; shift
  if "$run" "$@" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
    echo "FAILED: expected an error for: $*" >&2; fail=1; return
  fi
  grep -qF -- "$msg" "$tmp/err.txt" || { echo "FAILED: '$*' did not say '$msg'" >&2; cat "$tmp/err.txt" >&2; fail=1; }
}
expect_error "--workers K is required" --model mlp
expect_error "--backend cuda is not available" --model mlp --workers 2 --backend cuda
expect_error "unknown model 'nope'" --model nope --workers 2
expect_error "--kernels must be compiled or interp" --model mlp --workers 2 --kernels gpu
expect_error "--kernels interp runs one step" --model mlp --workers 2 --kernels interp --steps 3
exit $fail
