#!/usr/bin/env bash
# The training-step benchmark: the median step time of tofu-run on the CPU engine at k = 1
# and 2 workers (threads; the machine's cores shared among them) against PyTorch eager on
# the same CPU (tools/oracles/torch_peer.py: the same models, shapes, batch, loss, SGD and thread
# count), at several batches, and how the step time grows with the batch beside how the
# step's work grows (tofu-run's step_iterations: the scheduled loops' iterations, the
# multiply-adds of products and convolutions). Prints markdown tables. Installs the peer's
# Debian packages (python3-torch, python3-torchvision, and OpenBLAS so torch's products
# do not go to the reference BLAS) and says which BLAS the peer loaded.
#
#   bench/step_bench.sh [--steps N] [--models "mlp rnn-2-256 ..."] [--batches "2 32 128"]
#                       [--skip "MODEL:BATCH ..."]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=6
models="mlp wresnet-50-1-i32-c8-k10 wresnet-50-1-i32-c16-k10 gpt-2-256-4-64 rnn-2-256 resnet18-train"
batches="2 32 128"
skip=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift ;;
    --models) models="$2"; shift ;;
    --batches) batches="$2"; shift ;;
    --skip) skip="$2"; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

bazel build -c opt //tofu_run:tofu-run >/dev/null 2>&1 || bazel build -c opt //tofu_run:tofu-run
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp bazel-bin/tofu_run/tofu-run "$tmp/tofu-run"
threads=$(nproc)

# torchvision's resnet18 in training mode, with a symbolic batch (bench/resnet18_train_onnx.py).
case " $models " in
  *" resnet18-train "*)
    /usr/bin/python3 bench/resnet18_train_onnx.py "$tmp/resnet18_train.onnx" 2>/dev/null
    ;;
esac

for m in $models; do
  case "$m" in
    resnet18-train) src="--onnx $tmp/resnet18_train.onnx" ;;
    resnet18) src="--onnx tests/onnx/resnet18.onnx" ;;
    *) src="--model $m" ;;
  esac
  export TOFU_KERNEL_CACHE="$tmp/cache-$m"
  for b in $batches; do
    case " $skip " in *" $m:$b "*) continue ;; esac
    echo "step_bench: $m batch $b" >&2
    common="$src --batch $b --lr 0.01 --steps $steps --format=json"
    "$tmp/tofu-run" $src --batch "$b" --workers 1 --steps 1 --format=json >/dev/null # compiles the kernels
    for k in 1 2; do
      "$tmp/tofu-run" $common --workers "$k" >"$tmp/$m.b$b.k$k.json"
    done
    /usr/bin/python3 tools/oracles/torch_peer.py --model "$m" --batch "$b" --threads "$threads" \
      --steps $((steps + 2)) --json >"$tmp/$m.b$b.torch.json"
  done
done

python3 - "$tmp" "$models" "$batches" "$steps" <<'PY'
import json, os, sys
tmp, models, batches, steps = sys.argv[1], sys.argv[2].split(), [int(b) for b in sys.argv[3].split()], sys.argv[4]
def load(n):
    p = os.path.join(tmp, n)
    return json.load(open(p)) if os.path.exists(p) else None
ms = lambda s: f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.1f} s"
print("| model | batch | PyTorch | tofu k=1 | k=1 / PyTorch | k=2 | k=2 / k=1 |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
blas, torchv = "", ""
rows = {}
for m in models:
    for b in batches:
        t, k1, k2 = load(f"{m}.b{b}.torch.json"), load(f"{m}.b{b}.k1.json"), load(f"{m}.b{b}.k2.json")
        if not (t and k1 and k2):
            continue
        tp, s1, s2 = t["median_step_seconds"], k1["median_step_seconds"], k2["median_step_seconds"]
        rows[(m, b)] = (tp, s1, k1["step_iterations"])
        print(f"| {m} | {b} | {ms(tp)} | {ms(s1)} | {s1 / tp:.2f} | {ms(s2)} | {s2 / s1:.2f} |")
        blas = " ".join(os.path.basename(x) for x in t["blas"]) or "none"
        torchv = t["torch"]
print()
print("| model | batches | tofu time ratio | PyTorch time ratio | work ratio |")
print("| --- | --- | ---: | ---: | ---: |")
for m in models:
    have = [b for b in batches if (m, b) in rows]
    for lo, hi in zip(have, have[1:]):
        (t0, s0, w0), (t1, s1, w1) = rows[(m, lo)], rows[(m, hi)]
        print(f"| {m} | {hi} / {lo} | {s1 / s0:.1f} | {t1 / t0:.1f} | {w1 / w0:.1f} |")
print(f"\nmedian of {steps} steps; PyTorch {torchv} eager, {os.cpu_count()} threads, BLAS: {blas}; "
      f"tofu: {os.cpu_count()} cores shared by the k workers; work = the scheduled loops' "
      f"iterations of the whole step (tofu-run's step_iterations)")
PY
