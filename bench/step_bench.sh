#!/usr/bin/env bash
# The training-step benchmark: the median step time of tofu-run on the CPU engine at k = 1,
# 2 and 4 workers (threads; the machine's cores shared among them) against PyTorch eager on
# the same CPU (tools/torch_peer.py: the same models, shapes, batch, loss, SGD and thread
# count), and the kernels' compile time cold (an empty cache) and warm. Prints a markdown
# table with the ratios. Installs the peer's Debian packages (python3-torch,
# python3-torchvision, and OpenBLAS so torch's matrix products are not the reference BLAS).
#
#   bench/step_bench.sh [--steps N] [--models "mlp gpt-2-32-4-16 ..."]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=10
models="mlp wresnet-50-1-i32-c8-k10 gpt-2-32-4-16 rnn-2-256 resnet18"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift ;;
    --models) models="$2"; shift ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "step_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

tools/setup.sh
missing=()
for p in python3-torch python3-torchvision libopenblas0-pthread; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "step_bench: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

bazel build -c opt //tdlc:tofu-run >/dev/null 2>&1 || bazel build -c opt //tdlc:tofu-run
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp bazel-bin/tdlc/tofu-run "$tmp/tofu-run"

for m in $models; do
  case "$m" in
    resnet18) src="--onnx tests/onnx/resnet18.onnx" ;;
    *) src="--model $m" ;;
  esac
  echo "step_bench: $m" >&2
  export TOFU_KERNEL_CACHE="$tmp/cache-$m"
  common="$src --batch 2 --lr 0.01 --steps $steps --format=json"
  "$tmp/tofu-run" $common --workers 1 >"$tmp/$m.cold.json"   # compiles into an empty cache
  for k in 1 2 4; do
    "$tmp/tofu-run" $common --workers "$k" >"$tmp/$m.k$k.json"
  done
  /usr/bin/python3 tools/torch_peer.py --model "$m" --batch 2 --threads "$(nproc)" \
    --steps $((steps + 2)) --json >"$tmp/$m.torch.json"
done

python3 - "$tmp" "$models" "$steps" <<'PY'
import json, os, sys
tmp, models, steps = sys.argv[1], sys.argv[2].split(), sys.argv[3]
load = lambda n: json.load(open(os.path.join(tmp, n)))
print(f"| model (batch 2) | PyTorch | tofu k=1 | k=1 / PyTorch | k=2 | k=2 / k=1 | k=4 | k=4 / k=1 "
      f"| compile cold | warm |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
blas = ""
for m in models:
    t = load(f"{m}.torch.json")
    k = {w: load(f"{m}.k{w}.json") for w in (1, 2, 4)}
    cold = load(f"{m}.cold.json")
    s = {w: k[w]["median_step_seconds"] for w in k}
    print(f"| {m} | {t['median_step_seconds']*1e3:.1f} ms | {s[1]*1e3:.1f} ms | "
          f"{s[1]/t['median_step_seconds']:.2f} | {s[2]*1e3:.1f} ms | {s[2]/s[1]:.2f} | "
          f"{s[4]*1e3:.1f} ms | {s[4]/s[1]:.2f} | {cold['compile_seconds']:.1f} s | "
          f"{k[1]['compile_seconds']:.2f} s |")
    blas = " ".join(os.path.basename(b) for b in t["blas"])
print(f"\nmedian of {steps} steps; PyTorch {t['torch']} with {t['threads']} threads, BLAS: {blas or 'none'}; "
      f"tofu: {os.cpu_count()} cores shared by the k workers")
PY
