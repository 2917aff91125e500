#!/usr/bin/env bash
# Tofu's integration routes, tried against an install tree the way a user outside the
# repository would: the installed tools from another directory, the public headers alone,
# a CMake project (find_package(Tofu), C++ API), a C program (pkg-config, C API), the Python
# module (`import tofu`: a PyTorch script, and python/tests under pytest).
#
#   examples/consumers_test.sh PREFIX      PREFIX from tools/install.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=$(cd "${1:?usage: consumers_test.sh PREFIX}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
step() { echo "== $*"; }
fail() { echo "consumers: FAILED: $*" >&2; failures=$((failures + 1)); }
expect() { # expect FILE REGEX WHAT
  grep -Eq "$2" "$1" || { cat "$1"; fail "$3 (no line matching '$2')"; }
}
unset TOFU_OPS

step "installed tools from / with no environment set up"
if (cd / && env -i PATH=/usr/bin:/bin "$prefix/bin/tofu-plan" --model mlp --train --workers 4 --summary) \
    >"$work/plan.txt" 2>&1; then
  expect "$work/plan.txt" "^plan: mlp training step" "tofu-plan's plan"
else
  cat "$work/plan.txt"; fail "tofu-plan --model mlp --train --workers 4 from /"
fi
if (cd / && env -i PATH=/usr/bin:/bin HOME="$work" "$prefix/bin/tofu-run" --model mlp --batch 8 \
      --workers 2 --steps 2 --verify) >"$work/run.txt" 2>&1; then
  expect "$work/run.txt" "verify: PASSED" "tofu-run's verified step"
else
  cat "$work/run.txt"; fail "tofu-run --model mlp --workers 2 --verify from /"
fi
(cd / && "$prefix/bin/tdlc" --help) >/dev/null 2>&1 || fail "tdlc --help"

step "the public headers alone (no Tofu source, no LLVM)"
bad_includes=$(grep -hE '^[[:space:]]*#[[:space:]]*include' "$prefix"/include/tofu/*.h \
  | grep -vE '<(cstdint|map|memory|optional|string|utility|vector|stddef\.h|stdint\.h)>|"tofu/tofu\.h"' || true)
[ -z "$bad_includes" ] || fail "the headers include more than the standard library: $bad_includes"
for h in plan.h tofu.h; do
  echo "#include \"tofu/$h\"" >"$work/h.cc"
  g++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only -I "$prefix/include" "$work/h.cc" \
    || fail "tofu/$h does not compile on its own"
done
echo '#include "tofu/tofu.h"' >"$work/h.c"
cc -std=c99 -Wall -Werror -fsyntax-only -I "$prefix/include" "$work/h.c" || fail "tofu/tofu.h is not C99"

step "CMake consumer (find_package(Tofu), C++ API)"
if cmake -S "$here/cmake_consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
     -DCMAKE_BUILD_TYPE=Release >"$work/cmake.log" 2>&1 &&
   cmake --build "$work/cmake" >>"$work/cmake.log" 2>&1; then
  if (cd / && "$work/cmake/plan_mlp" 4) >"$work/cmake.txt" 2>&1; then
    cat "$work/cmake.txt"
    expect "$work/cmake.txt" "^libtofu_plan [0-9]+\.[0-9]+\.[0-9]+$" "the C++ consumer's version"
    expect "$work/cmake.txt" "^4 workers, 2 steps" "the C++ consumer's plan"
    expect "$work/cmake.txt" "^fc2.w cut per step:" "the C++ consumer's cuts"
    expect "$work/cmake.txt" "^worker 3 holds fc1.w\[" "the C++ consumer's tiles"
    expect "$work/cmake.txt" "^a graph with an unknown op: .*oops.*NoSuchOp" "the C++ consumer's error"
  else
    cat "$work/cmake.txt"; fail "the CMake consumer ran"
  fi
else
  cat "$work/cmake.log"; fail "the CMake consumer builds"
fi

step "C consumer (pkg-config tofu, C API)"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
if cc -std=c99 -Wall -Werror "$here/c_consumer/plan.c" $(pkg-config --cflags --libs tofu) \
     -o "$work/plan_c" 2>"$work/cc.log"; then
  if (cd "$work" && ./plan_c 6 plan.json) >"$work/c.txt" 2>&1; then
    cat "$work/c.txt"
    expect "$work/c.txt" "^planned on 6 workers: [1-9][0-9]* bytes" "the C consumer's plan"
    expect "$work/c.txt" "^0 workers: argument: workers must be at least 1" "a status for 0 workers"
    expect "$work/c.txt" "^algorithm 'best': argument: unknown algorithm 'best'" "a status for an algorithm"
    expect "$work/c.txt" "^x again: graph: tensor 'x' is declared twice" "a status for a duplicate"
    expect "$work/c.txt" "^junk ONNX: graph: 'junk.onnx' is not an ONNX model" "a status for junk ONNX"
    expect "$work/c.txt" "^no planner: argument:" "a status for a null planner"
    /usr/bin/python3 - "$work/plan.json" <<'EOF' || fail "the C consumer's JSON"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["workers"] == 6 and p["factors"] == [3, 2], p["factors"]
names = {t["name"] for t in p["tensors"]}
assert {"w1", "w2", "x", "labels", "loss"} <= names, names
assert len(p["worker_details"]) == 6
for w in p["worker_details"]:
    assert w["peak_bytes"] > 0 and w["tile_bytes"] > 0
    box = w["tiles"]["w1"]
    assert len(box) == 2 and all(0 <= lo < hi for lo, hi in box), box
# The workers' tiles of a weight cover it exactly once per replica.
cells = sum((b[0][1] - b[0][0]) * (b[1][1] - b[1][0]) for b in (w["tiles"]["w1"] for w in p["worker_details"]))
replicas = 1
for d, f in zip(next(t["split_dims"] for t in p["tensors"] if t["name"] == "w1"), p["factors"]):
    replicas *= f if d < 0 else 1
assert cells == 1024 * 4096 * replicas, (cells, replicas)
print("plan.json: 6 workers, tiles of w1 cover it", replicas, "time(s)")
EOF
  else
    cat "$work/c.txt"; fail "the C consumer ran"
  fi
else
  cat "$work/cc.log"; fail "the C consumer builds with pkg-config"
fi

step "Python consumer (import tofu: a torch.nn.Module planned by its parameters' names)"
if (cd / && /usr/bin/python3 "$here/torch_plan.py" --prefix "$prefix" --workers 4) >"$work/py.txt" 2>&1; then
  head -20 "$work/py.txt"
  expect "$work/py.txt" "SmallCNN \(batch 32\) training step on 4 workers" "the Python consumer's plan"
  for p in conv1.weight conv1.bias conv2.weight fc1.weight fc2.weight fc2.bias; do
    expect "$work/py.txt" "^$p \[[0-9, ]+\]: per step " "the Python consumer's $p"
    expect "$work/py.txt" "^  worker 3: $p\[" "worker 3's share of $p"
  done
else
  cat "$work/py.txt"; fail "examples/torch_plan.py"
fi
if (cd / && /usr/bin/python3 "$here/torch_plan.py" --prefix "$prefix" --model mlp --workers 3) >"$work/py2.txt" 2>&1; then
  expect "$work/py2.txt" "^layers.4.weight \[10, 512\]: per step" "the MLP's last layer"
else
  cat "$work/py2.txt"; fail "examples/torch_plan.py --model mlp --workers 3"
fi

step "the Python module's tests (pytest, against the install)"
if (cd / && env -i PATH=/usr/bin:/bin HOME="$work" TOFU_PREFIX="$prefix" \
      PYTHONPATH="$prefix/lib/python3/dist-packages" /usr/bin/python3 -m pytest -q \
      -p no:cacheprovider "$here/../python/tests") >"$work/pytest.txt" 2>&1; then
  tail -1 "$work/pytest.txt"
else
  cat "$work/pytest.txt"; fail "python/tests (pytest)"
fi

if [ "$failures" -eq 0 ]; then
  echo "consumers: all routes work against $prefix"
else
  echo "consumers: $failures failure(s)"
  exit 1
fi
