#!/usr/bin/env python3
"""PyTorch's float32 and bfloat16 products on the CPU at bf16_matmul_bench's shapes: the peer.

usage: /usr/bin/python3 bench/bf16_matmul_torch.py [--reps N]
"""
import os
import sys
import time

import torch

SHAPES = [(256, 256, 256), (64, 4096, 4096), (1024, 1024, 1024), (4096, 1024, 1024),
          (2048, 2048, 2048)]


def best(reps, fn):
    fn()
    t = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def main():
    reps = int(sys.argv[2]) if len(sys.argv) == 3 and sys.argv[1] == "--reps" else 5
    torch.set_num_threads(os.cpu_count())  # as oneDNN's OpenMP in the C++ bench
    torch.manual_seed(7)
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"oneDNN bf16 on this CPU: {torch.backends.mkldnn.is_available()}\n")
    print("| m x k x n | fp32 ms | bf16 ms | bf16 speed-up |\n| --- | ---: | ---: | ---: |")
    for m, k, n in SHAPES:
        a, b = torch.rand(m, k) * 2 - 1, torch.rand(k, n) * 2 - 1
        a16, b16 = a.bfloat16(), b.bfloat16()
        tf = best(reps, lambda: torch.mm(a, b))
        tb = best(reps, lambda: torch.mm(a16, b16))
        print(f"| {m} x {k} x {n} | {tf * 1e3:.3f} | {tb * 1e3:.3f} | {tf / tb:.2f}x |")


if __name__ == "__main__":
    main()
