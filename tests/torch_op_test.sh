#!/usr/bin/env bash
# The library's ops and their grad clauses against PyTorch autograd, op by op
# (tools/oracles/torch_op_oracle.py through `tdlc --eval`): forward values and each clause's
# vector-Jacobian product at rank-3 and rank-4 shapes whose groups span several axes.
# Under AddressSanitizer, half the ops, in turn with the commit (TOFU_SAMPLE_OFFSET).
set -uo pipefail
source tests/cli_lib.sh
detect_asan "$1"
exec /usr/bin/python3 tools/oracles/torch_op_oracle.py --tdlc "$1" --ops ops --sample $((asan + 1))
