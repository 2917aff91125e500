#!/usr/bin/env bash
# The whole test suite. Installs missing Debian packages, builds everything (the CUDA
# kernels included: nvcc compiles them even without a GPU), runs every Bazel test, checks
# every example of shared/docs/TDL.md with tdlc, every command the docs show, and the
# sources against .clang-format, and installs Tofu into a temporary prefix to build and run
# the CMake, C and Python consumers against it. At the end it prints each phase's time and
# the ten slowest tests. The TDL.md, docs and format checks run beside the tests (they need
# only the built binaries); their phase is the time they took beyond the tests.
#
#   tools/test.sh                 the suite
#   tools/test.sh --full          ... with every sampled check whole (TOFU_FULL=1 reaches the
#                                 tests: ONNX's node tests at k = 1 and 2, not a sample at k = 2)
#   tools/test.sh --asan          ... and again under AddressSanitizer + UBSan (a sample of
#                                 the slowest end-to-end cases, rotating with the commit)
#   tools/test.sh --avx2          ... and the tests whose results depend on the CPU's
#                                 instructions (the PyTorch peers, bf16, the library kernels)
#                                 again as on an AVX2-only CPU (bazel test --config=avx2:
#                                 oneDNN capped to AVX2, kernels for x86-64-v3); skipped,
#                                 saying so, on a CPU without AVX-512 (the plain run was that)
#   tools/test.sh --fuzz SECONDS  ... and fuzz the readers of untrusted input with libFuzzer
#                                 (clang 14; tests/fuzz/BUILD), the seconds shared among them
#   tools/test.sh --budget PHASE=SECONDS,...
#                                 fail when a phase (setup, build, tests, checks, install,
#                                 avx2, asan, fuzz, total) takes longer than its budget (.ci/run's)
set -uo pipefail
cd "$(dirname "$0")/.."

asan=0
avx2=0
fuzz=0
full=0
budget=""
while [ $# -gt 0 ]; do
  case "$1" in
    --asan) asan=1 ;;
    --avx2) avx2=1 ;;
    --full) full=1 ;;
    --fuzz) fuzz="${2:?--fuzz needs a number of seconds}"; shift ;;
    --budget) budget="${2:?--budget needs PHASE=SECONDS,...}"; shift ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# Each phase's seconds, in order, and the tests' own times (bazel's "PASSED in Ns").
phases=()
declare -A took
started=$SECONDS
phase_start=$SECONDS
phase() { # ends the phase running since the last call, under the name given
  took[$1]=$((SECONDS - phase_start))
  phases+=("$1")
  phase_start=$SECONDS
}
times=$(mktemp)

tools/setup.sh || exit 1
phase setup

passed=0
failed=0
log=$(mktemp)
# One kernel cache for every test: a kernel the zoo's models or the corpus share is compiled
# once, not once per test. Entries are named by a hash of their source and flags and written
# by rename, so concurrent tests share it safely, and a later run finds it warm.
kernels=/tmp/tofu-test-kernels-$(id -u)
mkdir -p "$kernels"
trap 'rm -f "$log" "$times"' EXIT
test_env=(--test_env=TOFU_TEST_KERNEL_CACHE="$kernels")
[ "$full" = 1 ] && test_env+=(--test_env=TOFU_FULL=1)
# Sampled tests (the node tests' every Nth case, under ASan and at k = 2) start at an offset
# drawn from the commit, so that successive commits cover every case.
commit=$(git rev-parse HEAD 2>/dev/null || echo 0)
test_env+=(--test_env=TOFU_SAMPLE_OFFSET=$((16#${commit:0:6})))

# Installs Tofu into a temporary prefix (tools/install.sh, the build above) and runs the three
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

# Runs `bazel test` with the given flags (and targets; default //...) and adds its per-target
# results to the counts.
bazel_tests() {
  local targets=(//...)
  [[ " $* " == *" //"* ]] && targets=()
  echo "== bazel test $*"
  bazel test "${test_env[@]}" "$@" "${targets[@]}" 2>&1 | tee "$log" | grep -vE '^(INFO|Loading|Analyzing|\[)' \
    | grep -E 'PASSED|FAILED|NO STATUS|TIMEOUT|Executed|ERROR|error:' || true
  sed -nE "s#^(//[^ ]+) +(\(cached\) )?(PASSED|FAILED) in ([0-9.]+)s.*#\4 \1${1:+ ($1)}#p" "$log" >>"$times"
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

echo "== bazel build //..."
if ! bazel build //... >"$log" 2>&1; then
  grep -E 'ERROR|error:' "$log" | head -30
fi
phase build
# The checks below use only built binaries (no Bazel command), so they run beside the tests,
# on the cores the tests leave idle (their tail: few long tests at the end); their output
# follows the tests'.
bin="$(bazel info bazel-bin 2>/dev/null)"
checks_log=$(mktemp)
checks_done=$(mktemp)
trap 'rm -f "$log" "$times" "$checks_log" "$checks_done"' EXIT
(
  p=0 f=0
  if [ -x "$bin/tdlc/tdlc" ] && python3 tools/checks/check_tdl_md.py "$bin/tdlc/tdlc"; then
    p=$((p + 1))
  else
    [ -x "$bin/tdlc/tdlc" ] || echo "test.sh: //tdlc was not built, for the TDL.md check"
    f=$((f + 1))
  fi
  echo "== tools/checks/check_docs.py: every command the README and docs/ show"
  if python3 tools/checks/check_docs.py "$bin"; then p=$((p + 1)); else f=$((f + 1)); fi
  echo "== tools/checks/check_format.sh"
  if tools/checks/check_format.sh; then p=$((p + 1)); else f=$((f + 1)); fi
  echo "$p $f $SECONDS" >"$checks_done"
) >"$checks_log" 2>&1 &
checks=$!
bazel_tests
phase tests
wait "$checks"
cat "$checks_log"
read -r cp cf _ <"$checks_done" 2>/dev/null || { cp=0; cf=1; echo "test.sh: the checks did not finish"; }
passed=$((passed + cp))
failed=$((failed + cf))
phase checks # what the checks took beyond the tests

install_and_consumers
phase install

# The tests whose results depend on the CPU's instructions: the PyTorch peers (bf16 bit for
# bit, training step by step, op by op), the recorded PyTorch outputs, and oneDNN's kernels
# against the generated ones. On a CPU with AVX-512 they run again as on one without
# (.bazelrc's test:avx2), so that CI on either kind of machine sees what the other would.
isa_tests=(//tests:torch_grad_test //tests:tofu_run_data_test //tests:torch_op_test
           //tests:tofu_run_infer_test //tests:verify_library_test //runtime:engine_test)
if [ "$avx2" = 1 ]; then
  if ! grep -qw avx2 /proc/cpuinfo || ! grep -qw fma /proc/cpuinfo; then
    echo "== the AVX2 pass: skipped (this CPU has no AVX2 and FMA to emulate an AVX2-only one with)"
  elif ! grep -qw avx512f /proc/cpuinfo; then
    echo "== the AVX2 pass: skipped (this CPU has no AVX-512: the run above was an AVX2-only CPU's)"
  else
    bazel_tests --config=avx2 "${isa_tests[@]}"
  fi
  phase avx2
fi

if [ "$asan" = 1 ]; then
  bazel_tests --config=asan
  phase asan
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
      if (cd "$work" && TMPDIR="$work" TOFU_FUZZ_OPS="$root/ops" "$bindir/${f}_fuzzer" -max_total_time="$share" \
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

[ "$fuzz" != 0 ] && phase fuzz
took[total]=$((SECONDS - started))
phases+=(total)

echo
echo "| phase | seconds | budget |"
echo "| --- | ---: | ---: |"
declare -A limit
for b in ${budget//,/ }; do limit[${b%%=*}]=${b#*=}; done
over=()
for p in "${phases[@]}"; do
  echo "| $p | ${took[$p]} | ${limit[$p]:-} |"
  if [ -n "${limit[$p]:-}" ] && [ "${took[$p]}" -gt "${limit[$p]}" ]; then
    over+=("$p took ${took[$p]} s, over its budget of ${limit[$p]} s")
  fi
done
echo
echo "the ten slowest tests (seconds):"
sort -rg "$times" | head -10 | sed 's/^/  /'
for o in "${over[@]}"; do
  echo "test.sh: budget: $o: make the slow tests faster (see the slowest above) before adding more"
  failed=$((failed + 1))
done
echo "tests: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
