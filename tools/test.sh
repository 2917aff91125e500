#!/usr/bin/env bash
# The whole test suite. Installs missing Debian packages, builds everything (the CUDA
# kernels included: nvcc compiles them even without a GPU), runs every Bazel test, checks
# every example of shared/docs/TDL.md with tdlc, every command the docs show, and the
# sources against .clang-format, and installs Tofu into a temporary prefix to build and run
# the CMake, C and Python consumers against it.
#
#   tools/test.sh                 the suite
#   tools/test.sh --asan          ... and again under AddressSanitizer + UBSan
#   tools/test.sh --fuzz SECONDS  ... and fuzz the readers of untrusted input with libFuzzer
#                                 (clang 14; tests/fuzz/BUILD), the seconds shared among them
set -uo pipefail
cd "$(dirname "$0")/.."

asan=0
fuzz=0
while [ $# -gt 0 ]; do
  case "$1" in
    --asan) asan=1 ;;
    --fuzz) fuzz="${2:?--fuzz needs a number of seconds}"; shift ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

tools/setup.sh || exit 1

passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Installs Tofu into a temporary prefix (tools/install.sh, -c opt) and runs the three
# consumers outside the repository against it (examples/consumers_test.sh).
install_and_consumers() {
  echo "== tools/install.sh into a temporary prefix, then examples/consumers_test.sh"
  local prefix
  prefix=$(mktemp -d)
  # Installed twice: the second run must leave the same tree (idempotent).
  listing() { (cd "$prefix" && find . -printf '%p %l\n' | sort && find . -type f -exec md5sum {} + | sort); }
  if tools/install.sh --no-setup "$prefix" && listing >"$prefix.first" &&
     tools/install.sh --no-setup "$prefix" >/dev/null && listing | cmp -s - "$prefix.first" &&
     examples/consumers_test.sh "$prefix"; then
    passed=$((passed + 1))
  else
    echo "test.sh: the install tree or a consumer failed (above)"
    failed=$((failed + 1))
  fi
  rm -rf "$prefix" "$prefix.first"
}

# Runs `bazel test` with the given flags and adds its per-target results to the counts.
bazel_tests() {
  echo "== bazel test $*"
  bazel test "$@" //... 2>&1 | tee "$log" | grep -vE '^(INFO|Loading|Analyzing|\[)' \
    | grep -E 'PASSED|FAILED|NO STATUS|TIMEOUT|Executed|ERROR|error:' || true
  local p f
  p=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
  f=$(grep -cE '^//[^ ]+ +.*(FAILED|NO STATUS|TIMEOUT)' "$log")
  if ! grep -qE '^Executed [0-9]+ out of' "$log"; then
    echo "test.sh: bazel test did not run (build or analysis error above)"
    f=$((f + 1))
  fi
  passed=$((passed + p))
  failed=$((failed + f))
}

bazel_tests
if bazel build //tdlc >/dev/null 2>&1; then
  if python3 tools/check_tdl_md.py "$(bazel info bazel-bin 2>/dev/null)/tdlc/tdlc"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
else
  echo "test.sh: cannot build //tdlc for the TDL.md check"
  failed=$((failed + 1))
fi

echo "== tools/check_docs.py: every command the README and docs/ show"
if python3 tools/check_docs.py "$(bazel info bazel-bin 2>/dev/null)"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
fi

echo "== tools/check_format.sh"
if tools/check_format.sh; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
fi

install_and_consumers

if [ "$asan" = 1 ]; then
  bazel_tests --config=asan
fi

if [ "$fuzz" != 0 ]; then
  # Every fuzzer for its share of the seconds, from its seeds (and every input it once
  # crashed on), in an empty folder: fuzzed imports must not find real files.
  fuzzers=(tdl graph_json onnx checkpoint data names)
  share=$(( (fuzz + ${#fuzzers[@]} - 1) / ${#fuzzers[@]} ))
  echo "== fuzzing ${#fuzzers[*]} readers for ${share}s each (libFuzzer, ASan + UBSan)"
  if bazel build --config=fuzz //tests/fuzz:all >"$log" 2>&1; then
    bindir="$(bazel info --config=fuzz bazel-bin 2>/dev/null)/tests/fuzz"
    root=$PWD
    node_tests=$(dpkg -L libonnx-testdata 2>/dev/null | grep -m1 '/data/node$')
    for f in "${fuzzers[@]}"; do
      work=$(mktemp -d)
      mkdir -p "$work/corpus"
      case $f in
        tdl) seeds=("$root/tests/tdl"); max_len=4096 ;;
        graph_json) seeds=("$root/tests/fuzz/seeds/graph_json" "$root/tests/bad_input"); max_len=16384 ;;
        onnx) seeds=("$root/tests/bad_input" ${node_tests:+"$node_tests"}); max_len=16384 ;;
        checkpoint) seeds=("$root/tests/fuzz/seeds/checkpoint"); max_len=4096 ;;
        data) seeds=("$root/tests/fuzz/seeds/data"); max_len=4096 ;;
        names) seeds=("$root/tests/fuzz/seeds/names"); max_len=256 ;;
      esac
      [ -d "$root/tests/fuzz/regressions/$f" ] && seeds+=("$root/tests/fuzz/regressions/$f")
      if (cd "$work" && TOFU_FUZZ_OPS="$root/ops" "$bindir/${f}_fuzzer" -max_total_time="$share" \
            -max_len=$max_len -timeout=20 -print_final_stats=1 -artifact_prefix="$work/" \
            corpus "${seeds[@]}" >"$work/fuzz.log" 2>&1) &&
         ! ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* >/dev/null 2>&1; then
        echo "fuzz $f: $(grep -E '^stat::number_of_executed_units' "$work/fuzz.log" | tail -1 |
          sed 's/.*: *//') inputs, no crash, leak, hang or sanitizer report"
        passed=$((passed + 1))
      else
        tail -40 "$work/fuzz.log"
        mkdir -p "fuzz-artifacts/$f"
        cp "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* "fuzz-artifacts/$f/" 2>/dev/null
        echo "fuzz $f: FAILED (reproducers copied to fuzz-artifacts/$f/; keep each in"
        echo "  tests/fuzz/regressions/$f/ once fixed)"
        failed=$((failed + 1))
      fi
      rm -rf "$work"
    done
  else
    tail -30 "$log"
    echo "fuzz: the fuzzers did not build"
    failed=$((failed + 1))
  fi
fi

echo "tests: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
