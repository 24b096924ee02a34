#!/usr/bin/env bash
# Runs ON the H200 machine (device tool): the CUDA FP8 linear (linear_fp8_cuda.cu) checked and
# measured in one call, each part under its own time limit, logs in $OUT as they finish. Carry
# .devdeps (scripts/device/pack_deps.sh). HEAD_ONLY=1 builds the committed sources: the tree with
# .devdeps/overlay copied over it (scripts/device/make_overlay.sh).
#   1. build cuda_tests, tandem and kernel_bench;
#   2. the FP8 linear tests (Fp8Linear.*), then the bf16 linear tests (LINEAR_FILTER);
#   3. compute-sanitizer memcheck of the FP8 tests (MEMCHECK_FILTER), synccheck (SYNCCHECK_LIMIT);
#   4. kernel_bench linear_fp8: TB/s at 1..8 decode rows against the bf16 kernel;
#   5. FP8 engine tests (ENGINE_FILTER, default *Fp8*) and tandem bench on the 27B FP8 and bf16
#      shapes at BATCHES (BENCH_LIMIT 0 skips).
set -uo pipefail
source scripts/device/devdeps_env.sh
if [[ -n ${HEAD_ONLY:-} ]]; then  # the committed versions of the files modified in the tree
  rm -rf /tmp/tandem-head && mkdir -p /tmp/tandem-head
  tar -c --exclude=./.devdeps --exclude='./build*' . | tar -x -C /tmp/tandem-head
  cp -r .devdeps/overlay/. /tmp/tandem-head/
  (cd /tmp/tandem-head && xargs -r rm -f < "$OLDPWD/.devdeps/overlay.remove")
  cp -r .devdeps /tmp/tandem-head/ && cd /tmp/tandem-head && BUILD_DIR=/tmp/build-head
fi
build_cuda cuda_tests tandem kernel_bench

timeout "${FP8_LIMIT:-200}" stdbuf -oL $B/tests/cuda_tests --gtest_filter='Fp8Linear.*' \
  > "$OUT/fp8_tests.log" 2>&1
summary "fp8 linear tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/fp8_tests.log" | tr '\n' ' ') ($(stamp))"
grep -E '^\[  FAILED  \]|linear_fp8|Failure|differ|error' "$OUT/fp8_tests.log" | head -30

if [[ ${LINEAR_LIMIT:-120} -gt 0 ]]; then
  timeout "${LINEAR_LIMIT:-120}" stdbuf -oL $B/tests/cuda_tests \
    --gtest_filter="${LINEAR_FILTER:-CudaConformance.Linear*:CudaRowInvariance.Linear*}" \
    > "$OUT/linear_tests.log" 2>&1
  summary "bf16 linear tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/linear_tests.log" | tr '\n' ' ') ($(stamp))"
  grep -E '^\[  FAILED  \]' "$OUT/linear_tests.log" | head -10
fi

if [[ ${MEMCHECK_LIMIT:-90} -gt 0 ]]; then
  timeout "${MEMCHECK_LIMIT:-90}" compute-sanitizer --tool memcheck --error-exitcode 3 \
    $B/tests/cuda_tests --gtest_filter="${MEMCHECK_FILTER:-Fp8Linear.EveryCode*:Fp8Linear.Prefill*}" \
    > "$OUT/memcheck.log" 2>&1
  summary "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) ($(stamp))"
fi

if [[ ${SYNCCHECK_LIMIT:-0} -gt 0 ]]; then  # the named barriers and mbarriers of the kernel
  timeout "$SYNCCHECK_LIMIT" compute-sanitizer --tool synccheck --error-exitcode 3 \
    $B/tests/cuda_tests --gtest_filter="${SYNCCHECK_FILTER:-Fp8Linear.Decode*}" \
    > "$OUT/synccheck.log" 2>&1
  summary "synccheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/synccheck.log" | tail -1) ($(stamp))"
fi

if [[ ${KBENCH_LIMIT:-120} -gt 0 ]]; then
  KERNEL_BENCH_ONLY=linear_fp8 COMMIT=${COMMIT:-unknown} timeout "${KBENCH_LIMIT:-120}" \
    $B/bench/kernel_bench "$OUT/kernel_bench_linear_fp8.json" > "$OUT/kernel_bench.log" 2>&1
  summary "kernel_bench linear_fp8 rc=$? ($(stamp))"
  grep '^linear fp8 \[' "$OUT/kernel_bench.log" | tee -a "$OUT/summary.txt"
fi

if [[ ${ENGINE_LIMIT:-0} -gt 0 ]]; then
  timeout "$ENGINE_LIMIT" stdbuf -oL $B/tests/cuda_tests --gtest_filter="${ENGINE_FILTER:-*Fp8*:-Fp8Linear.*}" \
    > "$OUT/fp8_engine.log" 2>&1
  summary "fp8 engine tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/fp8_engine.log" | tr '\n' ' ') ($(stamp))"
  grep -E '^\[  FAILED  \]|Failure' "$OUT/fp8_engine.log" | head -20
fi

if [[ ${BENCH_LIMIT:-0} -gt 0 ]]; then
  for cfg in ${BENCH_CONFIGS:-qwen3.5-27b-fp8 qwen3.5-27b}; do
    timeout "$BENCH_LIMIT" stdbuf -oL $B/tandem bench --device cuda --synthetic configs/$cfg.json \
      --context "${CONTEXT:-1024}" --batch "${BATCHES:-1,8,32}" --num-speculative-tokens 3 --steps "${STEPS:-6}" \
      --commit "${COMMIT:-unknown}" --json "$OUT/bench_$cfg.json" > "$OUT/bench_$cfg.log" 2>&1
    summary "bench $cfg rc=$? ($(stamp))"
    grep -v '^model:\|^attention:\|^gdn:\|^tied' "$OUT/bench_$cfg.log" | tail -12
  done
fi
