#!/usr/bin/env bash
# tofu-run --infer against PyTorch: every small model of tests/onnx with recorded outputs
# (NAME.ref.json: PyTorch's outputs for given inputs, tools/fixtures/export_onnx_fixtures.py) runs its
# forward graph on the engine at k = 1 and 2 and on the interpreter (--kernels interp) at
# k = 2, on those inputs given as .npy files, with the file's initializers as weights; each
# output written to --output-dir must match PyTorch's (relative 1e-3, absolute 1e-4). Then
# integer outputs: written as integers, exact on the interpreter past 2^24, where the engine
# warns. Then bad uses exit 2.
set -uo pipefail
run="$(realpath "$1")"
fail=0
tmp=$(mktemp -d /tmp/tofu-infer-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# One kernel cache for the whole run where tools/test.sh gives one (kernels compiled once).
export TOFU_KERNEL_CACHE="${TOFU_TEST_KERNEL_CACHE:-$tmp/kernels}"
source tests/cli_lib.sh
py=/usr/bin/python3
detect_asan "$run"
# The models' runs in one `tofu-run --batch` (each run forked from one loaded library), then
# one comparison of them all. Under ASan, a third of the models, in turn (in_sample), and
# small_cnn and attention, whose outputs the runs below are compared with.
# (Every model's inputs are written: cases below read some.)
refs=()
i=0
for ref in tests/onnx/*.ref.json; do
  case "$ref" in
    */small_cnn.ref.json | */attention.ref.json) refs+=("$ref") ;;
    *) in_sample "$i" 3 && refs+=("$ref") ;;
  esac
  i=$((i + 1))
done
$py - "$tmp" "${refs[*]}" tests/onnx/*.ref.json >"$tmp/refs.jsonl" <<'PY' || fail=1
import json, os, sys
import numpy as np
tmp, sampled = sys.argv[1], sys.argv[2].split()
for ref in sys.argv[3:]:
    r = json.load(open(ref))
    name = os.path.basename(ref)[: -len(".ref.json")]
    os.makedirs(f"{tmp}/{name}", exist_ok=True)
    given = []
    # Each input in the element type the model declares (as ONNX Runtime, Tofu converts
    # none): tokens as int64, the rest float32.
    import onnx, onnx.mapping
    declared = {i.name: onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[i.type.tensor_type.elem_type]
                for i in onnx.load(f"tests/onnx/{name}.onnx").graph.input}
    for k, v in r["inputs"].items():
        path = f"{tmp}/{name}/" + k.replace("/", "_") + ".npy"
        np.save(path, np.array(v["values"]).astype(declared[k]).reshape(v["shape"]))
        given.append(f"{k}={path}")
    if ref not in sampled:
        continue
    # k = 1 and 2 on the engine, and k = 2 on the interpreter (--kernels interp, double).
    for k in ("1", "2", "2i"):
        out = f"{tmp}/{name}/out{k}"
        args = ["--onnx", f"tests/onnx/{name}.onnx", "--data-inputs", str(len(given)),
                "--workers", k.rstrip("i"), "--kernels", "interp" if k == "2i" else "compiled",
                "--infer", "--input", ",".join(given), "--output-dir", out]
        print(json.dumps({"args": args, "stdout": f"{out}.out", "stderr": f"{out}.err",
                          "ref": ref, "name": name, "k": k, "out": out}))
PY
if ! "$run" --batch "$tmp/refs.jsonl" >"$tmp/refs.out" 2>"$tmp/err.txt"; then
  echo "FAILED: tofu-run --batch of the models' --infer runs" >&2; cat "$tmp/err.txt" >&2; fail=1
fi
checked=$($py - "$tmp/refs.jsonl" "$tmp/refs.out" <<'PY'
import json, os, sys
import numpy as np
runs = [json.loads(line) for line in open(sys.argv[1])]
results = {r["line"]: r for r in map(json.loads, open(sys.argv[2]))}
checked = 0
for line, run in enumerate(runs, 1):
    what = f"tofu-run --infer {run['name']} at k = {run['k']}"
    res = results.get(line, {})
    if res.get("exit") != 0:
        print(f"FAILED: {what}: {res}", file=sys.stderr)
        print(open(run["stderr"]).read(), file=sys.stderr)
        continue
    r = json.load(open(run["ref"]))
    ok = True
    for k, v in r["outputs"].items():
        got = np.load(os.path.join(run["out"], k.replace("/", "_") + ".npy"))
        want = np.array(v["values"], dtype=np.float64).reshape(v["shape"])
        if got.shape != want.shape:
            print(f"FAILED: {what}: output {k} has shape {got.shape}, PyTorch's {want.shape}",
                  file=sys.stderr)
            ok = False
            continue
        worst = float(np.max(np.abs(got - want) - 1e-3 * np.abs(want)))
        if worst > 1e-4:
            print(f"FAILED: {what}: output {k} differs from PyTorch's by {worst}", file=sys.stderr)
            ok = False
    checked += ok
print(checked)
PY
)
if [ "$checked" != $((3 * ${#refs[@]})) ]; then
  echo "FAILED: $checked of $((3 * ${#refs[@]})) --infer runs matched PyTorch's outputs" >&2; fail=1
fi
# Under MPI: 2 processes, each writing only its tiles of the input; rank 0 writes the outputs.
mpi_test_env
if ! mpirun --oversubscribe --bind-to none -np 2 "$run" --backend mpi --onnx tests/onnx/small_cnn.onnx \
     --infer --input "input=$tmp/small_cnn/input.npy" --output-dir "$tmp/mpi" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
  echo "FAILED: mpirun tofu-run --infer" >&2; cat "$tmp/err.txt" >&2; fail=1
else
  cmp "$tmp/mpi/output.npy" "$tmp/small_cnn/out2/output.npy" >/dev/null ||
    $py -c "
import numpy as np, sys
a, b = np.load('$tmp/mpi/output.npy'), np.load('$tmp/small_cnn/out2/output.npy')
assert np.allclose(a, b, rtol=1e-5, atol=1e-6), abs(a - b).max()" || fail=1
fi
echo "infer: $checked runs of ${#refs[@]} models matched PyTorch's outputs (and the MPI run)"

# As a new user gives inputs (issue 56): --input repeated, no --workers (inference takes 1)
# and no --data-inputs (every input --input names is data); a float16 .npy and a rank-0
# .npy: y = x * s with x float16 [2, 3] and s a scalar, on a model built here.
if ! "$run" --onnx tests/onnx/attention.onnx --infer --input "input0=$tmp/attention/input0.npy" \
     --input "input1=$tmp/attention/input1.npy" --output-dir "$tmp/repeat" >"$tmp/out.txt" 2>"$tmp/err.txt" ||
   ! cmp -s "$tmp/repeat/output.npy" "$tmp/attention/out1/output.npy"; then
  echo "FAILED: --input repeated, without --workers and --data-inputs" >&2; cat "$tmp/err.txt" >&2; fail=1
fi
# --infer --precision bf16: the attention model's products on bfloat16 operands, on 2
# workers: its outputs within bfloat16's rounding of the float32 run's (2e-2 of the largest),
# and not equal to them (the step did round).
if "$run" --onnx tests/onnx/attention.onnx --workers 2 --infer --precision bf16 \
     --input "input0=$tmp/attention/input0.npy" --input "input1=$tmp/attention/input1.npy" \
     --output-dir "$tmp/bf16" >"$tmp/out.txt" 2>"$tmp/err.txt" &&
   grep -q "forward on 2 workers (bf16 as torch.autocast)" "$tmp/out.txt"; then
  $py -c "
import numpy as np
a, b = np.load('$tmp/bf16/output.npy'), np.load('$tmp/attention/out1/output.npy')
d = np.abs(a - b).max()
assert 0 < d <= 2e-2 * np.abs(b).max(), (d, np.abs(b).max())
print(f'infer bf16: attention within {d:.2e} of float32 (largest {np.abs(b).max():.3f})')" || fail=1
else
  echo "FAILED: --infer --precision bf16" >&2; cat "$tmp/out.txt" "$tmp/err.txt" >&2; fail=1
fi
# Fused kernels compute what the unfused ones do in bf16 too: a bfloat16 intermediate folded
# into its reader is rounded there as its storage would round it. gpt_block's linears feed
# float32 residual adds; until 2026-11-29 a fused add read the linear's result unrounded, and
# 2 of 3 outputs differed from the unfused run's.
$py -c "import numpy as np; np.save('$tmp/gpt_tokens.npy', np.arange(16, dtype=np.int64).reshape(2, 8) * 3 % 50)"
for fuse in true false; do
  "$run" --onnx tests/onnx/gpt_block.onnx --workers 2 --infer --precision bf16 --fusion=$fuse \
    --input "input=$tmp/gpt_tokens.npy" \
    --output-dir "$tmp/gpt-fused-$fuse" >"$tmp/out.txt" 2>"$tmp/err.txt" ||
    { echo "FAILED: gpt_block bf16 --fusion=$fuse" >&2; cat "$tmp/err.txt" >&2; fail=1; }
done
cmp -s "$tmp/gpt-fused-true/output.npy" "$tmp/gpt-fused-false/output.npy" ||
  { echo "FAILED: gpt_block's bf16 forward pass fused differs from unfused" >&2; fail=1; }
$py - "$tmp" <<'PY'
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper
tmp = sys.argv[1]
g = helper.make_graph([helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
                       helper.make_node("Mul", ["xf", "s"], ["y"])], "scale",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3]),
                       helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
onnx.save(m, tmp + "/scale.onnx")
np.save(tmp + "/scale_x.npy", np.array([[1, -2.5, 0.125], [3, 4, 65504]], np.float16))
np.save(tmp + "/scale_s.npy", np.array(0.5, np.float32))
PY
if ! "$run" --onnx "$tmp/scale.onnx" --infer --input "x=$tmp/scale_x.npy" --input "s=$tmp/scale_s.npy" \
     --output-dir "$tmp/scale" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
  echo "FAILED: --infer on a float16 .npy and a rank-0 .npy" >&2; cat "$tmp/err.txt" >&2; fail=1
else
  $py -c "
import numpy as np
got = np.load('$tmp/scale/y.npy')
assert got.tolist() == [[0.5, -1.25, 0.0625], [1.5, 2.0, 32752.0]], got" || fail=1
fi

# A weight kept in an external file (tests/bad_input/external_ok.onnx: w's bytes at offset 16
# of external_ok.bin) is read from there, at k = 1 and 2.
$py -c "import numpy as np; np.save('$tmp/ext_x.npy', np.arange(8, dtype=np.float32).reshape(2, 4))"
for k in 1 2; do
  if ! "$run" --onnx tests/bad_input/external_ok.onnx --workers $k --infer --input "x=$tmp/ext_x.npy" \
       --output-dir "$tmp/ext$k" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
    echo "FAILED: tofu-run --infer external_ok at k = $k" >&2; cat "$tmp/err.txt" >&2; fail=1; continue
  fi
  $py -c "
import numpy as np
x = np.arange(8, dtype=np.float64).reshape(2, 4)
w = np.arange(12, dtype=np.float64).reshape(4, 3) / 10
got = np.load('$tmp/ext$k/y.npy')
assert np.allclose(got, x @ w, rtol=1e-6, atol=1e-6), (got, x @ w)" || { echo "FAILED: external_ok at k = $k" >&2; fail=1; }
done

# Integers: written in their own type, and exact: y = x + 1 and b = x > 1 on int64 values.
# Past 2^24 (float32's exact range), in an input or an output, the run goes to the
# interpreter (double, exact to 2^53); --kernels interp runs there from the start.
$py - "$tmp" <<'PY'
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
tmp = sys.argv[1]
one = numpy_helper.from_array(np.array([1], np.int64))
g = helper.make_graph(
    [helper.make_node("Constant", [], ["c"], value=one), helper.make_node("Add", ["x", "c"], ["y"]),
     helper.make_node("Greater", ["x", "c"], ["b"])], "ints",
    [helper.make_tensor_value_info("x", TensorProto.INT64, [3])],
    [helper.make_tensor_value_info("y", TensorProto.INT64, [3]),
     helper.make_tensor_value_info("b", TensorProto.BOOL, [3])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
onnx.save(m, tmp + "/ints.onnx")
np.save(tmp + "/ints_x.npy", np.array([2**40 + 1, 5, -2**35 - 3], np.int64))
np.save(tmp + "/ints_edge.npy", np.array([2**24 - 1, 5, -7], np.int64))  # only y reaches 2^24
np.save(tmp + "/ints_small.npy", np.array([2**20, 5, -7], np.int64))  # nothing does
PY
for k in compiled interp edge small; do
  x=x kernels=$k
  case $k in edge | small) x=$k kernels=compiled ;; esac
  if ! "$run" --onnx "$tmp/ints.onnx" --workers 2 --infer --kernels $kernels \
       --input "x=$tmp/ints_$x.npy" --output-dir "$tmp/ints_$k" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
    echo "FAILED: tofu-run --infer --kernels $kernels on int64 values ($k)" >&2; cat "$tmp/err.txt" >&2
    fail=1; continue
  fi
  $py - "$tmp/ints_$k" "$k" "$tmp/err.txt" "$tmp/out.txt" <<'PY' || fail=1
import sys
import numpy as np
d, case, err, out = sys.argv[1:5]
y, b = np.load(d + "/y.npy"), np.load(d + "/b.npy")
assert y.dtype == np.int64 and b.dtype == np.bool_, (y.dtype, b.dtype)
err, out = open(err).read(), open(out).read()
x = {"compiled": [2**40 + 1, 5, -2**35 - 3], "interp": [2**40 + 1, 5, -2**35 - 3],
     "edge": [2**24 - 1, 5, -7], "small": [2**20, 5, -7]}[case]
assert y.tolist() == [v + 1 for v in x], (case, y)
assert b.tolist() == [v > 1 for v in x], (case, b)
switched = {"compiled": "input 'x' (int64) holds 1099511627777, at or past 2^24",
            "edge": "output 'y' (int64) holds 16777216, at or past 2^24"}.get(case)
if switched:
    assert switched in err and "running" in err and "on the interpreter" in err, (case, err)
on_interp = "(interpreter, double)" in out
assert on_interp == (case != "small"), (case, out)
print(f"ints ({case}): {y.tolist()}")
PY
done

$py -c "import numpy as np; np.save('$tmp/x.npy', np.zeros((3, 3), np.float32))"
expect_exit 2 "--infer needs a value for every data input; --input gives none for input" "$run" \
  --onnx tests/onnx/mlp.onnx --workers 1 --infer
# An ONNX model's inputs are given to its import: a shape against a static dimension, or a
# name that is no data input, is refused there, naming the input.
expect_exit 1 "the value given for input 'input' has shape [3, 3]; the model declares [4, 64]" \
  "$run" --onnx tests/onnx/mlp.onnx --workers 1 --infer --input "input=$tmp/x.npy"
expect_exit 1 "a value is given for 'nope', which is not one of the model's data inputs" \
  "$run" --onnx tests/onnx/mlp.onnx --workers 1 --infer --input "nope=$tmp/x.npy"
expect_exit 2 "--input: 'input' is given twice" "$run" --onnx tests/onnx/mlp.onnx --workers 1 \
  --infer --input "input=$tmp/x.npy,input=$tmp/x.npy"
expect_exit 2 "--input and --output-dir are for --infer" "$run" --onnx tests/onnx/mlp.onnx --workers 1 --input "input=$tmp/x.npy"
$py -c "import numpy as np; np.save('$tmp/mlp_in.npy', np.zeros((4, 64), np.float32))"
expect_exit 2 "--output-dir /etc/passwd: Not a directory" "$run" --onnx tests/onnx/mlp.onnx --workers 1 --infer \
  --input "input=$tmp/mlp_in.npy" --output-dir /etc/passwd
expect_exit 2 "--verify is for training runs" "$run" --onnx tests/onnx/mlp.onnx --workers 1 --infer --verify
# float64 beyond float32's range is never made infinite: an input runs on the interpreter
# (double), or is refused where the interpreter cannot run (--load); an initializer is refused.
$py - "$tmp" <<'PY'
import sys
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto
t = sys.argv[1]
def model(path, inits, a, b):
    g = helper.make_graph([helper.make_node("Add", [a, b], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
model(f"{t}/add64.onnx", [], "x", "x")
model(f"{t}/big64.onnx", [numpy_helper.from_array(np.array([1.0, 1e300]), "big")], "x", "big")
np.save(f"{t}/big.npy", np.array([1e300, 2.0]))
np.save(f"{t}/small.npy", np.array([1.0, 2.0]))
PY
if ! "$run" --onnx "$tmp/add64.onnx" --infer --input "x=$tmp/big.npy" --output-dir "$tmp/o64" \
     >"$tmp/out.txt" 2>"$tmp/err.txt" || ! grep -q "running on the interpreter (double)" "$tmp/err.txt" ||
   ! $py -c "import numpy as np, sys; assert list(np.load(sys.argv[1])) == [2e300, 4.0]" "$tmp/o64/y.npy"; then
  echo "FAILED: a float64 input beyond float32's range" >&2; cat "$tmp/out.txt" "$tmp/err.txt" >&2; fail=1
fi
expect_exit 1 "initializer 'big' (float64) holds 1e+300, beyond the range of float32" "$run" \
  --onnx "$tmp/big64.onnx" --infer --input "x=$tmp/small.npy"
# tofu-run --batch: runs forked from one process, each with its own result line. A run that
# fails (exit 1) leaves the next to run; a run past its timeout is killed and reported; the
# outputs equal those of a run of its own; a line that is not an --infer run is refused.
mlp=(--onnx tests/onnx/mlp.onnx --workers 2 --infer --input "input=$tmp/mlp_in.npy")
if ! "$run" "${mlp[@]}" --output-dir "$tmp/alone" >/dev/null 2>&1; then
  echo "FAILED: tofu-run --infer of mlp" >&2; fail=1
fi
$py - "$tmp" > "$tmp/batch.jsonl" <<'PY'
import json, sys
t = sys.argv[1]
mlp = ["--onnx", "tests/onnx/mlp.onnx", "--workers", "2", "--infer", "--input", f"input={t}/mlp_in.npy"]
print(json.dumps({"args": mlp + ["--output-dir", f"{t}/b1"], "stdout": f"{t}/b1.out", "stderr": f"{t}/b1.err"}))
print(json.dumps({"args": ["--onnx", f"{t}/none.onnx", "--infer"], "stderr": f"{t}/b2.err"}))
print(json.dumps({"args": mlp + ["--output-dir", f"{t}/b3"], "timeout": 0.001}))
print(json.dumps({"args": mlp + ["--output-dir", f"{t}/b4"], "stdout": f"{t}/b4.out"}))
PY
if ! "$run" --batch "$tmp/batch.jsonl" >"$tmp/batch.out" 2>"$tmp/err.txt"; then
  echo "FAILED: tofu-run --batch" >&2; cat "$tmp/err.txt" >&2; fail=1
fi
$py - "$tmp" <<'PY' || fail=1
import json, sys
import numpy as np
t = sys.argv[1]
r = [json.loads(line) for line in open(f"{t}/batch.out")]
assert [x["line"] for x in r] == [1, 2, 3, 4], r
assert r[0]["exit"] == 0 and r[3]["exit"] == 0, r
assert r[1]["exit"] == 1 and "none.onnx" in open(f"{t}/b2.err").read(), r
assert r[2].get("timeout") == 0.001 and "exit" not in r[2], r
assert "forward on 2 workers" in open(f"{t}/b4.out").read()
for b in ("b1", "b4"):
    assert np.array_equal(np.load(f"{t}/{b}/output.npy"), np.load(f"{t}/alone/output.npy")), b
PY
echo '{"args": ["--onnx", "tests/onnx/mlp.onnx", "--workers", "1", "--steps", "1"]}' > "$tmp/train.jsonl"
expect_exit 2 "line 1: a batch runs --infer runs only" "$run" --batch "$tmp/train.jsonl"
echo '["--infer"]' > "$tmp/bad.jsonl"
expect_exit 2 "line 1: not a run" "$run" --batch "$tmp/bad.jsonl"
exit $fail
