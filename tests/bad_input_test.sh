#!/usr/bin/env bash
# The bad-input corpus (tests/bad_input/cases.txt): every case ends, within 60 s, with the
# exit status it names and a message containing its fragment. No signal, no hang, no exit 0.
set -uo pipefail
declare -A tool=([tdlc]="$1" [tofu-plan]="$2" [tofu-run]="$3")
cases="${4:-tests/bad_input/cases.txt}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One kernel cache for the whole run where tools/test.sh gives one (kernels compiled once).
export TOFU_KERNEL_CACHE="${TOFU_TEST_KERNEL_CACHE:-$tmp/kernels}"
fail=0 n=0
while IFS='|' read -r name status fragment args; do
  case "$name" in ''|'#'*) continue ;; esac
  n=$((n + 1))
  # shellcheck disable=SC2086
  timeout 60 "${tool[$name]}" $args >"$tmp/out.txt" 2>"$tmp/err.txt"
  rc=$?
  if [ "$rc" != "$status" ]; then
    echo "FAILED: $name $args: exit $rc, expected $status" >&2
    tail -c 600 "$tmp/err.txt" >&2; fail=1; continue
  fi
  if ! grep -qF -- "$fragment" "$tmp/err.txt" "$tmp/out.txt"; then
    echo "FAILED: $name $args: the message does not say '$fragment':" >&2
    tail -c 600 "$tmp/err.txt" >&2; fail=1
  fi
done <"$cases"
echo "bad inputs: $n cases"
exit $fail
