#!/usr/bin/env bash
# Cross-builds the GPU test binaries (no cgo) into bin/gpu/, which the
# device tool carries to the lent H200. See docs/gpu.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p bin/gpu
for pkg in ./compute/cuda ./model/gemma4 ./spec ./engine; do
  name=$(basename "$pkg")
  CGO_ENABLED=0 go test -c -o "bin/gpu/$name.test" "$pkg"
done
CGO_ENABLED=0 go build -o bin/gpu/tandem ./cmd/tandem
(cd e2e && CGO_ENABLED=0 go test -c -o ../bin/gpu/e2e.test .)
ls -la bin/gpu
