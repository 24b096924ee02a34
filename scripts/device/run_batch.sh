#!/usr/bin/env bash
# Runs ON the H200 machine (device tool): the batched engine's checks and benchmarks in one call,
# in priority order, each part under its own time limit, logs written to $OUT as they finish (so
# that a call cut short still returns what ran). Carry .devdeps (scripts/device/pack_deps.sh).
#   1. build cuda_tests and tandem;
#   2. cuda_tests: conformance and bitwise row invariance of every batched op, the engine on the
#      GPU (spec == plain, graphs == eager, 256 requests batched == solo);
#   3. tandem bench on the Qwen3.5-27B shape: batch 1 / 8 / 32 (/ more: BATCHES) at 1K, plain,
#      verify k = 1..3 and MTP drafts, as fractions of the memory and tensor-core bounds;
#   4. compute-sanitizer memcheck on an offline batch with k = 8 and the zero-accept oracle;
#   5. the shipped model's offline batch throughput, plain and MTP.
set -uo pipefail
source scripts/device/devdeps_env.sh
build_cuda cuda_tests tandem

# The engine first (it needs every kernel), then the kernels' conformance and invariance.
engine_tests "${ENGINE_LIMIT:-70}"
timeout "${TESTS_LIMIT:-100}" stdbuf -oL $B/tests/cuda_tests --gtest_filter="${KERNEL_FILTER:--*EngineCuda*}" \
  > "$OUT/cuda_tests.log" 2>&1
summary "cuda kernel tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/cuda_tests.log" | tr '\n' ' ') ($(stamp))"
grep -E '^\[  FAILED  \]' "$OUT/cuda_tests.log" | head -30
sed -n '/^op  *cases/,$p' "$OUT/cuda_tests.log" | head -45

[[ ${BENCH_LIMIT:-90} -gt 0 ]] && timeout "${BENCH_LIMIT:-90}" stdbuf -oL $B/tandem bench --device cuda --synthetic configs/qwen3.5-27b.json \
  --context 1024 --batch "${BATCHES:-1,8,32}" --num-speculative-tokens 3 --steps "${STEPS:-6}" \
  --commit "${COMMIT:-unknown}" --json "$OUT/bench_27b.json" > "$OUT/bench_27b.log" 2>&1
summary "bench 27B rc=$? ($(stamp))"
grep -v '^model:\|^attention:\|^gdn:\|^tied' "$OUT/bench_27b.log" | tail -8

python3 - <<'PY' > /tmp/prompts.jsonl
import json, random
r = random.Random(5)
for i in range(12):
    print(json.dumps({"prompt_ids": [r.randrange(2048) for _ in range(r.randrange(1, 90))], "max_tokens": 12}))
PY
timeout "${MEMCHECK_LIMIT:-50}" compute-sanitizer --tool memcheck --error-exitcode 9 $B/tandem generate \
  --device cuda --model tests/fixtures/models/small --prompts /tmp/prompts.jsonl --max-num-seqs 4 \
  --ignore-eos --speculative oracle --oracle-pattern none --num-speculative-tokens 8 \
  --max-num-batched-tokens 128 --output "$OUT/memcheck_results.jsonl" > "$OUT/memcheck.log" 2>&1
summary "memcheck batch k=8 none rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) ($(stamp))"

python3 - <<'PY' > /tmp/tiny.jsonl
import json, random
r = random.Random(9)
for i in range(256):
    print(json.dumps({"prompt_ids": [r.randrange(8192) for _ in range(r.randrange(8, 200))], "max_tokens": 96}))
PY
for spec in "--speculative none" "--speculative mtp --num-speculative-tokens 3"; do
  timeout "${TINY_LIMIT:-25}" $B/tandem generate --device cuda --model models/tandem-tiny-qwen35 --prompts /tmp/tiny.jsonl \
    --ignore-eos --max-num-seqs 64 $spec --output /tmp/tiny_out.jsonl > /dev/null 2>> "$OUT/tiny_batch.log"
  summary "tiny batch 256 x 96 ($spec): $(tail -1 "$OUT/tiny_batch.log") ($(stamp))"
done
