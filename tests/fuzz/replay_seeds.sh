#!/usr/bin/env bash
# Replays the fuzz seed corpus and saved regressions through the fuzz target.
set -euo pipefail
fuzzer="$1"
shift
dirs=()
for d in "$@"; do [ -d "$d" ] && dirs+=("$d"); done
exec "$fuzzer" "${dirs[@]}"
