#!/usr/bin/env bash
# Runs ON the device machine: the kernel paths that are written and tested here but not yet
# measured (src/kernels/opt_in.h: `tandem bench --opt-in`), against production in ONE build (the
# opt-ins are off by default, so no baseline build or patch is needed). One call (carry .devdeps,
# timeout_s 600):
#   PART=1 scripts/device/run_opt_in.sh        (BATCHES: 8,32,128,256, or 8,32,64 on an 80 GB card)
# PART=1 (in order of what a figure is worth): the bitwise tests of the opt-in paths against
# production (conv vector against the scalar kernel; GDN row pairs against the per-sequence grid,
# in batches, through chains of folds); kernel_bench conv and gdr (each path beside production);
# the 27B bf16 bench at BATCHES with no opt-in and with all. PART=2: the FP8 prefill tests, the GPU
# engine tests with the same-bits opt-ins on (TANDEM_OPT_IN), the bench without and with each
# bf16 opt-in alone. PART=4: compute-sanitizer memcheck of the opt-in tests. PART=5 (short): the
# FP8 prefill tests and an 8K FP8 prefill with --fp8-prefill dequantize and tensor-cores (PART=12:
# and the production steps, bf16 and FP8, at 1, 8, 32 streams). PART=3: the 27B-FP8 bench with
# and without the opt-ins, its prefill of 8,192 tokens and a decode step carrying a 512-token chunk
# on either FP8 prefill path, kernel_bench linear_fp8_batch (production, its configurations, the
# prefill paths side by side). PART=6: the 27B bf16 plain step with each kernel class left out in turn
# (tandem bench --diag-skip), to read what each costs inside the step. PART=7: one call's worth of
# the above (bitwise tests, kernel_bench gdr, engine tests on the same-bits opt-ins, the bench
# without and with gdr-regs). PART=8 (shortest): the GDN forms' bitwise tests and
# kernel_bench gdr. PART=9 (OPT=name for PART=10): production in one build (the GDN forms' bitwise
# tests, the step at 8, 16, 32 and the last batch, kernel_bench gdr, engine tests), and with OPT
# the same step and engine tests with that same-bits opt-in beside it. PART=11 (OPT optional):
# decode attention (its bitwise and conformance tests, kernel_bench attention, the bf16 step at 8
# and 32 streams without and with OPT, the GPU engine tests with OPT on; FP8_32K=1: the FP8 step
# at 32K, batch 1, without and with). PART=13: FP8 (linear tests, engine tests, the 27B-FP8 step
# at 1 and 8 streams, kernel_bench linear_fp8, a step carrying a 512-token chunk on either FP8
# prefill path). PART=14: the FP8 linear tests, kernel_bench linear_fp8, the 27B-FP8 step at 1 and
# 8 streams, and at 32K; PART=15 the same and every GPU engine test. PART=17: production's
# headline table (bf16 and FP8 at every batch, 32K batch 1) and the GPU engine tests. PART=18:
# an opt-in's bitwise tests (FILTER_BITS) and the bf16 and FP8 steps without and with it (OPT).
# PART=19: a new FP8 production kernel (its tests, the FP8 step, kernel_bench, engine tests).
# PART=20: an FP8 opt-in at batch 1 (bitwise tests, kernel_bench linear_fp8, the step at 1K, 32K).
# PART=21: the bf16 item shapes' table and fit, production's FP8 steps (1K, 32K at batch 1).
# PART=22: the FP8 linear tests, the FP8 step without and with fp8-quad-halves, kernel_bench
# linear_fp8_batch at 8-64 rows, the GPU engine tests with the opt-in on.
set -uo pipefail
source scripts/device/devdeps_env.sh
if [[ ${PART:-1} == 8 ]]; then build_cuda cuda_tests kernel_bench
elif [[ $PART == 17 && -n ${SHORT:-} ]]; then build_cuda tandem
else build_cuda cuda_tests tandem kernel_bench; fi
# 128+ streams of the 27B do not fit an 80 GB card: there 8, 32, 64.
mem_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
default_batches=8,32,128,256
[[ ${mem_mib:-0} -lt 100000 ]] && default_batches=8,32,64
BATCHES=${BATCHES:-$default_batches}
summary "GPU $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), batches $BATCHES"
# kernel_bench's gdr group (production, pairs, per-sequence grid, registers), limit $1 s.
kernel_bench_gdr() {
  KERNEL_BENCH_ONLY=gdr COMMIT=opt-in timeout "$1" $B/bench/kernel_bench "$OUT/kernel_bench_gdr.json" \
    > "$OUT/kernel_bench_gdr.log" 2>&1
  summary "kernel_bench gdr rc=$? ($(stamp))"
  grep -E '^gdr recurrent\+norm batch' "$OUT/kernel_bench_gdr.log" | tee -a "$OUT/summary.txt"
}
ALL=gdr-regs
SAME_BITS=gdr-regs  # production's bits
FILTER='CudaRowInvariance.ConvVector*:CudaRowInvariance.GdrStream*:CudaRowInvariance.GdnBatch*:CudaRowInvariance.GatedDeltaRuleFold:Fp8Linear.TensorCorePrefill*'
if [[ ${PART:-1} == 1 ]]; then
  tests opt_in_bits 150 "$FILTER"
  KERNEL_BENCH_ONLY=conv,gdr COMMIT=opt-in timeout 90 $B/bench/kernel_bench \
    "$OUT/kernel_bench_conv_gdr.json" > "$OUT/kernel_bench_conv_gdr.log" 2>&1
  summary "kernel_bench conv,gdr rc=$? ($(stamp))"
  grep -E '^(conv1d|gdr recurrent\+norm batch)' "$OUT/kernel_bench_conv_gdr.log" | tee -a "$OUT/summary.txt"
  bench bf16_production $B 110 configs/qwen3.5-27b.json "$BATCHES"
  bench bf16_opt_in_all $B 110 configs/qwen3.5-27b.json "$BATCHES" --opt-in $ALL
elif [[ $PART == 2 ]]; then
  tests opt_in_fp8_prefill 60 'Fp8Linear.TensorCorePrefill*'
  # The whole engine on the opt-ins with production's bits (opt_in_env_test.cpp).
  TANDEM_OPT_IN=$SAME_BITS engine_tests 100
  bench bf16_production $B 110 configs/qwen3.5-27b.json "$BATCHES"
  bench bf16_gdr_regs $B 110 configs/qwen3.5-27b.json "$BATCHES" --opt-in gdr-regs
elif [[ $PART == 5 || $PART == 12 ]]; then  # the FP8 prefill on tensor cores (tests, 8K prefill)
  tests opt_in_fp8_prefill 60 'Fp8Linear.TensorCorePrefill*'
  for side in dequantize tensor_cores; do
    args=(--fp8-prefill ${side//_/-})
    bench fp8_prefill_$side $B 100 configs/qwen3.5-27b-fp8.json 1 --speculative none \
      --prefill-tokens 8192 "${args[@]}"
    grep -E 'prefill' "$OUT/fp8_prefill_$side.log" | tee -a "$OUT/summary.txt"
  done
  if [[ $PART == 12 ]]; then  # and production's steps, bf16 and FP8, at 1, 8, 32 streams
    bench bf16_default $B 80 configs/qwen3.5-27b.json 1,8,32
    bench fp8_default $B 80 configs/qwen3.5-27b-fp8.json 1,8,32
  fi
elif [[ $PART == 7 ]]; then  # one call: every bitwise test, the GDN kernels, the engine, the step
  tests opt_in_bits 150 "$FILTER"
  kernel_bench_gdr 60
  TANDEM_OPT_IN=$SAME_BITS engine_tests 100
  bench bf16_production $B 110 configs/qwen3.5-27b.json "$BATCHES"
  bench bf16_gdr_regs $B 110 configs/qwen3.5-27b.json "$BATCHES" --opt-in gdr-regs
elif [[ $PART == 8 ]]; then  # shortest: the GDN forms' bitwise tests, then their kernel bench
  tests gdr_forms_bits 100 'CudaRowInvariance.GdrStream*:CudaRowInvariance.GdnBatch*'
  kernel_bench_gdr 50
elif [[ $PART == 9 || $PART == 10 ]]; then  # production, and beside it an opt-in of its bits
  # Run so far: gdr-fold-fuse (e354806), gdr-row-prefetch (f0136db), gdr-state-ring (628602a),
  # gdr-ring-ahead (cbfffa4); all removed since (docs/benchmarks-history.md, "Eighteenth session");
  # gdr-half-heads (1085f04), removed (docs/benchmarks-history.md, "Twenty-first session").
  OPT=${OPT:-}
  tests forms_bits 90 'CudaRowInvariance.GdrStream*:CudaRowInvariance.GdnBatch*:CudaRowInvariance.ConvVector*:CudaRowInvariance.GatedDeltaRuleFold'
  bench bf16_default $B 60 configs/qwen3.5-27b.json 8,16,32,"${BATCHES##*,}"
  if [[ -n $OPT ]]; then
    bench bf16_${OPT//-/_} $B 60 configs/qwen3.5-27b.json 8,16,32,"${BATCHES##*,}" --opt-in $OPT
  fi
  kernel_bench_gdr 40
  TANDEM_OPT_IN=$OPT engine_tests 80
elif [[ $PART == 11 ]]; then  # decode attention: tests, kernel bench, steps, engine (and OPT)
  # Run so far: attn-ring-sets, attn-ring-qregs (production since), attn-ring-deep (removed;
  # docs/cuda.md gap 4).
  OPT=${OPT:-}
  tests attn_bits 150 'CudaRowInvariance.Attention*:CudaConformance.Attention*'
  KERNEL_BENCH_ONLY=attention COMMIT=production timeout 100 $B/bench/kernel_bench \
    "$OUT/kernel_bench_attention.json" > "$OUT/kernel_bench_attention.log" 2>&1
  summary "kernel_bench attention rc=$? ($(stamp))"
  grep -E '^attention' "$OUT/kernel_bench_attention.log" | tee -a "$OUT/summary.txt"
  bench bf16_default $B 60 configs/qwen3.5-27b.json 8,32
  [[ -n $OPT ]] && bench bf16_${OPT//[-,]/_} $B 60 configs/qwen3.5-27b.json 8,32 --opt-in $OPT
  TANDEM_OPT_IN=$OPT engine_tests 120
  if [[ -n ${FP8_32K:-} ]]; then  # verify / decode at 32K, batch 1 (issue 16's 1.10)
    CONTEXT=32768 bench fp8_32k $B 120 configs/qwen3.5-27b-fp8.json 1
    [[ -n $OPT ]] && CONTEXT=32768 bench fp8_32k_${OPT//[-,]/_} $B 120 \
      configs/qwen3.5-27b-fp8.json 1 --opt-in $OPT
  fi
elif [[ $PART == 13 ]]; then  # FP8: the linear tests, the engine tests, the kernel bench, the
  # 27B-FP8 step at 1 and 8 streams, and a step carrying a 512-token prefill chunk on either FP8
  # prefill path. (Run 2026-12-06 with fp8-staged-8 as an opt-in; production since.)
  tests fp8_linear 200 'Fp8Linear.*'
  timeout 150 stdbuf -oL $B/tests/cuda_tests \
    --gtest_filter='Fp8EngineCuda.*' > "$OUT/fp8_engine.log" 2>&1
  summary "fp8 engine tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/fp8_engine.log" | tr '\n' ' ') ($(stamp))"
  grep -E '^\[  FAILED  \]|tensor-core prefill batch|fp8 cuda batch' "$OUT/fp8_engine.log" | tee -a "$OUT/summary.txt"
  bench fp8_default $B 120 configs/qwen3.5-27b-fp8.json 1,8 --speculative none
  KERNEL_BENCH_ONLY=linear_fp8 COMMIT=staged-8 timeout 120 $B/bench/kernel_bench \
    "$OUT/kernel_bench_linear_fp8.json" > "$OUT/kernel_bench_linear_fp8.log" 2>&1
  summary "kernel_bench linear_fp8 rc=$? ($(stamp))"
  grep -E '^linear fp8 \[.*n=(1|4|8):' "$OUT/kernel_bench_linear_fp8.log" | tee -a "$OUT/summary.txt"
  for side in dequantize tensor_cores; do  # what a running batch pays for an arriving prompt
    bench fp8_mixed_$side $B 90 configs/qwen3.5-27b-fp8.json 8 --speculative none \
      --mixed-prefill-tokens 512 --fp8-prefill ${side//_/-}
    grep -E 'mixed' "$OUT/fp8_mixed_$side.log" | tee -a "$OUT/summary.txt"
  done
elif [[ $PART == 14 || $PART == 15 ]]; then  # FP8 decode linear: tests, kernel bench, the
  # 27B-FP8 step at 1 and 8 streams, and at 32K batch 1 (verify / decode); PART=15 also every GPU
  # engine test (bf16 and FP8). (PART=14 ran 2026-12-06 with fp8-staged-8 an opt-in.)
  tests fp8_linear 200 'Fp8Linear.*'
  if [[ $PART == 15 ]]; then
    timeout 200 stdbuf -oL $B/tests/cuda_tests --gtest_filter='*EngineCuda*' \
      > "$OUT/cuda_engine.log" 2>&1
    summary "cuda engine tests (bf16 and FP8) rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/cuda_engine.log" | tr '\n' ' ') ($(stamp))"
    grep -E '^\[  FAILED  \]|differ' "$OUT/cuda_engine.log" | tee -a "$OUT/summary.txt"
  fi
  KERNEL_BENCH_ONLY=linear_fp8 COMMIT=staging timeout 120 $B/bench/kernel_bench \
    "$OUT/kernel_bench_linear_fp8.json" > "$OUT/kernel_bench_linear_fp8.log" 2>&1
  summary "kernel_bench linear_fp8 rc=$? ($(stamp))"
  grep -E '^linear fp8 \[.*n=(1|4|8):' "$OUT/kernel_bench_linear_fp8.log" | tee -a "$OUT/summary.txt"
  bench fp8_default $B 120 configs/qwen3.5-27b-fp8.json 1,8
  CONTEXT=32768 bench fp8_32k $B 150 configs/qwen3.5-27b-fp8.json 1
elif [[ $PART == 16 ]]; then  # the FP8 step at 1 and 8 streams without and with OPT (same bits;
  # run 2026-12-06 with fp8-rms-32, removed since: docs/fp8.md)
  bench fp8_default $B 120 configs/qwen3.5-27b-fp8.json 1,8 --speculative none
  bench fp8_${OPT//-/_} $B 120 configs/qwen3.5-27b-fp8.json 1,8 --speculative none --opt-in $OPT
  bench fp8_default_again $B 120 configs/qwen3.5-27b-fp8.json 1,8 --speculative none
elif [[ $PART == 17 ]]; then  # the headline table of production (docs/benchmarks.md, "Where
  # tandem stands"): bf16 at every batch with the MTP projection at acceptance 0.6, FP8 likewise,
  # both at 32K batch 1, then the GPU engine tests. About 8 minutes.
  # SHORT=1: 1, 8, 32 and the last batch, no 32K and no engine tests (~4 min).
  all_batches=1,8,16,32,64,128,256; [[ ${mem_mib:-0} -lt 100000 ]] && all_batches=1,8,16,32,64
  [[ -n ${SHORT:-} ]] && all_batches=1,8,32,${all_batches##*,}
  bench bf16_table $B 170 configs/qwen3.5-27b.json "$all_batches" --acceptance 0.6
  bench fp8_table $B 130 configs/qwen3.5-27b-fp8.json "1,8,32,${all_batches##*,}" --acceptance 0.6
  if [[ -z ${SHORT:-} ]]; then
    CONTEXT=32768 bench bf16_32k $B 70 configs/qwen3.5-27b.json 1
    CONTEXT=32768 bench fp8_32k $B 70 configs/qwen3.5-27b-fp8.json 1
    engine_tests 110
  fi
elif [[ $PART == 18 ]]; then  # an opt-in's A/B (OPT=name; several: space-separated, each
  # alone): its bitwise tests (FILTER_BITS), then the FP8 and bf16 steps without and with it
  # (FP8_ONLY=1: the FP8 steps only; FP8_STEP_BATCHES: their batches, default 8, 32 and the last);
  # KB_ROWS=n,...: kernel_bench linear_fp8_batch at those rows;
  # ENGINE=1: and production's GPU engine tests. Run 2026-12-06
  # (H100) with token-loads-ahead, whose FP8 half (fp8_tokens_kernel) is production since.
  OPT=${OPT:?PART=18 needs OPT=name}
  [[ -n ${FILTER_BITS:-} ]] && tests opt_in_bits 150 "$FILTER_BITS"
  for side in default $OPT; do
    args=(); [[ $side != default ]] && args=(--opt-in "$side")
    bench fp8_${side//-/_} $B 100 configs/qwen3.5-27b-fp8.json "${FP8_STEP_BATCHES:-8,32,${BATCHES##*,}}" "${args[@]}"
    [[ -z ${FP8_ONLY:-} ]] &&
      bench bf16_${side//-/_} $B 60 configs/qwen3.5-27b.json 16,32,"${BATCHES##*,}" "${args[@]}"
  done
  if [[ -n ${KB_ROWS:-} ]]; then  # KB_ROWS=32,...: kernel_bench linear_fp8_batch at those rows
    KERNEL_BENCH_ROWS=$KB_ROWS KERNEL_BENCH_ONLY=linear_fp8_batch COMMIT=opt-in timeout 120 \
      $B/bench/kernel_bench "$OUT/kernel_bench_fp8_batch.json" > "$OUT/kernel_bench_fp8_batch.log" 2>&1
    summary "kernel_bench linear_fp8_batch rows $KB_ROWS rc=$? ($(stamp))"
    grep -E '^linear fp8 \[' "$OUT/kernel_bench_fp8_batch.log" | tee -a "$OUT/summary.txt"
  fi
  [[ -n ${ENGINE:-} ]] && engine_tests 150
elif [[ $PART == 19 ]]; then  # a new FP8 production kernel: the FP8 linear tests, the 27B-FP8
  # step at FP8_BATCHES (default 1, 8, 32 and the last batch), kernel_bench linear_fp8_batch at
  # KB_ROWS (default 32,48,64,128; none: skipped), the GPU engine tests.
  tests fp8_linear 200 'Fp8Linear.*:CudaConformanceFp8*'
  bench fp8_production $B 150 configs/qwen3.5-27b-fp8.json "${FP8_BATCHES:-1,8,32,${BATCHES##*,}}"
  if [[ ${KB_ROWS:-} != none ]]; then
    KERNEL_BENCH_ROWS=${KB_ROWS:-32,48,64,128} KERNEL_BENCH_ONLY=linear_fp8_batch \
      COMMIT=production timeout 150 $B/bench/kernel_bench "$OUT/kernel_bench_fp8_batch.json" \
      > "$OUT/kernel_bench_fp8_batch.log" 2>&1
    summary "kernel_bench linear_fp8_batch rc=$? ($(stamp))"
    grep -E '^linear fp8 \[' "$OUT/kernel_bench_fp8_batch.log" | tee -a "$OUT/summary.txt"
  fi
  engine_tests 150
elif [[ $PART == 20 ]]; then  # an FP8 opt-in at batch 1 (OPT=name): its bitwise tests
  # (FILTER_BITS), kernel_bench linear_fp8 at KB_ROWS (default 1,4), the 27B-FP8 step at batch 1,
  # 1K and 32K, without, with and again without it. Run 2026-12-06 with fp8-deep-ring.
  # Several opt-ins: OPT space-separated, each alone; FP8_BATCHES (default 1,8); CTX32K=1: also
  # the step at 32K, batch 1; ENGINE=1: the engine tests with them all on; KB_ROWS=none: no
  # kernel_bench; NO_AGAIN=1: no second default run. A bf16-* opt-in also runs kernel_bench
  # linear_batch at KB_BF16_ROWS (default 1,4,5,8; none: skipped).
  OPT=${OPT:?PART=20 needs OPT=name}
  [[ -n ${FILTER_BITS:-} ]] && tests opt_in_bits 200 "$FILTER_BITS"
  if [[ ${KB_ROWS:-} != none ]]; then
    KERNEL_BENCH_ROWS=${KB_ROWS:-1,4} KERNEL_BENCH_ONLY=linear_fp8 COMMIT=opt-in timeout 120 \
      $B/bench/kernel_bench "$OUT/kernel_bench_fp8.json" > "$OUT/kernel_bench_fp8.log" 2>&1
    summary "kernel_bench linear_fp8 rows ${KB_ROWS:-1,4} rc=$? ($(stamp))"
    grep -E '^linear fp8 \[' "$OUT/kernel_bench_fp8.log" | tee -a "$OUT/summary.txt"
  fi
  if [[ $OPT == *bf16-* && ${KB_BF16_ROWS:-} != none ]]; then  # kernel_bench linear_batch
    KERNEL_BENCH_ROWS=${KB_BF16_ROWS:-1,4,5,8} KERNEL_BENCH_ONLY=linear_batch COMMIT=opt-in \
      timeout 150 $B/bench/kernel_bench "$OUT/kernel_bench_bf16.json" > "$OUT/kernel_bench_bf16.log" 2>&1
    summary "kernel_bench linear_batch rows ${KB_BF16_ROWS:-1,4,5,8} rc=$? ($(stamp))"
    grep -E '^linear decode \[' "$OUT/kernel_bench_bf16.log" | tee -a "$OUT/summary.txt"
  fi
  again=default_again; [[ -n ${NO_AGAIN:-} ]] && again=
  # An opt-in named bf16-* runs the bf16 step at BF16_BATCHES (default 8,32) instead, and the
  # default sides run it too when one does.
  for side in default $OPT $again; do
    args=(); [[ $side != default* ]] && args=(--opt-in "$side")
    if [[ $side != bf16-* ]]; then
      bench fp8_${side//-/_} $B 90 configs/qwen3.5-27b-fp8.json "${FP8_BATCHES:-1,8}" "${args[@]}"
      [[ -n ${CTX32K:-} ]] &&
        CONTEXT=32768 bench fp8_32k_${side//-/_} $B 90 configs/qwen3.5-27b-fp8.json 1 "${args[@]}"
    fi
    if [[ $side == bf16-* || ($side == default* && $OPT == *bf16-*) ]]; then
      bench bf16_${side//-/_} $B 90 configs/qwen3.5-27b.json "${BF16_BATCHES:-8,32}" "${args[@]}"
    fi
  done
  # ENGINE=1: the GPU engine tests with every OPT on (TANDEM_OPT_IN).
  [[ -n ${ENGINE:-} ]] && TANDEM_OPT_IN=${OPT// /,} engine_tests 150
elif [[ $PART == 21 ]]; then  # the twenty-sixth session's open measurements, one call: the bf16
  # wgmma kernel's forced item shapes bitwise (LinearDecodeBatch), kernel_bench linear_shapes at
  # KB_ROWS (default 8..256) and the wave model fitted to it (bench/fit_wave_model.py), production's
  # FP8 steps at FP8_BATCHES (default 1, 8, 32 and the last batch; the configuration estimate of
  # linear_fp8_wgmma_shape.h), and batch 1 at 1K and 32K.
  tests linear_decode_batch 300 'CudaRowInvariance.LinearDecodeBatch'
  KERNEL_BENCH_ROWS=${KB_ROWS:-8,16,24,32,48,64,96,128,192,256} KERNEL_BENCH_ONLY=linear_shapes \
    COMMIT=production timeout 200 $B/bench/kernel_bench "$OUT/kernel_bench_shapes.json" \
    > "$OUT/kernel_bench_shapes.log" 2>&1
  summary "kernel_bench linear_shapes rc=$? ($(stamp))"
  grep -E '^linear shapes \[' "$OUT/kernel_bench_shapes.log" | tee -a "$OUT/summary.txt"
  python3 bench/fit_wave_model.py "$OUT/kernel_bench_shapes.json" --min-rows 5 > "$OUT/fit_bf16.txt" 2>&1
  grep -E 'alpha|pick against|production' "$OUT/fit_bf16.txt" | tail -12 | tee -a "$OUT/summary.txt"
  bench fp8_production $B 150 configs/qwen3.5-27b-fp8.json "${FP8_BATCHES:-1,8,32,${BATCHES##*,}}"
  # (2026-12-07 on an H200 with fp8-deep-ring beside it: the deep ring is production for 1 row since.)
  bench fp8_1k $B 100 configs/qwen3.5-27b-fp8.json 1
  CONTEXT=32768 bench fp8_32k $B 100 configs/qwen3.5-27b-fp8.json 1
elif [[ $PART == 22 ]]; then  # the twenty-eighth session's open measurements, one call (~7 min
  # on an H200): every FP8 linear test (the class halves' among them), the 27B-FP8 step without
  # and with the opt-in fp8-quad-halves at FP8_BATCHES (default 8, 32, 48, 64 and the last batch:
  # its estimate changes the picks at 33+ rows), kernel_bench linear_fp8_batch at KB_ROWS (default
  # 8, 12, 16, 48, 64: the quads against the batched and 8-row kernels below 17 rows, the halves
  # at 33-64), the GPU engine tests with the opt-in on. Then PART=17 SHORT=1 in a second call.
  tests fp8_linear 170 'Fp8Linear.*:CudaConformanceFp8*'
  for side in default fp8-quad-halves; do
    args=(); [[ $side != default ]] && args=(--opt-in "$side")
    bench fp8_${side//-/_} $B 120 configs/qwen3.5-27b-fp8.json "${FP8_BATCHES:-8,32,48,64,${BATCHES##*,}}" "${args[@]}"
  done
  KERNEL_BENCH_ROWS=${KB_ROWS:-8,12,16,48,64} KERNEL_BENCH_ONLY=linear_fp8_batch COMMIT=halves \
    timeout 150 $B/bench/kernel_bench "$OUT/kernel_bench_fp8_batch.json" > "$OUT/kernel_bench_fp8_batch.log" 2>&1
  summary "kernel_bench linear_fp8_batch rc=$? ($(stamp))"
  grep -E '^linear fp8 \[' "$OUT/kernel_bench_fp8_batch.log" | tee -a "$OUT/summary.txt"
  TANDEM_OPT_IN=fp8-quad-halves engine_tests 150
elif [[ $PART == 6 ]]; then  # where the step's time goes: each kernel class left out in turn
  # (--diag-skip: timing only, the outputs are garbage), plain decode at 8, 32 (and 256 on an H200).
  diag_batches=8,32; [[ ${mem_mib:-0} -ge 100000 ]] && diag_batches=8,32,256
  for skip in none gdr conv attention gdr,conv,attention; do
    args=(); [[ $skip != none ]] && args=(--diag-skip $skip)
    bench bf16_skip_${skip//,/_} $B 100 configs/qwen3.5-27b.json "${DIAG_BATCHES:-$diag_batches}" \
      --speculative none "${args[@]}"
  done
elif [[ $PART == 4 ]]; then
  timeout 200 compute-sanitizer --tool memcheck $B/tests/cuda_tests --gtest_filter="$FILTER" \
    > "$OUT/memcheck_opt_in.log" 2>&1
  summary "memcheck opt-in tests rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_opt_in.log" | tail -1) ($(stamp))"
else
  bench fp8_production $B 150 configs/qwen3.5-27b-fp8.json "$BATCHES"
  bench fp8_opt_in_all $B 150 configs/qwen3.5-27b-fp8.json "$BATCHES" --opt-in $ALL
  for side in dequantize tensor_cores; do  # FP8 prefill of an 8K prompt, and steps carrying a chunk
    args=(--fp8-prefill ${side//_/-})
    bench fp8_prefill_$side $B 120 configs/qwen3.5-27b-fp8.json 1 --speculative none \
      --prefill-tokens 8192 --mixed-prefill-tokens 512 "${args[@]}"
    grep -E 'prefill|mixed' "$OUT/fp8_prefill_$side.log" | tee -a "$OUT/summary.txt"
  done
  KERNEL_BENCH_ONLY=linear_fp8_batch COMMIT=opt-in timeout 200 $B/bench/kernel_bench \
    "$OUT/kernel_bench_fp8_batch.json" > "$OUT/kernel_bench_fp8_batch.log" 2>&1
  summary "kernel_bench linear_fp8_batch rc=$? ($(stamp))"
  grep -E '^linear fp8 \[' "$OUT/kernel_bench_fp8_batch.log" | tee -a "$OUT/summary.txt"
fi
# A call returns only a few files: everything but the summary goes back in one archive.
(cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=summary.txt -- *.json *.log 2>/dev/null &&
  rm -f -- *.json *.log)
