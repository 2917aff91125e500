#!/usr/bin/env bash
# The main job, for now: build tdlc, check every .tdl file of the repository's examples
# and print the checked IR of the TDL.md examples. (Planning a real model comes with the
# search stage; this script will then run tofu-plan.)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel build //tdlc 2>&1 | grep -E '^(ERROR|error)' && exit 1
tdlc="$(bazel info bazel-bin 2>/dev/null)/tdlc/tdlc"
files=$(find tests/tdl/good -name '*.tdl' | sort)
"$tdlc" --check $files
echo "tdlc --check: $(echo "$files" | wc -l) files OK"
echo
echo "== tdlc --dump-ir tests/tdl/good/tdl_md_examples.tdl"
"$tdlc" --dump-ir tests/tdl/good/tdl_md_examples.tdl
