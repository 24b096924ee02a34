#!/usr/bin/env bash
# The README's first command: install what is missing, build, and generate text on the CPU with
# the small model shipped in models/, MTP speculation on. Extra arguments go to `tandem generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh --target tandem
model=models/tandem-tiny-qwen35
prompt="${PROMPT:-The Linux kernel is}"
exec build/tandem generate --model "$model" --prompt "$prompt" --max-tokens 80 \
  --speculative mtp --num-speculative-tokens 3 "$@"
