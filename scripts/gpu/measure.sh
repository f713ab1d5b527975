#!/usr/bin/env bash
# Measures the published shapes on the GPU machine, with the defaults and
# with the switches of docs/gpu.md ("Switches") turned off, each in its own
# process (the switches are read at start-up). Reports go to $OUT (or
# ./gpu-logs), one file per run.
# Usage: scripts/gpu/measure.sh [e2b|31b|prefill|rounds|pending|pending-each|sweep|long|profile-round|ncu|ncu-step|ncu-source|ncu-source-matmul|checkpoint|sampled|sampled-spec|attention]...   (default: e2b 31b)
# attention: what attention costs a decode step and why (docs/gpu.md, next
# steps): each kernel's share of a real 31B and E2B step (the stamped build,
# bench --step-stamps), then the steps with attention zeroed, the o
# product's split and attention's blocks a cluster swept, in one process a
# shape.
# pending: E2B, 26B-A4B and 31B decode with the switches in $PENDING (written
# without a GPU, docs/gpu.md) on, against the defaults; pending-each: one
# shape ($SHAPE, default 31b) with each alone (commas join switches that go
# together: PENDING="A=1 A=1,B=4").
# rounds: 31B speculative decoding at P = 0 and 0.8, rounds kept on the
# device against rounds read on the host (TANDEM_SPEC_ROUNDS=host).
# checkpoint: a 31B verify's checkpoint interval swept, with and without
# PDL for verifies; sampled: sampled decoding, temperature alone and with
# Gemma 4's top-k and top-p; sampled-spec: sampled speculative decoding;
# both Gemma runs against whole rows sampled on the host
# (TANDEM_SAMPLE_TOPS=0, the way before the seventeenth session), and
# sampled-spec also against rounds that read their drafts before the verify
# (TANDEM_SPEC_ROUNDS=host).
# long: the 31B shape at contexts 4k and 32k. profile-round: kernel profiles
# of a 31B speculative round at P = 0, with PDL off and on.
# ncu profiles the decode matmul on the 31B MLP and LM-head shapes with Nsight
# Compute (--clock-control none, as the device notes ask); ncu-step the norm
# and attention kernels of a 31B decode step. ncu-source: Nsight Compute's
# source view of the kernels matching $NCU_KERNEL (default attn_flash) in a
# bench run ($NCU_BENCH, default a 31B 4k bf16 prefill), launches
# $NCU_SKIP on, $NCU_COUNT of them (the defaults: the 31B's layers 4 and 5,
# a sliding and a global one): each SASS instruction's executions and
# stall samples (ncu-source.csv), summarised by scripts/gpu/sass_summary.py.
# $NCU_FLAGS adds ncu flags (--warp-sampling-interval 0: a sample every 32
# cycles, enough for a kernel of one block). ncu-source-matmul: the same
# view of one product shape alone (TestMatMulForProfiler) at each of
# $NCU_SHAPES (NxKxM; default the 31B gate|up at one and four rows), to
# set a verify's products against a step's.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
bin=bin/gpu/tandem
[ -x "$bin" ] || { echo "measure.sh: $bin is missing; run scripts/gpu/build.sh here first" >&2; exit 2; }
off=(TANDEM_CUDA_MATMUL=mma8 TANDEM_CUDA_ATTN=untiled TANDEM_CUDA_GRAPHS=0 TANDEM_CUDA_FUSE=0 TANDEM_CUDA_STACK=0
  TANDEM_CUDA_NORM2=0 TANDEM_CUDA_COMBINE=0 TANDEM_CUDA_CHECKPOINT=0 TANDEM_CUDA_ROUTE=0 TANDEM_CUDA_ROUTE_ROWS=0
  TANDEM_CUDA_MOE_BATCH=0 TANDEM_CUDA_SEGMENTS=0 TANDEM_CUDA_PDL=0)
bench() { # name, env..., -- bench args...
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  echo "== $name"
  env "${envs[@]}" "$bin" bench --device cuda "$@" >"$out/$name.txt" 2>"$out/$name.err"
  local rc=$?
  grep -v '^\s*$' "$out/$name.txt" | head -8
  [ $rc -eq 0 ] || tail -3 "$out/$name.err"
}
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(e2b 31b)
for w in "${want[@]}"; do
  case $w in
    e2b | 31b)
      args=(--preset "gemma4-$w" --draft auto --synthetic-acceptance 0.8 --contexts 128 --tokens 96 --kernel-profile)
      bench "$w-default" -- "${args[@]}"
      bench "$w-off" "${off[@]}" -- "${args[@]}"
      ;;
    attention)
      # The stamped build first: its test, then each kernel's share of a real step.
      # (The stamped build's steps may differ from the default's: compare its
      # plain steps with the sweep's "none" below before trusting the shares.)
      (cd compute/cuda && TANDEM_CUDA_STAMPS=1 timeout 300 ../../bin/gpu/cuda.test -test.run 'TestStepStamps|TestAttributeStamps' -test.v -test.timeout 3m) >"$out/stamps-test.txt" 2>&1
      grep -E '^(--- |ok|FAIL|PASS)|stamps_test' "$out/stamps-test.txt"
      for shape in 31b e2b; do
        bench "stamps-$shape" TANDEM_CUDA_STAMPS=1 -- --preset "gemma4-$shape" --contexts 128 --tokens 16 --prefill-runs 1 --step-stamps
        grep -E 'plain steps|one layer' "$out/stamps-$shape.txt"
        grep -A40 'step stamps' "$out/stamps-$shape.txt" | head -41
        grep 'step-stamps' "$out/stamps-$shape.err"
      done
      zero='TANDEM_CUDA_DROP=attn_cluster+attn_fused,TANDEM_CUDA_DROP_ZERO=1'
      bench attention-31b -- --preset gemma4-31b --contexts 128 --tokens 32 --prefill-runs 1 --sweep \
        "none;$zero;TANDEM_CUDA_SPLITS_FOR=5376x8192=6;TANDEM_CUDA_SPLITS_FOR=5376x8192=8;TANDEM_CUDA_SPLITS_FOR=5376x8192=9;TANDEM_CUDA_SPLITS_FOR=5376x8192=10;TANDEM_CUDA_ATTN_CLUSTER=2;TANDEM_CUDA_ATTN_CLUSTER=8;TANDEM_CUDA_ATTN_CLUSTER=0;none"
      grep 'plain steps' "$out/attention-31b.txt"
      bench attention-e2b -- --preset gemma4-e2b --contexts 128 --tokens 64 --prefill-runs 1 --sweep \
        "none;${zero/+attn_fused/};TANDEM_CUDA_SPLITS_FOR=1536x2048=8;TANDEM_CUDA_SPLITS_FOR=1536x2048=12;TANDEM_CUDA_ATTN_CLUSTER=4;TANDEM_CUDA_ATTN_CLUSTER=16;none"
      grep 'plain steps' "$out/attention-e2b.txt"
      ;;
    prefill) # a long prompt on the 31B shape: prefill, and decode after it
      args=(--preset gemma4-31b --contexts 4k --tokens 16)
      bench "prefill-default" -- "${args[@]}"
      bench "prefill-off" "${off[@]}" -- "${args[@]}"
      ;;
    rounds)
      for p in 0 0.8; do
        args=(--preset gemma4-31b --draft auto --synthetic-acceptance "$p" --contexts 128 --tokens 96)
        bench "rounds-device-$p" -- "${args[@]}"
        bench "rounds-host-$p" TANDEM_SPEC_ROUNDS=host -- "${args[@]}"
      done
      ;;
    pending) # PENDING="A=1 B=1": the switches written without a GPU, all on against the defaults
      read -ra sws <<<"${PENDING:-}"
      for p in e2b 26b-a4b 31b; do
        args=(--preset "gemma4-$p" --draft auto --synthetic-acceptance 0 --contexts 128 --tokens 64)
        bench "pending-$p-on" "${sws[@]}" -- "${args[@]}"
        bench "pending-$p-off" -- "${args[@]}"
      done
      ;;
    pending-each) # each of PENDING alone (A=1,B=2: two together), on the shape SHAPE (default 31b)
      read -ra sws <<<"${PENDING:-}"
      shape=${SHAPE:-31b}
      for sw in "${sws[@]}"; do
        IFS=, read -ra envs <<<"$sw"
        name=$(printf '%s' "$sw" | tr -c 'A-Za-z0-9_.-' '-')
        bench "pending-$shape-$name" "${envs[@]}" -- --preset "gemma4-$shape" --draft auto --synthetic-acceptance 0 --contexts 128 --tokens 48
      done
      ;;
    sweep) # SWEEP="none;A=1;A=1,B=2;none": bench --sweep on the shape SHAPE (default 31b), the model built once, each setting's graphs timed too and the serving engine's path measured beside the direct one
      shape=${SHAPE:-31b}
      bench "sweep-$shape" -- --preset "gemma4-$shape" --draft auto --synthetic-acceptance 0 --contexts 128 --tokens 48 --sweep "${SWEEP:-none}" --graph-profile --engine --engine-batch 4
      grep -E "^ *(settings|none|TANDEM_)|^context .*(round takes|plain steps|pool|ahead of|graphs of real|serving engine)" "$out/sweep-$shape.txt"
      ;;
    long)
      bench long -- --preset gemma4-31b --contexts 4k,32k --tokens 32
      ;;
    profile-round) # where a 31B P = 0 round's time goes, with PDL off and on
      for pdl in 0 1; do
        bench "profile-round-pdl$pdl" TANDEM_CUDA_PDL=$pdl -- --preset gemma4-31b --draft auto --synthetic-acceptance 0 \
          --contexts 128 --tokens 24 --kernel-profile
      done
      ;;
    ncu) # NCU_SHAPES="NxKxM ...": the rows kernels in Nsight Compute (default the 31B shapes at one row)
      for shape in ${NCU_SHAPES:-21504x5376x1 5376x21504x1 262144x5376x1}; do
        echo "== ncu $shape"
        (cd compute/cuda && TANDEM_PROFILE_SHAPE=$shape ncu --clock-control none -k regex:matmul_rows -c 2 \
          --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
          ../../bin/gpu/cuda.test -test.run ForProfiler) >"$out/ncu-$shape.txt" 2>&1
        grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Warp Cycles Per Issued" "$out/ncu-$shape.txt" | head -12
      done
      ;;
    ncu-step) # the small kernels of a 31B decode step (norms, attention) in Nsight Compute: which stall bounds them
      echo "== ncu-step"
      ncu --clock-control none -k regex:'rmsnorm2|attn_values|attn_scores|attn_fused' --launch-skip 600 -c 6 \
        --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
        "$bin" bench --device cuda --preset gemma4-31b --contexts 128 --tokens 12 >"$out/ncu-step.txt" 2>&1
      grep -E "^  [a-z_0-9]+|Duration|DRAM Throughput|Registers Per Thread|Warp Cycles Per Issued|Stall" "$out/ncu-step.txt" | head -60
      ;;
    ncu-source-matmul) # ncu-source's view of one product shape alone (TestMatMulForProfiler), at each of $NCU_SHAPES
      abs=$(cd "$out" && pwd) # the profiler runs in compute/cuda
      for shape in ${NCU_SHAPES:-43008x5376x1 43008x5376x4}; do
        echo "== ncu-source $shape"
        (cd compute/cuda && TANDEM_PROFILE_SHAPE=$shape ncu --clock-control none ${NCU_FLAGS:-} -k regex:matmul_rows -c 1 \
          --section SourceCounters --section WarpStateStats --section InstructionStats --section SpeedOfLight -f -o "$abs/ncu-source-$shape" \
          ../../bin/gpu/cuda.test -test.run ForProfiler) >"$out/ncu-source-$shape.txt" 2>&1
        ncu -i "$out/ncu-source-$shape.ncu-rep" --page source --csv --print-source sass >"$out/ncu-source-$shape.csv" 2>"$out/ncu-source-$shape.err"
        ncu -i "$out/ncu-source-$shape.ncu-rep" --page details >"$out/ncu-source-$shape-details.txt" 2>&1
        grep -E "^  [a-z_0-9]+ \(|Duration|Executed Instructions  |Warp Cycles Per Issued" "$out/ncu-source-$shape-details.txt" | head -8
        python3 scripts/gpu/sass_summary.py "$out/ncu-source-$shape.csv" | head -40
      done
      ;;
    ncu-source) # SASS-level counts of $NCU_KERNEL in a bench run: where its instructions and stalls are
      echo "== ncu-source ${NCU_KERNEL:-attn_flash}"
      read -r -a bargs <<<"${NCU_BENCH:---preset gemma4-31b --contexts 4096 --tokens 2 --prefill-runs 1 --prefill-size 4096 --prefill-precision bf16}"
      ncu --clock-control none ${NCU_FLAGS:-} -k regex:"${NCU_KERNEL:-attn_flash}" --launch-skip "${NCU_SKIP:-4}" -c "${NCU_COUNT:-2}" \
        --section SourceCounters --section WarpStateStats --section InstructionStats --section SpeedOfLight -f -o "$out/ncu-source" \
        "$bin" bench --device cuda "${bargs[@]}" >"$out/ncu-source.txt" 2>&1
      ncu -i "$out/ncu-source.ncu-rep" --page source --csv --print-source sass >"$out/ncu-source.csv" 2>"$out/ncu-source.err"
      ncu -i "$out/ncu-source.ncu-rep" --page details >"$out/ncu-source-details.txt" 2>&1
      grep -E "^  [a-z_0-9]+ \(|Duration|Executed Instructions  |Registers Per Thread|Warp Cycles Per Issued|represents" "$out/ncu-source-details.txt" | head -20
      python3 scripts/gpu/sass_summary.py "$out/ncu-source.csv" | head -80
      ;;
    sampled) # sampled decoding on E2B and 31B: temperature alone (OpenAI's defaults) and Gemma 4's generation config (top-k 64, top-p 0.95), directly and through the engine
      for shape in e2b 31b; do
        bench "sampled-$shape-temperature" -- --preset "gemma4-$shape" --temperature 1 --contexts 128 --tokens 64 --engine
        bench "sampled-$shape-gemma" -- --preset "gemma4-$shape" --temperature 1 --top-k 64 --top-p 0.95 --contexts 128 --tokens 64 --engine \
          --sweep 'none;TANDEM_SAMPLE_TOPS=0'
      done
      ;;
    sampled-spec) # sampled speculative decoding with Gemma 4's defaults, E2B and 31B, at P = 0.8 and 0 (each draft's distribution is computed on the host)
      for shape in e2b 31b; do
        for p in 0.8 0; do
          bench "sampled-spec-$shape-$p" -- --preset "gemma4-$shape" --draft auto --synthetic-acceptance "$p" --temperature 1 --top-k 64 --top-p 0.95 --contexts 128 --tokens 64 \
            --sweep 'none;TANDEM_SPEC_ROUNDS=host;TANDEM_SAMPLE_TOPS=0'
        done
      done
      ;;
    checkpoint) # a 31B P = 0 round with every, every second and every third checkpoint, and none; by default and without PDL for verifies
      for pdl in default decode; do
        envs=(TANDEM_X=1)
        [ "$pdl" = default ] || envs=(TANDEM_CUDA_PDL=decode)
        bench "checkpoint-$pdl" "${envs[@]}" -- --preset gemma4-31b --draft auto --synthetic-acceptance 0 --contexts 128 --tokens 48 \
          --sweep 'none;TANDEM_CUDA_CHECKPOINT=2;TANDEM_CUDA_CHECKPOINT=3;TANDEM_CUDA_CHECKPOINT=0;none' --graph-profile
        grep -E "^ *(settings|none|TANDEM_)|plain steps" "$out/checkpoint-$pdl.txt"
      done
      ;;
    *) echo "measure.sh: unknown run $w" >&2; exit 2 ;;
  esac
done
