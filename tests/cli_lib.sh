# Shared by the tools' shell tests (sourced): Open MPI's environment for tests, a check that
# a tool run ends with a given exit status and message, and the cases sampled under ASan.
# Needs: $tmp (a scratch directory) and $fail (set to 1 on a failure).

# Open MPI keeps its session files and sockets under TMPDIR (Bazel's is too long a path for
# a socket name), refuses root unless told it is meant, and its own allocations live until
# exit (not this project's leaks to report).
mpi_test_env() {
  export TMPDIR=/tmp
  if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
}

# expect_exit STATUS FRAGMENT COMMAND ARGS...: the command exits STATUS and its standard
# error contains FRAGMENT.
expect_exit() {
  local status="$1" want="$2"
  shift 2
  "$@" >"$tmp/out.txt" 2>"$tmp/err.txt"
  local got=$?
  if [ "$got" -ne "$status" ] || ! grep -qF -- "$want" "$tmp/err.txt"; then
    echo "FAILED: $* exited $got (want $status and '$want'):" >&2
    cat "$tmp/err.txt" >&2
    fail=1
  fi
}

# Whether TOOL --help prints text: valid UTF-8 without control characters (an option's
# description once pointed at a freed temporary, and --help printed the heap's bytes).
help_is_text() { # TOOL
  "$1" --help | python3 -c '
import sys
text = sys.stdin.buffer.read().decode("utf-8")  # fails on bytes that are not UTF-8
bad = [c for c in text if (ord(c) < 32 and c != "\n") or c == "\ufffd"]
sys.exit(1 if bad or "--workers" not in text else 0)'
}

# detect_asan BINARY: sets asan to 1 where the binary is built with AddressSanitizer (bazel
# test --config=asan), where it runs some 3 to 10 times slower; else to 0. The runtime's entry
# point is named in the binary either way: linked in (clang) or from libasan (GCC).
detect_asan() {
  asan=0
  if grep -qa __asan_init "$1"; then asan=1; fi
}

# in_sample INDEX EVERY: whether case INDEX of a test's list runs. Every case does, except
# where asan is 1 (detect_asan): then one case in EVERY does, from an offset that
# tools/test.sh draws from the commit (TOFU_SAMPLE_OFFSET), so that successive commits cover
# every case; the plain run always runs them all.
in_sample() {
  [ "${asan:-0}" != 1 ] && return 0
  [ $((($1 + ${TOFU_SAMPLE_OFFSET:-0}) % $2)) -eq 0 ]
}
