#!/usr/bin/env bash
# tdlc --verify --kernels compiled: a user's file verified on the kernels tofu-run runs;
# tdlc --kernel: an op's schedule and generated source, for either target.
set -uo pipefail
tdlc="$1"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One kernel cache for the whole run where tools/test.sh gives one (kernels compiled once).
export TOFU_KERNEL_CACHE="${TOFU_TEST_KERNEL_CACHE:-$tmp/kernels}"
for f in tests/tdl/good/tdl_md_examples.tdl ops/nn/conv.tdl; do
  if ! "$tdlc" --verify --kernels compiled "$f" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
    echo "FAILED: tdlc --verify --kernels compiled $f" >&2; cat "$tmp/out.txt" "$tmp/err.txt" >&2; fail=1; continue
  fi
  grep -q "^kernels: [1-9][0-9]* compiled" "$tmp/out.txt" || { echo "FAILED: no kernels compiled for $f" >&2; fail=1; }
  grep -q "^verify: [1-9][0-9]* passed, 0 failed" "$tmp/out.txt" || { echo "FAILED: $f" >&2; tail -3 "$tmp/out.txt" >&2; fail=1; }
done
if "$tdlc" --verify --kernels gpu tests/tdl/good/tdl_md_examples.tdl >"$tmp/out.txt" 2>"$tmp/err.txt" ||
   ! grep -q "for the --kernels option: must be interp or compiled, not 'gpu'" "$tmp/err.txt"; then
  echo "FAILED: --kernels gpu is not refused" >&2; fail=1
fi
# --kernel: batch norm's statistics are per-channel temporaries on the CPU, computed at the
# channel on CUDA; the source follows the schedule.
bn=(--op batch_norm_grad_x --rank dy=4 --rank x=4 --rank scale=1 --rank eps=0 ops/nn/norm.tdl)
if "$tdlc" --kernel "${bn[@]}" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
  [ "$(grep -c '^//   r[0-9]* Sum(.*) temporary \[c\]' "$tmp/out.txt")" = 4 ] ||
    { echo "FAILED: --kernel: not four temporaries over c" >&2; cat "$tmp/out.txt" >&2; fail=1; }
  grep -q '^extern "C" void tofu_k_' "$tmp/out.txt" && grep -q 'a->scratch' "$tmp/out.txt" ||
    { echo "FAILED: --kernel: no C++ kernel using its scratch space" >&2; fail=1; }
else
  echo "FAILED: tdlc --kernel" >&2; cat "$tmp/err.txt" >&2; fail=1
fi
if "$tdlc" --kernel --target=cuda "${bn[@]}" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
  grep -q '__global__' "$tmp/out.txt" && grep -q 'inline at c' "$tmp/out.txt" ||
    { echo "FAILED: --kernel --target=cuda" >&2; cat "$tmp/out.txt" >&2; fail=1; }
else
  echo "FAILED: tdlc --kernel --target=cuda" >&2; cat "$tmp/err.txt" >&2; fail=1
fi
if "$tdlc" --strategies --target=cuda ops/nn/norm.tdl >/dev/null 2>"$tmp/err.txt" ||
   ! grep -q "target applies to --kernel only" "$tmp/err.txt"; then
  echo "FAILED: --target without --kernel is not refused" >&2; fail=1
fi
# tdlc --eval: one op and its grad clauses on given arrays (tools/oracles/torch_op_oracle.py compares
# them with PyTorch); its usage errors name what is wrong.
/usr/bin/python3 -c "
import numpy as np
np.save('$tmp/x.npy', np.array([[-1.0, 2.0], [3.0, -4.0]]))
np.save('$tmp/d.npy', np.ones((2, 2)))"
if "$tdlc" --eval ops/nn/activation.tdl --op Relu --input "x=$tmp/x.npy" --dout "$tmp/d.npy" \
     --output-dir "$tmp/eval" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
  /usr/bin/python3 -c "
import numpy as np
assert (np.load('$tmp/eval/out.npy') == [[0, 2], [3, 0]]).all()
assert (np.load('$tmp/eval/grad_x.npy') == [[0, 1], [1, 0]]).all()" ||
    { echo "FAILED: tdlc --eval Relu: wrong values" >&2; fail=1; }
else
  echo "FAILED: tdlc --eval Relu" >&2; cat "$tmp/err.txt" >&2; fail=1
fi
expect_usage() { # message, arguments...
  local msg="$1"; shift
  "$tdlc" "$@" >"$tmp/out.txt" 2>"$tmp/err.txt"
  local rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$msg" "$tmp/err.txt"; then
    echo "FAILED: tdlc $*: exit $rc (want 2 and '$msg'):" >&2; cat "$tmp/err.txt" >&2; fail=1
  fi
}
expect_usage "--eval takes one file, --op NAME" --eval ops/nn/activation.tdl --input "x=$tmp/x.npy" --output-dir "$tmp/e"
expect_usage "no --input for 'x' of op 'Relu'" --eval ops/nn/activation.tdl --op Relu --output-dir "$tmp/e"
expect_usage "op 'Relu' has no input 'y'" --eval ops/nn/activation.tdl --op Relu --input "y=$tmp/x.npy" --output-dir "$tmp/e"
expect_usage "--input, --dout and --output-dir are for --eval" --check ops/nn/activation.tdl --dout "$tmp/d.npy"

exit $fail
