#!/usr/bin/env bash
# Builds what the GPU check runs (tofu-run-cuda and the CUDA tests) and packs it, with every
# shared library it needs that a GPU machine does not have, into one git-ignored folder
# (default gpu-bundle/, at most 60 MiB: it travels with the working tree). LLVM's Support
# is linked statically (--define=llvm_static=1) instead of carrying libLLVM-14.so; the CUDA
# binary has no oneDNN. The binaries' RPATH is $ORIGIN; the CUDA libraries (runtime, cuBLAS,
# cuDNN, NVRTC) are the GPU machine's own, found by tools/gpu_check.sh.
#
#   tools/gpu_bundle.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-bundle}"
case "$out" in -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
tools/setup.sh >/dev/null
targets=(//tofu_run:tofu-run-cuda //runtime/cuda:cuda_backend_test //runtime/cuda:device_kernels_test)
echo "gpu_bundle: building ${targets[*]} (LLVM Support static, RPATH \$ORIGIN)"
bazel build --define=llvm_static=1 '--linkopt=-Wl,--disable-new-dtags,-rpath,$ORIGIN' "${targets[@]}"
rm -rf "$out"
mkdir -p "$out"
bins=(bazel-bin/tofu_run/tofu-run-cuda bazel-bin/runtime/cuda/cuda_backend_test
      bazel-bin/runtime/cuda/device_kernels_test)
for b in "${bins[@]}"; do
  install -m 755 "$b" "$out/"
done
# The libraries the GPU machine provides (its C and C++ runtimes, its CUDA 13 toolkit and
# driver, cuDNN and NCCL wheels) stay behind; everything else travels.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libgcc_s\.|libstdc\+\+\.|libcuda\.|libcudart\.|libcublas|libcudnn|libnvrtc|libnccl)'
for b in "${bins[@]}"; do
  ldd "$b" | awk '$3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $skip ]]; then continue; fi
  cp -L "$path" "$out/$name"
done
size=$(du -sm "$out" | cut -f1)
echo "gpu_bundle: $out holds $(ls "$out" | wc -l) files, ${size} MiB:"
ls -la "$out" | awk 'NR > 1 { printf "  %10d  %s\n", $5, $9 }'
if [ "$size" -gt 60 ]; then
  echo "gpu_bundle: $out is over 60 MiB: it would not travel with the working tree" >&2
  exit 1
fi
