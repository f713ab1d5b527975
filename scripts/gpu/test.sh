#!/usr/bin/env bash
# Runs the cross-built GPU test binaries (scripts/gpu/build.sh) on the GPU
# machine: the CUDA package's own tests, then the model, speculative, engine
# and e2e tests with TANDEM_TEST_BACKEND=cuda, each if it was built. Logs go
# to $OUT (or ./gpu-logs).
# Usage: scripts/gpu/test.sh [go test flags, e.g. -test.run Oracle]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
root=$(pwd)
status=0
run() { # dir binary env...
  local dir=$1 bin=$2; shift 2
  [ -x "bin/gpu/$bin" ] || return 0 # not built this time
  echo "== $bin"
  (cd "$dir" && env "$@" "$root/bin/gpu/$bin" -test.v -test.count=1 "${extra[@]}") >"$out/$bin.log" 2>&1
  local rc=$?
  grep -E '^(--- FAIL|FAIL|ok|PASS)' "$out/$bin.log" | tail -20
  tail -3 "$out/$bin.log"
  [ $rc -eq 0 ] || status=1
}
extra=("$@")
run compute/cuda cuda.test
run model/gemma4 gemma4.test TANDEM_TEST_BACKEND=cuda
run spec spec.test TANDEM_TEST_BACKEND=cuda
run engine engine.test TANDEM_TEST_BACKEND=cuda
run e2e e2e.test TANDEM_TEST_BACKEND=cuda
exit $status
