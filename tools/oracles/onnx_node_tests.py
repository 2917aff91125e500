#!/usr/bin/python3
"""ONNX's backend node tests through `tofu-run --infer`.

Every test folder of ONNX's node tests (Debian's libonnx-testdata: one folder per test with
model.onnx and test_data_set_0/input_*.pb, output_*.pb) runs at each worker count given:
every graph input without an initializer is data (--data-inputs); tofu-run imports the
model (given the inputs' shapes and small values, which ops that need a constant take: a
Reshape's shape, a Slice's starts), partitions it, runs its forward graph on the test's
inputs and writes every output (a sequence input is given element by element, NAME[i]; an
optional holding a value as NAME[0]; an empty sequence or an optional holding nothing as
NAME[]; a sequence output comes back as NAME.0, NAME.1, ...;
an optional output as its value, or nothing); each output is compared with ONNX's expected one at the backend
runner's tolerances (rtol 1e-3, atol 1e-7; integers and booleans exactly). Each test is
sorted into
  passed          every output matches at every worker count (random outputs, a training-
                  mode Dropout's or Bernoulli's, obey their law instead: see dropout_law and
                  bernoulli_law);
  refused         tofu-run failed at the first worker count because the importer refuses
                  the model (`tofu-plan --onnx M --describe --input ...` then exits nonzero
                  with a message, no signal), grouped by reason;
  failed          it ran but an output differs, an output is missing, or it crashed (a
                  signal), hung (past --timeout) or exited otherwise.

  tools/oracles/onnx_node_tests.py --tofu-run PATH --tofu-plan PATH [--ops DIR] [--node-dir DIR] [--workers '1 2']
                           [--jobs N] [--timeout S] [--only SUBSTRING] [--sample N [--sample-offset I]]
                           [--thin K:N]
                           [--json FILE] [--known FILE] [--all-pass]

The runs go to --jobs `tofu-run --batch` processes (one line per run; tofu-run loads the
operator library once and forks each run from there, with its own timeout), not one
process per run: a run's own work is a few milliseconds, a process's start a quarter of a
second. Each test's inputs are written first, and its outputs judged after.

It prints the counts, the refusals by reason, every failure, and the seconds the runs took
(the slowest tests). With --known FILE (one
test name per line, then why it fails; # comments) it exits 1 when a test crashed or hung,
when a test not in FILE failed, or when a test in FILE no longer fails (the list must
shrink as fixes land); else 0. With --all-pass it exits 1 unless every test passed (a
folder of cases written for Tofu, such as tests/onnx_control, where a refusal is a failure
too). --sample N runs every N-th test only (by name order), from the I-th (--sample-offset,
modulo N); --thin K:N runs worker count K on every N-th of those only, from the same offset.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

DEFAULT_NODE_DIR = "/usr/share/libonnx-testdata/data/node"


def graph_inputs(model):
    """The model's data inputs (graph inputs that are not initializers), in order, each
    with whether it is a tensor (not a sequence, map or optional)."""
    inits = {i.name for i in model.graph.initializer}
    return [(i.name, i.type.HasField("tensor_type")) for i in model.graph.input
            if i.name not in inits]


def read_value(path, type_proto):
    """A test's .pb value, read as the model declares it (`type_proto`): a tensor as
    ("tensor", TensorProto), a sequence of tensors as ("sequence", [TensorProto, ...]), an
    optional as ("optional", one of those or None); None for anything else (a map, a
    sequence of sequences)."""
    with open(path, "rb") as f:
        data = f.read()
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        t = onnx.TensorProto()
        t.ParseFromString(data)
        return "tensor", t
    if kind == "sequence_type":
        p = onnx.SequenceProto()
        p.ParseFromString(data)
        if p.elem_type == onnx.SequenceProto.TENSOR or not p.sequence_values:
            return "sequence", list(p.tensor_values)
        return None
    if kind == "optional_type":
        p = onnx.OptionalProto()
        p.ParseFromString(data)
        if p.HasField("tensor_value"):
            return "optional", ("tensor", p.tensor_value)
        if p.HasField("sequence_value"):
            return "optional", ("sequence", list(p.sequence_value.tensor_values))
        return "optional", None
    return None


def pb_of(tensor, scratch, k):
    """A TensorProto written to a file of its own in `scratch` (input k's)."""
    path = os.path.join(scratch, f"input_{k}.pb")
    with open(path, "wb") as f:
        f.write(tensor.SerializeToString())
    return path


def given_inputs(model, data, scratch):
    """The --input items of a test's inputs (sequences element by element, NAME[i]; an
    optional's value under its name), or a reason the test cannot give them."""
    inits = {i.name for i in model.graph.initializer}
    given = []
    for k, v in enumerate(i for i in model.graph.input if i.name not in inits):
        pb = os.path.join(data, f"input_{k}.pb")
        if not os.path.exists(pb):
            continue
        if v.type.HasField("tensor_type"):
            given.append(f"{v.name}={pb}")
            continue
        value = read_value(pb, v.type)
        kind = v.type.WhichOneof("value")
        if kind == "optional_type" and value and value[0] == "optional":
            value = value[1]
            if value is None:  # an optional holding nothing
                given.append(f"{v.name}[]")
                continue
        if kind in ("sequence_type", "optional_type") and value and value[0] == "sequence":
            if not value[1]:
                given.append(f"{v.name}[]")
                continue
            for i, t in enumerate(value[1]):
                path = os.path.join(scratch, f"input_{k}_{i}.pb")
                with open(path, "wb") as f:
                    f.write(t.SerializeToString())
                given.append(f"{v.name}[{i}]={path}")
            continue
        if kind == "optional_type" and value and value[0] == "tensor":
            given.append(f"{v.name}[0]={pb_of(value[1], scratch, k)}")
            continue
        return None, f"graph input '{v.name}' is a {kind.replace('_type', '')} Tofu cannot take"
    return given, None


def from_bfloat16_bits(a):
    """uint16 bfloat16 bit patterns as float32 (numpy has no bfloat16)."""
    return (a.astype(np.uint32) << 16).view(np.float32)


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    a = numpy_helper.to_array(t)
    if t.data_type == onnx.TensorProto.BFLOAT16:  # numpy has no bfloat16: the bits as uint16
        a = from_bfloat16_bits(a)
    return a


def reason_of(message):
    """A refusal's reason without the parts that name one test (paths, names, numbers)."""
    line = message.strip().splitlines()[-1] if message.strip() else "no message"
    line = re.sub(r"^tofu-(run|plan): ", "", line)
    line = re.sub(r"^\S*model\.onnx: ", "", line)
    line = re.sub(r"^\S*/(input_\d+\.pb): ", r"\1: ", line)
    line = re.sub(r"^node '[^']*' ", "", line)
    line = re.sub(r"'[^']*'", "'…'", line)
    line = re.sub(r"\[[-0-9, ]*\]", "[…]", line)
    line = re.sub(r"-?\b\d+(\.\d+)?\b", "N", line)
    return line[:140]


def dropout_law(model, data):
    """What a test's random outputs must obey, or None when none are random. A Dropout in
    training mode with a ratio above 0 draws a random mask (ONNX's expected values come
    from numpy's generator, which no other runtime reproduces): its output y must be
    x * mask / (1 - ratio) with every mask element 0 or 1, the mask output (where there is
    one) that mask, and the fraction dropped within 5 standard deviations of the ratio."""
    nodes = [n for n in model.graph.node if n.op_type == "Dropout"]
    if len(nodes) != 1 or len(model.graph.node) != 1:
        return None
    n = nodes[0]
    names = [name for name, _ in graph_inputs(model)]
    def value(k):
        if len(n.input) <= k or not n.input[k]:
            return None
        return read_pb(os.path.join(data, f"input_{names.index(n.input[k])}.pb"))
    training = value(2)
    if training is None or not bool(training):
        return None
    ratio = value(1)
    ratio = float(ratio) if ratio is not None else 0.5
    if ratio == 0:
        return None
    return {"x": value(0).astype(np.float64), "ratio": ratio,
            "y": n.output[0], "mask": n.output[1] if len(n.output) > 1 else None}


def bernoulli_law(model, data):
    """What a Bernoulli test's output must obey, or None for any other test: ONNX Bernoulli
    of the graph's input (or its expansion, RandomUniformLike then Greater) draws each
    output 1 with the input's probability: every output is 0 or 1, 0 where the probability
    is 0 and 1 where it is 1, and the number of ones within 5 standard deviations of the
    probabilities' sum."""
    ops = [n.op_type for n in model.graph.node]
    if ops != ["Bernoulli"] and ops[:2] != ["RandomUniformLike", "Greater"]:
        return None
    return {"bernoulli": read_pb(os.path.join(data, "input_0.pb")).astype(np.float64),
            "y": model.graph.output[0].name}


def check_law(law, got):
    """None when the outputs `got` (by name) obey `law` (dropout_law or bernoulli_law), else
    what breaks it."""
    if "bernoulli" in law:
        p = law["bernoulli"]
        y = got[law["y"]].astype(np.float64)
        if y.shape != p.shape or not np.isin(y, (0, 1)).all():
            return "the output is not 0s and 1s of the input's shape"
        if (y[p == 0] != 0).any() or (y[p == 1] != 1).any():
            return "an output disagrees with a probability of 0 or 1"
        if abs(y.sum() - p.sum()) > 5 * np.sqrt((p * (1 - p)).sum()) + 1:
            return f"{int(y.sum())} ones; the probabilities sum to {p.sum():.2f}"
        return None
    x, ratio = law["x"], law["ratio"]
    y = got[law["y"]].astype(np.float64)
    scale = 1 / (1 - ratio)
    kept = np.isclose(y, x * scale, rtol=1e-6, atol=1e-7)
    dropped = y == 0
    if not (kept | dropped).all():
        at = tuple(np.argwhere(~(kept | dropped))[0])
        return f"y{list(at)} = {y[at]:.7g} is neither 0 nor x / (1 - ratio) = {x[at] * scale:.7g}"
    if law["mask"] is not None:
        mask = got[law["mask"]].astype(np.float64)
        if not np.isin(mask, (0, 1)).all():
            return "the mask holds values other than 0 and 1"
        if not np.isclose(y, x * mask * scale, rtol=1e-6, atol=1e-7).all():
            return "y is not x * mask / (1 - ratio)"
    n = x.size
    fraction = float(np.count_nonzero(~kept)) / n
    sd = (ratio * (1 - ratio) / n) ** 0.5
    if abs(fraction - ratio) > 5 * sd + 1.0 / n:
        return f"{fraction:.3f} of the elements dropped; the ratio is {ratio}"
    return None


def compare(expected, got):
    """None when `got` matches `expected` at ONNX's tolerances, else what differs."""
    if tuple(got.shape) != tuple(expected.shape):
        return f"shape {list(got.shape)}, expected {list(expected.shape)}"
    if expected.dtype.kind in "biu":
        e = expected.astype(np.float64)
        g = got.astype(np.float64)
        bad = np.nonzero(e != g)[0] if e.ndim == 1 else np.argwhere(e != g)
        if len(bad):
            at = tuple(bad[0]) if e.ndim != 1 else (bad[0],)
            return f"{len(bad)} of {e.size} integers differ (at {list(at)}: {g[at]} vs {e[at]})"
        return None
    e = expected.astype(np.float64)
    g = got.astype(np.float64)
    same_nan = np.isnan(e) & np.isnan(g)
    close = np.isclose(g, e, rtol=1e-3, atol=1e-7) | same_nan
    if close.all():
        return None
    bad = np.argwhere(~close)
    at = tuple(bad[0])
    return (f"{len(bad)} of {e.size} values differ (at {list(at)}: {g[at]:.7g} vs {e[at]:.7g})")


class Prepared:
    """One test ready to run: its runs (one per worker count) and what they must give."""

    def __init__(self, test, model_path, names, given, expected, counts, law, workers):
        self.test, self.model_path, self.names, self.given = test, model_path, names, given
        self.expected, self.counts, self.law, self.workers = expected, counts, law, workers
        self.outs = {}  # worker count -> output directory


def refusal(args, prep):
    """('refused', why) when the importer refuses the model, ('failed', why) when the import
    crashes or hangs, None when it imports (tofu-plan, given the same inputs)."""
    cmd = [args.tofu_plan, "--ops", args.ops, "--onnx", prep.model_path,
           "--data-inputs", str(len(prep.names)), "--describe"]
    if prep.given:  # the inputs' shapes and small values, as --infer gets them
        cmd += ["--input", ",".join(prep.given)]
    try:
        imp = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return "failed", f"the import hung (no result in {args.timeout} s)"
    if imp.returncode < 0 or imp.returncode >= 128:
        return "failed", f"the import crashed (exit {imp.returncode}): {imp.stderr.strip()[-300:]}"
    if imp.returncode != 0:
        return "refused", imp.stderr
    return None


def prepare(args, test, workers, scratch):
    """A test's Prepared runs, or its (status, detail) where it cannot run (its inputs or
    expected outputs are of kinds Tofu cannot take)."""
    folder = os.path.join(args.node_dir, test)
    model_path = os.path.join(folder, "model.onnx")
    data = os.path.join(folder, "test_data_set_0")
    try:
        model = onnx.load(model_path)
    except Exception as e:  # a model ONNX itself cannot load
        return "refused", f"onnx cannot load the model: {e}"
    names = [name for name, _ in graph_inputs(model)]
    outputs = [o.name for o in model.graph.output]
    os.makedirs(scratch)
    given, why = given_inputs(model, data, scratch)
    if why:
        return "refused", why
    prep = Prepared(test, model_path, names, given, {}, {}, None, workers)
    # Expected outputs by the name tofu-run writes each under: a tensor under its own, a
    # sequence's elements under NAME.0, NAME.1, ... (their count checked too), an optional's
    # value under its name (nothing for none).
    for i, name in enumerate(outputs):
        pb = os.path.join(data, f"output_{i}.pb")
        if not os.path.exists(pb):
            continue
        value = read_value(pb, model.graph.output[i].type)
        if value and value[0] == "optional":
            value = value[1]
            if value is None:
                prep.counts[name] = 0
                continue
        if value is None:
            return refusal(args, prep) or ("failed", f"imported, but expected output {i} is "
                                                     "neither a tensor, a sequence nor an optional")
        if value[0] == "sequence":
            prep.counts[name] = len(value[1])
            for j, t in enumerate(value[1]):
                prep.expected[f"{name}.{j}"] = numpy_helper.to_array(t)
            continue
        want = numpy_helper.to_array(value[1])
        if value[1].data_type == onnx.TensorProto.BFLOAT16:  # the bits as uint16
            want = from_bfloat16_bits(want)
        # A bfloat16 output stored as its uint16 bits (as ONNX 1.12's test files store them).
        elif (want.dtype == np.uint16 and
              model.graph.output[i].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16):
            want = from_bfloat16_bits(want)
        prep.expected[name] = want
    prep.law = dropout_law(model, data) or bernoulli_law(model, data)
    for k in workers:
        prep.outs[k] = os.path.join(scratch, f"out_k{k}")
    return prep


def run_line(args, prep, k):
    """The tofu-run --batch line of `prep`'s run at worker count k."""
    cmd = ["--ops", args.ops, "--onnx", prep.model_path, "--infer",
           "--data-inputs", str(len(prep.names)), "--workers", str(k),
           "--output-dir", prep.outs[k]]
    if prep.given:
        cmd += ["--input", ",".join(prep.given)]
    return {"args": cmd, "stdout": os.devnull, "stderr": prep.outs[k] + ".err",
            "timeout": args.timeout}


def judge(args, prep, results):
    """(status, detail) of a prepared test from its runs' results (by worker count: the
    batch's {"exit"|"signal"|"timeout": ...})."""
    for k in prep.workers:
        r = results.get(k)
        if r is None:
            return "failed", f"k={k}: the batch ended before this run (tofu-run --batch died)"
        try:
            with open(prep.outs[k] + ".err") as f:
                stderr = f.read()
        except OSError:
            stderr = ""
        if "timeout" in r:
            return "failed", f"k={k}: hung (no result in {args.timeout} s)"
        if "signal" in r:
            return "failed", f"k={k}: crashed (signal {r['signal']}): {stderr.strip()[-300:]}"
        if r["exit"] != 0:
            # tofu-run imports first: whether its failure is the importer's refusal is
            # asked of tofu-plan only now, so that a test that runs imports once per k.
            if r["exit"] >= 128:
                return "failed", f"k={k}: crashed (exit {r['exit']}): {stderr.strip()[-300:]}"
            return ((k == prep.workers[0] and refusal(args, prep)) or
                    ("failed", f"k={k}: exit {r['exit']}: {stderr.strip()[-300:]}"))
        out = prep.outs[k]
        got = {}
        written = os.listdir(out) if os.path.isdir(out) else []
        for name, count in prep.counts.items():
            mine = [f for f in written if f.startswith(re.sub(r"[/\\:]", "_", name) + ".")
                    and f.endswith(".npy")]
            if len(mine) != count:
                return "failed", (f"k={k}: output '{name}' has {len(mine)} elements; "
                                  f"expected {count}")
        for name, want in prep.expected.items():
            path = os.path.join(out, re.sub(r"[/\\:]", "_", name) + ".npy")
            if not os.path.exists(path):
                return "failed", f"k={k}: output '{name}' was not written"
            got[name] = np.load(path)
            why = None if prep.law else compare(want, got[name])
            if why:
                return "failed", f"k={k}: output '{name}': {why}"
        why = prep.law and check_law(prep.law, got)
        if why:
            return "failed", f"k={k}: random outputs: {why}"
    return "passed", "random outputs, checked by their law" if prep.law else ""


def run_batches(args, lines, scratch):
    """Runs `lines` ((key, batch line) pairs) in --jobs tofu-run --batch processes, the
    lines dealt out in turn; returns each key's result (see tofu-run's runBatch)."""
    jobs = max(1, min(args.jobs, len(lines)))
    results = {}

    def one(j):
        mine = lines[j::jobs]
        path = os.path.join(scratch, f"batch{j}.jsonl")
        with open(path, "w") as f:
            for _, line in mine:
                f.write(json.dumps(line) + "\n")
        # Each run has its own timeout; the batch as a whole gets all of theirs.
        try:
            p = subprocess.run([args.tofu_run, "--batch", path], capture_output=True, text=True,
                               timeout=args.timeout * len(mine) + 60)
            out = p.stdout
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        got = {}
        for text in out.splitlines():
            try:
                r = json.loads(text)
            except ValueError:
                continue
            if 1 <= r.get("line", 0) <= len(mine):
                got[mine[r["line"] - 1][0]] = r
        return got

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for got in pool.map(one, range(jobs)):
            results.update(got)
    return results


def workers_of(args, i):
    """The worker counts test number `i` (of those run) runs at: --workers, less each count
    --thin K:N names on all but every N-th test (from --sample-offset)."""
    return [k for k in args.workers
            if k not in args.thin or (i - args.sample_offset) % args.thin[k] == 0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tofu-run", required=True)
    ap.add_argument("--tofu-plan", required=True)
    ap.add_argument("--ops", default="ops")
    ap.add_argument("--node-dir", default=DEFAULT_NODE_DIR)
    ap.add_argument("--workers", default="1 2", help="worker counts, e.g. '1 2'")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--only", default="", help="only tests whose name contains this")
    ap.add_argument("--json", default="", help="write every test's status and detail here")
    ap.add_argument("--known", default="", help="the known failures (see above)")
    ap.add_argument("--sample", type=int, default=1, help="run every N-th test only")
    ap.add_argument("--sample-offset", type=int, default=0,
                    help="the first test --sample runs (modulo N): a sample that rotates")
    ap.add_argument("--thin", default="",
                    help="K:N[,K:N]: run worker count K on every N-th test only (from "
                         "--sample-offset); the others run at the other counts")
    ap.add_argument("--all-pass", action="store_true",
                    help="exit 1 unless every test passed (refusals included)")
    args = ap.parse_args()
    args.workers = [int(w) for w in args.workers.split()]
    args.thin = {int(k): max(1, int(n)) for k, n in
                 (item.split(":") for item in args.thin.split(",") if item)}
    if not os.path.isdir(args.node_dir):
        print(f"onnx_node_tests: no node tests at {args.node_dir} (install libonnx-testdata)",
              file=sys.stderr)
        return 2
    tests = sorted(t for t in os.listdir(args.node_dir)
                   if args.only in t and os.path.isdir(os.path.join(args.node_dir, t)))
    step = max(1, args.sample)
    tests = tests[args.sample_offset % step::step]
    # Every test prepared (its inputs written where they must be), then every run in
    # --jobs tofu-run --batch processes (one process each, not one per run: a run's own
    # work is a few milliseconds, a process's start a quarter of a second), then judged.
    results, seconds = {}, collections.Counter()
    with tempfile.TemporaryDirectory() as scratch:
        prepared, lines = {}, []
        for i, t in enumerate(tests):
            prep = prepare(args, t, workers_of(args, i), os.path.join(scratch, f"t{i}"))
            if isinstance(prep, Prepared):
                prepared[t] = prep
                lines += [((t, k), run_line(args, prep, k)) for k in prep.workers]
            else:
                results[t] = prep
        ran = run_batches(args, lines, scratch)
        for t, prep in prepared.items():
            mine = {k: ran[(t, k)] for k in prep.workers if (t, k) in ran}
            seconds[t] = sum(r.get("seconds", 0) for r in mine.values())
            results[t] = judge(args, prep, mine)
    counts = collections.Counter(s for s, _ in results.values())
    workers = " and ".join(str(k) + (f" (every {args.thin[k]}th test)" if k in args.thin else "")
                           for k in args.workers)
    print(f"ONNX node tests ({args.node_dir}), k = {workers}: {len(tests)} tests, "
          f"{counts['passed']} passed, {counts['refused']} refused by the importer, "
          f"{counts['failed']} failed\n")
    random = sorted(t for t, (s, d) in results.items() if s == "passed" and d)
    if random:
        print(f"Of the passed, {len(random)} have random outputs (training-mode Dropout and "
              f"Bernoulli: {', '.join(random)}); ONNX's expected values come from numpy's "
              "generator, so they are checked by their law: Dropout's y = x * mask / "
              "(1 - ratio) with mask 0 or 1 and the fraction dropped near the ratio; "
              "Bernoulli's 0s and 1s, as many ones as the probabilities make likely.\n")
    reasons = collections.Counter(reason_of(d) for s, d in results.values() if s == "refused")
    if reasons:
        print("| refused because | tests |\n| --- | ---: |")
        for r, n in reasons.most_common():
            print(f"| {r.replace('|', '/')} | {n} |")
        print()
    failed = sorted((t, d) for t, (s, d) in results.items() if s == "failed")
    if failed:
        print("| failed | why |\n| --- | --- |")
        for t, d in failed:
            print(f"| {t} | {d.replace('|', '/').replace(chr(10), ' ')} |")
        print()
    slowest = seconds.most_common(5)
    print(f"{sum(seconds.values()):.0f} s in tofu-run's runs; the slowest tests: " +
          ", ".join(f"{t} {s:.1f} s" for t, s in slowest) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({t: {"status": s, "detail": d, "seconds": round(seconds[t], 3)}
                       for t, (s, d) in sorted(results.items())}, f, indent=1)
    if args.all_pass and counts["passed"] != len(tests):
        print(f"onnx_node_tests: {len(tests) - counts['passed']} of {len(tests)} tests did not "
              "pass (--all-pass)", file=sys.stderr)
        return 1
    if not args.known:
        return 0
    known = {}
    with open(args.known) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, why = line.partition(" ")
                known[name] = why.strip()
    bad = 0
    for t, d in failed:
        if "crashed" in d or "hung" in d:
            print(f"onnx_node_tests: {t} crashed or hung: {d}", file=sys.stderr)
            bad += 1
        elif t not in known:
            print(f"onnx_node_tests: {t} fails and is not a known failure: {d}", file=sys.stderr)
            bad += 1
    # A known failure that ran at fewer worker counts (--thin) may fail at the others.
    everywhere = {t for i, t in enumerate(tests) if workers_of(args, i) == args.workers}
    for t in sorted(known):
        if t in results and results[t][0] != "failed" and t in everywhere:
            print(f"onnx_node_tests: {t} is listed as a known failure but {results[t][0]}: "
                  f"take it off {args.known}", file=sys.stderr)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
