#!/usr/bin/env bash
# tdlc --verify --kernels compiled: a user's file verified on the kernels tofu-run runs.
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
exit $fail
