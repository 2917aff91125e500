#!/usr/bin/env bash
# The main job: build tdlc, tofu-plan and tofu-run, check and verify (by execution: strategies and
# gradients) every op of the operator library, then plan the paper's two large models
# (WResNet-152-10 and RNN-10-8K training steps on 8 workers) and print the plans'
# summaries; the full plans (every tensor's cut, every op's strategy per step) and an SVG
# of WResNet's tiles are written to out/. Then a small WResNet-50's training step runs
# partitioned on 4 workers and is checked against the unpartitioned step (tofu-run
# --verify). Then torchvision's resnet18 (from ONNX) trains partitioned on 2 workers for 10
# steps on one fixed batch (it memorises it: 1000 classes and batch 2 learn nothing visible
# from a teacher in 10 steps) and is saved to out/resnet18/model.safetensors, and the 25M-parameter MLP trains on
# 2 workers for 50 steps, on the CPU engine (oneDNN + generated kernels, float32 arenas), on
# a fresh synthetic batch every step labelled by a fixed random teacher: the loss per step
# (and its mean over the first and the last ten steps), the median step time, every
# worker's peak memory, and the first step checked against the unpartitioned one.
# Finally the library's statistics.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
if ! bazel build //tdlc //tdlc:tofu-plan //tdlc:tofu-run >/tmp/tofu-main-build.log 2>&1; then
  tail -30 /tmp/tofu-main-build.log
  exit 1
fi
tdlc="$(bazel info bazel-bin 2>/dev/null)/tdlc/tdlc"
files=$(find tests/tdl/good ops -name '*.tdl' | sort)
"$tdlc" --check $files
echo "tdlc --check: $(echo "$files" | wc -l) files OK"
for f in $files; do "$tdlc" --verify "$f"; done | grep -E '^verify:' \
  | awk '{p += $2; f += $4} END {printf "tdlc --verify: %d checks passed (strategies and gradients), %d failed\n", p, f; exit f > 0}'
plan="$(bazel info bazel-bin 2>/dev/null)/tdlc/tofu-plan"
mkdir -p out
echo
echo "== tofu-plan --model wresnet-152-10 --batch 8 --train --workers 8"
"$plan" --model wresnet-152-10 --batch 8 --train --workers 8 --svg out/wresnet-152-10.svg \
  >out/wresnet-152-10.plan.txt
sed -n '/^| tensor /q;p' out/wresnet-152-10.plan.txt
echo "(the whole plan: out/wresnet-152-10.plan.txt; its tiles: out/wresnet-152-10.svg)"
echo "the last bottleneck block's convolutions:"
echo "| node | op | strategy per step | communication |"
echo "| --- | --- | --- | ---: |"
grep -E '^\| s4b3_conv[123] \|' out/wresnet-152-10.plan.txt || true
echo
echo "== tofu-plan --model rnn-10-8K --batch 512 --train --workers 8"
"$plan" --model rnn-10-8K --batch 512 --train --workers 8 >out/rnn-10-8K.plan.txt
sed -n '/^| tensor /q;p' out/rnn-10-8K.plan.txt
echo "(the whole plan: out/rnn-10-8K.plan.txt)"
echo
echo "== tofu-run --model wresnet-50-1-i32-c4-k10 --workers 4 --verify"
"$(bazel info bazel-bin 2>/dev/null)/tdlc/tofu-run" --model wresnet-50-1-i32-c4-k10 --workers 4 \
  --verify >out/tofu-run.txt
cat out/tofu-run.txt
echo
echo "== tofu-run --onnx tests/onnx/resnet18.onnx --workers 2 --steps 10 --lr 0.001 --data fixed --verify --save out/resnet18"
"$(bazel info bazel-bin 2>/dev/null)/tdlc/tofu-run" --onnx tests/onnx/resnet18.onnx --workers 2 \
  --steps 10 --lr 0.001 --data fixed --verify --save out/resnet18 | tee out/tofu-run-resnet18.txt
echo
# One process per worker: Open MPI starts them (and refuses root unless told it is meant).
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "== mpirun -np 2 tofu-run --backend mpi --model mlp --steps 50 --lr 0.01 --verify"
mpirun --oversubscribe --bind-to none -np 2 "$(bazel info bazel-bin 2>/dev/null)/tdlc/tofu-run" \
  --backend mpi --model mlp --steps 50 --lr 0.01 --verify | tee out/tofu-run-mlp.txt
echo
echo "== tdlc --stats ops"
"$tdlc" --stats ops
