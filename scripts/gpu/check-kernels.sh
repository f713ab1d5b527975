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
       -Xclang -target-feature -Xclang +ptx78 -include scripts/gpu/clang_cuda_shim.h -Werror)
n=0
for f in $(git ls-files 'compute/cuda/kernels/*.cu'); do
  clang-16 "${flags[@]}" -S -o /dev/null "$f"
  n=$((n + 1))
done
echo "check-kernels: $n CUDA source(s) compiled for sm_90"
