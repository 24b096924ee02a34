#!/usr/bin/env bash
# Fails when a tracked C++/CUDA file differs from clang-format's output (.clang-format: Google,
# 100 columns). STYLE.md rule 10; run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.h' '*.hpp' '*.cpp' '*.cc' '*.cu' '*.cuh' 2>/dev/null || true)
if ((${#files[@]} == 0)); then
  mapfile -t files < <(find src apps tests bench -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh')
fi
clang-format --dry-run --Werror "${files[@]}"
echo "format: ${#files[@]} files clean"
