#!/usr/bin/env python3
"""Trains the main job's Fashion-MNIST CNN with tofu from a PyTorch DataLoader on 2 workers,
scores it on the test split, and gives the trained weights back to the module.

    PYTHONPATH=PREFIX/lib/python3/dist-packages /usr/bin/python3 examples/train_fmnist.py [--steps N]
"""
import argparse, gzip, os
import numpy as np, torch
from torch import nn
import tofu

DATA = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist


class FashionMNIST(torch.utils.data.Dataset):
    """torchvision's FashionMNIST over the Debian files: (1x28x28 image in [0, 1], class)."""

    def __init__(self, split):
        def idx(name, header):  # an IDX file's bytes after its header
            with gzip.open(os.path.join(DATA, f"{split}-{name}-ubyte.gz")) as f:
                return np.frombuffer(f.read(), np.uint8, offset=header)
        images = idx("images-idx3", 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255
        self.images = torch.from_numpy(images)
        self.labels = torch.from_numpy(idx("labels-idx1", 8).astype(np.int64))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--steps", type=int, default=None, help="default: one epoch (937 steps)")
parser.add_argument("--save", default=None, help="a folder for tofu-run --save's checkpoint")
args = parser.parse_args()
loader = torch.utils.data.DataLoader(FashionMNIST("train"), batch_size=64, shuffle=True)
trainer = tofu.Trainer(model, workers=2, optimizer="sgd", lr=0.1)
trainer.fit(loader, steps=args.steps, progress=False)
print(f"trained {len(trainer.losses)} steps: loss {trainer.losses[0]:.4f} -> {trainer.losses[-1]:.4f}")
score = trainer.evaluate(FashionMNIST("t10k"))
print(f"test accuracy {score['accuracy']:.4f}, loss {score['loss']:.4f} over {score['samples']} images")
model.load_state_dict(trainer.state_dict())  # the module now holds the trained weights
if args.save:
    print("saved", trainer.save(args.save)["path"])
