#!/usr/bin/env python3
"""The PyTorch peer of tofu-run's benchmark: the median time of one SGD training step of the
zoo's MLP (1024-4096-4096-1000, softmax cross-entropy) on the CPU, in PyTorch eager, float32,
with the same batch and thread count. Run with Debian's python3-torch (/usr/bin/python3);
prints which BLAS torch reaches (install libopenblas0-pthread for a fair peer)."""
import argparse
import statistics
import time

import torch


def mlp(dims):
    layers = []
    for i in range(1, len(dims)):
        layers.append(torch.nn.Linear(dims[i - 1], dims[i]))
        if i + 1 < len(dims):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = mlp([1024, 4096, 4096, 1000])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.rand(args.batch, 1024)
    y = torch.randint(0, 1000, (args.batch,))
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
    import re
    blas = re.findall(r"BLAS_INFO=([^,]+)", torch.__config__.show())
    libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.lower()})
    print(f"pytorch {torch.__version__} mlp batch {args.batch}, {args.threads} threads: "
          f"median step {statistics.median(times[2:]):.4f} s; BLAS_INFO={','.join(blas)}; "
          f"loaded: {' '.join(libs)}")


if __name__ == "__main__":
    main()
