#!/usr/bin/python3
"""The main job's language model: a small character-level GPT on the text of Debian's
`fortunes` package, and its PyTorch peer.

  charlm.py data OUT_DIR [--fortunes DIR] [--seq T] [--held-out FRACTION] [--held-out-max N]
      Reads every fortune file of DIR (default /usr/share/games/fortunes; the index files
      .dat and .u8 left out) in name order, keeps printable ASCII and newlines (a tab
      becomes a space; overstrikes and other bytes are dropped), and numbers the characters
      that occur (the vocabulary, OUT_DIR/vocab.json). The text is cut into windows of T + 1
      characters, none overlapping: `tokens` is a window's first T characters and `labels`
      its last T, the next character at every position. The last FRACTION of the text
      (default 0.1) is held out, at most N windows of it (default 1024). Writes
      OUT_DIR/train.safetensors and OUT_DIR/heldout.safetensors (int32 arrays [windows, T]),
      the data set tofu-run trains and evaluates on (--data, --eval).
  charlm.py export OUT.onnx --vocab V|--data DIR [--seq T] [--layers L] [--width D]
                   [--heads H] [--seed S]
      Defines the GPT in PyTorch (initial weights from torch.manual_seed(S)): token and
      position embeddings, L pre-norm blocks of causal self-attention (an additive mask of
      -inf above the diagonal, a buffer) and a GELU MLP, a final layer norm and the
      projection to the vocabulary: logits [batch, T, V]. Exports it to ONNX with a dynamic
      batch.
  charlm.py train --onnx M.onnx --data DIR [--steps N] [--batch B] [--lr LR] [--seed S]
                  [--eval-every N] [--bf16] [--threads T] --json OUT.json
      Trains the same model in PyTorch from the ONNX file's initial weights on the same
      batches in the same order as tofu-run --data DIR/train.safetensors --seed S
      (runtime/dataset.h's epochOrder), with torch.optim.Adam and the mean cross-entropy
      over every position (tofu-run --loss cross-entropy). Every --eval-every steps and
      after the last it scores the held-out windows: the mean loss per character and the
      accuracy of the next-character guess. --bf16 trains and evaluates under
      torch.autocast's CUDA rules applied on the CPU (tools/oracles/torch_autocast.py), float32
      weights, as tofu-run --precision bf16 does. Writes tofu-run --metrics's keys.
  charlm.py plot OUT.svg NAME=TOFU.json,TORCH.json ... [--tolerance R]
      Draws every run's training loss (means over windows of steps) and held-out loss in one
      SVG, and compares each pair: the final held-out losses must agree within R relative
      (default 0.02). Exits 1 when a pair does not.

Runs under Debian's /usr/bin/python3 (python3-torch 1.13, python3-onnx).
"""
import argparse
import contextlib
import json
import os
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# torch_autocast lives with the other PyTorch oracles.
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracles"))


def read_text(folder):
    names = sorted(n for n in os.listdir(folder)
                   if not n.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(folder, n)))
    if not names:
        sys.exit(f"charlm.py: no fortune files in {folder} (apt-get install fortunes)")
    out = bytearray()
    for n in names:
        with open(os.path.join(folder, n), "rb") as f:
            raw = f.read()
        for b in raw:
            if b == 9:
                out.append(32)
            elif b == 10 or 32 <= b < 127:
                out.append(b)
            elif b == 8 and out:  # an overstrike: "_\bx" prints x
                out.pop()
    return bytes(out), names


def write_safetensors(path, arrays):
    """A safetensors file of int32 arrays (little-endian), keys in order."""
    header, offset, blobs = {}, 0, []
    for key, a in arrays.items():
        a = np.ascontiguousarray(a, dtype="<i4")
        header[key] = {"dtype": "I32", "shape": list(a.shape),
                       "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def data(args):
    text, names = read_text(args.fortunes)
    vocab = sorted(set(text))
    index = np.zeros(256, dtype=np.int32)
    for i, c in enumerate(vocab):
        index[c] = i
    ids = index[np.frombuffer(text, dtype=np.uint8)]
    t = args.seq
    windows = (len(ids) - 1) // (t + 1)
    held = max(1, int(windows * args.held_out))
    train_windows = windows - held
    w = ids[:windows * (t + 1)].reshape(windows, t + 1)
    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, "train.safetensors"),
                      {"tokens": w[:train_windows, :t], "labels": w[:train_windows, 1:]})
    h = w[train_windows:train_windows + min(held, args.held_out_max)]
    write_safetensors(os.path.join(args.out, "heldout.safetensors"),
                      {"tokens": h[:, :t], "labels": h[:, 1:]})
    with open(os.path.join(args.out, "vocab.json"), "w") as f:
        json.dump({"characters": "".join(chr(c) for c in vocab), "files": names,
                   "text_characters": len(ids), "seq": t}, f)
    print(f"{len(names)} fortune files, {len(ids)} characters, vocabulary of {len(vocab)}: "
          f"{train_windows} training windows of {t} + 1, {len(h)} held out (of {held}, the "
          f"text's last {100 * args.held_out:.0f}%)")


def build_model(vocab, seq, layers, width, heads):
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.fc = nn.Linear(width, 4 * width)
            self.act = nn.GELU()
            self.out = nn.Linear(4 * width, width)

        def forward(self, x, mask):
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)

            def split(t):
                return t.reshape(b, s, heads, d // heads).transpose(1, 2)

            q, k, v = split(q), split(k), split(v)
            att = torch.softmax(q @ k.transpose(-2, -1) / ((d // heads) ** 0.5) + mask, dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, s, d)
            x = x + self.proj(y)
            return x + self.out(self.act(self.fc(self.ln2(x))))

    class CharGpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, width)
            self.pos = nn.Parameter(torch.randn(seq, width) * 0.02)
            # The causal mask: -inf above the diagonal, added to the scores (a buffer, so a
            # constant of the export that nothing trains).
            self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.lnf = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens):
            x = self.tok(tokens) + self.pos
            for blk in self.blocks:
                x = blk(x, self.mask)
            return self.head(self.lnf(x))

    return CharGpt()


def shape_args(p):
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)


def export(args):
    import torch
    if args.data:
        with open(os.path.join(args.data, "vocab.json")) as f:
            args.vocab = len(json.load(f)["characters"])
    if not args.vocab:
        sys.exit("charlm.py export: give --vocab V or --data DIR")
    torch.manual_seed(args.seed)
    model = build_model(args.vocab, args.seq, args.layers, args.width, args.heads)
    x = torch.zeros(2, args.seq, dtype=torch.int64)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    # In training mode, without constant folding: an eval-mode export merges initializers
    # of equal values (every layer norm's ones would become one tied weight) and folds the
    # products' transposes into anonymous copies of their weights.
    torch.onnx.export(model.train(), x, args.out, input_names=["tokens"],
                      output_names=["logits"],
                      dynamic_axes={"tokens": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    import onnx
    m = onnx.load(args.out)  # the heads are not in the weights' shapes: say them
    entry = m.metadata_props.add()
    entry.key, entry.value = "charlm.heads", str(args.heads)
    onnx.save(m, args.out)
    params = sum(p.numel() for p in model.parameters())
    print(f"exported the character GPT ({args.layers} layers of width {args.width}, "
          f"{args.heads} heads, {args.seq} characters, vocabulary {args.vocab}; {params} "
          f"parameters, seed {args.seed}) to {args.out}")


def model_shape(onnx_path):
    """The export's initial weights, vocabulary, sequence, layers, width and heads."""
    import onnx
    import onnx.numpy_helper
    m = onnx.load(onnx_path)
    init = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    vocab, width = init["tok.weight"].shape
    seq = init["pos"].shape[0]
    layers = len({k.split(".")[1] for k in init if k.startswith("blocks.")})
    heads = {p.key: p.value for p in m.metadata_props}.get("charlm.heads")
    if heads is None:
        sys.exit(f"charlm.py: {onnx_path} does not say its heads (charlm.py export writes them)")
    return init, vocab, seq, layers, width, int(heads)


def train(args):
    import torch
    from fmnist import epoch_order, read_safetensors
    from torch_autocast import cuda_autocast_bf16
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    init, vocab, seq, layers, width, heads = model_shape(args.onnx)
    model = build_model(vocab, seq, layers, width, heads)
    state = model.state_dict()
    for name in state:
        if name == "mask":
            continue
        if name not in init:
            sys.exit(f"charlm.py: {args.onnx} has no initializer '{name}'")
        state[name] = torch.from_numpy(np.array(init[name], dtype=np.float32))
    model.load_state_dict(state)
    autocast = cuda_autocast_bf16 if args.bf16 else contextlib.nullcontext
    tr = read_safetensors(os.path.join(args.data, "train.safetensors"))
    ho = read_safetensors(os.path.join(args.data, "heldout.safetensors"))
    tokens, labels = tr["tokens"].astype(np.int64), tr["labels"].astype(np.int64)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    n = len(tokens)
    steps_per_epoch = n // args.batch
    losses, rates, step_seconds, evals = [], [], [], []

    def evaluate(done):
        model.eval()
        total, correct, count = 0.0, 0, 0
        with torch.no_grad():
            for start in range(0, len(ho["tokens"]), 256):
                x = torch.from_numpy(ho["tokens"][start:start + 256].astype(np.int64))
                y = torch.from_numpy(ho["labels"][start:start + 256].astype(np.int64))
                with autocast():
                    out = model(x)
                    total += float(torch.nn.functional.cross_entropy(
                        out.reshape(-1, vocab), y.reshape(-1), reduction="sum"))
                correct += int((out.argmax(-1) == y).sum())
                count += y.numel()
        model.train()
        evals.append({"step": done, "epoch": done / steps_per_epoch, "loss": total / count,
                      "accuracy": correct / count, "samples": len(ho["tokens"])})
        print(f"eval after step {done}: held-out loss {total / count:.4f} per character, "
              f"accuracy {100 * correct / count:.2f}%", flush=True)

    model.train()
    order, epoch = None, -1
    for step in range(args.steps):
        if step // steps_per_epoch != epoch:
            epoch = step // steps_per_epoch
            order = epoch_order(n, args.seed, epoch)
        within = step % steps_per_epoch
        idx = order[within * args.batch:(within + 1) * args.batch]
        t0 = time.perf_counter()
        rates.append(args.lr)
        x, y = torch.from_numpy(tokens[idx]), torch.from_numpy(labels[idx])
        opt.zero_grad()
        with autocast():
            loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(float(loss))
        step_seconds.append(time.perf_counter() - t0)
        done = step + 1
        if done % args.log_every == 0:
            window = losses[-args.log_every:]
            print(f"| {done} | {sum(window) / len(window):.6f} |", flush=True)
        if done % args.eval_every == 0 or done == args.steps:
            evaluate(done)
    med = sorted(step_seconds)[len(step_seconds) // 2]
    print(f"median step {med:.4f} s ({args.threads} threads)")
    with open(args.json, "w") as f:
        json.dump({"model": "charlm (PyTorch" + (", bf16" if args.bf16 else "") + ")",
                   "loss": losses, "lr_per_step": rates, "eval": evals,
                   "step_seconds": step_seconds, "median_step_seconds": med,
                   "batch": args.batch, "steps_per_epoch": steps_per_epoch}, f)


def plot(args):
    from fmnist import svg_frame, windows
    runs = []  # (name, tofu, torch)
    for item in args.pairs:
        name, _, paths = item.partition("=")
        a, b = paths.split(",")
        with open(a) as f, open(b) as g:
            runs.append((name, json.load(f), json.load(g)))
    n = args.window
    w, h, left, right, top, bottom = 760, 440, 60, 20, 30, 50
    series = []
    colours = [("#1f77b4", "#d62728"), ("#2ca02c", "#ff7f0e")]
    for k, (name, a, b) in enumerate(runs):
        series.append((f"Tofu {name}", a, colours[k % 2][0], None))
        series.append((f"PyTorch {name}", b, colours[k % 2][1], "5,3"))
    hi = max(max(windows(s["loss"], n)) for _, s, _, _ in series) * 1.05
    steps = max(len(s["loss"]) for _, s, _, _ in series)

    def x_of(step):
        return left + (w - left - right) * step / max(1, steps)

    def y_of(v):
        return top + (h - top - bottom) * (1 - v / hi)

    lines = svg_frame(w, h, left, right, top, bottom)
    for k in range(6):
        v = hi * k / 5
        lines.append(f'<text x="{left - 6}" y="{y_of(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
        s = steps * k // 5
        lines.append(f'<text x="{x_of(s):.1f}" y="{h - bottom + 16}" text-anchor="middle">{s}</text>')
    lines.append(f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle">step (training loss per '
                 f'character: mean of each {n} steps; dots: held-out loss)</text>')
    for k, (label, run, colour, dash) in enumerate(series):
        pts = " ".join(f"{x_of(i * n + n / 2):.1f},{y_of(v):.1f}"
                       for i, v in enumerate(windows(run["loss"], n)))
        style = f' stroke-dasharray="{dash}"' if dash else ""
        lines.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{style} '
                     f'points="{pts}"/>')
        for e in run.get("eval", []):
            lines.append(f'<circle cx="{x_of(e["step"]):.1f}" cy="{y_of(e["loss"]):.1f}" r="3.5" '
                         f'fill="{colour}"/>')
        y = top + 10 + 18 * k
        final = run["eval"][-1]["loss"] if run.get("eval") else float("nan")
        lines.append(f'<line x1="{w - 330}" y1="{y}" x2="{w - 310}" y2="{y}" stroke="{colour}" '
                     f'stroke-width="3"{style}/>')
        lines.append(f'<text x="{w - 304}" y="{y + 4}">{label}: held-out loss {final:.4f}</text>')
    lines.append(f'<text x="{left}" y="18">Character-level GPT on Debian\'s fortunes '
                 f'(tools/main/charlm.py), same initial weights and batches</text>')
    lines.append("</svg>")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    ok = True
    for name, a, b in runs:
        fa, fb = a["eval"][-1]["loss"], b["eval"][-1]["loss"]
        rel = abs(fa - fb) / fb
        agree = rel <= args.tolerance
        ok = ok and agree
        print(f"{name}: held-out loss per character, Tofu {fa:.4f} against PyTorch {fb:.4f} "
              f"({100 * rel:.2f}% apart, tolerance {100 * args.tolerance:.0f}%): "
              f"{'AGREE' if agree else 'DIFFER'}; training loss of the first {n} steps "
              f"{windows(a['loss'], n)[0]:.4f} and {windows(b['loss'], n)[0]:.4f}, of the last "
              f"{windows(a['loss'], n)[-1]:.4f} and {windows(b['loss'], n)[-1]:.4f}")
    print(f"plot: {args.out}")
    if not ok:
        sys.exit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data")
    d.add_argument("out")
    d.add_argument("--fortunes", default="/usr/share/games/fortunes")
    d.add_argument("--seq", type=int, default=64)
    d.add_argument("--held-out", type=float, default=0.1)
    d.add_argument("--held-out-max", type=int, default=1024)
    e = sub.add_parser("export")
    e.add_argument("out")
    e.add_argument("--vocab", type=int, help="the vocabulary's size")
    e.add_argument("--data", help="a directory `data` wrote: the vocabulary of its vocab.json")
    e.add_argument("--seed", type=int, default=1)
    shape_args(e)
    t = sub.add_parser("train")
    t.add_argument("--onnx", required=True)
    t.add_argument("--data", required=True)
    t.add_argument("--steps", type=int, default=300)
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--eval-every", type=int, default=100)
    t.add_argument("--log-every", type=int, default=50)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--bf16", action="store_true")
    t.add_argument("--json", required=True)
    g = sub.add_parser("plot")
    g.add_argument("out")
    g.add_argument("pairs", nargs="+")
    g.add_argument("--window", type=int, default=20)
    g.add_argument("--tolerance", type=float, default=0.02)
    args = p.parse_args()
    {"data": data, "export": export, "train": train, "plot": plot}[args.cmd](args)


if __name__ == "__main__":
    main()
