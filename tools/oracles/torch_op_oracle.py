#!/usr/bin/python3
"""The library's ops and their grad clauses against PyTorch autograd, op by op.

For every op of ops/ with a PyTorch counterpart listed below, at shapes of rank 3 and 4 that
give every variadic group several axes, this draws inputs (float64), runs the op and each of
its grad clauses through `tdlc --eval` (the TDL interpreter, in double; results written as
float32) for a random output gradient, and compares:
  forward    the op's value with the PyTorch function's,
  grad X     each grad clause's result with torch.autograd's gradient of that input
             (the vector-Jacobian product with the same output gradient).
A value passes when max |tofu - torch| <= 1e-4 * max(1, max |torch|). The finite-difference
check of `tdlc --verify` stays; this one is independent of TDL's own semantics.

  tools/oracles/torch_op_oracle.py --tdlc PATH [--ops DIR] [--only SUBSTRING] [--keep DIR]
                           [--sample EVERY]

--sample EVERY runs one case in EVERY, from the offset $TOFU_SAMPLE_OFFSET (the suite under
AddressSanitizer: successive commits cover every case).

Prints a table (op, shapes, what was compared, largest error) and exits 1 on any mismatch,
any op that cannot be evaluated, or any grad clause that PyTorch has no gradient for.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import warnings
import zlib

import numpy as np
import torch
import torch.nn.functional as F

TOLERANCE = 1e-4
# Tensor.index_reduce (the scatter reductions' oracle) warns that it is in beta.
warnings.filterwarnings("ignore", message="index_reduce")


class Case:
    """One op at one instantiation.

    inputs: (name, shape, kind) per TDL input, in order; kind is 'f' (uniform in [-1, 1]),
    'pos' (in [0.5, 2]), 'half' (in [-0.9, 0.9]), 'big' (in [1.25, 2]), 'c' and 'cpos' (as
    'f' and 'pos', not differentiated: running statistics, class weights), ('int', n)
    integers in [0, n), ('halves', n) quarters in [-n, n], ('value', v) a fixed value, 'cond'
    (0 or 1), 'ties' (quarters in [-1, 1]: many equal values, for max pooling's gradient,
    which the first maximum of a window takes). PyTorch differentiates the 'f', 'pos',
    'half', 'big' and 'ties' inputs.
    fn: the PyTorch function of the inputs as float64 tensors (integers as int64).
    """

    def __init__(self, op, file, inputs, fn, attrs=None, groups=None, label=None):
        self.op, self.file, self.inputs, self.fn = op, file, inputs, fn
        self.attrs, self.groups = attrs or {}, groups or {}
        self.label = label or op


def sc(t):
    """A rank-0 input's value."""
    return t.reshape(())


def reverse_sequences(x, lens, time_first):
    """ONNX ReverseSequence: batch b's first lens[b] steps reversed (PyTorch's flip)."""
    y = x.clone()
    for b, n in enumerate(lens.tolist()):
        if time_first:
            y[:n, b] = x[:n, b].flip(0)
        else:
            y[b, :n] = x[b, :n].flip(0)
    return y


A = "nn/activation.tdl"
U = "math/unary.tdl"
B = "math/binary.tdl"
LIN = "nn/linear.tdl"
CONV = "nn/conv.tdl"
POOL = "nn/pool.tdl"
NORM = "nn/norm.tdl"
SM = "nn/softmax.tdl"
LOSS = "loss/loss.tdl"
RED = "reduce/reduce.tdl"
SH = "tensor/shape.tdl"
TR = "tensor/transpose.tdl"

X4 = (2, 3, 4, 5)  # rank 4: a group *i of four axes
CASES = [
    # Element-wise activations (the group *i of rank 4).
    Case("Relu", A, [("x", X4, "f")], torch.relu, groups={"i": 4}),
    Case("Sigmoid", A, [("x", X4, "f")], torch.sigmoid, groups={"i": 4}),
    Case("Tanh", A, [("x", X4, "f")], torch.tanh, groups={"i": 4}),
    Case("LeakyRelu", A, [("x", X4, "f"), ("alpha", (1,), ("value", 0.1))],
         lambda x, a: F.leaky_relu(x, 0.1), groups={"i": 4}),
    Case("PRelu", A, [("x", X4, "f"), ("slope", X4, "pos")],
         lambda x, s: torch.where(x >= 0, x, x * s), groups={"i": 4}),
    Case("Elu", A, [("x", X4, "f"), ("alpha", (1,), ("value", 1.5))],
         lambda x, a: F.elu(x, 1.5), groups={"i": 4}),
    Case("Selu", A, [("x", X4, "f"), ("alpha", (1,), ("value", 1.6732632423543772)),
                     ("gamma", (1,), ("value", 1.0507009873554805))],
         lambda x, a, g: F.selu(x), groups={"i": 4}),
    Case("Celu", A, [("x", X4, "f"), ("alpha", (1,), ("value", 0.7))],
         lambda x, a: F.celu(x, 0.7), groups={"i": 4}),
    Case("HardSigmoid", A, [("x", X4, "f"), ("alpha", (1,), ("value", 1 / 6)),
                            ("beta", (1,), ("value", 0.5))],
         lambda x, a, b: torch.clamp(x / 6 + 0.5, 0, 1), groups={"i": 4}),
    Case("HardSwish", A, [("x", X4, "f")], F.hardswish, groups={"i": 4}),
    Case("Softplus", A, [("x", X4, "f")], F.softplus, groups={"i": 4}),
    Case("Softsign", A, [("x", X4, "f")], F.softsign, groups={"i": 4}),
    Case("Mish", A, [("x", X4, "f")], F.mish, groups={"i": 4}),
    Case("Gelu", A, [("x", X4, "f")], F.gelu, groups={"i": 4}),
    Case("Clip", A, [("x", X4, "f"), ("lo", (1,), ("value", -0.5)), ("hi", (1,), ("value", 0.6))],
         lambda x, lo, hi: torch.clamp(x, -0.5, 0.6), groups={"i": 4}),
    # Element-wise math.
    Case("Exp", U, [("x", X4, "f")], torch.exp, groups={"i": 4}),
    Case("Log", U, [("x", X4, "pos")], torch.log, groups={"i": 4}),
    Case("Sqrt", U, [("x", X4, "pos")], torch.sqrt, groups={"i": 4}),
    Case("Abs", U, [("x", X4, "f")], torch.abs, groups={"i": 4}),
    Case("Neg", U, [("x", X4, "f")], torch.neg, groups={"i": 4}),
    Case("Reciprocal", U, [("x", X4, "pos")], torch.reciprocal, groups={"i": 4}),
    Case("Sin", U, [("x", X4, "f")], torch.sin, groups={"i": 4}),
    Case("Cos", U, [("x", X4, "f")], torch.cos, groups={"i": 4}),
    Case("Erf", U, [("x", X4, "f")], torch.erf, groups={"i": 4}),
    Case("Atan", U, [("x", X4, "f")], torch.atan, groups={"i": 4}),
    Case("Sinh", U, [("x", X4, "f")], torch.sinh, groups={"i": 4}),
    Case("Add", B, [("a", X4, "f"), ("b", X4, "f")], torch.add, groups={"i": 4}),
    Case("Sub", B, [("a", X4, "f"), ("b", X4, "f")], torch.sub, groups={"i": 4}),
    Case("Mul", B, [("a", X4, "f"), ("b", X4, "f")], torch.mul, groups={"i": 4}),
    Case("Div", B, [("a", X4, "f"), ("b", X4, "pos")], torch.div, groups={"i": 4}),
    Case("Pow", B, [("a", X4, "pos"), ("b", X4, "f")], torch.pow, groups={"i": 4}),
    Case("Where", B, [("c", X4, "cond"), ("a", X4, "f"), ("b", X4, "f")],
         lambda c, a, b: torch.where(c != 0, a, b), groups={"i": 4}),
    # Products: a batch group *b of two axes.
    Case("MatMul", LIN, [("A", (2, 3, 4, 5), "f"), ("B", (2, 3, 5, 6), "f")], torch.matmul,
         groups={"b": 2}),
    Case("MatMulBcastB", LIN, [("A", (2, 3, 4, 5), "f"), ("W", (5, 6), "f")], torch.matmul,
         groups={"b": 2}),
    Case("GemmNT", LIN, [("A", (4, 5), "f"), ("B", (6, 5), "f"), ("C", (4, 6), "f"),
                         ("alpha", (1,), ("value", 0.5)), ("beta", (1,), ("value", 2.0))],
         lambda a, b, c, al, be: 0.5 * a @ b.T + 2.0 * c),
    # Convolutions and pooling (torch's layouts: NCHW data, OIHW filters).
    Case("Conv1d", CONV, [("data", (2, 3, 9), "f"), ("w", (4, 3, 3), "f")],
         lambda x, w: F.conv1d(x, w, stride=2, padding=1, dilation=1),
         attrs={"s": 2, "p": 1, "pe": 1}),
    Case("Conv2d", CONV, [("data", (2, 3, 7, 6), "f"), ("w", (4, 3, 3, 2), "f")],
         lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=(1, 1), dilation=(1, 2)),
         attrs={"sh": 2, "sw": 1, "ph": 1, "pw": 1, "peh": 1, "pew": 1, "dh": 1, "dw": 2}),
    Case("Conv2dGrouped", CONV, [("data", (2, 4, 6, 6), "f"), ("w", (6, 2, 3, 3), "f")],
         lambda x, w: F.conv2d(x, w, stride=1, padding=1, groups=2),
         attrs={"cog": 3, "ph": 1, "pw": 1, "peh": 1, "pew": 1}),
    Case("ConvTranspose2d", CONV, [("data", (2, 3, 4, 5), "f"), ("w", (3, 2, 3, 3), "f")],
         lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1),
         attrs={"oh": 7, "ow": 9, "sh": 2, "sw": 2, "ph": 1, "pw": 1}),
    # Depth: stride 2, padding 1, output padding 1, dilation 2 (od = (3 - 1) * 2 - 2 +
    # 2 * (2 - 1) + 1 + 1 = 6); columns padded by 1 (ow = 1).
    Case("ConvTranspose3d", CONV, [("data", (2, 3, 3, 4, 2), "f"), ("w", (3, 2, 2, 3, 2), "f")],
         lambda x, w: F.conv_transpose3d(x, w, stride=(2, 1, 1), padding=(1, 0, 1),
                                         output_padding=(1, 0, 0), dilation=(2, 1, 1)),
         attrs={"od": 6, "oh": 6, "ow": 1, "sd": 2, "pd": 1, "pw": 1, "dd": 2}),
    Case("MaxPool2d", POOL, [("data", (2, 3, 6, 7), "f")],
         lambda x: F.max_pool2d(x, (2, 3), stride=(2, 2), padding=(1, 1)),
         attrs={"kh": 2, "kw": 3, "sh": 2, "sw": 2, "ph": 1, "pw": 1, "peh": 1, "pew": 1}),
    # torch's indices count within each image (H * W); ONNX's over the whole tensor.
    Case("MaxPool2dIndices", POOL, [("data", (2, 3, 6, 7), "f")],
         lambda x: (F.max_pool2d(x, (2, 3), stride=(2, 2), padding=(1, 1), return_indices=True)[1]
                    + (torch.arange(6).reshape(2, 3, 1, 1) * 42)).double(),
         attrs={"kh": 2, "kw": 3, "sh": 2, "sw": 2, "ph": 1, "pw": 1, "peh": 1, "pew": 1}),
    Case("AveragePool2d", POOL, [("data", (2, 3, 6, 7), "f")],
         lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=True),
         attrs={"kh": 3, "kw": 3, "sh": 2, "sw": 2, "ph": 1, "pw": 1, "peh": 1, "pew": 1}),
    Case("AveragePool2dExcl", POOL, [("data", (2, 3, 6, 7), "f")],
         lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
         attrs={"kh": 3, "kw": 3, "sh": 2, "sw": 2, "ph": 1, "pw": 1, "peh": 1, "pew": 1}),
    Case("AveragePool3d", POOL, [("data", (2, 2, 5, 6, 4), "f")],
         lambda x: F.avg_pool3d(x, (2, 3, 2), stride=(2, 2, 1), padding=(1, 1, 1),
                                count_include_pad=False),
         attrs={"kd": 2, "kh": 3, "kw": 2, "sd": 2, "sh": 2, "sw": 1, "pd": 1, "ph": 1, "pw": 1,
                "ped": 1, "peh": 1, "pew": 1}, label="AveragePool3d excl"),
    Case("AveragePool3d", POOL, [("data", (2, 2, 5, 6, 4), "f")],
         lambda x: F.avg_pool3d(x, 2, stride=2, padding=1, count_include_pad=True),
         attrs={"kd": 2, "kh": 2, "kw": 2, "sd": 2, "sh": 2, "sw": 2, "pd": 1, "ph": 1, "pw": 1,
                "ped": 1, "peh": 1, "pew": 1, "incl": 1}, label="AveragePool3d incl"),
    Case("GlobalAveragePool", POOL, [("x", (2, 3, 4, 5), "f")],
         lambda x: x.mean(dim=(2, 3), keepdim=True)),
    # Normalisations (training-mode batch norm: batch statistics).
    Case("batch_norm_train", NORM, [("x", (4, 3, 2, 5), "f"), ("scale", (3,), "pos"),
                                    ("B", (3,), "f"), ("eps", (1,), ("value", 1e-5))],
         lambda x, s, b, e: F.batch_norm(x, None, None, s, b, training=True, eps=1e-5),
         groups={"s": 2}),
    Case("BatchNormalization", NORM, [("x", (2, 3, 4, 5), "f"), ("scale", (3,), "pos"),
                                      ("B", (3,), "f"), ("mean", (3,), "c"),
                                      ("var", (3,), "cpos"), ("eps", (1,), ("value", 1e-5))],
         lambda x, s, b, m, v, e: F.batch_norm(x, m, v, s, b, training=False, eps=1e-5),
         groups={"s": 2}),
    Case("LayerNormalization", NORM, [("x", (2, 3, 4, 5), "f"), ("scale", (4, 5), "pos"),
                                      ("B", (4, 5), "f"), ("eps", (1,), ("value", 1e-5))],
         lambda x, s, b, e: F.layer_norm(x, (4, 5), s, b, eps=1e-5),
         groups={"p": 2, "f": 2}),
    Case("InstanceNormalization", NORM, [("x", (2, 3, 4, 5), "f"), ("scale", (3,), "pos"),
                                         ("B", (3,), "f"), ("eps", (1,), ("value", 1e-5))],
         lambda x, s, b, e: F.instance_norm(x, weight=s, bias=b, eps=1e-5), groups={"s": 2}),
    # Softmax over an inner axis: groups before and after it.
    Case("Softmax", SM, [("x", (2, 3, 4, 5), "f")], lambda x: torch.softmax(x, dim=2),
         groups={"pre": 2, "post": 1}),
    Case("LogSoftmax", SM, [("x", (2, 3, 4, 5), "f")], lambda x: torch.log_softmax(x, dim=1),
         groups={"pre": 1, "post": 2}),
    # Losses.
    Case("softmax_cross_entropy", LOSS, [("logits", (6, 5), "f"), ("labels", (6,), ("int", 5))],
         lambda x, y: F.cross_entropy(x, y)),
    Case("softmax_cross_entropy_seq", LOSS,
         [("logits", (3, 4, 5), "f"), ("labels", (3, 4), ("int", 5))],
         lambda x, y: F.cross_entropy(x.reshape(-1, 5), y.reshape(-1))),
    Case("mse", LOSS, [("pred", (2, 3, 4), "f"), ("target", (2, 3, 4), "f")],
         lambda p, t: F.mse_loss(p, t), groups={"i": 3}),
    Case("NegativeLogLikelihoodLoss", LOSS, [("logp", (6, 5), "f"), ("target", (6,), ("int", 5))],
         lambda x, y: F.nll_loss(x, y)),
    Case("NllLossMean", LOSS, [("logp", (3, 5, 2, 4), "f"), ("target", (3, 2, 4), ("int", 5)),
                               ("w", (5,), "cpos")],
         lambda x, y, w: F.nll_loss(x, y, weight=w, ignore_index=2),
         attrs={"ignore": 1, "ii": 2}, groups={"d": 2, "e": 2}),
    Case("NllLossSum", LOSS, [("logp", (3, 5, 4), "f"), ("target", (3, 4), ("int", 5)),
                              ("w", (5,), "cpos")],
         lambda x, y, w: F.nll_loss(x, y, weight=w, reduction="sum"), groups={"d": 1}),
    Case("NllLossNone", LOSS, [("logp", (3, 5, 2, 4), "f"), ("target", (3, 2, 4), ("int", 5)),
                               ("w", (5,), "cpos")],
         lambda x, y, w: F.nll_loss(x, y, weight=w, reduction="none", ignore_index=1),
         attrs={"ignore": 1, "ii": 1}, groups={"d": 2}),
    # Reductions over a middle group of axes.
    Case("ReduceSum", RED, [("x", (2, 3, 4, 5), "f")], lambda x: x.sum(dim=(1, 2)),
         groups={"pre": 1, "r": 2, "post": 1}),
    Case("ReduceMean", RED, [("x", (2, 3, 4, 5), "f")], lambda x: x.mean(dim=(1, 2)),
         groups={"pre": 1, "r": 2, "post": 1}),
    Case("ReduceMax", RED, [("x", (2, 3, 4, 5), "f")], lambda x: x.amax(dim=(2,)),
         groups={"pre": 2, "r": 1, "post": 1}),
    Case("ReduceLogSumExp", RED, [("x", (2, 3, 4, 5), "f")], lambda x: torch.logsumexp(x, dim=(1,)),
         groups={"pre": 1, "r": 1, "post": 2}),
    Case("ReduceProd", RED, [("x", (2, 3, 4, 5), "pos")], lambda x: x.prod(dim=2),
         groups={"pre": 2, "r": 1, "post": 1}),
    Case("CumSum", SH, [("x", (2, 3, 4, 5), "f")], lambda x: torch.cumsum(x, dim=2),
         groups={"pre": 2, "post": 1}),
    Case("CumSumExcl", SH, [("x", (2, 3, 4, 5), "f")], lambda x: torch.cumsum(x, dim=1) - x,
         groups={"pre": 1, "post": 2}),
    # Layout.
    Case("Transpose_021", TR, [("x", (3, 4, 5), "f")], lambda x: x.permute(0, 2, 1)),
    Case("Concat", SH, [("a", (2, 3, 4, 5), "f"), ("b", (2, 3, 2, 5), "f")],
         lambda a, b: torch.cat([a, b], dim=2), attrs={"n": 4, "m": 6},
         groups={"pre": 2, "post": 1}),
    Case("Slice", SH, [("x", (2, 3, 9, 5), "f")], lambda x: x[:, :, 1:8:3, :],
         attrs={"start": 1, "n": 3, "step": 3, "m": 9}, groups={"pre": 2, "post": 1}),
    Case("Pad", SH, [("x", (2, 3, 4, 5), "f"), ("v", (1,), ("value", 0.25))],
         lambda x, v: F.pad(x, (0, 0, 2, 1), value=0.25), attrs={"p": 2, "n": 7, "m": 4},
         groups={"pre": 2, "post": 1}),
    Case("Gather", SH, [("data", (2, 6, 3, 4), "f"), ("idx", (5, 2), ("int", 6))],
         lambda d, i: d[:, i], groups={"pre": 1, "q": 2, "post": 2}),
    Case("Tile", SH, [("x", (2, 3, 4, 5), "f")], lambda x: x.repeat(1, 3, 1, 1),
         attrs={"m": 3, "n": 9}, groups={"pre": 1, "post": 2}),
    Case("ExpandAxis", SH, [("x", (2, 1, 4, 5), "f")], lambda x: x.expand(2, 3, 4, 5),
         attrs={"n": 3}, groups={"pre": 1, "post": 2}),
    Case("AxisMap", SH, [("x", (2, 3, 4, 5), "f"), ("m", (6, 4), "f")],
         lambda x, m: torch.einsum("ok,abkc->aboc", m, x), groups={"pre": 2, "post": 1}),
    Case("DiagonalLast", SH, [("x", (2, 3, 4, 4), "f")],
         lambda x: torch.diagonal(x, dim1=-2, dim2=-1)),
    Case("ReverseSequenceTime", SH, [("x", (5, 3, 2, 2), "f"), ("lens", (3,), ("int", 6))],
         lambda x, n: reverse_sequences(x, n, True)),
    Case("ReverseSequenceBatch", SH, [("x", (3, 5, 2, 2), "f"), ("lens", (3,), ("int", 6))],
         lambda x, n: reverse_sequences(x, n, False)),
    Case("ResizeNearest2d", SH, [("x", (2, 3, 4, 5), "f")],
         lambda x: F.interpolate(x, scale_factor=(2, 3), mode="nearest"),
         attrs={"fh": 2, "fw": 3}),
    # More element-wise ops.
    Case("Floor", U, [("x", X4, "f")], torch.floor, groups={"i": 4}),
    Case("Ceil", U, [("x", X4, "f")], torch.ceil, groups={"i": 4}),
    Case("Round", U, [("x", X4, ("halves", 4))], torch.round, groups={"i": 4}),
    # Casts to the narrow floats: PyTorch's rounding forward; the grad clause passes dOut
    # through (a straight-through cast: PyTorch's own would round dOut to the narrow type).
    Case("CastBfloat16", U, [("x", X4, "f")],
         lambda x: x + (x.float().to(torch.bfloat16).double() - x).detach(), groups={"i": 4}),
    Case("CastFloat16", U, [("x", X4, "f")],
         lambda x: x + (x.float().to(torch.float16).double() - x).detach(), groups={"i": 4}),
    Case("Sign", U, [("x", X4, "f")], torch.sign, groups={"i": 4}),
    Case("Tan", U, [("x", X4, "f")], torch.tan, groups={"i": 4}),
    Case("Asin", U, [("x", X4, "half")], torch.asin, groups={"i": 4}),
    Case("Acos", U, [("x", X4, "half")], torch.acos, groups={"i": 4}),
    Case("Atanh", U, [("x", X4, "half")], torch.atanh, groups={"i": 4}),
    Case("Cosh", U, [("x", X4, "f")], torch.cosh, groups={"i": 4}),
    Case("Asinh", U, [("x", X4, "f")], torch.asinh, groups={"i": 4}),
    Case("Acosh", U, [("x", X4, "big")], torch.acosh, groups={"i": 4}),
    Case("IsNaN", U, [("x", X4, "f")], lambda x: torch.isnan(x).double(), groups={"i": 4}),
    Case("Not", U, [("x", X4, "cond")], lambda x: (x == 0).double(), groups={"i": 4}),
    Case("Identity", B, [("x", X4, "f")], lambda x: x * 1, groups={"i": 4}),
    Case("Mod", B, [("a", X4, "f"), ("b", X4, "pos")], torch.remainder, groups={"i": 4}),
    Case("Fmod", B, [("a", X4, "f"), ("b", X4, "pos")], torch.fmod, groups={"i": 4}),
    # uint8 shifts: a left shift drops the bits past the eighth.
    Case("BitShiftLeft", B, [("x", X4, ("int", 256)), ("y", X4, ("int", 8))],
         lambda x, y: (torch.bitwise_left_shift(x, y) % 256).double(), attrs={"bits": 8},
         groups={"i": 4}),
    Case("BitShiftRight", B, [("x", X4, ("int", 256)), ("y", X4, ("int", 8))],
         lambda x, y: torch.bitwise_right_shift(x, y).double(), groups={"i": 4}),
    Case("Max2", B, [("a", X4, "f"), ("b", X4, "f")], torch.maximum, groups={"i": 4}),
    Case("Min2", B, [("a", X4, "f"), ("b", X4, "f")], torch.minimum, groups={"i": 4}),
    Case("Sum2", B, [("a", X4, "f"), ("b", X4, "f")], torch.add, groups={"i": 4}),
    Case("Mean2", B, [("a", X4, "f"), ("b", X4, "f")], lambda a, b: (a + b) / 2, groups={"i": 4}),
    Case("RunningMean2", B, [("a", X4, "f"), ("b", X4, "f"), ("n", (1,), ("value", 3.0))],
         lambda a, b, n: a + (b - a) / sc(n), groups={"i": 4}),
    Case("Equal", B, [("a", X4, ("int", 3)), ("b", X4, ("int", 3))],
         lambda a, b: (a == b).double(), groups={"i": 4}),
    Case("Less", B, [("a", X4, "c"), ("b", X4, "c")], lambda a, b: (a < b).double(),
         groups={"i": 4}),
    Case("GreaterOrEqual", B, [("a", X4, "c"), ("b", X4, "c")], lambda a, b: (a >= b).double(),
         groups={"i": 4}),
    Case("And", B, [("a", X4, "cond"), ("b", X4, "cond")],
         lambda a, b: torch.logical_and(a != 0, b != 0).double(), groups={"i": 4}),
    Case("Xor", B, [("a", X4, "cond"), ("b", X4, "cond")],
         lambda a, b: torch.logical_xor(a != 0, b != 0).double(), groups={"i": 4}),
    Case("AddBcast", B, [("a", (2, 3, 4, 5), "f"), ("b", (4, 5), "f")], torch.add,
         groups={"p": 2, "i": 2}),
    Case("MulBcast", B, [("a", (2, 3, 4, 5), "f"), ("b", (3, 4, 5), "f")], torch.mul,
         groups={"p": 1, "i": 3}),
    Case("DivBcast", B, [("a", (2, 3, 4, 5), "f"), ("b", (5,), "pos")], torch.div,
         groups={"p": 3, "i": 1}),
    Case("PowBcast", B, [("a", (2, 3, 4, 5), "pos"), ("b", (4, 5), "f")], torch.pow,
         groups={"p": 2, "i": 2}),
    Case("ThresholdedRelu", A, [("x", X4, "f"), ("alpha", (1,), ("value", 0.3))],
         lambda x, a: torch.where(x > 0.3, x, torch.zeros_like(x)), groups={"i": 4}),
    Case("Shrink", A, [("x", X4, "f"), ("bias", (1,), ("value", 0.4)),
                       ("lambd", (1,), ("value", 0.4))],
         lambda x, b, l: F.softshrink(x, 0.4), groups={"i": 4}),
    Case("GemmNN", LIN, [("A", (4, 5), "f"), ("B", (5, 6), "f"), ("C", (4, 6), "f"),
                         ("alpha", (1,), ("value", 1.5)), ("beta", (1,), ("value", 0.5))],
         lambda a, b, c, al, be: 1.5 * a @ b + 0.5 * c),
    Case("GemmTN", LIN, [("A", (5, 4), "f"), ("B", (5, 6), "f"), ("C", (4, 6), "f"),
                         ("alpha", (1,), ("value", 1.0)), ("beta", (1,), ("value", 1.0))],
         lambda a, b, c, al, be: a.T @ b + c),
    Case("GemmTT", LIN, [("A", (5, 4), "f"), ("B", (6, 5), "f"), ("C", (4, 6), "f"),
                         ("alpha", (1,), ("value", 0.5)), ("beta", (1,), ("value", 1.0))],
         lambda a, b, c, al, be: 0.5 * a.T @ b.T + c),
    Case("Conv3d", CONV, [("data", (2, 2, 5, 4, 5), "f"), ("w", (3, 2, 2, 3, 2), "f")],
         lambda x, w: F.conv3d(x, w, stride=(1, 2, 1), padding=(1, 1, 0)),
         attrs={"sh": 2, "pd": 1, "ped": 1, "ph": 1, "peh": 1}),
    Case("ConvBias", CONV, [("x", (2, 3, 4, 5), "f"), ("b", (3,), "f")],
         lambda x, b: x + b.reshape(1, 3, 1, 1), groups={"s": 2}),
    Case("ConvTranspose1d", CONV, [("data", (2, 3, 5), "f"), ("w", (3, 4, 3), "f")],
         lambda x, w: F.conv_transpose1d(x, w, stride=2, padding=1),
         attrs={"o": 9, "s": 2, "p": 1}),
    Case("MaxPool1d", POOL, [("data", (2, 3, 9), "f")],
         lambda x: F.max_pool1d(x, 3, stride=2, padding=1), attrs={"k": 3, "s": 2, "p": 1, "pe": 1}),
    Case("MaxPool3d", POOL, [("data", (2, 2, 4, 6, 5), "f")],
         lambda x: F.max_pool3d(x, 2, stride=2, padding=(0, 1, 1)),
         attrs={"ph": 1, "pw": 1}),
    # Ties: the first maximum of each window takes its gradient, as in PyTorch.
    Case("MaxPool2d", POOL, [("data", (2, 3, 6, 7), "ties")],
         lambda x: F.max_pool2d(x, (2, 3), stride=(2, 2), padding=(1, 1)),
         attrs={"kh": 2, "kw": 3, "sh": 2, "sw": 2, "ph": 1, "pw": 1, "peh": 1, "pew": 1},
         label="MaxPool2d (ties)"),
    Case("MaxPool2d", POOL, [("data", (2, 2, 7, 7), "ties")],
         lambda x: F.max_pool2d(x, 3, stride=1, padding=1, dilation=2),
         attrs={"kh": 3, "kw": 3, "sh": 1, "sw": 1, "ph": 1, "pw": 1, "peh": 1, "pew": 1,
                "dh": 2, "dw": 2}, label="MaxPool2d (ties, dilated, overlapping)"),
    Case("MaxPool1d", POOL, [("data", (2, 3, 9), "ties")],
         lambda x: F.max_pool1d(x, 3, stride=2, padding=1), attrs={"k": 3, "s": 2, "p": 1, "pe": 1},
         label="MaxPool1d (ties)"),
    Case("MaxPool3d", POOL, [("data", (2, 2, 4, 6, 5), "ties")],
         lambda x: F.max_pool3d(x, 2, stride=2, padding=(0, 1, 1)),
         attrs={"ph": 1, "pw": 1}, label="MaxPool3d (ties)"),
    Case("GlobalMaxPool", POOL, [("x", (2, 3, 4, 5), "ties")],
         lambda x: F.adaptive_max_pool2d(x, 1), label="GlobalMaxPool (ties)"),
    Case("AveragePool1d", POOL, [("data", (2, 3, 9), "f")],
         lambda x: F.avg_pool1d(x, 3, stride=2), attrs={"k": 3, "s": 2}),
    Case("AveragePool1d", POOL, [("data", (2, 3, 9), "f")],
         lambda x: F.avg_pool1d(x, 3, stride=2, padding=1, ceil_mode=True,
                                count_include_pad=False),
         attrs={"k": 3, "s": 2, "p": 1, "pe": 1, "incl": 0}, label="AveragePool1d excl"),
    Case("AveragePool1d", POOL, [("data", (2, 3, 9), "f")],
         lambda x: F.avg_pool1d(x, 3, stride=2, padding=1, count_include_pad=True),
         attrs={"k": 3, "s": 2, "p": 1, "pe": 1}, label="AveragePool1d incl"),
    Case("LpPool2d", POOL, [("data", (2, 3, 6, 5), "f")],
         lambda x: F.lp_pool2d(x, 2, (2, 2), stride=(2, 1)), attrs={"sw": 1}),
    Case("GlobalMaxPool", POOL, [("x", (2, 3, 4, 5), "f")],
         lambda x: x.amax(dim=(2, 3), keepdim=True)),
    Case("GlobalLpPool", POOL, [("x", (2, 3, 4, 5), "f")],
         lambda x: x.abs().pow(2).sum(dim=(2, 3), keepdim=True).sqrt()),
    Case("LRN", NORM, [("x", (2, 6, 3, 4), "f"), ("alpha", (1,), ("value", 1e-2)),
                       ("beta", (1,), ("value", 0.75)), ("bias", (1,), ("value", 1.5))],
         lambda x, a, b, k: F.local_response_norm(x, 3, alpha=1e-2, beta=0.75, k=1.5),
         attrs={"size": 3}, groups={"s": 2}),
    Case("Hardmax", SM, [("x", (2, 3, 4, 5), "f")],
         lambda x: F.one_hot(x.argmax(dim=2), 4).permute(0, 1, 3, 2).double(),
         groups={"pre": 2, "post": 1}),
    Case("ReduceMin", RED, [("x", (2, 3, 4, 5), "f")], lambda x: x.amin(dim=(1, 2)),
         groups={"pre": 1, "r": 2, "post": 1}),
    Case("ReduceL1", RED, [("x", (2, 3, 4, 5), "f")], lambda x: x.abs().sum(dim=(2,)),
         groups={"pre": 2, "r": 1, "post": 1}),
    Case("ReduceL2", RED, [("x", (2, 3, 4, 5), "f")], lambda x: x.pow(2).sum(dim=(1, 2)).sqrt(),
         groups={"pre": 1, "r": 2, "post": 1}),
    Case("ReduceSumSquare", RED, [("x", (2, 3, 4, 5), "f")], lambda x: x.pow(2).sum(dim=(1,)),
         groups={"pre": 1, "r": 1, "post": 2}),
    Case("ReduceLogSum", RED, [("x", (2, 3, 4, 5), "pos")], lambda x: x.sum(dim=(2,)).log(),
         groups={"pre": 2, "r": 1, "post": 1}),
    Case("ReduceSumKeep", RED, [("x", (2, 3, 4, 5), "f")], lambda x: x.sum(dim=2, keepdim=True),
         groups={"pre": 2, "post": 1}),
    Case("ReduceMeanKeep", RED, [("x", (2, 3, 4, 5), "f")], lambda x: x.mean(dim=1, keepdim=True),
         groups={"pre": 1, "post": 2}),
    Case("ReduceMaxKeep", RED, [("x", (2, 3, 4, 5), "f")], lambda x: x.amax(dim=2, keepdim=True),
         groups={"pre": 2, "post": 1}),
    Case("ArgMax", RED, [("x", (2, 3, 4, 5), "f")], lambda x: x.argmax(dim=2).double(),
         groups={"pre": 2, "post": 1}),
    Case("ArgMin", RED, [("x", (2, 3, 4, 5), "f")], lambda x: x.argmin(dim=1).double(),
         groups={"pre": 1, "post": 2}),
    # More layout ops.
    Case("Split", SH, [("x", (2, 3, 9, 5), "f")], lambda x: x[:, :, 3:7, :],
         attrs={"offset": 3, "n": 4, "m": 9}, groups={"pre": 2, "post": 1}),
    Case("Unsqueeze", SH, [("x", (2, 3, 4), "f")], lambda x: x.unsqueeze(2),
         groups={"pre": 2, "post": 1}),
    Case("Squeeze", SH, [("x", (2, 3, 1, 4), "f")], lambda x: x.squeeze(2),
         groups={"pre": 2, "post": 1}),
    Case("ReshapeSplit", SH, [("x", (2, 12, 5), "f")], lambda x: x.reshape(2, 3, 4, 5),
         attrs={"n": 4, "outer": 3}, groups={"pre": 1, "post": 1}),
    Case("ReshapeMerge", SH, [("x", (2, 3, 4, 5), "f")], lambda x: x.reshape(2, 12, 5),
         attrs={"n": 4, "m": 12}, groups={"pre": 1, "post": 1}),
    Case("Flatten4", SH, [("x", (2, 3, 4, 5), "f")], lambda x: x.reshape(2, 60)),
    Case("ExpandLeading", SH, [("x", (3, 4, 5), "f")], lambda x: x.expand(2, 3, 4, 5),
         attrs={"n": 2}, groups={"i": 3}),
    Case("DepthToSpaceCRD", SH, [("x", (2, 8, 3, 4), "f")], lambda x: F.pixel_shuffle(x, 2),
         attrs={"bs": 2}),
    Case("SpaceToDepthCRD", SH, [("x", (2, 2, 6, 4), "f")], lambda x: F.pixel_unshuffle(x, 2),
         attrs={"bs": 2}),
    Case("ReverseAxis", SH, [("x", (2, 3, 4, 5), "f")], lambda x: x.flip(2), attrs={"m": 4},
         groups={"pre": 2, "post": 1}),
    Case("Trilu", SH, [("x", (2, 3, 4, 5), "f")], lambda x: torch.tril(x, -1),
         attrs={"upper": 0, "k": -1}, groups={"b": 2}),
    Case("CumSumReverse", SH, [("x", (2, 3, 4, 5), "f")],
         lambda x: x.flip(2).cumsum(2).flip(2), groups={"pre": 2, "post": 1}),
    Case("GatherElements", SH, [("data", (2, 5, 3, 4), "f"), ("idx", (2, 6, 3, 4), ("int", 5))],
         lambda d, i: torch.gather(d, 1, i), groups={"pre": 1, "post": 2}),
    # ScatterND at index depth 1 (ONNX's deeper tuples are made flat indices first):
    # duplicate indices are defined for the reductions.
    Case("ScatterND1Add", SH, [("data", (6, 3, 4), "f"), ("idx", (5, 1), ("int", 6)),
                               ("upd", (5, 3, 4), "f")],
         lambda d, i, u: d.index_add(0, i[:, 0], u), groups={"r": 2}),
    Case("ScatterND1Max", SH, [("data", (6, 3, 4), "f"), ("idx", (5, 1), ("int", 6)),
                               ("upd", (5, 3, 4), "f")],
         lambda d, i, u: d.index_reduce(0, i[:, 0], u, "amax"), groups={"r": 2}),
    Case("ScatterND1Min", SH, [("data", (6, 3, 4), "f"), ("idx", (5, 1), ("int", 6)),
                               ("upd", (5, 3, 4), "f")],
         lambda d, i, u: d.index_reduce(0, i[:, 0], u, "amin"), groups={"r": 2}),
    Case("FlatIndex", SH, [("idx", (5, 3), ("int", 4)), ("ext", (3,), ("int", 5)),
                                  ("stride", (3,), ("int", 5))],
         lambda i, e, s: ((i + (i < 0) * e) * s).sum(1).double()),
    Case("OneHot", SH, [("idx", (2, 3, 4), ("int", 5)), ("values", (2,), "c")],
         lambda i, v: F.one_hot(i, 5).double() * (v[1] - v[0]) + v[0],
         attrs={"depth": 5}, groups={"i": 3}),
    # Quantisation per entry of axis 2 (torch.round rounds halves to even, as ONNX does).
    Case("QuantizeLinearAxis", "math/misc.tdl",
         [("x", (2, 3, 4, 5), "f"), ("scale", (4,), "pos"), ("zp", (4,), ("int", 10))],
         lambda x, s, z: torch.clamp(torch.round(x / s[:, None]) + z[:, None], -128, 127),
         attrs={"lo": -128, "hi": 127}, groups={"pre": 2, "post": 1}),
    Case("DequantizeLinearAxis", "math/misc.tdl",
         [("x", (2, 3, 4, 5), ("int", 256)), ("scale", (4,), "c"), ("zp", (4,), ("int", 256))],
         lambda x, s, z: (x - z[:, None]) * s[:, None], groups={"pre": 2, "post": 1}),
    Case("Det", "math/misc.tdl", [("m", (2, 3, 4, 4), "f")], torch.det, groups={"b": 2}),
    Case("LpNormalization", "math/misc.tdl", [("x", (2, 3, 4, 5), "f")],
         lambda x: F.normalize(x, p=2, dim=2), groups={"pre": 2, "post": 1}),
    Case("TopKValues", "math/misc.tdl", [("x", (2, 3, 6, 5), "f")],
         lambda x: torch.topk(x, 3, dim=2).values, attrs={"k": 3}, groups={"pre": 2, "post": 1}),
    Case("EyeLike", "math/misc.tdl", [("x", (4, 5), "c")],
         lambda x: (torch.arange(5)[None, :] - torch.arange(4)[:, None] == 1).double(),
         attrs={"k": 1}),
]
# DFT of real and complex signals along a middle axis (pre 1, post 1), forward, inverse and
# onesided with zero padding; complex results as [real, imaginary] last.
def dft_oracle(x, n, inverse=False, onesided=False):
    z = torch.complex(x[..., 0], x[..., 1]) if x.shape[-1] == 2 else x[..., 0]
    if onesided:
        y = torch.fft.rfft(z, n=n, dim=1)
    else:
        y = (torch.fft.ifft if inverse else torch.fft.fft)(z, n=n, dim=1)
    return torch.stack([y.real, y.imag], dim=-1)


CASES += [
    Case("DFT", "math/signal.tdl", [("x", (2, 8, 3, 1), "f")], lambda x: dft_oracle(x, 8),
         attrs={"len": 8, "n": 8}, groups={"pre": 1, "post": 1}, label="DFT real"),
    Case("DFT", "math/signal.tdl", [("x", (2, 6, 3, 2), "f")],
         lambda x: dft_oracle(x, 6, inverse=True), attrs={"len": 6, "n": 6, "inverse": 1},
         groups={"pre": 1, "post": 1}, label="DFT complex inverse"),
    Case("DFT", "math/signal.tdl", [("x", (2, 7, 3, 1), "f")],
         lambda x: dft_oracle(x, 10, onesided=True), attrs={"len": 10, "n": 6},
         groups={"pre": 1, "post": 1}, label="DFT onesided, padded to 10"),
    # torch.stft gives [batch, bins, frames] complex: permuted to [batch, frames, bins, 2].
    Case("STFT", "math/signal.tdl", [("x", (2, 20, 1), "f"), ("window", (8,), "f")],
         lambda x, w: torch.view_as_real(torch.stft(
             x[:, :, 0], 8, hop_length=3, window=w, center=False, onesided=True,
             return_complex=True)).permute(0, 2, 1, 3), attrs={"step": 3}),
]
# GridSample in every mode, padding mode and corner alignment; the grid (quarters in
# [-2, 2]) reaches past [-1, 1], so that every padding mode is exercised.
for gs_op, gs_mode in [("GridSampleLinear", "bilinear"), ("GridSampleNearest", "nearest"),
                       ("GridSampleCubic", "bicubic")]:
    for gs_pad, gs_padding in enumerate(["zeros", "border", "reflection"]):
        for gs_align in (0, 1):
            CASES.append(Case(
                gs_op, "math/signal.tdl",
                [("x", (2, 3, 4, 5), "f"), ("grid", (2, 3, 2, 2), ("halves", 2))],
                lambda x, g, m=gs_mode, p=gs_padding, a=gs_align: F.grid_sample(
                    x, g, mode=m, padding_mode=p, align_corners=bool(a)),
                attrs={"align": gs_align, "pad": gs_pad, "h": 4, "w": 5},
                label=f"{gs_op} {gs_padding}{' aligned' if gs_align else ''}"))
# Every permutation of ranks 2 to 4 the library names (Transpose_<perm>).
for perm in ["10", "102", "120", "201", "210", "0132", "0213", "0231", "0312", "0321", "1023",
             "1032", "1203", "1230", "1302", "1320", "2013", "2031", "2103", "2130", "2301",
             "2310", "3012", "3021", "3102", "3120", "3201", "3210"]:
    order = [int(c) for c in perm]
    CASES.append(Case("Transpose_" + perm, TR, [("x", (2, 3, 4, 5)[:len(order)], "f")],
                      lambda x, order=order: x.permute(*order)))


def draw(rng, shape, kind):
    if kind in ("f", "c"):
        return rng.uniform(-1, 1, shape)
    if kind == "half":
        return rng.uniform(-0.9, 0.9, shape)
    if kind == "big":
        return rng.uniform(1.25, 2, shape)
    if kind == "ties":  # quarters in [-1, 1]: equal values in most pooling windows
        return np.round(rng.uniform(-1, 1, shape) * 4) / 4
    if kind[0] == "halves":  # multiples of 0.5 (ties round to even), and values between
        return np.round(rng.uniform(-kind[1], kind[1], shape) * 4) / 4
    if kind in ("pos", "cpos"):
        return rng.uniform(0.5, 2, shape)
    if kind == "cond":
        return rng.integers(0, 2, shape).astype(np.float64)
    if kind[0] == "int":
        return rng.integers(0, kind[1], shape).astype(np.int64)
    if kind[0] == "value":
        return np.full(shape, kind[1], np.float64)
    raise ValueError(kind)


def error(got, want):
    want = np.asarray(want, np.float64)
    got = np.asarray(got, np.float64).reshape(want.shape) if got.size == want.size else got
    if got.shape != want.shape:
        return float("inf")
    return float(np.max(np.abs(got - want), initial=0) / max(1.0, np.max(np.abs(want), initial=0)))


def run_case(args, case, folder):
    """Rows (what, error, problem) of one case."""
    rng = np.random.default_rng(zlib.crc32(case.label.encode()))
    arrays = [draw(rng, shape, kind) for _, shape, kind in case.inputs]
    given = []
    for (name, _, _), a in zip(case.inputs, arrays):
        path = os.path.join(folder, f"in_{name}.npy")
        np.save(path, a)
        given.append(f"{name}={path}")
    # PyTorch: float inputs that are not fixed values are differentiated.
    tensors = []
    for (name, _, kind), a in zip(case.inputs, arrays):
        t = torch.tensor(a)
        if t.dtype == torch.float64 and kind in ("f", "pos", "half", "big", "ties"):
            t.requires_grad_(True)
        tensors.append(t)
    fn_args = [sc(t) if kind[0] == "value" else t for (_, _, kind), t in zip(case.inputs, tensors)]
    out = case.fn(*fn_args)
    dout = rng.uniform(-1, 1, tuple(out.shape))
    if out.requires_grad:  # else nothing is differentiable: every gradient is zero
        out.backward(torch.tensor(dout))
    dpath = os.path.join(folder, "dout.npy")
    np.save(dpath, dout.reshape(1) if dout.ndim == 0 else dout)
    outdir = os.path.join(folder, "out")
    cmd = [args.tdlc, "--eval", os.path.join(args.ops, case.file), "--op", case.op,
           "--input", ",".join(given), "--dout", dpath, "--output-dir", outdir]
    for k, v in case.attrs.items():
        cmd += ["--attr", f"{k}={v}"]
    for k, v in case.groups.items():
        cmd += ["--group", f"{k}={v}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return [("eval", float("inf"), (p.stderr or p.stdout).strip()[-400:])]
    rows = [("forward", error(np.load(os.path.join(outdir, "out.npy")), out.detach().numpy()), "")]
    for (name, _, kind), t in zip(case.inputs, tensors):
        path = os.path.join(outdir, f"grad_{name}.npy")
        if not os.path.exists(path):
            continue  # no grad clause for this input
        if not t.requires_grad:
            continue  # an index, condition or fixed value: PyTorch gives it no gradient
        want = t.grad if t.grad is not None else torch.zeros_like(t)
        rows.append((f"grad {name}", error(np.load(path), want.numpy()), ""))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tdlc", required=True)
    ap.add_argument("--ops", default="ops")
    ap.add_argument("--only", default="")
    ap.add_argument("--keep", default="", help="keep the arrays here")
    ap.add_argument("--sample", type=int, default=1, metavar="EVERY",
                    help="one case in EVERY, from $TOFU_SAMPLE_OFFSET")
    args = ap.parse_args()
    if args.sample < 1:
        ap.error("--sample must be at least 1")
    torch.set_default_dtype(torch.float64)
    offset = int(os.environ.get("TOFU_SAMPLE_OFFSET", "0") or 0)
    cases = [c for i, c in enumerate(c for c in CASES if args.only in c.label)
             if (i + offset) % args.sample == 0]
    print("| op | input shapes | compared | largest error |")
    print("| --- | --- | --- | ---: |")
    bad = []
    compared = 0
    for case in cases:
        with tempfile.TemporaryDirectory() as tmp:
            folder = os.path.join(args.keep, case.label) if args.keep else tmp
            os.makedirs(folder, exist_ok=True)
            try:
                rows = run_case(args, case, folder)
            except Exception as e:  # a case that PyTorch or this script cannot run
                rows = [("setup", float("inf"), f"{type(e).__name__}: {e}")]
        shapes = " ".join("x".join(map(str, s)) for _, s, _ in case.inputs)
        worst = max(r[1] for r in rows)
        print(f"| {case.label} | {shapes} | {', '.join(r[0] for r in rows)} | {worst:.2g} |")
        for what, err, problem in rows:
            compared += 1
            if not err <= TOLERANCE:
                bad.append(f"{case.label}: {what}: error {err:.3g}" + (f": {problem}" if problem else ""))
    sampled = f" (one in {args.sample})" if args.sample > 1 else ""
    print(f"\n{len(cases)} ops{sampled}, {compared} values compared with PyTorch, {len(bad)} differ")
    for b in bad:
        print("FAILED: " + b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
