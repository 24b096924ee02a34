#!/usr/bin/env bash
# Runs ON the H200 (device tool): where batched MTP's time goes on the shipped model, for
# speculation control. Builds the committed sources (.devdeps/head, scripts/device/pack_deps.sh)
# and runs offline batches, plain, adaptive and fixed k, printing the engine's counters.
set -uo pipefail
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
if [[ -z ${TANDEM_BIN:-} ]]; then  # else: a binary built already (run_serve.sh)
  source scripts/device/devdeps_env.sh
  args=("${cmake_args[@]}" -DTANDEM_TESTS=OFF)
  B=/tmp/build-head
  cmake -S .devdeps/head -B $B "${args[@]}" > "$OUT/build.log" 2>&1 && ninja -C $B -j16 tandem >> "$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
  TANDEM_BIN=$B/tandem
fi
for spec in "${NTOK:-96}:64" "${LONG:-400}:64" "${LONG:-400}:256"; do
  n=${spec%%:*} seqs=${spec##*:}
  python3 -c "
import json, random
r = random.Random(9)
for i in range(256):
    print(json.dumps({'prompt_ids': [r.randrange(8192) for _ in range(r.randrange(8, 200))], 'max_tokens': $n}))
" > /tmp/p.jsonl
  for s in "none" "mtp --num-speculative-tokens 3" "mtp --num-speculative-tokens 3 --speculation-control fixed" \
           "mtp --num-speculative-tokens 1 --speculation-control fixed"; do
    echo "256 x $n, --max-num-seqs $seqs, --speculative $s: $($TANDEM_BIN generate --device cuda \
      --model models/tandem-tiny-qwen35 --prompts /tmp/p.jsonl --ignore-eos --max-num-seqs $seqs \
      --speculative $s --output /tmp/o.jsonl 2>&1 > /dev/null | tail -1)" | tee -a "$OUT/diag.txt"
  done
done
