#!/usr/bin/python3
"""The main job's real model: a small CNN on Fashion-MNIST, and its PyTorch peer.

  fmnist.py export OUT.onnx [--seed S] [--bn]
      Defines the CNN in PyTorch (initial weights from torch.manual_seed(S)) and exports it
      to ONNX with a dynamic batch: the model tofu-run trains (--onnx), its initializers
      the initial weights. --bn puts a batch norm after each convolution and exports in
      training mode (batch statistics; the running ones are initializers that a training
      step updates).
  fmnist.py train --onnx M.onnx --data DIR [--epochs E | --steps N] [--batch B] [--lr LR]
                  [--optimizer sgd|momentum|nesterov|adam|adamw] [--momentum MU]
                  [--weight-decay WD] [--lr-schedule S] [--warmup N] [--seed S]
                  [--normalize MEAN,STD] [--log-every N] [--threads T] [--float64 | --bf16]
                  [--perturb K [--perturb-sums]] [--shuffle on|off] --json OUT.json
      Trains the same model in PyTorch from the ONNX file's initial weights, on the same
      batches in the same order as tofu-run --data DIR --seed S (runtime/dataset.h:
      epochOrder, reimplemented below), with torch.optim's optimiser of that name (SGD,
      SGD(momentum), SGD(nesterov), Adam, AdamW) and torch.optim.lr_scheduler's schedule
      (StepLR, CosineAnnealingLR, after LinearLR's warm-up under SequentialLR), stepped per
      step as tofu-run's --optimizer, --lr-schedule and --warmup are, and evaluates on the
      test split after each epoch (and after the last step). Writes per-step losses, rates
      and the evaluations as JSON (tofu-run --format=json's keys). --float64 trains in
      double precision: the exact reference where float32 rounding grows chaotically (Adam's
      updates normalise away a gradient's size, so rounding noise in a near-zero gradient
      becomes a full step; two float32 runs then part within a few steps). --bf16 trains and
      evaluates in mixed precision as tofu-run --precision bf16 does: torch.autocast's CUDA
      rules (tools/oracles/torch_autocast.py), float32 weights. --perturb K
      multiplies every gradient element by 1 + e*u at every step, e float32's epsilon and u
      uniform in [-1, 1] (draw K): rounding of the size a different summation order makes,
      so the run differs from the plain one only as another float32 implementation would.
      --perturb-sums also moves every output of a convolution or linear layer by e*u times
      the sum of its terms' magnitudes (sum |w| |x| + |b|): the error another summation
      order makes in a float32 sum. Unlike a relative error, it can carry an output that
      lies within rounding of zero across a ReLU's kink (or reorder a max pool's window),
      which changes a step's gradient discretely (one position of 6272 in conv2's filter
      gradient: about 1e-4 of it); float32 implementations part so.
  fmnist.py evaluate --checkpoint DIR [--bn] [--data DIR] [--normalize MEAN,STD] [--json OUT]
      Loads a checkpoint tofu-run --save wrote (whole or sharded) into the PyTorch module by
      name (running statistics included) and prints its eval-mode (model.eval()) loss and
      accuracy on the test split.
  fmnist.py plot TOFU.json TORCH.json OUT.svg [--spread P1.json ...] [--steps N]
      Draws both loss curves (means over windows of steps) and the test accuracies in one SVG,
      and compares the runs (exit 1 when they differ): the first N steps' losses and the final
      test accuracy, each against a tolerance derived from the --spread runs (PyTorch with
      --perturb), which show how far rounding alone moves PyTorch from itself (see agree()).

Runs under Debian's /usr/bin/python3 (python3-torch 1.13, python3-onnx).
"""
import argparse
import contextlib
import gzip
import json
import os
import struct
import sys
import time

import numpy as np


def build_model(bn=False):
    import torch.nn as nn

    class Cnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
            self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
            self.fc1 = nn.Linear(32 * 7 * 7, 128)
            self.fc2 = nn.Linear(128, 10)
            self.pool = nn.MaxPool2d(2)
            self.relu = nn.ReLU()
            if bn:  # a batch norm after each convolution (running statistics: buffers)
                self.bn1 = nn.BatchNorm2d(16)
                self.bn2 = nn.BatchNorm2d(32)

        def forward(self, x):
            x = self.conv1(x)
            x = self.pool(self.relu(self.bn1(x) if bn else x))
            x = self.conv2(x)
            x = self.pool(self.relu(self.bn2(x) if bn else x))
            x = x.flatten(1)
            return self.fc2(self.relu(self.fc1(x)))

    return Cnn()


def export(args):
    import torch
    torch.manual_seed(args.seed)
    model = build_model(args.bn)
    x = torch.zeros(2, 1, 28, 28)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    if args.bn:  # training mode: the batch norms normalise with the batch's statistics
        import warnings  # PyTorch notes that the export drops num_batches_tracked's count
        warnings.filterwarnings("ignore", message=".*num_batches_tracked.*")
        model.train()
        torch.onnx.export(model, x, args.out, input_names=["image"], output_names=["logits"],
                          dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                          opset_version=15, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False)
    else:
        torch.onnx.export(model.eval(), x, args.out, input_names=["image"],
                          output_names=["logits"],
                          dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                          opset_version=13)
    params = sum(p.numel() for p in model.parameters())
    print(f"exported the CNN ({params} parameters, seed {args.seed}"
          f"{', batch norms in training mode' if args.bn else ''}) to {args.out}")


def read_safetensors(path):
    """A safetensors file's tensors by name (F32, F64, I32, I64), as numpy arrays."""
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8"}[entry["dtype"]]
        lo, hi = entry["data_offsets"]
        out[name] = np.frombuffer(body[lo:hi], dtype=dtype).reshape(entry["shape"])
    return out


def read_checkpoint(folder):
    """A tofu-run --save checkpoint's tensors by name: model.safetensors whole, or a sharded
    one (index.json naming each tensor's tiles: runtime/checkpoint.h) assembled."""
    whole = os.path.join(folder, "model.safetensors")
    if os.path.exists(whole):
        return read_safetensors(whole)
    with open(os.path.join(folder, "index.json")) as f:
        index = json.load(f)
    files, out = {}, {}
    for name, entry in index["tensors"].items():
        t = np.zeros(entry["shape"], dtype=np.float32)
        for tile in entry["tiles"]:
            if tile["file"] not in files:
                files[tile["file"]] = read_safetensors(os.path.join(folder, tile["file"]))
            t[tuple(slice(lo, hi) for lo, hi in tile["box"])] = files[tile["file"]][tile["key"]]
        out[name] = t
    return out


def evaluate_checkpoint(args):
    """PyTorch's eval-mode accuracy of a checkpoint tofu-run saved, loaded by name."""
    import torch
    torch.set_num_threads(args.threads)
    model = build_model(args.bn)
    saved = read_checkpoint(args.checkpoint)
    state = model.state_dict()
    for name in state:
        if name.endswith("num_batches_tracked"):
            continue  # PyTorch's count of steps, which no ONNX export holds
        if name not in saved:
            sys.exit(f"fmnist.py: the checkpoint {args.checkpoint} has no tensor '{name}'")
        state[name] = torch.from_numpy(np.array(saved[name], dtype=np.float32))
    model.load_state_dict(state)
    model.eval()
    mean, std = (float(v) for v in args.normalize.split(","))
    images, labels = split(args.data, "t10k")
    correct, total = 0, 0.0
    with torch.no_grad():
        for start in range(0, len(images), 1000):
            x = (torch.from_numpy(images[start:start + 1000].astype(np.float32) / 255.0)
                 .unsqueeze(1) - mean) / std
            y = torch.from_numpy(labels[start:start + 1000].astype(np.int64))
            out = model(x)
            total += float(torch.nn.functional.cross_entropy(out, y, reduction="sum"))
            correct += int((out.argmax(1) == y).sum())
    result = {"accuracy": correct / len(images), "loss": total / len(images),
              "samples": len(images)}
    print(f"PyTorch eval mode: loss {result['loss']:.4f}, accuracy "
          f"{100 * result['accuracy']:.2f}% on {len(images)} test samples")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, kind, rank = struct.unpack(">HBB", data[:4])
    assert zero == 0 and kind == 0x08, f"{path}: not a u8 IDX file"
    dims = struct.unpack(">" + "I" * rank, data[4:4 + 4 * rank])
    return np.frombuffer(data[4 + 4 * rank:], dtype=np.uint8).reshape(dims)


def split(data_dir, name):
    def find(base):
        for suffix in ("", ".gz"):
            if os.path.exists(os.path.join(data_dir, base + suffix)):
                return os.path.join(data_dir, base + suffix)
        sys.exit(f"fmnist.py: no {base}[.gz] in {data_dir}")
    return (read_idx(find(f"{name}-images-idx3-ubyte")),
            read_idx(find(f"{name}-labels-idx1-ubyte")))


MASK = (1 << 64) - 1
FLOAT32_EPS = 2.0 ** -23


def epoch_order(n, seed, epoch):
    """runtime/dataset.h's epochOrder: Fisher-Yates driven by SplitMix64."""
    state = ((seed << 32) + epoch) & MASK
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        x = state
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
        x ^= x >> 31
        j = x % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def train(args):
    import onnx
    import onnx.numpy_helper
    import torch
    torch.set_num_threads(args.threads)
    real = np.float64 if args.float64 else np.float32
    if args.float64:
        torch.set_default_dtype(torch.float64)
    if args.bf16 and args.float64:
        sys.exit("fmnist.py: --bf16 and --float64 exclude each other")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracles"))
    from torch_autocast import cuda_autocast_bf16
    autocast = cuda_autocast_bf16 if args.bf16 else contextlib.nullcontext
    model = build_model(args.bn)
    init = {t.name: onnx.numpy_helper.to_array(t)
            for t in onnx.load(args.onnx).graph.initializer}
    state = model.state_dict()
    for name in state:
        if name.endswith("num_batches_tracked"):
            continue
        if name not in init:
            sys.exit(f"fmnist.py: {args.onnx} has no initializer '{name}'")
        state[name] = torch.from_numpy(np.array(init[name], dtype=real))
    model.load_state_dict(state)
    mean, std = (float(v) for v in args.normalize.split(","))
    images, labels = split(args.data, "train")
    test_images, test_labels = split(args.data, "t10k")

    def prepare(x):
        return (torch.from_numpy(x.astype(real) / 255.0).unsqueeze(1) - mean) / std

    params = model.parameters()
    if args.optimizer in ("sgd", "momentum", "nesterov"):
        opt = torch.optim.SGD(params, lr=args.lr,
                              momentum=0.0 if args.optimizer == "sgd" else args.momentum,
                              nesterov=args.optimizer == "nesterov",
                              weight_decay=args.weight_decay or 0.0)
    elif args.optimizer == "adam":
        opt = torch.optim.Adam(params, lr=args.lr, weight_decay=args.weight_decay or 0.0)
    else:
        opt = torch.optim.AdamW(params, lr=args.lr,
                                weight_decay=0.01 if args.weight_decay is None else args.weight_decay)
    steps_per_epoch = len(images) // args.batch
    total = args.steps or args.epochs * steps_per_epoch
    scheduler = make_scheduler(torch, opt, args.lr_schedule, args.warmup, total)
    loss_fn = torch.nn.CrossEntropyLoss()
    losses, rates, step_seconds, evals = [], [], [], []

    def evaluate(done):
        model.eval()
        total, correct, n = 0.0, 0, len(test_images)
        with torch.no_grad():
            for start in range(0, n, 1000):
                x = prepare(test_images[start:start + 1000])
                y = torch.from_numpy(test_labels[start:start + 1000].astype(np.int64))
                with autocast():
                    out = model(x)
                    total += float(torch.nn.functional.cross_entropy(out, y, reduction="sum"))
                correct += int((out.argmax(1) == y).sum())
        model.train()
        evals.append({"step": done, "epoch": done / steps_per_epoch, "loss": total / n,
                      "accuracy": correct / n, "samples": n})
        print(f"eval after step {done}: loss {total / n:.4f}, accuracy {100 * correct / n:.2f}%")

    model.train()
    noise = torch.Generator().manual_seed(args.perturb) if args.perturb else None
    if args.perturb_sums:
        if not args.perturb:
            sys.exit("fmnist.py: --perturb-sums needs --perturb K (the draw)")
        perturb_sums(torch, model, noise)
    epochs = -(-total // steps_per_epoch)
    for epoch in range(epochs):
        order = (epoch_order(len(images), args.seed, epoch) if args.shuffle == "on"
                 else list(range(len(images))))
        for within in range(steps_per_epoch):
            if epoch * steps_per_epoch + within >= total:
                break
            t0 = time.perf_counter()
            rates.append(opt.param_groups[0]["lr"])
            idx = order[within * args.batch:(within + 1) * args.batch]
            x = prepare(images[idx])
            y = torch.from_numpy(labels[idx].astype(np.int64))
            opt.zero_grad()
            with autocast():
                loss = loss_fn(model(x), y)
            loss.backward()
            if noise is not None:
                # A rounding error of up to one float32 step in every gradient element, as a
                # different summation order makes (see --perturb).
                for p in model.parameters():
                    u = torch.rand(p.grad.shape, generator=noise, dtype=torch.float64)
                    p.grad.copy_(p.grad.double() * (1 + FLOAT32_EPS * (2 * u - 1)))
            opt.step()
            if scheduler is not None:
                scheduler.step()
            losses.append(float(loss))
            step_seconds.append(time.perf_counter() - t0)
            done = epoch * steps_per_epoch + within + 1
            if done % args.log_every == 0:
                window = losses[-args.log_every:]
                print(f"| {done} | {sum(window) / len(window):.6f} |", flush=True)
        evaluate(min(total, (epoch + 1) * steps_per_epoch))
    med = sorted(step_seconds)[len(step_seconds) // 2]
    print(f"median step {med:.4f} s, {args.batch / med:.1f} samples/s ({args.threads} threads)")
    with open(args.json, "w") as f:
        json.dump({"model": "fmnist-cnn (PyTorch)", "loss": losses, "lr_per_step": rates,
                   "eval": evals,
                   "step_seconds": step_seconds, "median_step_seconds": med,
                   "batch": args.batch, "steps_per_epoch": steps_per_epoch}, f)


def perturb_sums(torch, model, noise):
    """--perturb-sums: forward hooks on model's convolutions and linear layers that move each
    output by FLOAT32_EPS * u * (the sum of its terms' magnitudes), u uniform in [-1, 1]
    from noise; the shift is a constant of the step (no gradient flows through it)."""
    import torch.nn as nn
    import torch.nn.functional as F

    def hook(module, inputs, out):
        x = inputs[0].detach().abs()
        w = module.weight.detach().abs()
        b = module.bias.detach().abs() if module.bias is not None else None
        if isinstance(module, nn.Conv2d):
            scale = F.conv2d(x, w, b, module.stride, module.padding, module.dilation,
                             module.groups)
        else:
            scale = F.linear(x, w, b)
        u = torch.rand(out.shape, generator=noise, dtype=torch.float64).to(out.dtype)
        return out + (FLOAT32_EPS * (2 * u - 1) * scale).detach()

    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            m.register_forward_hook(hook)


def make_scheduler(torch, opt, text, warmup, total):
    """tofu-run's --lr-schedule TEXT --warmup N (runtime/lr_schedule.h) as PyTorch's own
    schedulers, stepped once per training step; None for a constant rate."""
    sched = torch.optim.lr_scheduler
    parts = text.split(":")
    if parts[0] == "constant":
        main = None
    elif parts[0] == "step":
        main = sched.StepLR(opt, step_size=int(parts[1]),
                            gamma=float(parts[2]) if len(parts) > 2 else 0.1)
    elif parts[0] == "cosine":
        horizon = int(parts[1]) if len(parts) > 1 else total
        main = sched.CosineAnnealingLR(opt, T_max=horizon - warmup)
    else:
        sys.exit(f"fmnist.py: unknown --lr-schedule {text}")
    if warmup == 0:
        return main
    warm = sched.LinearLR(opt, start_factor=1.0 / (warmup + 1), end_factor=1.0,
                          total_iters=warmup)
    if main is None:
        return warm
    return sched.SequentialLR(opt, [warm, main], milestones=[warmup])


def windows(values, n):
    return [sum(values[i:i + n]) / len(values[i:i + n]) for i in range(0, len(values), n)]


def svg_frame(w, h, left, right, top, bottom):
    """An SVG's opening lines: a white page of w x h and the axes inside its margins."""
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
            f'font-family="sans-serif" font-size="12">',
            f'<rect width="{w}" height="{h}" fill="white"/>',
            f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>']


def plot(args):
    with open(args.tofu) as f:
        a = json.load(f)
    with open(args.torch) as f:
        b = json.load(f)
    n = args.window
    ta, tb = windows(a["loss"], n), windows(b["loss"], n)
    w, h, left, right, top, bottom = 720, 420, 60, 20, 30, 50
    hi = max(max(ta), max(tb)) * 1.05
    count = max(len(ta), len(tb))

    def xy(i, v):
        x = left + (w - left - right) * (i + 0.5) / count
        y = top + (h - top - bottom) * (1 - v / hi)
        return f"{x:.1f},{y:.1f}"

    lines = svg_frame(w, h, left, right, top, bottom)
    for k in range(6):
        v = hi * k / 5
        y = top + (h - top - bottom) * (1 - v / hi)
        lines.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    steps = len(a["loss"])
    for k in range(6):
        s = steps * k // 5
        x = left + (w - left - right) * s / max(1, steps)
        lines.append(f'<text x="{x:.1f}" y="{h - bottom + 16}" text-anchor="middle">{s}</text>')
    lines.append(f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle">step (training loss: '
                 f'mean of each {n} steps)</text>')
    for series, colour in ((ta, "#1f77b4"), (tb, "#d62728")):
        pts = " ".join(xy(i, v) for i, v in enumerate(series))
        lines.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{pts}"/>')
    legend = [("#1f77b4", "Tofu, 2 MPI processes", a), ("#d62728", "PyTorch 1.13", b)]
    for k, (colour, label, run) in enumerate(legend):
        y = top + 10 + 18 * k
        final = run["eval"][-1]["accuracy"] * 100 if run.get("eval") else float("nan")
        lines.append(f'<line x1="{w - 300}" y1="{y}" x2="{w - 280}" y2="{y}" stroke="{colour}" '
                     f'stroke-width="3"/>')
        lines.append(f'<text x="{w - 274}" y="{y + 4}">{label}: test accuracy {final:.2f}%</text>')
    lines.append(f'<text x="{left}" y="18">Fashion-MNIST, CNN of tools/main/fmnist.py, same initial '
                 f'weights and batches</text>')
    lines.append("</svg>")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    for run, name in ((a, "tofu"), (b, "pytorch")):
        accs = ", ".join(f"{100 * e['accuracy']:.2f}%" for e in run.get("eval", []))
        print(f"{name}: loss of the first {n} steps {ta[0] if run is a else tb[0]:.4f}, "
              f"of the last {n} {ta[-1] if run is a else tb[-1]:.4f}; test accuracy {accs}")
    if not agree(a, b, args.spread, args.steps):
        sys.exit(1)
    print(f"plot: {args.out}")


def agree(a, b, spread_paths, first):
    """Whether Tofu's run `a` agrees with PyTorch's `b`, judged against how far PyTorch moves
    from itself when only float rounding differs: the runs in `spread_paths` (fmnist.py
    train --perturb: same batches, every gradient off by up to one float32 step).
    Prints each check and how its tolerance was derived.
    - Losses, steps 1..first: float32 keeps the runs together there, so each step's gap
      |tofu - torch| must be at most 10x the largest perturbed run's gap at that step (and
      at least 1e-5 relative is allowed: one step's own rounding).
    - Final test accuracy: float rounding, amplified over thousands of steps, scatters it by
      tenths of a point. Tofu must lie within 4 standard deviations of PyTorch's runs (the
      unperturbed and the perturbed: their sample deviation) of their mean, and within 1
      point at least (a handful of runs estimates a deviation loosely)."""
    spread = []
    for path in spread_paths:
        with open(path) as f:
            spread.append(json.load(f))
    ok = True
    n = min(first, len(a["loss"]), len(b["loss"]))
    if spread and n:
        worst = 0.0
        for i in range(n):
            gap = abs(a["loss"][i] - b["loss"][i])
            noise = max(abs(r["loss"][i] - b["loss"][i]) for r in spread)
            tol = max(10 * noise, 1e-5 * abs(b["loss"][i]))
            worst = max(worst, gap / tol)
            if gap > tol:
                print(f"step {i + 1}: loss {a['loss'][i]:.7f} against PyTorch's "
                      f"{b['loss'][i]:.7f}: gap {gap:.2e} beyond {tol:.2e} (10x the perturbed "
                      "runs' largest gap)")
                ok = False
        print(f"losses of steps 1-{n}: {'AGREE' if ok else 'DIFFER'} (largest gap "
              f"{worst:.2f} of its tolerance; step 1 {a['loss'][0]:.7f} against "
              f"{b['loss'][0]:.7f}, step {n} {a['loss'][n - 1]:.6f} against {b['loss'][n - 1]:.6f})")
    if a.get("eval") and b.get("eval"):
        accs = [100 * r["eval"][-1]["accuracy"] for r in [b] + spread if r.get("eval")]
        mine = 100 * a["eval"][-1]["accuracy"]
        mean = sum(accs) / len(accs)
        sd = (sum((x - mean) ** 2 for x in accs) / (len(accs) - 1)) ** 0.5 if len(accs) > 1 else 0
        tol = max(4 * sd, 1.0)
        within = abs(mine - mean) <= tol
        print(f"PyTorch's final test accuracy over {len(accs)} runs that differ only by float "
              f"rounding: {', '.join(f'{x:.2f}%' for x in accs)}; mean {mean:.2f}%, standard "
              f"deviation {sd:.2f} pt; tolerance max(4 sd, 1 pt) = {tol:.2f} pt")
        print(f"Tofu's final test accuracy {mine:.2f}% is {abs(mine - mean):.2f} pt from "
              f"PyTorch's mean: {'AGREE' if within else 'DIFFER'}")
        ok = ok and within
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("out")
    e.add_argument("--seed", type=int, default=1)
    e.add_argument("--bn", action="store_true",
                   help="a batch norm after each convolution, exported in training mode")
    t = sub.add_parser("train")
    t.add_argument("--onnx", required=True)
    t.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    t.add_argument("--epochs", type=int, default=1)
    t.add_argument("--batch", type=int, default=64)
    t.add_argument("--lr", type=float, default=0.01)
    t.add_argument("--steps", type=int, default=0)
    t.add_argument("--optimizer", default="momentum",
                   choices=["sgd", "momentum", "nesterov", "adam", "adamw"])
    t.add_argument("--momentum", type=float, default=0.9)
    t.add_argument("--weight-decay", type=float, default=None)
    t.add_argument("--lr-schedule", default="constant")
    t.add_argument("--warmup", type=int, default=0)
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--shuffle", choices=["on", "off"], default="on",
                   help="as tofu-run's --shuffle: off takes the samples in file order")
    t.add_argument("--normalize", default="0.2860,0.3530")
    t.add_argument("--log-every", type=int, default=50)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--float64", action="store_true")
    t.add_argument("--bf16", action="store_true")
    t.add_argument("--perturb", type=int, default=0,
                   help="every gradient element off by up to one float32 step at every step "
                        "(this seed's draw): a run that differs only by rounding")
    t.add_argument("--perturb-sums", action="store_true",
                   help="with --perturb: every convolution's and linear layer's output off by "
                        "up to one float32 step of its terms' summed magnitude")
    t.add_argument("--bn", action="store_true", help="the model export --bn wrote")
    t.add_argument("--json", required=True)
    v = sub.add_parser("evaluate")
    v.add_argument("--checkpoint", required=True, help="a tofu-run --save directory")
    v.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    v.add_argument("--bn", action="store_true", help="the model export --bn wrote")
    v.add_argument("--normalize", default="0.2860,0.3530")
    v.add_argument("--threads", type=int, default=2)
    v.add_argument("--json", default="")
    g = sub.add_parser("plot")
    g.add_argument("tofu")
    g.add_argument("torch")
    g.add_argument("out")
    g.add_argument("--window", type=int, default=50)
    g.add_argument("--spread", nargs="*", default=[],
                   help="PyTorch runs with --perturb: how far rounding alone moves a run")
    g.add_argument("--steps", type=int, default=15,
                   help="compare the losses of this many first steps against the spread")
    args = p.parse_args()
    {"export": export, "train": train, "evaluate": evaluate_checkpoint,
     "plot": plot}[args.cmd](args)


if __name__ == "__main__":
    main()
