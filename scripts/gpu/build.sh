#!/usr/bin/env bash
# Cross-builds the GPU test binaries and the CLI (no cgo) into bin/gpu/, which
# the device tool carries to the lent H200. See docs/gpu.md.
# Usage: scripts/gpu/build.sh [cuda gemma4 spec engine tandem sample e2e]
# Without arguments everything but e2e is built: the device tool carries at
# most 64 MiB, and the e2e binary (the OpenAI client) alone is about 30 MiB;
# build it on its own (scripts/gpu/build.sh e2e) for a run of its own.
set -euo pipefail
cd "$(dirname "$0")/../.."
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(cuda gemma4 spec engine tandem sample)
rm -rf bin/gpu
mkdir -p bin/gpu
flags=(-trimpath -ldflags=-s\ -w)
for name in "${want[@]}"; do
  case $name in
    cuda) CGO_ENABLED=0 go test -c "${flags[@]}" -o bin/gpu/cuda.test ./compute/cuda ;;
    gemma4) CGO_ENABLED=0 go test -c "${flags[@]}" -o bin/gpu/gemma4.test ./model/gemma4 ;;
    spec | engine | sample) CGO_ENABLED=0 go test -c "${flags[@]}" -o "bin/gpu/$name.test" "./$name" ;; # sample: its benchmarks, on the GPU host's cores
    tandem) CGO_ENABLED=0 go build "${flags[@]}" -o bin/gpu/tandem ./cmd/tandem ;;
    e2e) (cd e2e && CGO_ENABLED=0 go test -c "${flags[@]}" -o ../bin/gpu/e2e.test .) ;;
    *) echo "build.sh: unknown target $name" >&2; exit 2 ;;
  esac
done
ls -la bin/gpu
du -sh bin/gpu
