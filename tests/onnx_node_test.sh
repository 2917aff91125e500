#!/usr/bin/env bash
# ONNX's backend node tests (Debian's libonnx-testdata) through tofu-run --infer at k = 1 and
# 2 (tools/onnx_node_tests.py): no test crashes or hangs, every test the importer accepts
# matches ONNX's expected outputs except the known failures (tests/onnx_node_known_failures.txt),
# and none of those passes unnoticed. Under ASan (slower by several times) every 14th test.
set -uo pipefail
run="$(realpath "$1")"
plan="$(realpath "$2")"
tmp=$(mktemp -d /tmp/tofu-node-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export TOFU_KERNEL_CACHE="$tmp/kernels"
node=/usr/share/libonnx-testdata/data/node
if [ ! -d "$node" ]; then
  echo "onnx_node_test: $node is missing: install libonnx-testdata (tools/setup.sh does)" >&2
  exit 1
fi
sample=1
[ -n "${ASAN_OPTIONS:-}" ] && sample=14
/usr/bin/python3 tools/onnx_node_tests.py --tofu-run "$run" --tofu-plan "$plan" --ops ops \
  --node-dir "$node" --workers "1 2" --jobs 2 --timeout 300 --sample "$sample" \
  --known tests/onnx_node_known_failures.txt
