#!/usr/bin/python3
"""Exports the ONNX fixtures of tests/onnx/ from torchvision and torch models, without
weights (export_params=False: parameters become graph inputs after the data input).

Needs Debian's python3-torch and python3-torchvision (not needed by the build or the tests,
which use the committed files):  sudo apt-get install python3-torch python3-torchvision
Run from the repository root:     /usr/bin/python3 tools/export_onnx_fixtures.py
"""
import os

import torch
import torchvision

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "onnx")
OPSET = 13  # what torch 1.13 exports reliably; the ops used are unchanged up to 17


def export(model, example, name, **kw):
    model.eval()
    path = os.path.join(OUT, name + ".onnx")
    torch.onnx.export(model, example, path, export_params=False, opset_version=OPSET,
                      input_names=["input"], output_names=["output"],
                      do_constant_folding=False, **kw)
    print("%s: %d bytes" % (path, os.path.getsize(path)))


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                       torch.nn.Linear(128, 10))

    def forward(self, x):
        return torch.softmax(self.net(x), dim=-1)


def main():
    torch.manual_seed(0)
    image = torch.randn(1, 3, 224, 224)
    export(torchvision.models.resnet18(), image, "resnet18")
    export(torchvision.models.wide_resnet50_2(), image, "wide_resnet50_2")
    export(Mlp(), torch.randn(4, 64), "mlp")
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                             batch_first=True)
    export(torch.nn.TransformerEncoder(layer, num_layers=2), torch.randn(2, 16, 64),
           "transformer")


if __name__ == "__main__":
    main()
