#!/usr/bin/env bash
# tdlc --verify --kernels compiled: a user's file verified on the kernels tofu-run runs;
# tdlc --kernel: an op's schedule and generated source, for either target.
set -uo pipefail
tdlc="$1"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export TOFU_KERNEL_CACHE="$tmp/kernels"
for f in tests/tdl/good/tdl_md_examples.tdl ops/nn/conv.tdl; do
  if ! "$tdlc" --verify --kernels compiled "$f" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
    echo "FAILED: tdlc --verify --kernels compiled $f" >&2; cat "$tmp/out.txt" "$tmp/err.txt" >&2; fail=1; continue
  fi
  grep -q "^kernels: [1-9][0-9]* compiled" "$tmp/out.txt" || { echo "FAILED: no kernels compiled for $f" >&2; fail=1; }
  grep -q "^verify: [1-9][0-9]* passed, 0 failed" "$tmp/out.txt" || { echo "FAILED: $f" >&2; tail -3 "$tmp/out.txt" >&2; fail=1; }
done
if "$tdlc" --verify --kernels gpu tests/tdl/good/tdl_md_examples.tdl >"$tmp/out.txt" 2>"$tmp/err.txt" ||
   ! grep -q "kernels must be interp or compiled" "$tmp/err.txt"; then
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
exit $fail
