#!/usr/bin/env bash
# Runs ON the H200 machine (device tool; carry .devdeps): the class-split kernel's exchange forms
# (linear_classes_set_form) checked bitwise (CudaRowInvariance.LinearDecodeBatch: failures counted
# per form), then ncu of form 1 and form 0 on gate|up at 256 rows (scripts/device/profile_linear.sh;
# the kernel bench's linear_classes group runs forms 1, 0, 2, ... at n = 65, 128, 256, 13 launches
# each, so launch 32 of a form is its first timed one at 256 rows).
set -uo pipefail
source scripts/device/devdeps_env.sh
build_cuda cuda_tests kernel_bench
if [[ -z ${SKIP_TESTS:-} ]]; then
  timeout 150 stdbuf -oL $B/tests/cuda_tests --gtest_filter='CudaRowInvariance.LinearDecodeBatch' \
    > $OUT/linear_tests.log 2>&1
  summary "decode batch rc=$? ($(stamp))"
  grep -oE "classes_form=[0-9]" $OUT/linear_tests.log | sort | uniq -c | tee -a $OUT/summary.txt
fi
KERNEL_NAME_BASE=mangled NCU_LIMIT=150 PROFILES="linear_classes:ClassCfgILi128ELi128ELi2ELi2ELi4ELi1ELb0EEELNS1_10ClassStoreE0E:31:f1_gateup_n256 linear_classes:ClassCfgILi128ELi128ELi2ELi1ELi5ELi2ELb1EEELNS1_10ClassStoreE0E:31:f0_gateup_n256" \
  bash scripts/device/profile_linear.sh
