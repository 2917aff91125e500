#!/usr/bin/python3
"""Exports the ONNX fixtures and the model corpus of tests/onnx/ from Debian's torch 1.13 and
torchvision 0.14, without downloads. Models are exported without weights (export_params=False:
parameters and buffers become graph inputs after the data inputs), except the small ones
with a reference file, whose random parameters are the file's initializers.

Needs Debian's python3-torch and python3-torchvision (not needed by the build or the tests,
which use the committed files):  sudo apt-get install python3-torch python3-torchvision
Run from anywhere:                /usr/bin/python3 tools/export_onnx_fixtures.py [NAME ...]

Writes, for each model of the corpus, tests/onnx/NAME.onnx, and tests/onnx/corpus.json, the
manifest the tests read: each model's family, its data input count, whether it is a
training-mode export, whether tofu-run verifies it (the small ones), and whether a
reference file NAME.ref.json holds PyTorch's outputs for given inputs (the importer's
translation is then checked value by value, not only by shape).

Every parameter and buffer gets its own random values before export: torch's exporter
merges parameters of equal value into one input (so a batch norm's running mean could
become another layer's bias), which default initialisations (ones, zeros) trigger.
"""
import json
import os
import sys
from typing import List

import torch
import torchvision
from torch import nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "onnx")
OPSET = 17


def randomize(model, seed):
    """Distinct random values for every parameter and buffer (variances positive)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if not p.is_floating_point():
                continue
            fan = p[0].numel() if p.dim() > 1 else max(p.numel(), 1)
            if name.endswith("running_var"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            elif p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) / fan ** 0.5)
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


def export(model, examples, path, opset, input_names, training=False, params=False,
           script=False):
    dynamic = None
    if script:  # TorchScript keeps Python control flow; every input axis but the last is free
        model = torch.jit.script(model)
        dynamic = {name: {d: "%s_%d" % (name, d) for d in range(x.dim() - 1)}
                   for name, x in zip(input_names, examples)}
    if training:
        model.train()
        mode = torch.onnx.TrainingMode.TRAINING
    else:
        model.eval()
        mode = torch.onnx.TrainingMode.EVAL
    torch.onnx.export(model, tuple(examples), path, export_params=params, opset_version=opset,
                      input_names=input_names,
                      output_names=getattr(model, "output_names", ["output"]),
                      do_constant_folding=False, training=mode, dynamic_axes=dynamic)


# --- Small models written here --------------------------------------------------------------

class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return torch.softmax(self.net(x), dim=-1)


class SmallCnn(nn.Module):
    """A residual CNN: conv, batch norm, max pool, a skip connection, global pooling."""

    def __init__(self, dropout=0.0):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(2))
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                   nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(dropout), nn.Linear(8, 10))

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        return self.head(nn.functional.adaptive_avg_pool2d(x, 1))


class Recurrent(nn.Module):
    """nn.LSTM / nn.GRU / nn.RNN over a batch-first sequence, a linear head on every step."""

    def __init__(self, kind, layers, bidirectional, inputs=8, hidden=16, **kw):
        super().__init__()
        self.rnn = kind(inputs, hidden, num_layers=layers, batch_first=True,
                        bidirectional=bidirectional, **kw)
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), 4)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


class RecurrentStates(nn.Module):
    """nn.LSTM as PyTorch returns it: the sequence and the final hidden and cell states (a
    graph of three outputs; a training step picks one with --loss-output)."""
    output_names = ["y", "h", "c"]

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, num_layers=1, batch_first=True)

    def forward(self, x):
        y, (h, c) = self.rnn(x)
        return y, h, c


class ScriptedControl(nn.Module):
    """A recurrence written as a Python loop and a branch on the input's length, exported from
    TorchScript with dynamic batch and time axes: an ONNX Loop whose trip count is the input's
    time extent (Shape, Gather) and an If whose condition compares it (Greater), as scripted
    models export control flow. The import unrolls and inlines them once shapes are known."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 16)
        self.cell = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        h = torch.zeros(x.size(0), 16)
        for t in range(x.size(1)):
            h = torch.tanh(self.proj(x[:, t]) + self.cell(h))
        if x.size(1) > 3:
            h = h * 2.0
        else:
            h = h - 1.0
        return self.head(h)


class ScriptedList(nn.Module):
    """A recurrence that appends each step's state to a Python list, stacks it and splits it
    again, exported from TorchScript: a Loop carrying a sequence (SequenceEmpty,
    SequenceInsert), ConcatFromSequence, SplitToSequence and SequenceAt. The import unrolls
    the loop and holds the sequences as lists of tensors."""

    def __init__(self):
        super().__init__()
        self.cell = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        outs: List[torch.Tensor] = []
        h = x[:, 0]
        for t in range(x.size(1)):
            h = torch.tanh(self.cell(h) + x[:, t])
            outs.append(h)
        y = torch.stack(outs, 1)
        parts = torch.split(y, 2, dim=1)
        return self.head(parts[0].sum(1) + parts[-1].sum(1))


class Conv1dNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(4, 8, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
                                 nn.Conv1d(8, 8, 3, dilation=2, padding=2), nn.ReLU(),
                                 nn.AvgPool1d(2), nn.Flatten(), nn.Linear(8 * 8, 5))

    def forward(self, x):
        return self.net(x)


class UNet(nn.Module):
    """Down by a strided conv, up by ConvTranspose2d, a skip concatenation."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.dec = nn.Conv2d(16, 2, 3, padding=1)

    def forward(self, x):
        e = self.enc(x)
        u = self.up(self.down(e))
        return self.dec(torch.cat([e, u], dim=1))


class ConvTranspose1dNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1), nn.Tanh(),
                                 nn.Conv1d(6, 3, 3, padding=1))

    def forward(self, x):
        return self.net(x)


class GptBlock(nn.Module):
    """A pre-norm decoder-only block written out: causal attention by matmuls, a GELU MLP.
    With `buffer_mask`, the causal mask is a registered buffer applied by masked_fill (an
    Equal into a Where's condition, as nanoGPT writes it), with dropout on the attention and
    the MLP."""

    def __init__(self, d=32, heads=4, seq=8, vocab=50, buffer_mask=False, dropout=0.0):
        super().__init__()
        self.buffer_mask = buffer_mask
        if buffer_mask:
            self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))
        self.drop = nn.Dropout(dropout)
        self.heads, self.seq = heads, seq
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        self.ln1, self.ln2, self.lnf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.out = nn.Linear(d, vocab)

    def forward(self, tokens):
        b, s = tokens.shape
        x = self.tok(tokens) + self.pos
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        split = lambda t: t.reshape(b, s, self.heads, -1).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        att = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
        if self.buffer_mask:
            att = self.drop(torch.softmax(
                att.masked_fill(self.mask[:, :, :s, :s] == 0, float("-inf")), dim=-1))
        else:
            mask = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
            att = torch.softmax(att + mask, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, -1)
        x = x + self.proj(y)
        x = x + self.drop(self.mlp(self.ln2(x)))
        return self.out(self.lnf(x))


class EinsumAttention(nn.Module):
    """Attention written with torch.einsum (as MaxViT and many research models do)."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, d // self.heads).unbind(2)
        att = torch.softmax(torch.einsum("bihd,bjhd->bhij", q, k), dim=-1)
        return torch.einsum("bhij,bjhd->bihd", att, v).reshape(b, s, d)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, q, kv):
        return self.mha(q, kv, kv, need_weights=False)[0]


class Decoder(nn.Module):
    """nn.TransformerDecoder with a causal mask on its target."""

    def __init__(self, d=32, seq=6):
        super().__init__()
        layer = nn.TransformerDecoderLayer(d, 4, dim_feedforward=64, batch_first=True)
        self.dec = nn.TransformerDecoder(layer, num_layers=2)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq),
                             persistent=False)

    def forward(self, tgt, memory):
        return self.dec(tgt, memory, tgt_mask=self.mask)


def encoder(d, heads, ff, layers, dropout=0.1):
    layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=ff, batch_first=True,
                                       norm_first=True, activation="gelu", dropout=dropout)
    return nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)


def image(size, batch=2):
    return torch.randn(batch, 3, size, size)


def tv(name, **kw):
    return getattr(torchvision.models, name)(weights=None, **kw)


# --- The corpus --------------------------------------------------------------------------------
# name: (family, builder, example inputs, options). Options: 'verify' (tofu-run --verify at
# k = 2 and 4 in CI), 'ref' (PyTorch's outputs recorded), 'train' (a training-mode export),
# 'script' (exported from TorchScript, its control flow kept, its input axes dynamic).

def corpus():
    g = torch.Generator().manual_seed(7)
    rnd = lambda *s: torch.randn(*s, generator=g)
    tokens = torch.randint(0, 50, (2, 8), generator=g)
    return {
        # Small models: verified by tofu-run, most with PyTorch's values recorded.
        "small_cnn": ("cnn", lambda: SmallCnn(), [rnd(2, 3, 8, 8)], {"verify", "ref"}),
        "small_cnn_train": ("cnn", lambda: SmallCnn(dropout=0.25), [rnd(2, 3, 8, 8)],
                            {"verify", "train"}),
        "conv1d": ("cnn", Conv1dNet, [rnd(2, 4, 32)], {"verify", "ref"}),
        "unet": ("cnn", UNet, [rnd(2, 3, 8, 8)], {"verify", "ref"}),
        "conv_transpose1d": ("cnn", ConvTranspose1dNet, [rnd(2, 4, 10)], {"verify", "ref"}),
        "lstm": ("rnn", lambda: Recurrent(nn.LSTM, 2, False), [rnd(2, 5, 8)], {"verify", "ref"}),
        "lstm_bidirectional": ("rnn", lambda: Recurrent(nn.LSTM, 1, True), [rnd(2, 4, 8)],
                               {"ref"}),
        "gru": ("rnn", lambda: Recurrent(nn.GRU, 1, True), [rnd(2, 5, 8)], {"verify", "ref"}),
        "rnn_relu": ("rnn", lambda: Recurrent(nn.RNN, 2, False, nonlinearity="relu"),
                     [rnd(2, 5, 8)], {"verify", "ref"}),
        "attention": ("transformer", Attention, [rnd(2, 6, 32), rnd(2, 5, 32)],
                      {"verify", "ref"}),
        "einsum_attention": ("transformer", EinsumAttention, [rnd(2, 6, 16)], {"verify", "ref"}),
        "gpt_block": ("transformer", GptBlock, [tokens], {"verify", "ref"}),
        "gpt_where_train": ("transformer", lambda: GptBlock(buffer_mask=True, dropout=0.1),
                            [tokens], {"verify", "train"}),
        "encoder_prenorm": ("transformer", lambda: encoder(32, 4, 64, 2), [rnd(2, 6, 32)],
                            {"verify", "ref"}),
        "encoder_prenorm_train": ("transformer", lambda: encoder(32, 4, 64, 1), [rnd(2, 6, 32)],
                                  {"verify", "train"}),
        "decoder_causal": ("transformer", Decoder, [rnd(2, 6, 32), rnd(2, 5, 32)], {"ref"}),
        # torchvision classifiers, 10 classes, small images (graph only).
        "resnet50": ("cnn", lambda: tv("resnet50", num_classes=10), [image(64)], set()),
        "resnet18_train": ("cnn", lambda: tv("resnet18", num_classes=10), [image(32)], {"train"}),
        "resnext50_32x4d": ("cnn", lambda: tv("resnext50_32x4d", num_classes=10), [image(64)], set()),
        "wide_resnet50_2_small": ("cnn", lambda: tv("wide_resnet50_2", num_classes=10), [image(64)],
                                  set()),
        "densenet121": ("cnn", lambda: tv("densenet121", num_classes=10), [image(64)], set()),
        "mobilenet_v2": ("cnn", lambda: tv("mobilenet_v2", num_classes=10), [image(64)], set()),
        "mobilenet_v2_train": ("cnn", lambda: tv("mobilenet_v2", num_classes=10), [image(32)],
                               {"train"}),
        "mobilenet_v3_small": ("cnn", lambda: tv("mobilenet_v3_small", num_classes=10),
                               [image(64)], set()),
        "efficientnet_b0": ("cnn", lambda: tv("efficientnet_b0", num_classes=10), [image(64)], set()),
        "regnet_y_400mf": ("cnn", lambda: tv("regnet_y_400mf", num_classes=10), [image(64)], set()),
        "shufflenet_v2_x0_5": ("cnn", lambda: tv("shufflenet_v2_x0_5", num_classes=10),
                               [image(64)], set()),
        "squeezenet1_0": ("cnn", lambda: tv("squeezenet1_0", num_classes=10), [image(64)], set()),
        "googlenet": ("cnn", lambda: tv("googlenet", num_classes=10, aux_logits=False,
                                        init_weights=False), [image(64)], set()),
        "inception_v3": ("cnn", lambda: tv("inception_v3", num_classes=10, aux_logits=False,
                                           init_weights=False), [image(96)], set()),
        "vgg11_bn": ("cnn", lambda: tv("vgg11_bn", num_classes=10), [image(224, 1)], set()),
        "alexnet": ("cnn", lambda: tv("alexnet", num_classes=10), [image(224, 1)], set()),
        "convnext_tiny": ("cnn", lambda: tv("convnext_tiny", num_classes=10), [image(64)], set()),
        "swin_t": ("transformer", lambda: tv("swin_t", num_classes=10), [image(64)], set()),
        "vit": ("transformer", lambda: torchvision.models.VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128,
            num_classes=10), [image(32)], set()),
        "maxvit": ("transformer", lambda: torchvision.models.MaxVit(
            input_size=(64, 64), stem_channels=16, partition_size=2, block_channels=[32, 64],
            block_layers=[1, 1], head_dim=16, stochastic_depth_prob=0.0, num_classes=10),
                   [image(64)], set()),
        "lstm_large": ("rnn", lambda: Recurrent(nn.LSTM, 2, False, inputs=64, hidden=256),
                       [rnd(4, 20, 64)], set()),
        # Last, so that the examples drawn before them stay as they were.
        "lstm_states": ("rnn", RecurrentStates, [rnd(2, 5, 8)], {"verify"}),
        "scripted_control": ("rnn", ScriptedControl, [rnd(2, 5, 8)], {"verify", "ref", "script"}),
        "scripted_list": ("rnn", ScriptedList, [rnd(2, 5, 8)], {"verify", "ref", "script"}),
        # Training mode at 64x64 (issue 56): its last batch norms normalise 8 values per
        # channel, and its step is chaotic in float32 all the same (a ReLU6 input within
        # rounding of 0 or 6 passes or stops a gradient): tests/tofu_run_cli_test.sh.
        "mobilenet_v2_train64": ("cnn", lambda: tv("mobilenet_v2", num_classes=10), [image(64)],
                                 {"train"}),
    }


# Models added after the corpus's seeds were fixed: they take the seeds after the others'.
ADDED_LATER = ["mobilenet_v2_train64"]


def reference(model, examples, onnx_path, path):
    """PyTorch's outputs for the data inputs (the parameters are the file's initializers)."""
    import onnx
    m = onnx.load(onnx_path)
    names = [i.name for i in m.graph.input][:len(examples)]
    with torch.no_grad():
        out = model(*examples)
    enc = lambda t: {"shape": list(t.shape), "values": [round(float(v), 7) for v in t.flatten()]}
    data = {"about": "PyTorch's output of %s for these inputs, with the parameters that file "
                     "holds (tools/export_onnx_fixtures.py)" % os.path.basename(onnx_path),
            "inputs": {k: enc(v) for k, v in zip(names, examples)},
            "outputs": {"output": enc(out)}}
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))


def legacy():
    """The four fixtures the importer's unit tests were written against (opset 13)."""
    image224 = torch.randn(1, 3, 224, 224)
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
    for name, model, example in [
            ("resnet18", torchvision.models.resnet18(), image224),
            ("wide_resnet50_2", torchvision.models.wide_resnet50_2(), image224),
            ("mlp", Mlp(), torch.randn(4, 64)),
            ("transformer", nn.TransformerEncoder(layer, num_layers=2), torch.randn(2, 16, 64))]:
        path = os.path.join(OUT, name + ".onnx")
        export(model, [example], path, 13, ["input"])
        print("%s: %d bytes" % (path, os.path.getsize(path)))


def main():
    torch.manual_seed(0)
    wanted = set(sys.argv[1:])
    if not wanted or "legacy" in wanted:
        legacy()
    manifest_path = os.path.join(OUT, "corpus.json")
    manifest, failed = {}, []
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f).get("models", {})
    models = corpus()
    # Each model's seed is its place in name order; models added later come after, so
    # that the earlier ones keep their seeds (and their recorded values).
    order = sorted(n for n in models if n not in ADDED_LATER) + ADDED_LATER
    for seed, name in enumerate(order):
        family, build, examples, opts = models[name]
        if wanted and name not in wanted:
            continue
        model = build()
        randomize(model, 1000 + seed)
        path = os.path.join(OUT, name + ".onnx")
        inputs = ["input"] if len(examples) == 1 else ["input%d" % k for k in range(len(examples))]
        try:
            export(model, examples, path, OPSET, inputs, training="train" in opts,
                   params="ref" in opts, script="script" in opts)
        except Exception as e:  # the others still export; the run fails at the end
            print("%s: not exported: %s" % (name, str(e).splitlines()[0]), file=sys.stderr)
            failed.append(name)
            continue
        entry = {"family": family, "data_inputs": len(examples), "training_mode": "train" in opts,
                 "verify": "verify" in opts, "reference": "ref" in opts}
        if "ref" in opts:
            model.eval()
            reference(model, examples, path, os.path.join(OUT, name + ".ref.json"))
        # Hand-written notes (a 'known_failure' the corpus test expects) stay.
        manifest[name] = dict(manifest.get(name, {}), **entry)
        print("%s: %d bytes" % (path, os.path.getsize(path)))
    with open(manifest_path, "w") as f:
        json.dump({"about": "The ONNX corpus (tools/export_onnx_fixtures.py): each model's "
                            "family, data inputs, export mode, whether tofu-run verifies it in "
                            "CI and whether NAME.ref.json holds PyTorch's outputs",
                   "models": dict(sorted(manifest.items()))}, f, indent=1)
        f.write("\n")
    if failed:
        raise SystemExit("not exported: " + ", ".join(failed))


if __name__ == "__main__":
    main()
