#!/usr/bin/env bash
# ONNX's backend node tests (Debian's libonnx-testdata) through tofu-run --infer, every test
# at k = 1 and a third of them at k = 2 (all of them with TOFU_FULL=1: tools/test.sh --full;
# tools/oracles/onnx_node_tests.py): no test crashes or hangs, every test the importer accepts
# matches ONNX's expected outputs except the known failures (tests/onnx_node_known_failures.txt),
# and none of those passes unnoticed; then ONNX's pytorch-converted and pytorch-operator
# tests. Under ASan (slower by several times) every 14th test.
# The runs go to two tofu-run --batch processes, which load the library once and fork each
# run (1 min 6 s for the 1,242 runs with the kernels cached, against 4 min 30 s as a process
# each; 6 min from an empty kernel cache, against 8).
# Samples start at an offset that rotates with the commit (TOFU_SAMPLE_OFFSET, set by
# tools/test.sh), so that successive commits cover every test.
set -uo pipefail
run="$(realpath "$1")"
plan="$(realpath "$2")"
tmp=$(mktemp -d /tmp/tofu-node-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# One kernel cache for the whole run where tools/test.sh gives one (kernels compiled once).
export TOFU_KERNEL_CACHE="${TOFU_TEST_KERNEL_CACHE:-$tmp/kernels}"
node=/usr/share/libonnx-testdata/data/node
if [ ! -d "$node" ]; then
  echo "onnx_node_test: $node is missing: install libonnx-testdata (tools/setup.sh does)" >&2
  exit 1
fi
sample=1
[ -n "${ASAN_OPTIONS:-}" ] && sample=14
# Every test at k = 1, and every 3rd at k = 2 (every one with TOFU_FULL=1: tools/test.sh
# --full). tools/test.sh draws the offset from the commit: successive commits sample every
# test at k = 2.
thin=2:3
[ "${TOFU_FULL:-0}" = 1 ] && thin=""
fail=0
/usr/bin/python3 tools/oracles/onnx_node_tests.py --tofu-run "$run" --tofu-plan "$plan" --ops ops \
  --node-dir "$node" --workers "1 2" --jobs 2 --timeout 300 --sample "$sample" --thin "$thin" \
  --sample-offset "${TOFU_SAMPLE_OFFSET:-0}" --known tests/onnx_node_known_failures.txt || fail=1
# ONNX's tests converted from PyTorch's modules and operators (the same package): each at
# k = 1 and 2, none failing (grouped Conv1d and Conv3d; float64 inputs beyond float32's
# range, which run on the interpreter). 7 of the 117 are refused by the importer.
for more in pytorch-converted pytorch-operator; do
  /usr/bin/python3 tools/oracles/onnx_node_tests.py --tofu-run "$run" --tofu-plan "$plan" --ops ops \
    --node-dir "${node%/node}/$more" --workers "1 2" --jobs 2 --timeout 300 --sample "$sample" \
    --sample-offset "${TOFU_SAMPLE_OFFSET:-0}" --known /dev/null || fail=1
done
exit $fail
