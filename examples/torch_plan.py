#!/usr/bin/env python3
"""Plans a PyTorch module's training step with Tofu and says where to place its parameters.

The module is exported to ONNX in memory, handed to libtofu_plan through its C API (ctypes),
and for every parameter, by its PyTorch name, the script prints how the plan cuts it at each
recursion step and which slice each worker holds.

    /usr/bin/python3 examples/torch_plan.py --prefix PREFIX [--workers 4] [--model cnn|mlp]

PREFIX is where tools/install.sh installed Tofu (PREFIX/lib/libtofu_plan.so); without it,
the library is looked up by the system's loader (LD_LIBRARY_PATH, ldconfig).
"""
import argparse
import ctypes
import io
import json
import os
import sys

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Two convolutions and two linear layers over 3x16x16 images."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(32 * 8 * 8, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        return self.fc2(torch.relu(self.fc1(x)))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                    nn.Linear(512, 10))

    def forward(self, x):
        return self.layers(x)


MODELS = {"cnn": (SmallCNN, (3, 16, 16)), "mlp": (MLP, (256,))}


class TofuError(RuntimeError):
    pass


class Tofu:
    """The C API of include/tofu/tofu.h, through ctypes."""

    class Options(ctypes.Structure):
        _fields_ = [("workers", ctypes.c_uint), ("train", ctypes.c_int), ("optimizer", ctypes.c_int),
                    ("algorithm", ctypes.c_char_p), ("budget_seconds", ctypes.c_double),
                    ("per_worker", ctypes.c_int), ("onnx_batch", ctypes.c_int64),
                    ("onnx_data_inputs", ctypes.c_uint), ("precision", ctypes.c_int),
                    ("device", ctypes.c_char_p), ("memory_per_worker", ctypes.c_int64),
                    ("recompute", ctypes.c_char_p)]

    def __init__(self, prefix):
        path = os.path.join(prefix, "lib", "libtofu_plan.so") if prefix else "libtofu_plan.so.0"
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as e:
            raise TofuError(f"cannot load libtofu_plan ({path}): {e}; give --prefix PREFIX") from e
        lib = self.lib
        lib.tofu_version.restype = ctypes.c_char_p
        lib.tofu_last_error.restype = ctypes.c_char_p
        lib.tofu_status_name.restype = ctypes.c_char_p
        lib.tofu_status_name.argtypes = [ctypes.c_int]
        lib.tofu_plan_options_init.argtypes = [ctypes.POINTER(Tofu.Options)]
        lib.tofu_plan_options_size.restype = ctypes.c_size_t
        # tofu_plan_options_init writes every field of the library's struct: this one must be it.
        if lib.tofu_plan_options_size() != ctypes.sizeof(Tofu.Options):
            raise TofuError(f"{path}'s tofu_plan_options has {lib.tofu_plan_options_size()} bytes, "
                            f"this binding's {ctypes.sizeof(Tofu.Options)}: they differ in version")
        lib.tofu_planner_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.tofu_planner_free.argtypes = [ctypes.c_void_p]
        lib.tofu_plan_onnx.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                       ctypes.c_char_p, ctypes.POINTER(Tofu.Options),
                                       ctypes.POINTER(ctypes.c_void_p)]
        lib.tofu_plan_json.restype = ctypes.c_char_p
        lib.tofu_plan_json.argtypes = [ctypes.c_void_p]
        lib.tofu_plan_free.argtypes = [ctypes.c_void_p]
        self.planner = ctypes.c_void_p()
        self._check(lib.tofu_planner_open(None, ctypes.byref(self.planner)), "opening the library")

    def _check(self, status, what):
        if status != 0:
            name = self.lib.tofu_status_name(status).decode()
            raise TofuError(f"{what}: {name} error: {self.lib.tofu_last_error().decode()}")

    def version(self):
        return self.lib.tofu_version().decode()

    def plan_onnx(self, model_bytes, name, workers, batch):
        options = Tofu.Options()
        self.lib.tofu_plan_options_init(ctypes.byref(options))
        options.workers = workers
        options.onnx_batch = batch
        plan = ctypes.c_void_p()
        self._check(self.lib.tofu_plan_onnx(self.planner, model_bytes, len(model_bytes), name.encode(),
                                            ctypes.byref(options), ctypes.byref(plan)),
                    f"planning {name}")
        try:
            return json.loads(self.lib.tofu_plan_json(plan).decode())
        finally:
            self.lib.tofu_plan_free(plan)

    def close(self):
        if self.planner:
            self.lib.tofu_planner_free(self.planner)
            self.planner = ctypes.c_void_p()


def export_onnx(module, example):
    """The module as ONNX bytes (opset 17), parameters as initializers under their names."""
    buffer = io.BytesIO()
    torch.onnx.export(module, (example,), buffer, opset_version=17, input_names=["x"],
                      output_names=["logits"], do_constant_folding=False,
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    return buffer.getvalue()


def slice_text(lo, hi, shape):
    parts = []
    for a, b, n in zip(lo, hi, shape):
        parts.append(":" if (a, b) == (0, n) else f"{a}:{b}")
    return "[" + ", ".join(parts) + "]"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", default=os.environ.get("TOFU_PREFIX", ""),
                        help="where Tofu is installed (default: $TOFU_PREFIX, else the loader's path)")
    parser.add_argument("--workers", type=int, default=4, help="workers to partition across (default 4)")
    parser.add_argument("--batch", type=int, default=32, help="the batch size planned for (default 32)")
    parser.add_argument("--model", choices=sorted(MODELS), default="cnn", help="the module (default cnn)")
    args = parser.parse_args()
    if args.workers < 1 or args.batch < 1:
        parser.error("--workers and --batch must be at least 1")

    torch.manual_seed(0)
    cls, sample_shape = MODELS[args.model]
    module = cls().eval()
    model_bytes = export_onnx(module, torch.randn(2, *sample_shape))
    try:
        tofu = Tofu(args.prefix)
        plan = tofu.plan_onnx(model_bytes, f"{args.model}.onnx", args.workers, args.batch)
    except TofuError as e:
        print(f"torch_plan.py: {e}", file=sys.stderr)
        return 1
    tofu.close()

    factors = " x ".join(str(f) for f in plan["factors"]) or "1"
    print(f"libtofu_plan {tofu.version()}: {cls.__name__} (batch {args.batch}) training step on "
          f"{plan['workers']} workers ({factors}), algorithm {plan['algorithm']}")
    if plan["loss_note"]:
        print(f"loss: {plan['loss_note']}")
    print(f"communication per step: {plan['communication_bytes']} bytes")
    tensors = {t["name"]: t for t in plan["tensors"]}
    workers = plan.get("worker_details", [])
    missing = []
    for name, param in module.named_parameters():
        t = tensors.get(name)
        if t is None or t["role"] != "weight":
            missing.append(name)
            continue
        cuts = ", ".join("replicated" if d < 0 else f"dim {d}" for d in t["split_dims"])
        print(f"\n{name} {list(param.shape)}: per step {cuts}")
        for w in workers:
            box = w["tiles"][name]
            print(f"  worker {w['worker']}: {name}{slice_text([b[0] for b in box], [b[1] for b in box], t['shape'])}")
    for w in workers:
        print(f"worker {w['worker']}: peak memory {w['peak_bytes']} bytes")
    if missing:
        print(f"torch_plan.py: parameters not in the ONNX graph: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
