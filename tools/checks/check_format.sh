#!/usr/bin/env bash
# Checks that every C++ and CUDA source of the repository follows .clang-format (LLVM's style,
# 100 columns; STYLE.md). Lists each file that does not, with the first lines clang-format
# would change, and exits 1; exits 0 when all follow it. third_party/ is not ours.
#
#   tools/checks/check_format.sh          check (tools/test.sh runs it)
#   tools/checks/check_format.sh --fix    reformat the files that do not follow it, in place
set -uo pipefail
cd "$(dirname "$0")/../.."

fix=0
case "${1:-}" in
  --fix) fix=1 ;;
  "") ;;
  -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "check_format.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac

format=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$format" ]; then
  echo "check_format.sh: clang-format-14 is not installed (tools/setup.sh installs it)" >&2
  exit 1
fi

mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | grep -v '^third_party/')
bad=0
for f in "${files[@]}"; do
  if ! "$format" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
    bad=$((bad + 1))
    if [ "$fix" = 1 ]; then
      "$format" --style=file -i "$f"
      echo "reformatted $f"
    else
      echo "$f does not follow .clang-format:"
      diff <(cat "$f") <("$format" --style=file "$f") | head -8 | sed 's/^/  /'
    fi
  fi
done
if [ "$fix" = 1 ] || [ "$bad" = 0 ]; then
  echo "format: ${#files[@]} files follow .clang-format"
  exit 0
fi
echo "format: $bad of ${#files[@]} files do not follow .clang-format (tools/checks/check_format.sh --fix)"
exit 1
