#!/usr/bin/env bash
# Golden test: tdlc's output on checked-in inputs must equal the checked-in expectation.
#   golden_test.sh TDLC EXPECTED ARGS...
set -euo pipefail
tdlc="$1"
expected="$2"
shift 2
actual=$(mktemp)
trap 'rm -f "$actual"' EXIT
"$tdlc" "$@" > "$actual"
if ! diff -u "$expected" "$actual"; then
  echo "golden mismatch: tdlc $* differs from $expected (diff above)"
  exit 1
fi
echo "golden OK: tdlc $*"
