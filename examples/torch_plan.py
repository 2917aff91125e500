#!/usr/bin/env python3
"""Plans a PyTorch module's training step with Tofu and says where to place its parameters.

The `tofu` module exports the module to ONNX in memory and plans it with the libraries the
tools use; for every parameter, by its PyTorch name, the script prints how the plan cuts it
at each recursion step and which slice each worker holds.

    /usr/bin/python3 examples/torch_plan.py --prefix PREFIX [--workers 4] [--model cnn|mlp]

PREFIX is where tools/install.sh installed Tofu (the module in
PREFIX/lib/python3/dist-packages/tofu); without it, `tofu` is imported from PYTHONPATH.
"""
import argparse
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", default=os.environ.get("TOFU_PREFIX", ""),
                        help="where Tofu is installed (default: $TOFU_PREFIX, else PYTHONPATH)")
    parser.add_argument("--workers", type=int, default=4, help="workers to partition across (default 4)")
    parser.add_argument("--batch", type=int, default=32, help="the batch size planned for (default 32)")
    parser.add_argument("--model", choices=sorted(MODELS), default="cnn", help="the module (default cnn)")
    args = parser.parse_args()
    if args.workers < 1 or args.batch < 1:
        parser.error("--workers and --batch must be at least 1")
    if args.prefix:
        sys.path.insert(0, os.path.join(args.prefix, "lib", "python3", "dist-packages"))
    import tofu

    torch.manual_seed(0)
    cls, sample_shape = MODELS[args.model]
    module = cls()
    try:
        plan = tofu.plan(module, torch.randn(args.batch, *sample_shape), workers=args.workers)
    except tofu.Error as e:
        print(f"torch_plan.py: {e}", file=sys.stderr)
        return 1

    factors = " x ".join(str(f) for f in plan.json()["factors"]) or "1"
    print(f"tofu {tofu.__version__}: {cls.__name__} (batch {args.batch}) training step on "
          f"{plan.workers} workers ({factors}), algorithm {plan.algorithm}")
    for note in plan.notes:
        print(f"note: {note}")
    print(f"communication per step: {plan.communication['total']} bytes")
    for name, param in module.named_parameters():
        placement = plan.placement(name)
        cuts = ", ".join("replicated" if d is None else f"dim {d}" for d in placement.cuts)
        print(f"\n{name} {list(param.shape)}: per step {cuts}")
        for w, tile in enumerate(placement.tiles):
            part = ", ".join(":" if (s.start, s.stop) == (0, n) else f"{s.start}:{s.stop}"
                             for s, n in zip(tile, param.shape))
            print(f"  worker {w}: {name}[{part}] ({param[tile].numel()} elements)")
    for w, peak in enumerate(plan.peak_bytes):
        print(f"worker {w}: peak memory {peak} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
