# Sourced ON the H200 by the device scripts (run_batch.sh, run_linear_batch.sh, run_serve.sh):
# sets OUT (created), the clock and the `stamp` and `summary` helpers, writes the GPU's name into
# $OUT/build.log, points pkg-config and the loader at .devdeps/ (scripts/device/pack_deps.sh) and
# fills cmake_args for a CUDA release build, adding the .devdeps CMake configs of whatever the
# image lacks; then build_cuda, engine_tests, tests and bench, the scripts' common steps. Run from
# the repository root.
# .devdeps/usr and .devdeps/head travel packed (usr.tar.xz, head.tar.xz, from pack_deps.sh), to
# keep the call within 64 MiB.
[[ -f .devdeps/usr.tar.xz && ! -d .devdeps/usr ]] && tar -xJf .devdeps/usr.tar.xz -C .devdeps
[[ -f .devdeps/head.tar.xz && ! -d .devdeps/head ]] && tar -xJf .devdeps/head.tar.xz -C .devdeps
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "$(( $(date +%s) - t0 ))s"; }
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/build.log" 2>&1
D=$PWD/.devdeps/usr A=x86_64-linux-gnu
cmake_args=(-G Ninja -DTANDEM_CUDA=ON -DCMAKE_BUILD_TYPE=Release)
mkdir -p /tmp/devdeps-pc
for pc in "$D/lib/$A/pkgconfig/"*.pc; do sed "s|^prefix=.*|prefix=$D|" "$pc" > "/tmp/devdeps-pc/$(basename "$pc")"; done
export PKG_CONFIG_PATH=/tmp/devdeps-pc LD_LIBRARY_PATH=$D/lib/$A:${LD_LIBRARY_PATH:-}
for h in nlohmann/json.hpp CLI/CLI.hpp fmt/core.h gtest/gtest.h; do
  [[ -f /usr/include/$h ]] && continue
  case $h in
    fmt/core.h) cmake_args+=(-Dfmt_DIR=$D/lib/$A/cmake/fmt) ;;
    gtest/gtest.h) cmake_args+=(-DGTest_DIR=$D/lib/$A/cmake/GTest) ;;
    CLI/CLI.hpp) cmake_args+=(-DCLI11_DIR=$D/share/cmake/CLI11) ;;
    nlohmann/json.hpp) cmake_args+=(-Dnlohmann_json_DIR=$D/share/cmake/nlohmann_json) ;;
  esac
done
command -v pkg-config > /dev/null || cmake_args+=(-DPKG_CONFIG_EXECUTABLE=$PWD/.devdeps/bin/pkgconf)
echo 'int main(){}' | g++ -Wno-error=dangling-reference -Werror -x c++ - -o /dev/null 2>/dev/null &&
  cmake_args+=("-DCMAKE_CXX_FLAGS=-Wno-error=dangling-reference")

# Builds the given targets into B=/tmp/build-cuda (appending to $OUT/build.log); exits on failure.
build_cuda() {
  B=${BUILD_DIR:-/tmp/build-cuda}
  if ! { cmake -S . -B $B "${cmake_args[@]}" >> "$OUT/build.log" 2>&1 &&
         ninja -C $B -j16 "$@" >> "$OUT/build.log" 2>&1; }; then
    summary "build FAIL ($(stamp))"; grep -B2 -A6 -m4 'error' "$OUT/build.log" | tail -40; exit 1
  fi
  summary "build ok ($(stamp))"
}

# The GPU engine tests (spec == plain, graphs == eager, 256 requests batched == solo), limit $1 s.
engine_tests() {
  timeout "$1" stdbuf -oL $B/tests/cuda_tests --gtest_filter='*EngineCuda*' > "$OUT/cuda_engine.log" 2>&1
  summary "cuda engine tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/cuda_engine.log" | tr '\n' ' ') ($(stamp))"
  grep -E '^\[  FAILED  \]|batch exactness|gpu vs cpu' "$OUT/cuda_engine.log" | head -20
}

# tests NAME LIMIT FILTER: $B's cuda_tests with a gtest filter, the result line into the summary.
tests() {
  timeout "$2" stdbuf -oL $B/tests/cuda_tests --gtest_filter="$3" > "$OUT/$1.log" 2>&1
  summary "$1 rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/$1.log" | tr '\n' ' ') ($(stamp))"
  grep -E '^\[  FAILED  \]' "$OUT/$1.log" | head -20 | tee -a "$OUT/summary.txt"
}

# bench NAME BUILD LIMIT CONFIG BATCHES [ARGS...]: tandem bench of a synthetic config at 1K (or
# $CONTEXT) with k = 3 (JSON and log under $OUT), its table rows into the summary.
bench() {
  local name=$1 build=$2 limit=$3 config=$4 batches=$5
  shift 5
  timeout "$limit" stdbuf -oL $build/tandem bench --device cuda --synthetic "$config" \
    --context "${CONTEXT:-1024}" --batch "$batches" --num-speculative-tokens 3 --steps 6 --commit "$name" \
    --json "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  summary "$name rc=$? ($(stamp))"
  grep -E '^ *[0-9]+ +[0-9]+ ' "$OUT/$name.log" | tee -a "$OUT/summary.txt"
}
