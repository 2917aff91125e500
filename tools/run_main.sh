#!/usr/bin/env bash
# The main job: build tdlc, tofu-plan and tofu-run, check and verify (by execution: strategies and
# gradients) every op of the operator library, then plan the paper's two large models
# (WResNet-152-10 and RNN-10-8K training steps on 8 workers) and print the plans'
# summaries; the full plans (every tensor's cut, every op's strategy per step) and an SVG
# of WResNet's tiles are written to out/. Then a small WResNet-50's training step runs
# partitioned on 4 workers and is checked against the unpartitioned step (tofu-run
# --verify). Then torchvision's resnet18 (from ONNX, its initializers the initial weights)
# trains partitioned on 2 workers for 10 steps on one fixed batch (it memorises it) and is
# saved to out/resnet18/model.safetensors. Then a real model learns from real data: a small
# CNN defined and exported by tools/main/fmnist.py trains on Fashion-MNIST (Debian's
# dataset-fashion-mnist) for 2 epochs partitioned on 2 workers that are 2 MPI processes
# (SGD with momentum, batch 64), evaluated on the test split after each epoch; PyTorch then
# trains the same model from the same initial weights on the same batches, and the two loss
# curves are drawn over each other (out/fmnist/loss.svg). PyTorch runs 3 times more, every
# gradient element off by up to one float32 step at every step: how far rounding alone moves
# it. Tofu's first 15 losses and its final test accuracy are judged against that spread
# (fmnist.py plot --spread prints how each tolerance is derived). Then a language model
# learns real text: a character-level GPT exported by tools/main/charlm.py trains on the text of
# Debian's fortunes for 1000 steps on 2 workers, in fp32 and in bf16, each against PyTorch
# from the same weights and batches; the loss curves and held-out losses go in one SVG
# (out/charlm/loss.svg), and the final held-out losses must agree within 2%.
# Finally the library's statistics.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
if ! bazel build //tdlc //tofu_plan:tofu-plan //tofu_run:tofu-run >/tmp/tofu-main-build.log 2>&1; then
  tail -30 /tmp/tofu-main-build.log
  exit 1
fi
tdlc="$(bazel info bazel-bin 2>/dev/null)/tdlc/tdlc"
files=$(find tests/tdl/good ops -name '*.tdl' | sort)
"$tdlc" --check $files
echo "tdlc --check: $(echo "$files" | wc -l) files OK"
for f in $files; do "$tdlc" --verify "$f"; done | grep -E '^verify:' \
  | awk '{p += $2; f += $4} END {printf "tdlc --verify: %d checks passed (strategies and gradients), %d failed\n", p, f; exit f > 0}'
plan="$(bazel info bazel-bin 2>/dev/null)/tofu_plan/tofu-plan"
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
"$(bazel info bazel-bin 2>/dev/null)/tofu_run/tofu-run" --model wresnet-50-1-i32-c4-k10 --workers 4 \
  --verify >out/tofu-run.txt
cat out/tofu-run.txt
echo
echo "== tofu-run --onnx tests/onnx/resnet18.onnx --workers 2 --steps 10 --lr 0.001 --data fixed --verify --save out/resnet18"
"$(bazel info bazel-bin 2>/dev/null)/tofu_run/tofu-run" --onnx tests/onnx/resnet18.onnx --workers 2 \
  --steps 10 --lr 0.001 --data fixed --verify --save out/resnet18 | tee out/tofu-run-resnet18.txt
echo
# One process per worker: Open MPI starts them (and refuses root unless told it is meant).
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fmnist=/usr/share/datasets/fashion-mnist
mkdir -p out/fmnist
echo "== Fashion-MNIST: a CNN exported from PyTorch, trained on 2 MPI processes"
/usr/bin/python3 tools/main/fmnist.py export out/fmnist/cnn.onnx --seed 1
hyper=(--batch 64 --lr 0.02 --momentum 0.9 --seed 1 --normalize 0.2860,0.3530)
echo "mpirun -np 2 tofu-run --backend mpi --onnx out/fmnist/cnn.onnx --data $fmnist --eval test --epochs 2 --optimizer momentum ${hyper[*]}"
mpirun --oversubscribe --bind-to none -np 2 "$(bazel info bazel-bin 2>/dev/null)/tofu_run/tofu-run" \
  --backend mpi --onnx out/fmnist/cnn.onnx --data "$fmnist" --eval test --epochs 2 \
  --optimizer momentum "${hyper[@]}" --log-every 100 --metrics out/fmnist/tofu.json \
  | tee out/fmnist/tofu.txt
echo
echo "== the same in PyTorch (tools/main/fmnist.py train: same initial weights, batches and updates)"
/usr/bin/python3 tools/main/fmnist.py train --onnx out/fmnist/cnn.onnx --data "$fmnist" --epochs 2 \
  "${hyper[@]}" --log-every 100 --json out/fmnist/torch.json | tee out/fmnist/torch.txt
echo
echo "== PyTorch's own spread: the same run 3 times more, every gradient off by up to one float32 step at every step"
spread=()
for k in 1 2 3; do
  /usr/bin/python3 tools/main/fmnist.py train --onnx out/fmnist/cnn.onnx --data "$fmnist" --epochs 2 \
    "${hyper[@]}" --log-every 100000 --perturb $k --json out/fmnist/torch-perturb$k.json | grep '^eval' | tail -1 \
    | sed "s/^/perturbed run $k: /"
  spread+=(out/fmnist/torch-perturb$k.json)
done
echo
/usr/bin/python3 tools/main/fmnist.py plot out/fmnist/tofu.json out/fmnist/torch.json out/fmnist/loss.svg \
  --window 100 --spread "${spread[@]}" --steps 15
echo
# A language model on real text: a character-level GPT exported from PyTorch, trained in fp32
# and in bf16 on Debian's fortunes (held-out: the text's last 10%), each against PyTorch from
# the same initial weights and batches (fp32, and autocast's CUDA rules for bf16).
lm=out/charlm
mkdir -p "$lm"
echo "== a character-level GPT on Debian's fortunes (tools/main/charlm.py), fp32 and bf16, against PyTorch"
/usr/bin/python3 tools/main/charlm.py data "$lm"
/usr/bin/python3 tools/main/charlm.py export "$lm/charlm.onnx" --data "$lm" --seed 1
lmhyper=(--batch 32 --steps 1000 --lr 0.003 --seed 1 --eval-every 200 --log-every 200)
for p in fp32 bf16; do
  echo "tofu-run --onnx $lm/charlm.onnx --data $lm/train.safetensors --eval $lm/heldout.safetensors --loss cross-entropy --optimizer adam --workers 2 --precision $p ${lmhyper[*]}"
  "$(bazel info bazel-bin 2>/dev/null)/tofu_run/tofu-run" --onnx "$lm/charlm.onnx" \
    --data "$lm/train.safetensors" --eval "$lm/heldout.safetensors" --loss cross-entropy \
    --optimizer adam --workers 2 --precision $p "${lmhyper[@]}" --metrics "$lm/tofu-$p.json" \
    | tee "$lm/tofu-$p.txt" | grep -E '^\| [0-9]|^eval|^loss|median'
  echo "PyTorch, $p: tools/main/charlm.py train"
  /usr/bin/python3 tools/main/charlm.py train --onnx "$lm/charlm.onnx" --data "$lm" "${lmhyper[@]}" \
    $([ $p = bf16 ] && echo --bf16) --json "$lm/torch-$p.json" | tee "$lm/torch-$p.txt" \
    | grep -E '^eval|median'
done
/usr/bin/python3 tools/main/charlm.py plot "$lm/loss.svg" "fp32=$lm/tofu-fp32.json,$lm/torch-fp32.json" \
  "bf16=$lm/tofu-bf16.json,$lm/torch-bf16.json"
echo
echo "== tdlc --stats ops"
"$tdlc" --stats ops
