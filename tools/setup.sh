#!/usr/bin/env bash
# Installs the Debian packages Tofu builds, tests and fuzzes with. Idempotent: packages
# already present are not touched, and apt is not run at all when nothing is missing.
set -euo pipefail

packages=(
  bazel-bootstrap        # Bazel 4.2.3 (WORKSPACE, offline)
  default-jdk-headless   # Bazel and the ANTLR tool run on the JDK
  antlr4                 # ANTLR tool 4.7.2 (generates the TDL parser)
  libantlr4-runtime-dev  # ANTLR C++ runtime 4.9
  llvm-14-dev            # ADT, Support: Error/Expected, cl::opt, raw_ostream
  clang-14               # libFuzzer builds, the ASan suite (.bazelrc)
  clang-format-14        # tools/checks/check_format.sh: the sources follow .clang-format
  libclang-rt-14-dev     # sanitizer and libFuzzer runtimes
  libfmt-dev
  nlohmann-json3-dev
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libonnx-dev
  libprotobuf-dev
  protobuf-compiler
  python3
  python3-dev            # Python.h: the tofu module's native part (python/module.cc)
  pybind11-dev           # pybind11 2.10, which that native part is written with
  python3-pytest         # python/tests, the module's tests
  python3-tqdm           # tofu.Trainer's progress bar
  libdnnl-dev            # oneDNN 2.6: library kernels for matrix products and convolutions
  libopenmpi-dev         # Open MPI 4.1: one process per worker (tofu-run --backend mpi)
  openmpi-bin            # mpirun
  cmake                  # examples/cmake_consumer (find_package(Tofu) against an install)
  pkgconf                # examples/c_consumer (pkg-config tofu)
  python3-torch          # examples/torch_plan.py, tools/oracles/torch_peer.py, ONNX fixtures
  python3-torchvision    # tools/fixtures/export_onnx_fixtures.py, which the PyTorch gradient oracle imports
  python3-onnx           # tools/main/fmnist.py reads a model's initial weights
  libopenblas0-pthread   # PyTorch's float32 products (the peers run ~30x slower without it)
  zlib1g-dev             # gzipped data sets (runtime/dataset)
  dataset-fashion-mnist  # the main job's real data
  fortunes               # English text: the main job's character-level language model
  libonnx-testdata       # ONNX's backend node tests (tests/onnx_node_test.sh)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  echo "setup: done"
fi

# CUDA is not a Debian package here: the toolkit is expected under /usr/local/cuda.
if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: error: /usr/local/cuda/bin/nvcc not found; the CUDA 13 toolkit is required" \
       "to compile the project's kernels" >&2
  exit 1
fi
