#!/usr/bin/env bash
# Runs ON the H200 machine (device tool): the landing candidate (this tree: main + the branches
# measured on 2026-12-05 + production rules from that run) against main as it was, both built here,
# in the same call, so that each figure has its baseline beside it. The baseline is this tree's
# sources with .baseline.patch applied (untracked, so it travels with the tree; the tree with
# models/ and tests/ leaves no room for a second copy within the call's 64 MiB):
#   git diff HEAD main -- src apps bench/*.cpp bench/*.h bench/CMakeLists.txt CMakeLists.txt \
#     configs > .baseline.patch
# One call (carry .devdeps, timeout_s 600), in order of what a figure is worth: both builds; the
# candidate's bitwise tests of its new rules (LinearDecodeBatch, Fp8Linear.*); the 27B bf16 bench
# at 8,32,128,256: baseline, candidate, candidate with --linear-variant 19 (the item shapes before:
# isolates the conv1d and attention kernels' share from the shape rule's); kernel_bench attention
# on both; the 27B-FP8 bench (candidate) at 1,8,32,256; the GPU engine tests. PART=2 adds the
# baseline's FP8 bench at 8,32,256. PART=verify builds no baseline: the candidate's tests as in
# PART=1, its 27B bf16 bench at 8,32,128,256 and FP8 at 1,32,256, then the engine tests.
set -uo pipefail
source scripts/device/devdeps_env.sh
build_cuda cuda_tests tandem kernel_bench
CAND=$B
ROOT=$PWD
if [[ ${PART:-1} != verify && ! -x /tmp/build-base/tandem ]]; then
  rm -rf /tmp/base && mkdir -p /tmp/base && cp -r src apps bench CMakeLists.txt configs /tmp/base/
  rm -rf /tmp/base/bench/results
  (cd /tmp/base && { git apply "$ROOT/.baseline.patch" || patch -p1 < "$ROOT/.baseline.patch"; } &&
    cmake_args+=(-DTANDEM_TESTS=OFF) && BUILD_DIR=/tmp/build-base build_cuda tandem kernel_bench) ||
    { summary "baseline build failed"; exit 1; }
fi
BASE=/tmp/build-base

if [[ ${PART:-1} == 1 ]]; then
  tests linear_batch 110 'CudaRowInvariance.LinearDecodeBatch'
  tests fp8_linear 90 'Fp8Linear.*'
  bench base_bf16 $BASE 100 configs/qwen3.5-27b.json 8,32,128,256
  bench cand_bf16 $CAND 100 configs/qwen3.5-27b.json 8,32,128,256
  bench cand_bf16_v19 $CAND 100 configs/qwen3.5-27b.json 8,32,128,256 --linear-variant 19
  for side in base cand; do
    build=$BASE; [[ $side == cand ]] && build=$CAND
    KERNEL_BENCH_ONLY=attention COMMIT=$side timeout 60 $build/bench/kernel_bench \
      "$OUT/kernel_bench_attention_$side.json" > "$OUT/kernel_bench_attention_$side.log" 2>&1
    summary "kernel_bench attention $side rc=$? ($(stamp))"
  done
  att() { grep '^attention' "$OUT/kernel_bench_attention_$1.log" | awk '{print $(NF-8), $(NF-4)}'; }
  paste -d' ' <(grep '^attention' "$OUT/kernel_bench_attention_base.log" | sed 's/  .*//') \
    <(att base) <(att cand) | tee -a "$OUT/summary.txt"  # name, ms and TB/s base, then candidate
  bench cand_fp8 $CAND 150 configs/qwen3.5-27b-fp8.json 1,8,32,256
  engine_tests 100
elif [[ $PART == verify ]]; then
  tests linear_batch 110 'CudaRowInvariance.LinearDecodeBatch'
  tests fp8_linear 90 'Fp8Linear.*'
  bench cand_bf16 $CAND 100 configs/qwen3.5-27b.json 8,32,128,256
  bench cand_fp8 $CAND 150 configs/qwen3.5-27b-fp8.json 1,32,256
  engine_tests 100
elif [[ $PART == onerank ]]; then  # main as landed (bf16) and the FP8 one-rank plan against main
  tests fp8_linear 90 'Fp8Linear.*'
  bench cand_fp8 $CAND 120 configs/qwen3.5-27b-fp8.json 1,8,32,256
  bench base_fp8 $BASE 120 configs/qwen3.5-27b-fp8.json 1,8,32,256
  bench cand_bf16 $CAND 100 configs/qwen3.5-27b.json 8,32,128,256
  engine_tests 100
  tests linear_batch 110 'CudaRowInvariance.LinearDecodeBatch'
  timeout 90 ncu -k regex:conv1d --launch-count 2 --section SpeedOfLight --section LaunchStats \
    --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats \
    $CAND/tandem bench --device cuda --synthetic configs/qwen3.5-27b.json --context 1024 \
    --batch 256 --num-speculative-tokens 3 --steps 1 --no-graphs > "$OUT/ncu_conv_256.log" 2>&1
  summary "ncu conv 256 rc=$? ($(stamp))"
else
  bench base_fp8 $BASE 150 configs/qwen3.5-27b-fp8.json 8,32,256
fi
