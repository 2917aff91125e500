#!/usr/bin/env bash
# The example plans its graph on 1, 3 and 4 workers, finding the operator library beside
# itself; a bad library path is a clear error.
set -euo pipefail
ex=examples/plan_example
out=$("$ex" 4)
echo "$out"
grep -q "^4 workers in 2 steps" <<<"$out"
grep -q "^weight w1: cut per step:" <<<"$out"
grep -q "^peak memory of worker 0: [1-9]" <<<"$out"
grep -q "^communication per training step: [1-9]" <<<"$out"
"$ex" 3 | grep -q "^3 workers in 1 steps"
"$ex" 1 | grep -q "^communication per training step: 0 bytes"
if "$ex" 2 no/such/dir 2>err.txt; then
  echo "expected a failure for a missing library" >&2
  exit 1
fi
cat err.txt
grep -q "^plan_example: the operator library no/such/dir: no .tdl files there" err.txt
