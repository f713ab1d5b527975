#!/usr/bin/env bash
# Compiles every CUDA kernel source with clang-16 for sm_90 (device code only, no CUDA toolkit
# needed), so a kernel that does not compile fails CI on a machine without a GPU. The GPU machine
# compiles the same sources with NVRTC at start-up.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v clang-16 >/dev/null; then
  echo "check-kernels: installing clang-16 (Debian)"
  for try in 1 2 3; do
    (apt-get update -q >/dev/null && apt-get install -y -q clang-16 >/dev/null) && break || sleep 10
  done
fi
if ! command -v clang-16 >/dev/null; then
  echo "check-kernels: WARNING: clang-16 could not be installed; CUDA kernels were NOT compiled" >&2
  exit 0
fi
flags=(-x cuda --cuda-device-only --cuda-gpu-arch=sm_90 -nocudalib -nocudainc
       -Xclang -target-feature -Xclang +ptx78 -include scripts/gpu/clang_cuda_shim.h
       -include compute/cuda/kernels/common.cuh -Werror)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
for f in $(git ls-files 'compute/cuda/kernels/*.cu'); do
  clang-16 "${flags[@]}" -S -o "$tmp/$(basename "$f" .cu).ptx" "$f"
  n=$((n + 1))
done
echo "check-kernels: $n CUDA source(s) compiled for sm_90"
# Every kernel the backend looks up at start-up (kernelNames in backend.go,
# and tileKernels' four variants each) must be an entry of its source: a
# missing one fails New on the GPU.
missing=0
for file in $(ls "$tmp"); do
  src=${file%.ptx}.cu
  names=$(sed -n "/^var kernelNames/,/^}/p" compute/cuda/backend.go | sed -n "/\"$src\":/,/},/p" |
    grep -o '"[A-Za-z0-9_]*"' | tr -d '"')
  if [ "$src" = matmul.cu ]; then # the multi-tile kernels (tileKernels) and their variants
    for t in $(grep '^var tileKernels' compute/cuda/backend.go | grep -o '"matmul_[A-Za-z0-9_]*"' | tr -d '"'); do
      names="$names $t ${t}_early ${t}_cl ${t}_early_cl"
    done
  fi
  [ -n "$names" ] || { echo "check-kernels: no kernelNames entry for $src" >&2; missing=1; }
  for k in $names; do
    grep -q "^\.visible \.entry $k(" "$tmp/$file" || { echo "check-kernels: $k (kernelNames, $src) is not a kernel of $src" >&2; missing=1; }
  done
done
[ $missing -eq 0 ] || exit 1
echo "check-kernels: every kernel in kernelNames is defined"
