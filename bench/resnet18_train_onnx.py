"""Writes torchvision's resnet18 (10 classes, 32x32 images) exported in training mode (batch
norm with batch statistics) with a symbolic batch, so that tofu-run's --batch sets it (the
fixtures in tests/onnx have a fixed one). Weights are left out: tofu-run draws them.

usage: /usr/bin/python3 bench/resnet18_train_onnx.py OUT.onnx
"""
import sys

import torch
import torchvision

m = torchvision.models.resnet18(num_classes=10)
m.train()
torch.onnx.export(m, (torch.randn(2, 3, 32, 32),), sys.argv[1], export_params=False,
                  opset_version=17, input_names=["input"], output_names=["output"],
                  do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING,
                  dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
