#!/usr/bin/env bash
# The README's second command (and what CI runs): install what is missing, build everything, run
# every test with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/check_format.sh
scripts/check_layers.sh
scripts/build.sh
# Tests run in parallel, one OpenMP thread each; passive waiting keeps idle OpenMP workers from
# spinning on cores that other tests need.
export OMP_WAIT_POLICY=PASSIVE
cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900
