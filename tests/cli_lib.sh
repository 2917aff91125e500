# Shared by the tools' shell tests (sourced): Open MPI's environment for tests, and a check
# that a tool run ends with a given exit status and message.
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
