#!/usr/bin/env bash
# The GPU check, run on a machine with an NVIDIA GPU (the device tool's), in the repository
# root, with the bundle that tools/gpu_bundle.sh made here: in one call, the GPU tests, the
# verified steps (the MLP, a small WResNet-50, a small GPT, the LSTM and resnet18 from
# tests/onnx at k = 1, 2, 4, 8 virtual workers, each against the unpartitioned step, in
# float32 and in bf16), and the benchmark (WResNet-50-2 224x224 batch 32, GPT-12-768-12-1024
# batch 8, RNN-4-2K batch 128: the median step at k = 1 against PyTorch eager on the same
# GPU, float32 and bf16 against autocast bf16, and at k = 2, 4, 8 virtual workers, with each
# worker's arena). Each part prints a markdown table; logs and JSON go to gpu-results/ (and,
# where $OUT is set, as $OUT/gpu-results.tgz). Exits non-zero when a test or a verification
# fails.
#
#   tools/gpu_check.sh [--bundle DIR] [--only tests|verify|bench] [--steps N]
#                      [--models 'MODEL:BATCH ...' (the benchmark's, default the three above)]
#                      [--workers 'K ...' (the worker counts, default '1 2 4 8')]
#                      [--precisions 'fp32 bf16' (default both)]
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=gpu-bundle
only=""
steps=10
models="wresnet-50-2:32 gpt-12-768-12-1024:8 rnn-4-2048:128"
workers="1 2 4 8"
precisions="fp32 bf16"
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle="$2"; shift ;;
    --only) only="$2"; shift ;;
    --steps) steps="$2"; shift ;;
    --models) models="$2"; shift ;;
    --workers) workers="$2"; shift ;;
    --precisions) precisions="$2"; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
results="$PWD/gpu-results"
mkdir -p "$results"
trap '[ -n "${OUT:-}" ] && tar czf "$OUT/gpu-results.tgz" -C "$results/.." "$(basename "$results")"' EXIT
[ -x "$bundle/tofu-run-cuda" ] || { echo "gpu_check.sh: no $bundle/tofu-run-cuda: run tools/gpu_bundle.sh first" >&2; exit 2; }

# The CUDA libraries: the toolkit's, and the NVIDIA wheels of the python that has torch.
libdirs="$bundle"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && libdirs="$libdirs:$d"
done
for d in $(python3 - <<'PY' 2>/dev/null
import os, site
for sp in site.getsitepackages():
    root = os.path.join(sp, "nvidia")
    for path, _, files in os.walk(root):
        if any(f.startswith(("libcudnn", "libcublas", "libnvrtc", "libcudart")) for f in files):
            print(path)
PY
); do libdirs="$libdirs:$d"; done
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TOFU_KERNEL_CACHE="${TOFU_KERNEL_CACHE:-/tmp/tofu-kernels}"
run="$bundle/tofu-run-cuda"
status=0

echo "## Machine"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed "s/^/GPU: /"
else
  echo "GPU: none found (no nvidia-smi)"
fi
date -u +"date: %Y-%m-%d %H:%M UTC"
if ldd "$run" | grep "not found"; then
  echo "gpu_check.sh: libraries missing (above); LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >&2
  exit 1
fi

if [ -z "$only" ] || [ "$only" = tests ]; then
  echo; echo "## GPU tests"; echo
  echo "| test | result |"; echo "| --- | --- |"
  for t in device_kernels_test cuda_backend_test; do
    timeout 900 "$bundle/$t" >"$results/$t.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then r=passed; else r="FAILED ($rc)"; status=1; fi
    skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$results/$t.log")
    echo "| $t | $r, $(grep -c '^\[       OK \]' "$results/$t.log") ok, $skipped skipped |"
  done
  grep -h "^GPU " "$results/cuda_backend_test.log" | sed 's/^/    /'
  grep -h -B2 -A8 "Failure" "$results"/*_test.log | head -60
fi

# One tofu-run as JSON: $1 a label, then its arguments.
tofu_json() {
  local label="$1"; shift
  timeout 900 "$run" "$@" --format=json >"$results/$label.json" 2>"$results/$label.err"
}

if [ -z "$only" ] || [ "$only" = verify ]; then
  echo; echo "## Verified steps (the first step of k virtual workers against the unpartitioned step)"; echo
  echo "| model | precision | k | verify | largest relative difference | bytes moved = predicted | median step ms | largest arena |"
  echo "| --- | --- | ---: | --- | ---: | --- | ---: | ---: |"
  for precision in $precisions; do
    for m in "mlp:--model mlp" "wresnet:--model wresnet-50-1-i32-c8-k10" "gpt:--model gpt-2-32-4-16" \
             "rnn:--model rnn-2-256" "resnet18:--onnx tests/onnx/resnet18.onnx"; do
      name="${m%%:*}"; args="${m#*:}"
      for k in $workers; do
        label="verify-$name-$precision-k$k"
        # shellcheck disable=SC2086
        tofu_json "$label" $args --workers "$k" --steps 3 --verify --precision "$precision"
        python3 - "$results/$label.json" "$name" "$k" "$precision" 2>/dev/null <<'PY' || { status=1; echo "| $name | $precision | $k | FAILED: $(tail -c 300 "$results/$label.err" | tr '\n' ' ') | | | | |"; }
import json, sys
j = json.load(open(sys.argv[1]))
v = j["verify"]
print(f"| {sys.argv[2]} | {sys.argv[4]} | {sys.argv[3]} | {'PASSED' if v['passed'] else 'FAILED'} | "
      f"{v['largest_relative_difference']:.3g} | {j['bytes_moved'] == j['predicted_bytes']} | "
      f"{1e3 * j['median_step_seconds']:.2f} | {max(j['worker_peak_bytes']) / 2**20:.1f} MiB |")
sys.exit(0 if v["passed"] and j["bytes_moved"] == j["predicted_bytes"] else 1)
PY
      done
    done
  done
fi

if [ -z "$only" ] || [ "$only" = bench ]; then
  echo; echo "## Step time (median of $steps steps) against PyTorch eager on the same GPU (bf16: autocast)"; echo
  echo "| model | precision | batch | PyTorch ms | k=1 ms (/ PyTorch) | k=2 ms | k=4 ms | k=8 ms (/ k=1) | arena per worker k=1 / 2 / 4 / 8 |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
  for precision in $precisions; do
  for m in $models; do
    model="${m%%:*}"; b="${m#*:}"; tag="$model-$precision"
    PYTHONUNBUFFERED=1 timeout 900 python3 tools/oracles/torch_peer.py --model "$model" --batch "$b" \
      --device cuda --steps "$steps" --precision "$precision" --json >"$results/bench-$tag-torch.json" 2>"$results/bench-$tag-torch.err"
    for k in $workers; do
      tofu_json "bench-$tag-k$k" --model "$model" --batch "$b" --workers "$k" --steps "$steps" --data fixed --profile 5 --precision "$precision"
    done
    python3 - "$results" "$model" "$b" "$precision" <<'PY'
import json, os, sys
res, model, batch, precision = sys.argv[1:]
def load(p):
    try:
        return json.load(open(os.path.join(res, p)))
    except Exception:
        return None
torch = load(f"bench-{model}-{precision}-torch.json")
runs = {k: load(f"bench-{model}-{precision}-k{k}.json") for k in (1, 2, 4, 8)}
ms = lambda j: 1e3 * j["median_step_seconds"] if j else float("nan")
arena = lambda j: f"{max(j['worker_peak_bytes']) / 2**30:.2f}" if j else "-"
t = ms(torch)
one = ms(runs[1])
cells = [f"{ms(runs[k]):.1f}" for k in (2, 4)]
arenas = " / ".join(arena(runs[k]) for k in (1, 2, 4, 8))
print(f"| {model} | {precision} | {batch} | {t:.1f} | {one:.1f} ({one / t:.2f}x) | {cells[0]} | {cells[1]} | "
      f"{ms(runs[8]):.1f} ({ms(runs[8]) / one:.2f}x) | {arenas} GiB |")
PY
  done
  done
  echo
  echo "At k=1, the kernels' device time per step by op (the ten largest), beside the kernel"
  echo "report's roofline estimate and bound for an H100 (tofu-run --kernel-report; bf16:"
  echo "how many library calls run on tensor cores):"
  for precision in $precisions; do
  for m in $models; do
    mb="${m#*:}"; m="${m%%:*}"; tag="$m-$precision"
    tofu_json "bench-$tag-k1-report" --model "$m" --batch "$mb" --workers 1 --kernel-report --precision "$precision"
    python3 - "$results/bench-$tag-k1.json" "$tag" "$results/bench-$tag-k1-report.json" <<'PY' 2>/dev/null
import collections, json, sys
j = json.load(open(sys.argv[1]))
try:
    report = {e["node"]: e for e in json.load(open(sys.argv[3]))}
except Exception:
    report = {}
by = collections.defaultdict(lambda: [0.0, 0, 0.0, 0.0])
for nodes in j.get("profile", []):
    for n in nodes:
        b = by[(n["op"], n["kernel"])]
        b[0] += n["compute_seconds"]
        b[1] += 1
        e = report.get(n["node"])
        if e:
            b[2] += e["estimate_seconds"]
            b[3] += e["bound_seconds"]
total = sum(v[0] for v in by.values())
estimate = sum(v[2] for v in by.values())
cores = sum(1 for e in report.values() if e.get("tensor_cores"))
library = sum(1 for e in report.values() if e.get("library"))
print(f"    {sys.argv[2]}: kernels {1e3 * total:.1f} ms measured, {1e3 * estimate:.1f} ms estimated; "
      f"{library} library calls, {cores} on tensor cores")
print("      measured ms | estimate ms | bound ms | launches | op (how)")
for (op, kernel), (sec, count, est, bound) in sorted(by.items(), key=lambda kv: -kv[1][0])[:10]:
    print(f"      {1e3 * sec:11.2f} | {1e3 * est:11.2f} | {1e3 * bound:8.2f} | {count:8d} | {op} ({kernel})")
PY
  done
  done
  echo
  echo "Per worker at k=8, where the step goes (device time: kernels, copies, waiting):"
  for precision in $precisions; do
  for m in $models; do
    m="${m%%:*}-$precision"
    python3 - "$results/bench-$m-k8.json" "$m" <<'PY' 2>/dev/null
import json, sys
j = json.load(open(sys.argv[1]))
for w, nodes in enumerate(j.get("profile", [])):
    c = sum(n["compute_seconds"] for n in nodes); cp = sum(n["copy_seconds"] for n in nodes)
    wt = sum(n["wait_seconds"] for n in nodes)
    print(f"    {sys.argv[2]} worker {w}: kernels {1e3*c:.1f} ms, copies {1e3*cp:.1f} ms, idle {1e3*wt:.1f} ms")
PY
  done
  done
fi
exit $status
