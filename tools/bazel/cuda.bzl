"""cuda_library: compiles .cu files with the system nvcc into a cc_library.

nvcc runs in a genrule (host compiler: the system g++), producing position-independent
objects that a cc_library links together with the CUDA runtime. Machines without a GPU
still build this; only running the kernels needs a device.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

def cuda_library(name, srcs, hdrs = [], deps = [], arch = "sm_90", copts = [], **kwargs):
    """Compiles `srcs` (.cu) with nvcc and wraps the objects and `hdrs` in a cc_library."""
    objs = []
    for src in srcs:
        base = src[:-len(".cu")] if src.endswith(".cu") else src
        obj = name + "_" + base.replace("/", "_") + ".pic.o"
        native.genrule(
            name = name + "_" + base.replace("/", "_") + "_nvcc",
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-std=c++17",
                "-O2",
                "-arch=" + arch,
                "-Xcompiler",
                "-fPIC",
                "-I.",
            ] + copts + [
                "-c",
                "$(location " + src + ")",
                "-o",
                "$@",
            ]),
            tags = ["cuda"],
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        **kwargs
    )
