#!/usr/bin/env bash
# Control flow (If, Loop, Scan) through tofu-run --infer at k = 1 and 2: the cases of
# tests/onnx_control (tools/fixtures/make_control_flow_tests.py: expected outputs from numpy) all pass,
# with the node-test runner (tools/oracles/onnx_node_tests.py).
set -uo pipefail
run="$(realpath "$1")"
plan="$(realpath "$2")"
tmp=$(mktemp -d /tmp/tofu-control-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# One kernel cache for the whole run where tools/test.sh gives one (kernels compiled once).
export TOFU_KERNEL_CACHE="${TOFU_TEST_KERNEL_CACHE:-$tmp/kernels}"
/usr/bin/python3 tools/oracles/onnx_node_tests.py --tofu-run "$run" --tofu-plan "$plan" --ops ops \
  --node-dir tests/onnx_control --workers "1 2" --jobs 2 --timeout 300 --all-pass
