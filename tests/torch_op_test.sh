#!/usr/bin/env bash
# The library's ops and their grad clauses against PyTorch autograd, op by op
# (tools/torch_op_oracle.py through `tdlc --eval`): forward values and each clause's
# vector-Jacobian product at rank-3 and rank-4 shapes whose groups span several axes.
set -uo pipefail
exec /usr/bin/python3 tools/torch_op_oracle.py --tdlc "$1" --ops ops
