#!/usr/bin/env bash
# The example plans its graph on 1, 3 and 4 workers; a bad library path is a clear error.
set -euo pipefail
ex=examples/plan_example
out=$("$ex" ops 4)
echo "$out"
grep -q "^4 workers in 2 steps" <<<"$out"
grep -q "^weight w1 found: cut per step:" <<<"$out"
grep -q "^communication per training step: [0-9]" <<<"$out"
"$ex" ops 3 | grep -q "^3 workers in 1 steps"
"$ex" ops 1 | grep -q "^communication per training step: 0 bytes"
if "$ex" no/such/dir 2 2>err.txt; then
  echo "expected a failure for a missing library" >&2
  exit 1
fi
grep -q "cannot load the operator library 'no/such/dir'" err.txt
