#!/usr/bin/env bash
# Runs ON the H200 machine (device tool): the decode linears (linear_persistent_cuda.cu,
# linear_wgmma_cuda.cu) checked and measured in one call, in order, each part under its own time
# limit, logs in $OUT as they finish. Carry .devdeps (scripts/device/pack_deps.sh).
#   1. build cuda_tests, tandem and kernel_bench, then a 60 s smoke test (LinearConfigurations, or
#      SMOKE_FILTER's tests): a kernel that hangs stops the run there instead of eating every later
#      part's time limit;
#   2. the linear conformance and bitwise row-invariance tests (every kernel configuration and
#      decode-group rule against production, 1..256 rows, every epilogue), or LINEAR_FILTER's;
#   3. kernel_bench KBENCH_GROUPS (default linear_batch: TB/s of weights at 1..1,024 decode rows per
#      kernel variant; gdr: the GDN recurrence at 1..256 sequences, both kernels);
#   4. the GPU engine tests (spec == plain, graphs == eager, 256 requests batched == solo);
#   5. tandem bench on the Qwen3.5-27B shape (BENCH_CONFIG: another config, e.g.
#      configs/qwen3.5-27b-fp8.json) at BATCHES (default 1,8,32,64,256), 1K context;
#   6-8. optional: PROFILE_BATCH (ncu), MEMCHECK, RACECHECK_FILTER (see each part).
set -uo pipefail
source scripts/device/devdeps_env.sh
build_cuda cuda_tests tandem kernel_bench
timeout 60 $B/tests/cuda_tests --gtest_filter="${SMOKE_FILTER:-CudaRowInvariance.LinearConfigurations}" \
  > "$OUT/smoke.log" 2>&1
rc=$?
summary "smoke rc=$rc $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/smoke.log" | tr '\n' ' ') ($(stamp))"
[[ $rc == 124 ]] && { summary "smoke test hung: stopping"; exit 1; }

timeout "${LINEAR_LIMIT:-150}" stdbuf -oL $B/tests/cuda_tests \
  --gtest_filter="${LINEAR_FILTER:-CudaConformance.Linear*:CudaRowInvariance.Linear*}" \
  > "$OUT/linear_tests.log" 2>&1
summary "linear tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/linear_tests.log" | tr '\n' ' ') ($(stamp))"
grep -E '^\[  FAILED  \]|FAIL' "$OUT/linear_tests.log" | head -20

if [[ ${KBENCH_LIMIT:-100} -gt 0 ]]; then
  KERNEL_BENCH_ONLY=${KBENCH_GROUPS:-linear_batch} COMMIT=${COMMIT:-unknown} timeout "${KBENCH_LIMIT:-100}" \
    $B/bench/kernel_bench "$OUT/kernel_bench_${KBENCH_GROUPS:-linear_batch}.json" > "$OUT/kernel_bench.log" 2>&1
  summary "kernel_bench ${KBENCH_GROUPS:-linear_batch} rc=$? ($(stamp))"
  grep -E '^(linear (decode|classes) \[|gdr )' "$OUT/kernel_bench.log" | tee -a "$OUT/summary.txt"
fi

[[ ${ENGINE_LIMIT:-70} -gt 0 ]] && engine_tests "${ENGINE_LIMIT:-70}"

if [[ ${BENCH_LIMIT:-150} -gt 0 ]]; then
  timeout "${BENCH_LIMIT:-150}" stdbuf -oL $B/tandem bench --device cuda --synthetic "${BENCH_CONFIG:-configs/qwen3.5-27b.json}" \
    --context 1024 --batch "${BATCHES:-1,8,32,64,256}" --num-speculative-tokens 3 --steps "${STEPS:-6}" \
    --commit "${COMMIT:-unknown}" --json "$OUT/bench_27b.json" > "$OUT/bench_27b.log" 2>&1
  summary "bench 27B rc=$? ($(stamp))"
  grep -v '^model:\|^attention:\|^gdn:\|^tied' "$OUT/bench_27b.log" | tail -14
fi

# 6. PROFILE_BATCH=B: ncu kernel times of two eager decode steps of the 27B shape at batch B
#    (the bench randomises the state with fill kernels, which the name filter skips, and starts
#    with its warm-up decode steps: no prefill to skip).
if [[ -n ${PROFILE_BATCH:-} ]]; then
  timeout "${PROFILE_LIMIT:-150}" ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --kernel-name 'regex:^(?!fill).*' --launch-count "${PROFILE_COUNT:-1400}" "$B/tandem" bench --device cuda --synthetic configs/qwen3.5-27b.json \
    --context 1024 --batch "$PROFILE_BATCH" --speculative none --num-speculative-tokens 1 --steps 2 --no-graphs \
    > "$OUT/profile.csv" 2> "$OUT/profile.err"
  summary "profile batch $PROFILE_BATCH rc=$? ($(stamp))"
  python3 scripts/device/profile_step.py "$OUT/profile.csv" 2 > "$OUT/profile.txt" 2>&1
  head -30 "$OUT/profile.txt" | tee -a "$OUT/summary.txt"
fi

# 7. MEMCHECK=1: compute-sanitizer memcheck of the bitwise linear tests (every configuration at
#    1..64 rows, 5..256 in LinearDecodeBatch), or of MEMCHECK_FILTER's tests, limit MEMCHECK_LIMIT s.
if [[ -n ${MEMCHECK:-} ]]; then
  timeout "${MEMCHECK_LIMIT:-400}" compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$B/tests/cuda_tests" --gtest_filter="${MEMCHECK_FILTER:-CudaRowInvariance.LinearConfigurations:CudaRowInvariance.LinearDecodeBatch}" \
    > "$OUT/memcheck.log" 2>&1
  summary "memcheck rc=$? (0 clean, 9 errors, 124 time limit) ($(stamp))"
  grep -E 'ERROR SUMMARY|Invalid' "$OUT/memcheck.log" | head -5 | tee -a "$OUT/summary.txt"
fi

# 8. RACECHECK_FILTER=GTEST_FILTER: compute-sanitizer racecheck of those tests (limit
#    RACECHECK_LIMIT s), every report counted by message and source line (docs/cuda.md known gap 9:
#    which reports are racecheck's view of bar.arrive or of the exit without a cluster barrier).
if [[ -n ${RACECHECK_FILTER:-} ]]; then
  timeout "${RACECHECK_LIMIT:-150}" compute-sanitizer --tool racecheck --print-limit 100000000 \
    --show-backtrace device "$B/tests/cuda_tests" --gtest_filter="$RACECHECK_FILTER" \
    > /tmp/racecheck.log 2>&1
  summary "racecheck rc=$? (124 time limit) $(grep -E 'SUMMARY' /tmp/racecheck.log | tail -1) ($(stamp))"
  { grep -E '^========= [A-Z]' /tmp/racecheck.log | grep -v SUMMARY | sed 's/of size [0-9]* bytes//' |
      sed -E 's/\+0x[0-9a-f]+//g' | cut -c1-160 | sort | uniq -c | sort -rn | head -20
    grep -E '^=========     (at|and) ' /tmp/racecheck.log | grep -oE '[a-z_0-9]+\.cuh?:[0-9]+' |
      sort | uniq -c | sort -rn | head -20; } | tee "$OUT/racecheck_counts.txt"
fi
