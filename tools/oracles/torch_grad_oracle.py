#!/usr/bin/python3
"""PyTorch autograd as the oracle of Tofu's gradients, model by model.

  torch_grad_oracle.py prepare NAME DIR [--steps N] [--lr LR] [--seed S]
      Rebuilds the fixture NAME of tests/onnx (its builder in export_onnx_fixtures.py) with
      the ONNX file's initializers as its parameters, draws one batch (the example inputs'
      shapes: normal floats, or tokens in the embedding's range) and a loss target (class
      labels for a rank-2 output, else a normal target of the output's shape), and writes
      them to DIR as .npy arrays with the command line tofu-run trains on them (DIR/args).
      With --loss-output SPEC (tofu-run's: NAME[:WEIGHT],...), a model of several outputs
      gets a target for each output named, and trains on their losses' weighted sum.
      Then trains N steps of plain SGD in PyTorch (eval mode: dropout off, batch norm on
      its running statistics, as the exported graph computes) on that one batch, with the
      loss tofu-run adds (softmax cross-entropy, or the mean squared error: both means),
      and writes each step's loss to DIR/torch.json.

The losses after the first step depend on every gradient of the step before, so equal loss
curves check every grad clause the model uses against autograd. Runs under Debian's
/usr/bin/python3 (python3-torch 1.13, python3-torchvision, python3-onnx).
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The models are the fixture exporter's.
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))


def load_model(name):
    import onnx
    import onnx.numpy_helper
    import torch
    import export_onnx_fixtures as fx
    corpus = fx.corpus()
    family, build, examples, opts = corpus[name]
    path = os.path.join(fx.OUT, name + ".onnx")
    init = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    model = build()
    # The export's own randomisation first (its seed is the model's place in the corpus):
    # buffers that are not saved (a causal mask) are baked into the graph with those values.
    fx.randomize(model, 1000 + sorted(corpus).index(name))
    state = model.state_dict()
    missing = [k for k in state if k not in init and state[k].is_floating_point()]
    if missing or not init:
        sys.exit(f"torch_grad_oracle.py: {path}: no initializer for {', '.join(missing) or 'any'} "
                 "parameter (the export folded or renamed it)")
    for k in state:
        if k in init:
            state[k] = torch.from_numpy(np.array(init[k]))
    model.load_state_dict(state)
    # The rebuilt model must reproduce the outputs PyTorch recorded at export.
    ref_path = os.path.join(fx.OUT, name + ".ref.json")
    if not os.path.exists(ref_path):
        sys.exit(f"torch_grad_oracle.py: {name} has no {ref_path} to check the rebuilt model by")
    with open(ref_path) as f:
        ref = json.load(f)
    ins = [torch.tensor(v["values"]).reshape(v["shape"]).to(ex.dtype)
           for v, ex in zip(ref["inputs"].values(), examples)]
    model.eval()
    with torch.no_grad():
        got = model(*ins)
    for out, (key, v) in zip(got if isinstance(got, tuple) else (got,), ref["outputs"].items()):
        want = torch.tensor(v["values"]).reshape(out.shape)
        gap = float((out - want).abs().max())
        if gap > 1e-5 * max(1.0, float(want.abs().max())):
            sys.exit(f"torch_grad_oracle.py: the rebuilt {name} differs from {ref_path} at "
                     f"{key} by {gap}: its weights are not the file's")
    return model, examples, path


def loss_terms(spec, names):
    """tofu-run's --loss-output: NAME[:WEIGHT],... (the first output when empty)."""
    if not spec:
        return [(names[0], 1.0)]
    terms = []
    for item in spec.split(","):
        name, _, weight = item.partition(":")
        terms.append((name, float(weight) if weight else 1.0))
    return terms


def prepare(args):
    import onnx
    import torch
    torch.manual_seed(args.seed)
    model, examples, path = load_model(args.name)
    graph = onnx.load(path).graph
    inputs = [i.name for i in graph.input][:len(examples)]
    rng = np.random.default_rng(args.seed)
    arrays = {}
    for name, ex in zip(inputs, examples):
        if ex.dtype in (torch.int64, torch.int32):
            vocab = int(ex.max()) + 1
            arrays[name] = rng.integers(0, vocab, ex.shape).astype(np.int64)
        else:
            arrays[name] = rng.standard_normal(ex.shape).astype(np.float32)
    model.eval()
    with torch.no_grad():
        outs = model(*[torch.from_numpy(arrays[n]) for n in inputs])
    names = getattr(model, "output_names", ["output"])
    outs = dict(zip(names, outs if isinstance(outs, tuple) else (outs,)))
    # Each term's target, named as tofu-run names the input it adds: 'labels' for a rank-2
    # output (class labels, cross-entropy), else 'target' (the mean squared error); the
    # second of a kind after its output ('mel_post_target').
    losses_of = []
    for out_name, weight in loss_terms(args.loss_output, names):
        out = outs[out_name]
        if out.dim() == 2:
            target = "labels" if "labels" not in arrays else out_name + "_labels"
            arrays[target] = rng.integers(0, out.shape[1], out.shape[0]).astype(np.int64)
            fn = torch.nn.functional.cross_entropy
        else:
            target = "target" if "target" not in arrays else out_name + "_target"
            arrays[target] = rng.standard_normal(tuple(out.shape)).astype(np.float32)
            fn = torch.nn.functional.mse_loss
        losses_of.append((names.index(out_name), target, weight, fn))
    os.makedirs(args.dir, exist_ok=True)
    for name, a in arrays.items():
        np.save(os.path.join(args.dir, name + ".npy"), a)
    data = ",".join(f"{n}={os.path.join(args.dir, n + '.npy')}" for n in arrays)
    feed = ",".join(f"{n}={n}" for n in arrays)
    with open(os.path.join(args.dir, "args"), "w") as f:
        f.write(" ".join(["--onnx", path, "--batch", str(examples[0].shape[0]),
                          "--data-inputs", str(len(inputs)), "--data", data, "--feed", feed,
                          "--optimizer", "sgd", "--lr", str(args.lr), "--steps",
                          str(args.steps)] +
                         (["--loss-output", args.loss_output] if args.loss_output else [])) + "\n")
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    x = [torch.from_numpy(arrays[n]) for n in inputs]
    losses = []
    for _ in range(args.steps):
        opt.zero_grad()
        y = model(*x)
        y = y if isinstance(y, tuple) else (y,)
        loss = sum(w * fn(y[k], torch.from_numpy(arrays[t])) for k, t, w, fn in losses_of)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    with open(os.path.join(args.dir, "torch.json"), "w") as f:
        json.dump({"model": args.name, "loss": losses}, f)
    print(f"{args.name}: PyTorch losses {losses[0]:.6f} -> {losses[-1]:.6f} over {args.steps} steps")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("prepare")
    q.add_argument("name")
    q.add_argument("dir")
    q.add_argument("--steps", type=int, default=5)
    q.add_argument("--lr", type=float, default=0.1)
    q.add_argument("--seed", type=int, default=5)
    q.add_argument("--loss-output", default="",
                   help="tofu-run's --loss-output: train on the weighted sum of these outputs' "
                        "losses (NAME[:WEIGHT],...)")
    args = p.parse_args()
    prepare(args)


if __name__ == "__main__":
    main()
