#!/usr/bin/env bash
# Tofu's gradients against PyTorch autograd, model by model: each small fixture of
# tests/onnx with its weights in the file (the ones with PyTorch's outputs recorded) is
# rebuilt in PyTorch from those weights (tools/torch_grad_oracle.py checks the rebuild
# against the recorded outputs), and both train 5 steps of SGD (lr 0.1) on one batch with
# the loss tofu-run adds. Tofu runs partitioned on 2 workers; every step's loss must agree
# within 1e-5 relative. A step's loss depends on every gradient of the steps before it, so
# this checks every grad clause these models use (attention, LayerNorm, GELU, embeddings,
# LSTM/GRU/RNN cells, 1-d convolutions and their transposes, pooling, softmax
# cross-entropy, MSE; scripted_control's Loop and If, unrolled and inlined at import, its
# time axis fixed by the data's samples; scripted_list's sequences, held by the importer)
# against autograd rather than against Tofu itself.
# small_cnn is left out: its export folded batch norm into the convolutions' weights, so
# PyTorch's model cannot be rebuilt from the file.
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
        gpt_block gru lstm lstm_bidirectional rnn_relu scripted_control scripted_list unet"
for m in $models; do
  i=$((i + 1))
  in_sample "$i" 2 || continue
  d="$tmp/$m"
  if ! $py tools/torch_grad_oracle.py prepare "$m" "$d" >"$tmp/py.txt" 2>&1; then
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
exit $fail
