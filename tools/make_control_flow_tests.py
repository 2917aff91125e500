#!/usr/bin/python3
"""Writes tests/onnx_control/: control-flow cases (If, Loop, Scan) laid out as ONNX's node
tests are (CASE/model.onnx, CASE/test_data_set_0/input_K.pb and output_K.pb), so that
tools/onnx_node_tests.py runs them (//tests:onnx_control_test). With them, the sequence and
optional operators the importer holds (graph/onnx_sequences.cc).

ONNX 1.12's own node tests have one If, one Loop and two Scans over tensors. These add what
they leave out: conditions computed from shapes, branches whose outputs differ in shape,
nested If, Loop states and scan outputs with the iteration number read, a Loop that runs no
iteration, an If in a Loop decided anew at each iteration, a Scan in a Loop, Scan's axes and
directions in both inputs and outputs, and opset 8's batched Scan. The expected outputs are
computed here with numpy, as the operators' definitions say (ONNX 1.12 has no reference
runtime to ask, and ONNX Runtime is not packaged for Debian).

Needs Debian's python3-onnx and python3-numpy. Run: /usr/bin/python3 tools/make_control_flow_tests.py
"""
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "onnx_control")
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, elem, dims):
    return helper.make_tensor_value_info(name, elem, dims)


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value)))


def write(case, graph, opset, inputs, outputs):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="tools/make_control_flow_tests.py")
    model.ir_version = 8 if opset >= 13 else 4
    onnx.checker.check_model(model)
    folder = os.path.join(OUT, case)
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    for kind, values, infos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
        for k, (v, info) in enumerate(zip(values, infos)):
            t = numpy_helper.from_array(np.asarray(v), info.name)
            with open(os.path.join(data, "%s_%d.pb" % (kind, k)), "wb") as f:
                f.write(t.SerializeToString())


def if_from_shape(rng):
    """If on a condition computed from x's shape, a nested If in the branch taken, and
    branches whose outputs differ in shape (the one taken decides)."""
    x = rng.standard_normal((2, 3)).astype(np.float32)
    inner = helper.make_node(
        "If", ["small"], ["twice"],
        then_branch=helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t1"])], "inner_then",
                                      [], [vi("t1", F, [2, 3])]),
        else_branch=helper.make_graph([helper.make_node("Sub", ["x", "two"], ["e1"])], "inner_else",
                                      [], [vi("e1", F, [2, 3])]))
    then = helper.make_graph(
        [const("five", np.int64(5)), helper.make_node("Less", ["rows", "five"], ["small"]), inner,
         const("axis1", np.array([1], np.int64)),
         helper.make_node("ReduceSum", ["x", "axis1"], ["rowsum"], keepdims=0)],
        "then", [], [vi("twice", F, [2, 3]), vi("rowsum", F, [2])])
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["neg"]), const("axis0", np.array([0], np.int64)),
         helper.make_node("ReduceSum", ["x", "axis0"], ["colsum"], keepdims=0)],
        "else", [], [vi("neg", F, [2, 3]), vi("colsum", F, [3])])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), const("zero", np.int64(0)),
             helper.make_node("Gather", ["shape", "zero"], ["rows"], axis=0),
             const("one", np.int64(1)), helper.make_node("Greater", ["rows", "one"], ["big"]),
             const("two", np.float32(2)),
             helper.make_node("If", ["big"], ["a", "b"], then_branch=then, else_branch=other),
             helper.make_node("Add", ["a", "two"], ["y"])]
    graph = helper.make_graph(nodes, "if_from_shape", [vi("x", F, [2, 3])],
                              [vi("y", F, [2, 3]), vi("b", F, ["n"])])
    return graph, 17, [x], [x * 2 + 2, x.sum(axis=1)]


def loop_body(extra_nodes=()):
    """(i, cond, a, b) -> (cond, a + x * i, b / 2 + a', a', 2 b')."""
    nodes = [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("Cast", ["i"], ["fi"], to=F),
             helper.make_node("Mul", ["x", "fi"], ["xi"]),
             helper.make_node("Add", ["a_in", "xi"], ["a_out"]),
             const("half", np.float32(0.5)),
             helper.make_node("Mul", ["b_in", "half"], ["bh"]),
             helper.make_node("Add", ["bh", "a_out"], ["b_out"]),
             const("twice", np.float32(2)),
             helper.make_node("Mul", ["b_out", "twice"], ["b2"])] + list(extra_nodes)
    return helper.make_graph(
        nodes, "body", [vi("i", I64, []), vi("cond_in", B, []), vi("a_in", F, [3]),
                        vi("b_in", F, [3])],
        [vi("cond_out", B, []), vi("a_out", F, [3]), vi("b_out", F, [3]), vi("a_out_scan", F, [3]),
         vi("b2", F, [3])])


def loop_reference(x, a, b, trips):
    scans_a, scans_b = [], []
    for i in range(trips):
        a = a + x * np.float32(i)
        b = b * np.float32(0.5) + a
        scans_a.append(a)
        scans_b.append(b * 2)
    return a, b, scans_a, scans_b


def loop_states_and_scans(rng):
    """A Loop whose trip count is an input (given), two states, the iteration number read,
    and two scan outputs."""
    x = rng.standard_normal(3).astype(np.float32)
    a0 = rng.standard_normal(3).astype(np.float32)
    body = loop_body([helper.make_node("Identity", ["a_out"], ["a_out_scan"])])
    nodes = [const("go", np.bool_(True)),
             helper.make_node("Loop", ["trips", "go", "a0", "b0"], ["a", "b", "as", "bs"], body=body)]
    b0 = np.zeros(3, np.float32)
    graph = helper.make_graph(
        nodes, "loop_states_and_scans", [vi("trips", I64, []), vi("x", F, [3]), vi("a0", F, [3])],
        [vi("a", F, [3]), vi("b", F, [3]), vi("as", F, ["n", 3]), vi("bs", F, ["n", 3])],
        initializer=[numpy_helper.from_array(b0, "b0")])
    a, b, sa, sb = loop_reference(x, a0, b0, 4)
    return graph, 17, [np.int64(4), x, a0], [a, b, np.stack(sa), np.stack(sb)]


def loop_zero_trips(rng):
    """A Loop whose condition is false as given: it runs no iteration, and its states are
    the initial values."""
    x = rng.standard_normal(3).astype(np.float32)
    body = loop_body([helper.make_node("Identity", ["a_out"], ["a_out_scan"])])
    body.output.pop()  # no scan outputs: they would be empty
    body.output.pop()
    nodes = [const("trips", np.int64(5)), const("stop", np.bool_(False)),
             helper.make_node("Loop", ["trips", "stop", "x", "x"], ["a", "b"], body=body),
             helper.make_node("Add", ["a", "b"], ["y"])]
    graph = helper.make_graph(nodes, "loop_zero_trips", [vi("x", F, [3])], [vi("y", F, [3])])
    return graph, 17, [x], [x + x]


def if_in_loop(rng):
    """An If in a Loop's body whose condition is the iteration number's parity: each
    iteration takes its own branch once the loop is unrolled."""
    x = rng.standard_normal((2, 2)).astype(np.float32)
    then = helper.make_graph([helper.make_node("MatMul", ["s_in", "x"], ["t"])], "even", [],
                             [vi("t", F, [2, 2])])
    other = helper.make_graph([helper.make_node("Add", ["s_in", "x"], ["e"])], "odd", [],
                              [vi("e", F, [2, 2])])
    body = helper.make_graph(
        [const("two", np.int64(2)), helper.make_node("Mod", ["i", "two"], ["parity"]),
         const("zero", np.int64(0)), helper.make_node("Equal", ["parity", "zero"], ["even"]),
         helper.make_node("If", ["even"], ["s_out"], then_branch=then, else_branch=other),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [vi("i", I64, []), vi("cond_in", B, []), vi("s_in", F, [2, 2])],
        [vi("cond_out", B, []), vi("s_out", F, [2, 2])])
    nodes = [const("trips", np.int64(5)),
             helper.make_node("Loop", ["trips", "", "x"], ["s"], body=body)]
    graph = helper.make_graph(nodes, "if_in_loop", [vi("x", F, [2, 2])], [vi("s", F, [2, 2])])
    s = x
    for i in range(5):
        s = s @ x if i % 2 == 0 else s + x
    return graph, 17, [x], [s]


def scan_in_loop(rng):
    """A Scan (a running sum over the rows of an outer tensor, from the loop's state) inside
    a Loop: the Loop is unrolled first, then each copy of the Scan."""
    x = rng.standard_normal((4, 3)).astype(np.float32)
    scan_body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "row"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["acc_scan"])],
        "scan_body", [vi("acc_in", F, [3]), vi("row", F, [3])],
        [vi("acc_out", F, [3]), vi("acc_scan", F, [3])])
    body = helper.make_graph(
        [helper.make_node("Scan", ["s_in", "x"], ["s_out", "partial"], body=scan_body,
                          num_scan_inputs=1),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [vi("i", I64, []), vi("cond_in", B, []), vi("s_in", F, [3])],
        [vi("cond_out", B, []), vi("s_out", F, [3]), vi("partial", F, [4, 3])])
    nodes = [const("trips", np.int64(2)), const("s0", np.zeros(3, np.float32)),
             helper.make_node("Loop", ["trips", "", "s0"], ["s", "partials"], body=body)]
    graph = helper.make_graph(nodes, "scan_in_loop", [vi("x", F, [4, 3])],
                              [vi("s", F, [3]), vi("partials", F, [2, 4, 3])])
    s, partials = np.zeros(3, np.float32), []
    for _ in range(2):
        partial = np.cumsum(x, axis=0) + s
        s = partial[-1]
        partials.append(partial)
    return graph, 17, [x], [s, np.stack(partials)]


def scan_axes_directions(rng):
    """Scan over two inputs along different axes, one reversed, and two outputs stacked
    along different axes, one reversed."""
    s0 = rng.standard_normal(2).astype(np.float32)
    u = rng.standard_normal((2, 4)).astype(np.float32)  # scanned along axis 1
    v = rng.standard_normal((4, 2)).astype(np.float32)  # along axis 0, last row first
    body = helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["ab"]),
         helper.make_node("Add", ["s_in", "ab"], ["s_out"]),
         helper.make_node("Sub", ["a", "b"], ["diff"]),
         helper.make_node("Identity", ["s_out"], ["s_scan"])],
        "body", [vi("s_in", F, [2]), vi("a", F, [2]), vi("b", F, [2])],
        [vi("s_out", F, [2]), vi("s_scan", F, [2]), vi("diff", F, [2])])
    node = helper.make_node("Scan", ["s0", "u", "v"], ["s", "sums", "diffs"], body=body,
                            num_scan_inputs=2, scan_input_axes=[1, 0],
                            scan_input_directions=[0, 1], scan_output_axes=[0, -1],
                            scan_output_directions=[1, 0])
    graph = helper.make_graph([node], "scan_axes_directions",
                              [vi("s0", F, [2]), vi("u", F, [2, 4]), vi("v", F, [4, 2])],
                              [vi("s", F, [2]), vi("sums", F, [4, 2]), vi("diffs", F, [2, 4])])
    s, sums, diffs = s0, [], []
    for t in range(4):
        a, b = u[:, t], v[3 - t]
        s = s + a * b
        sums.append(s)
        diffs.append(a - b)
    return graph, 17, [s0, u, v], [s, np.stack(sums[::-1], axis=0), np.stack(diffs, axis=-1)]


def scan8_batched(rng):
    """Opset 8's Scan: a batch axis first on the state and the scan input, the scan input
    read backwards (directions), each batch entry scanned on its own."""
    s0 = rng.standard_normal((2, 3)).astype(np.float32)
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "row"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "row"], ["prod"])],
        "body", [vi("s_in", F, [3]), vi("row", F, [3])],
        [vi("s_out", F, [3]), vi("prod", F, [3])])
    node = helper.make_node("Scan", ["", "s0", "x"], ["s", "prods"], body=body,
                            num_scan_inputs=1, directions=[1])
    graph = helper.make_graph([node], "scan8_batched", [vi("s0", F, [2, 3]), vi("x", F, [2, 4, 3])],
                              [vi("s", F, [2, 3]), vi("prods", F, [2, 4, 3])])
    finals, prods = [], []
    for b in range(2):
        s, p = s0[b], []
        for t in reversed(range(4)):
            s = s + x[b, t]
            p.append(s * x[b, t])
        finals.append(s)
        prods.append(np.stack(p))
    return graph, 8, [s0, x], [np.stack(finals), np.stack(prods)]


def sequence_ops(rng):
    """Sequences and optionals held by the importer: split into rows, one erased, a row
    inserted at the front, read back by position, counted, stacked and concatenated; an
    optional wrapping a value."""
    x = rng.standard_normal((4, 3)).astype(np.float32)
    extra = rng.standard_normal(3).astype(np.float32)
    nodes = [helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
             const("one", np.int64(1)), const("front", np.int64(0)), const("last", np.int64(-1)),
             const("extra", extra),
             helper.make_node("SequenceErase", ["rows", "one"], ["erased"]),
             helper.make_node("SequenceInsert", ["erased", "extra", "front"], ["inserted"]),
             helper.make_node("SequenceAt", ["inserted", "last"], ["lastrow"]),
             helper.make_node("SequenceLength", ["inserted"], ["n"]),
             helper.make_node("ConcatFromSequence", ["inserted"], ["stacked"], axis=1, new_axis=1),
             helper.make_node("ConcatFromSequence", ["inserted"], ["joined"], axis=0),
             helper.make_node("Optional", ["lastrow"], ["maybe"]),
             helper.make_node("OptionalHasElement", ["maybe"], ["has"]),
             helper.make_node("OptionalGetElement", ["maybe"], ["got"]),
             helper.make_node("Mul", ["got", "lastrow"], ["squared"])]
    graph = helper.make_graph(
        nodes, "sequence_ops", [vi("x", F, [4, 3])],
        [vi("n", I64, []), vi("stacked", F, [3, 4]), vi("joined", F, [12]), vi("has", B, []),
         vi("squared", F, [3])])
    rows = [extra, x[0], x[2], x[3]]
    return graph, 17, [x], [np.int64(4), np.stack(rows, axis=1), np.concatenate(rows),
                            np.bool_(True), x[3] * x[3]]


CASES = [if_from_shape, loop_states_and_scans, loop_zero_trips, if_in_loop, scan_in_loop,
         scan_axes_directions, scan8_batched, sequence_ops]


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    rng = np.random.default_rng(35)
    for make in CASES:
        graph, opset, inputs, outputs = make(rng)
        write("test_" + make.__name__, graph, opset, inputs, outputs)
        print("test_" + make.__name__)


if __name__ == "__main__":
    main()
