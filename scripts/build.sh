#!/usr/bin/env bash
# Configures and builds tandem into build/ (CUDA too where nvcc is installed; TANDEM_CUDA=OFF
# in the environment turns it off).
set -euo pipefail
cd "$(dirname "$0")/.."
cuda_flag=()
[ -n "${TANDEM_CUDA:-}" ] && cuda_flag=(-DTANDEM_CUDA="$TANDEM_CUDA")
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_flag[@]}" >/dev/null
cmake --build build -j "$(nproc)" "$@"
