#!/usr/bin/env bash
# Runs ON the H200 machine (device tool), carry .devdeps (scripts/device/pack_deps.sh): the server
# and the batched engine's closing checks in one call, logs to $OUT as they finish.
#   1. build tandem and cuda_tests from the working tree;
#   2. the GPU engine tests (spec == plain, graphs == eager, 256 requests batched == solo);
#   3. bench/canary.py through `tandem serve --device cuda`: N requests (default 10,000) at
#      concurrency 64, plain and MTP k = 3, each response bit for bit against plain decoding alone;
#   4. speculation control against plain on the shipped model's offline batches (diag_control.sh);
#   5. tandem bench on the Qwen3.5-27B shape at 32K (batch 1 / 8) with an 8K prefill.
set -uo pipefail
source scripts/device/devdeps_env.sh
build_cuda cuda_tests tandem
engine_tests "${ENGINE_LIMIT:-90}"

timeout "${CANARY_LIMIT:-300}" python3 bench/canary.py --binary $B/tandem --model models/tandem-tiny-qwen35 \
  -n "${CANARY_N:-10000}" -c 64 -k 3 --server-args "--device cuda" --out "$OUT/canary.json" \
  > "$OUT/canary.log" 2>&1
summary "canary rc=$? $(tail -1 "$OUT/canary.log") ($(stamp))"
grep -iE 'diverg|error|tok/s|req/s' "$OUT/canary.log" | head -20

TANDEM_BIN=$B/tandem timeout "${DIAG_LIMIT:-120}" bash scripts/device/diag_control.sh > /dev/null 2>&1
summary "control diag rc=$? ($(stamp))"; cat "$OUT/diag.txt" 2>/dev/null

[[ ${BENCH_LIMIT:-150} -gt 0 ]] && timeout "${BENCH_LIMIT:-150}" stdbuf -oL $B/tandem bench --device cuda \
  --synthetic configs/qwen3.5-27b.json --context 32768 --batch 1,8 --num-speculative-tokens 3 \
  --steps 6 --prefill-tokens 8192 --commit "${COMMIT:-unknown}" --json "$OUT/bench_27b_32k.json" \
  > "$OUT/bench_27b_32k.log" 2>&1
summary "bench 27B 32K rc=$? ($(stamp))"
grep -v '^model:\|^attention:\|^gdn:\|^tied' "$OUT/bench_27b_32k.log" | tail -8
