#!/usr/bin/env bash
# Tofu's gradients against PyTorch autograd, model by model: each small fixture of
# tests/onnx with its weights in the file (the ones with PyTorch's outputs recorded) is
# rebuilt in PyTorch from those weights (tools/oracles/torch_grad_oracle.py checks the rebuild
# against the recorded outputs), and both train 5 steps of SGD (lr 0.1) on one batch with
# the loss tofu-run adds. Tofu runs partitioned on 2 workers; every step's loss must agree
# within 1e-5 relative. A step's loss depends on every gradient of the steps before it, so
# this checks every grad clause these models use (attention, LayerNorm, GELU, embeddings,
# LSTM/GRU/RNN cells, 1-d convolutions and their transposes, pooling, softmax
# cross-entropy, MSE; scripted_control's Loop and If, unrolled and inlined at import, its
# time axis fixed by the data's samples; scripted_list's sequences, held by the importer;
# streaming_rnnt's empty slices and memory, ceil-mode and padding-excluding 1-d average
# pools and its transducer joiner; three_outputs' weighted sum of three losses)
# against autograd rather than against Tofu itself.
# small_cnn is left out: its export folded batch norm into the convolutions' weights, so
# PyTorch's model cannot be rebuilt from the file. Then bf16 forward passes against PyTorch's
# autocast, bit for bit.
set -uo pipefail
run="$(realpath "$1")"
fail=0
tmp=$(mktemp -d /tmp/tofu-grad-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# One kernel cache for the whole run where tools/test.sh gives one (kernels compiled once).
export TOFU_KERNEL_CACHE="${TOFU_TEST_KERNEL_CACHE:-$tmp/kernels}"
source tests/cli_lib.sh
py=/usr/bin/python3
# Under AddressSanitizer, half the models, in turn with the commit (in_sample).
detect_asan "$run"
i=0
models="attention conv1d conv_transpose1d decoder_causal einsum_attention encoder_prenorm
        gpt_block gru lstm lstm_bidirectional rnn_relu scripted_control scripted_list unet
        streaming_rnnt three_outputs"
for m in $models; do
  i=$((i + 1))
  in_sample "$i" 2 || continue
  d="$tmp/$m"
  # three_outputs trains on the weighted sum of its three outputs' losses (--loss-output).
  extra=()
  [ "$m" = three_outputs ] && extra=(--loss-output "mel,mel_post,gate:0.1")
  if ! $py tools/oracles/torch_grad_oracle.py prepare "$m" "$d" "${extra[@]}" >"$tmp/py.txt" 2>&1; then
    echo "FAILED: torch_grad_oracle.py prepare $m" >&2; cat "$tmp/py.txt" >&2; fail=1; continue
  fi
  # shellcheck disable=SC2046
  if ! "$run" $(cat "$d/args") --workers 2 --format=json >"$d/tofu.json" 2>"$tmp/err.txt"; then
    echo "FAILED: tofu-run $(cat "$d/args")" >&2; cat "$tmp/err.txt" >&2; fail=1; continue
  fi
  $py - "$d/tofu.json" "$d/torch.json" "$m" <<'PY' || fail=1
import json, sys
a, b = (json.load(open(p))["loss"] for p in sys.argv[1:3])
assert len(a) == len(b) == 5, (len(a), len(b))
worst = max(abs(x - y) / max(1.0, abs(y)) for x, y in zip(a, b))
assert worst <= 1e-5, (sys.argv[3], "tofu", a, "pytorch", b)
assert a[-1] < a[0], (sys.argv[3], "the loss does not fall", a)
print(f"{sys.argv[3]}: 5 SGD steps agree with autograd within {worst:.1e} "
      f"(loss {b[0]:.5f} -> {b[-1]:.5f})")
PY
done

# bf16 against PyTorch's autocast, element by element: the forward pass of two CNNs (the
# conv1d fixture, and the main job's Fashion-MNIST CNN) and of an attention by einsums under
# --precision bf16 on 2 workers gives PyTorch's outputs under autocast's CUDA rules
# (tools/oracles/torch_autocast.py: products on bfloat16 operands accumulated in float32 and rounded
# once, as cuBLAS does) bit for bit. Products and convolutions with float32 accumulation,
# each bias added before the one rounding, max pooling and ReLU on bfloat16, the softmax in
# float32: every rounding where PyTorch's is. gpt_block and encoder_prenorm too: causal and
# plain attention, GELU MLPs between residual adds, layer norms (the export's five-op GELU
# joined into one op, which rounds once as nn.GELU does: 65% of gpt_block's outputs were
# equal without). nn.MultiheadAttention (attention) too, its q / sqrt(head_dim) computed as
# CUDA does (87.5% of its outputs were equal when the peer divided by sqrt(8) rounded to
# bfloat16, as PyTorch's CPU kernels do). The post-norm decoder (decoder_causal: its
# attention mask a float tensor, the exported baddbmm joined into one rounding; 0% equal
# without) ends in a float32 layer norm, whose summation order is PyTorch's own: its
# outputs are checked within 4 float32 ulps of the largest output (2^-21 of the outputs'
# scale; the layer norm's own rounding), 2^13 times finer than one bfloat16 rounding.
for m in conv1d fmnist_cnn einsum_attention gpt_block encoder_prenorm attention decoder_causal; do
  d="$tmp/bf16-$m"
  mkdir -p "$d"
  if ! $py - "$m" "$d" >"$tmp/py.txt" 2>&1 <<'PY'; then
import os, sys
import numpy as np
import torch
sys.path[:0] = ["tools/oracles", "tools/main"]
from torch_autocast import cuda_autocast_bf16
name, d = sys.argv[1:]
if name == "fmnist_cnn":
    import onnx, onnx.numpy_helper, fmnist
    path = "tests/onnx/fmnist_cnn.onnx"
    init = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    model = fmnist.build_model(False)
    state = model.state_dict()
    for k in state:
        state[k] = torch.from_numpy(np.array(init[k]))
    model.load_state_dict(state)
    names, shapes = ["image"], [(8, 1, 28, 28)]
else:
    import onnx, torch_grad_oracle
    model, examples, path = torch_grad_oracle.load_model(name)
    names = [i.name for i in onnx.load(path).graph.input][:len(examples)]
    shapes = [tuple(e.shape) for e in examples]
torch.manual_seed(11)
xs = [torch.randn(s) for s in shapes]
if name == "gpt_block":
    xs = [examples[0]]  # tokens
model.eval()
with cuda_autocast_bf16(model):  # grad mode: PyTorch's eval fast paths would bypass the rules
    out = model(*xs).float().detach().numpy()
np.save(os.path.join(d, "torch.npy"), out)
for n, x in zip(names, xs):
    np.save(os.path.join(d, n + ".npy"), x.numpy())
with open(os.path.join(d, "args"), "w") as f:
    f.write(" ".join(["--onnx", path, "--batch", str(shapes[0][0])] +
                     [f"--input {n}={os.path.join(d, n + '.npy')}" for n in names]))
PY
    echo "FAILED: PyTorch's bf16 forward of $m" >&2; cat "$tmp/py.txt" >&2; fail=1; continue
  fi
  # shellcheck disable=SC2046
  if ! "$run" $(cat "$d/args") --workers 2 --infer --precision bf16 --output-dir "$d/out" \
       >"$tmp/out.txt" 2>"$tmp/err.txt"; then
    echo "FAILED: tofu-run --infer --precision bf16 $m" >&2; cat "$tmp/err.txt" >&2; fail=1; continue
  fi
  $py - "$d" "$m" <<'PY' || fail=1
import glob, os, sys
import numpy as np
d, name = sys.argv[1:]
a = np.load(glob.glob(os.path.join(d, "out", "*.npy"))[0])
b = np.load(os.path.join(d, "torch.npy"))
assert a.shape == b.shape, (a.shape, b.shape)
same = float(np.mean(a == b))
if name == "decoder_causal":  # a float32 layer norm last: float32 ulps, not bfloat16 ones
    ulps = float(np.max(np.abs(a - b)) / np.spacing(np.float32(np.abs(b).max())))
    assert ulps <= 4, (name, "float32 ulps apart", ulps, "bit-equal", same)
    print(f"{name}: the bf16 forward pass is within {ulps:.0f} float32 ulps (of its largest "
          f"output) of PyTorch autocast's ({same:.1%} bit for bit, {a.size} outputs)")
    sys.exit(0)
assert same == 1.0, (name, "bit-equal", same, "largest difference", float(np.abs(a - b).max()))
print(f"{name}: the bf16 forward pass equals PyTorch autocast's bit for bit ({a.size} outputs)")
PY
done
exit $fail
