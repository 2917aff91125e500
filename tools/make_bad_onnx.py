"""Writes the bad ONNX models of the bad-input corpus (tests/bad_input/*.onnx): each valid
enough for ONNX's checker, each with one thing the importer must refuse with a message
(tests/bad_input/cases.txt says which).

    /usr/bin/python3 tools/make_bad_onnx.py [OUT_DIR]   (default tests/bad_input)
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(out, name, nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    # The bytes as they are (onnx.save would resolve external data).
    with open(os.path.join(out, name + ".onnx"), "wb") as f:
        f.write(model.SerializeToString())


def window(out, name, op, attrs, x_shape=(1, 2, 8, 8), w_shape=(2, 2, 3, 3), weight=True):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["d%d" % i for i in range(len(x_shape))])
    inits = []
    inputs = ["x"]
    if weight:
        inits.append(numpy_helper.from_array(np.ones(w_shape, np.float32), "w"))
        inputs.append("w")
    node = helper.make_node(op, inputs, ["y"], name=name, **attrs)
    save(out, name, [node], [x], [y], inits)


def gather(out, name, index):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    idx = numpy_helper.from_array(np.array(index, np.int64), "idx")
    node = helper.make_node("Gather", ["x", "idx"], ["y"], name=name, axis=0)
    save(out, name, [node], [x], [y], [idx])


def weight_shell(name, dims):
    """A float TensorProto with a name and dims and no values yet."""
    w = TensorProto()
    w.name = name
    w.data_type = TensorProto.FLOAT
    w.dims.extend(dims)
    return w


def matmul(out, name, w):
    """y = x @ w, x 2 x 4, with the 4 x 3 initializer `w` as given."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    save(out, name, [helper.make_node("MatMul", ["x", "w"], ["y"], name=name)], [x], [y], [w])


def short_initializer(out):
    w = weight_shell("w", [4, 3])
    w.raw_data = np.ones(5, np.float32).tobytes()  # 20 bytes where 48 are needed
    matmul(out, "short_initializer", w)


def external(out, name, location, offset=None, length=None):
    """A MatMul whose weight w (4 x 3, values 0.0, 0.1, ... 1.1) keeps its bytes in an external
    file at `location` (external_ok.bin holds 16 bytes of padding, then w)."""
    w = weight_shell("w", [4, 3])
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = w.external_data.add()
            entry.key = key
            entry.value = str(value)
    matmul(out, name, w)


def external_data(out):
    with open(os.path.join(out, "external_ok.bin"), "wb") as f:
        f.write(b"\xff" * 16 + (np.arange(12, dtype=np.float32) / 10).tobytes())
    external(out, "external_ok", "external_ok.bin", 16, 48)
    external(out, "external_dotdot", "../bad_input/external_ok.bin", 16, 48)
    external(out, "external_absolute", "/etc/passwd")
    external(out, "external_missing", "no_such_file.bin")
    external(out, "external_past_end", "external_ok.bin", 32, 48)
    # A link inside the folder to a file outside it.
    link = os.path.join(out, "external_link.bin")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink("../../README.md", link)
    external(out, "external_link", "external_link.bin")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/bad_input"
    os.makedirs(out, exist_ok=True)
    window(out, "conv_stride0", "Conv", {"strides": [0, 1]})
    window(out, "conv1d_stride0", "Conv", {"strides": [0]}, (1, 2, 8), (2, 2, 3))
    window(out, "convtranspose_stride0", "ConvTranspose", {"strides": [0, 1]})
    window(out, "conv_dilation0", "Conv", {"dilations": [1, 0]})
    window(out, "conv_group0", "Conv", {"group": 0})
    window(out, "maxpool_stride0", "MaxPool", {"kernel_shape": [2, 2], "strides": [0, 2]},
           weight=False)
    gather(out, "gather_index99", [99])
    gather(out, "gather_index_minus99", [-99])
    short_initializer(out)
    external_data(out)
    # A weight of rank 2 for a 1-D ConvTranspose: ONNX's own shape inference reads a third
    # dimension it does not have (a segfault; the fuzzer found it).
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, 3])
    w = helper.make_tensor_value_info("W", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 2, 5])
    node = helper.make_node("ConvTranspose", ["X", "W"], ["Y"], name="convtranspose_weight_rank2")
    save(out, "convtranspose_weight_rank2", [node], [x, w], [y])
    # Strings: an input and an initializer (the importer took them for float32 tensors).
    s_in = helper.make_tensor_value_info("s", TensorProto.STRING, [2])
    s_out = helper.make_tensor_value_info("t", TensorProto.STRING, [2])
    save(out, "string_input", [helper.make_node("Identity", ["s"], ["t"], name="string_input")],
         [s_in], [s_out])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    labels = helper.make_tensor("labels", TensorProto.STRING, [2], [b"cat", b"dog"])
    save(out, "string_initializer", [helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [y],
         [labels])


if __name__ == "__main__":
    main()
