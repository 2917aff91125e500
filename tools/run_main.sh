#!/usr/bin/env bash
# The main job, for now: build tdlc and tofu-plan, check and verify (by execution:
# strategies and gradients) every op of the operator library and the examples, describe
# the WResNet-152-10 training graph, print the library's statistics and the partition
# strategies of the TDL.md examples. (Partition search comes next.) (Planning a real model comes with the search stage; this script will then run
# tofu-plan.)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
if ! bazel build //tdlc //tdlc:tofu-plan >/tmp/tofu-main-build.log 2>&1; then
  tail -30 /tmp/tofu-main-build.log
  exit 1
fi
tdlc="$(bazel info bazel-bin 2>/dev/null)/tdlc/tdlc"
files=$(find tests/tdl/good ops -name '*.tdl' | sort)
"$tdlc" --check $files
echo "tdlc --check: $(echo "$files" | wc -l) files OK"
for f in $files; do "$tdlc" --verify "$f"; done | grep -E '^verify:' \
  | awk '{p += $2; f += $4} END {printf "tdlc --verify: %d checks passed (strategies and gradients), %d failed\n", p, f; exit f > 0}'
echo
echo "== tofu-plan --model wresnet-152-10 --batch 8 --train --describe"
"$(bazel info bazel-bin 2>/dev/null)/tdlc/tofu-plan" --model wresnet-152-10 --batch 8 --train --describe
echo
echo "== tdlc --stats ops"
"$tdlc" --stats ops
echo
echo "== tdlc --strategies tests/tdl/good/tdl_md_examples.tdl"
"$tdlc" --strategies tests/tdl/good/tdl_md_examples.tdl
