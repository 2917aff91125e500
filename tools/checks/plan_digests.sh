#!/usr/bin/env bash
# Plan digests for refactorings that must not change any plan: every algorithm at several
# worker counts on four zoo models, one line per plan with the md5 of its JSON (timings
# dropped). Run it with the tofu-plan before and after a change and diff the two outputs.
#
#   tools/checks/plan_digests.sh bazel-bin/tofu_plan/tofu-plan > before.txt
set -u  # a plan that fails is digested by its message, not a stop
if [ $# -ne 1 ] || [ ! -x "$1" ]; then
  echo "usage: tools/checks/plan_digests.sh PATH/TO/tofu-plan" >&2
  exit 2
fi
plan=$1
ops=$(cd "$(dirname "$0")/../.." && pwd)/ops
models=(mlp wresnet-50-1-i32-c4-k10 gpt-1-16-2-4 rnn-2-64)
algorithms=(tofu dp-flat icml18 equalchop spartan allrow data-parallel)
for m in "${models[@]}"; do
  for k in 2 3 4 6 8; do
    for a in "${algorithms[@]}"; do
      digest=$("$plan" --model "$m" --workers "$k" --algo "$a" --train --format=json --ops "$ops" 2>&1 |
        python3 -c '
import json, sys
text = sys.stdin.read()
try:
    plan = json.loads(text)
except ValueError:
    print(text.strip())  # an error: its message is the digest
    sys.exit()
def untimed(x):
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if "second" not in k}
    if isinstance(x, list):
        return [untimed(v) for v in x]
    return x
print(json.dumps(untimed(plan), sort_keys=True))' | md5sum | cut -c1-12)
      echo "$m k=$k $a $digest"
    done
  done
done
