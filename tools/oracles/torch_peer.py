#!/usr/bin/env python3
"""The PyTorch peer of Tofu's step benchmark (bench/step_bench.sh): the median time of one
SGD training step, in PyTorch eager on the CPU, float32, of the same models as tofu-run's
zoo builds them (graph/zoo.cc) with the same shapes, batch, loss and thread count. Run it
with Debian's python3-torch (/usr/bin/python3). Prints which BLAS torch reaches (install
libopenblas0-pthread for a fair peer: the default reference BLAS is ~30x slower).

  torch_peer.py --model mlp|wresnet-50-1-i32-c8-k10|gpt-2-32-4-16|rnn-2-256|resnet18|resnet18-train
                [--batch B]

--device cuda times the same step on the GPU (the GPU check, tools/gpu_check.sh, against
tofu-run --backend cuda): float32 with TF32 off, as the CUDA engine runs by default, each
step synchronised before its time is taken.

--precision bf16 runs the forward pass and the loss under torch.autocast with bfloat16 (the
peer of tofu-run --precision bf16): weights and their gradients stay float32.
"""
import contextlib
import argparse
import json
import math
import re
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    """zoo mlp: 1024-4096-4096-1000, ReLU between, softmax cross-entropy."""

    def __init__(self, dims=(1024, 4096, 4096, 1000)):
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
        self.inputs = dims[0]
        self.classes = dims[-1]

    def forward(self, x):
        for i, fc in enumerate(self.fcs):
            x = fc(x)
            if i + 1 < len(self.fcs):
                x = F.relu(x)
        return x

    def batch(self, b):
        return torch.rand(b, self.inputs) * 2 - 1, torch.randint(0, self.classes, (b,))


class Bottleneck(nn.Module):
    def __init__(self, cin, width, out, stride):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.c2, self.b2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.c3, self.b3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
        self.down = None
        if cin != out or stride != 1:
            self.down = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.b2(self.c2(y)))
        y = self.b3(self.c3(y))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class WResNet(nn.Module):
    """zoo wresnet-<depth>-<W>-i<image>-c<base>-k<classes>: bottleneck ResNet, batch norm in
    training mode, first block of each stage downsampling (but the first stage's)."""

    def __init__(self, depth, widen, image, base, classes):
        super().__init__()
        blocks = {50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}[depth]
        c = base * widen
        self.stem = nn.Sequential(nn.Conv2d(3, c, 7, 2, 3, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers = []
        for s, n in enumerate(blocks):
            width, out = (base << s) * widen, (4 * base << s) * widen
            for b in range(n):
                layers.append(Bottleneck(c, width, out, 2 if b == 0 and s > 0 else 1))
                c = out
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(c, classes)
        self.image, self.classes = image, classes

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(x.mean(dim=(2, 3)))

    def batch(self, b):
        return torch.rand(b, 3, self.image, self.image) * 2 - 1, torch.randint(0, self.classes, (b,))


class Lstm(nn.Module):
    """zoo rnn-<layers>-<hidden>: 20 timesteps of stacked LSTM cells, the input of size
    hidden, the loss the sum over timesteps of the MSE of the top layer's h to a target."""

    def __init__(self, layers, hidden, steps=20):
        super().__init__()
        self.cells = nn.ModuleList(nn.LSTMCell(hidden, hidden) for _ in range(layers))
        self.hidden, self.steps = hidden, steps

    def forward(self, xs):
        b = xs.shape[1]
        h = [xs.new_zeros(b, self.hidden) for _ in self.cells]
        c = [xs.new_zeros(b, self.hidden) for _ in self.cells]
        outs = []
        for t in range(self.steps):
            x = xs[t]
            for l, cell in enumerate(self.cells):
                h[l], c[l] = cell(x, (h[l], c[l]))
                x = h[l]
            outs.append(x)
        return torch.stack(outs)

    def batch(self, b):
        return (torch.rand(self.steps, b, self.hidden) * 2 - 1,
                torch.rand(self.steps, b, self.hidden) * 2 - 1)


class Gpt(nn.Module):
    """zoo gpt-<layers>-<hidden>-<heads>-<seq>: pre-LN decoder blocks, causal mask, no
    biases but the feed-forward's, vocabulary 32000, cross-entropy at every position."""

    def __init__(self, layers, d, heads, seq, vocab=32000):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(nn.ModuleDict(dict(
                ln1=nn.LayerNorm(d), q=nn.Linear(d, d, bias=False), k=nn.Linear(d, d, bias=False),
                v=nn.Linear(d, d, bias=False), o=nn.Linear(d, d, bias=False), ln2=nn.LayerNorm(d),
                ff1=nn.Linear(d, 4 * d), ff2=nn.Linear(4 * d, d))))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.heads, self.seq, self.vocab = heads, seq, vocab
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), -1e9), 1))

    def forward(self, tokens):
        b, s = tokens.shape
        x = self.tok(tokens) + self.pos
        dh = x.shape[-1] // self.heads
        split = lambda t: t.view(b, s, self.heads, dh).transpose(1, 2)
        for blk in self.blocks:
            h = blk["ln1"](x)
            q, k, v = split(blk["q"](h)), split(blk["k"](h)), split(blk["v"](h))
            a = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(dh) + self.mask, dim=-1)
            ctx = (a @ v).transpose(1, 2).reshape(b, s, -1)
            x = x + blk["o"](ctx)
            x = x + blk["ff2"](F.relu(blk["ff1"](blk["ln2"](x))))
        return self.head(self.ln(x)).reshape(b * s, self.vocab)

    def batch(self, b):
        return (torch.randint(0, self.vocab, (b, self.seq)),
                torch.randint(0, self.vocab, (b * self.seq,)))


class Resnet18(nn.Module):
    """torchvision's resnet18, as tests/onnx/resnet18.onnx was exported (224x224 images)."""

    def __init__(self, image=224, classes=1000):
        super().__init__()
        import torchvision
        self.net = torchvision.models.resnet18(num_classes=classes)
        self.image = image
        self.classes = classes

    def forward(self, x):
        return self.net(x)

    def batch(self, b):
        return (torch.rand(b, 3, self.image, self.image) * 2 - 1,
                torch.randint(0, self.classes, (b,)))


def build(name):
    if name == "mlp":
        return Mlp(), F.cross_entropy
    if name == "resnet18":
        return Resnet18(), F.cross_entropy
    if name == "resnet18-train":  # tests/onnx/resnet18_train.onnx: 10 classes, 32x32 images
        return Resnet18(image=32, classes=10), F.cross_entropy
    m = re.fullmatch(r"wresnet-(\d+)-(\d+)(?:-i(\d+))?(?:-c(\d+))?(?:-k(\d+))?", name)
    if m:
        g = [int(x) if x else None for x in m.groups()]
        return WResNet(g[0], g[1], g[2] or 224, g[3] or 64, g[4] or 1000), F.cross_entropy
    m = re.fullmatch(r"rnn-(\d+)-(\d+)", name)
    if m:
        return Lstm(int(m[1]), int(m[2])), lambda y, t: ((y - t) ** 2).mean(dim=(1, 2)).sum()
    m = re.fullmatch(r"gpt-(\d+)-(\d+)-(\d+)-(\d+)", name)
    if m:
        return Gpt(*map(int, m.groups())), F.cross_entropy
    raise SystemExit(f"torch_peer.py: unknown model '{name}'")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    cuda = args.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    model, loss_fn = build(args.model)
    model.train()
    x, y = model.batch(args.batch)
    model = model.to(args.device)
    x, y = x.to(args.device), y.to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    autocast = ((lambda: torch.autocast(args.device, dtype=torch.bfloat16))
                if args.precision == "bf16" else contextlib.nullcontext)
    times, losses = [], []
    for _ in range(args.steps):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        losses.append(loss.item())
    blas = sorted({l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.lower()})
    med = statistics.median(times[2:] if len(times) > 4 else times)
    if args.json:
        print(json.dumps({"model": args.model, "device": args.device, "precision": args.precision,
                          "gpu": torch.cuda.get_device_name() if cuda else None,
                          "median_step_seconds": med, "torch": torch.__version__,
                          "threads": args.threads, "blas": blas, "loss": losses}))
    else:
        print(f"pytorch {torch.__version__} {args.model} batch {args.batch} {args.precision}, "
              f"{args.threads} threads: "
              f"median step {med:.4f} s; loss {losses[0]:.4f} -> {losses[-1]:.4f}; "
              f"BLAS loaded: {' '.join(blas) or 'none'}")


if __name__ == "__main__":
    main()
