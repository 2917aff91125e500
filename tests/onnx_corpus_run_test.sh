#!/usr/bin/env bash
# tofu-run --verify on the small models of the ONNX corpus (corpus.json's "verify"): at
# k = 2 and k = 4 the partitioned training step reproduces the unpartitioned one and moves
# the bytes the plan predicts.
set -uo pipefail
run="$1"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One kernel cache for the whole run where tools/test.sh gives one (kernels compiled once).
export TOFU_KERNEL_CACHE="${TOFU_TEST_KERNEL_CACHE:-$tmp/kernels}"
models=$(python3 -c '
import json
m = json.load(open("tests/onnx/corpus.json"))["models"]
print(" ".join("%s:%d" % (k, v["data_inputs"]) for k, v in m.items() if v["verify"]))')
source tests/cli_lib.sh
# Under AddressSanitizer, a third of the runs, in turn (in_sample).
detect_asan "$run"
count=0
want=0
i=0
for entry in $models; do
  name=${entry%%:*} data=${entry##*:}
  for k in 2 4; do
    i=$((i + 1))
    in_sample "$i" 3 || continue
    want=$((want + 1))
    args="--onnx tests/onnx/$name.onnx --data-inputs $data --workers $k --verify"
    if ! $run $args >"$tmp/out.txt" 2>"$tmp/err.txt"; then
      echo "FAILED: tofu-run $args" >&2; cat "$tmp/out.txt" "$tmp/err.txt" >&2; fail=1; continue
    fi
    grep -q "^verify: PASSED" "$tmp/out.txt" || { echo "FAILED: no PASSED for $args" >&2; fail=1; }
    grep -q "(the plan predicts [0-9]*: equal)" "$tmp/out.txt" || { echo "FAILED: bytes for $args" >&2; fail=1; }
    echo "$name k=$k: $(grep '^verify:' "$tmp/out.txt" | cut -c1-120)"
    count=$((count + 1))
  done
done
[ "$i" -ge 20 ] || { echo "FAILED: only $i runs (the corpus marks fewer than 10 models)" >&2; fail=1; }
[ "$count" = "$want" ] || { echo "FAILED: $count of $want runs verified" >&2; fail=1; }
exit $fail
