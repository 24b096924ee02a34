#!/usr/bin/env bash
# Runs ON the H200 machine (device tool): ncu of single decode-linear launches from kernel_bench,
# the full section set and the per-instruction stall samples, to find what bounds a kernel. Carry
# .devdeps (scripts/device/pack_deps.sh). Each entry of PROFILES is GROUP:KERNEL_REGEX:SKIP:NAME:
# kernel_bench group KERNEL_BENCH_ONLY=GROUP, the SKIP+1-th launch whose name matches the regex.
# Default: the FP8 kernel and the bf16 persistent kernel on gate|up at 1 row (linear_fp8 runs 25
# bf16 then 25 FP8 launches per shape and row count), FP8 on in_proj and down at 1 row.
# Out: profiles.tar.gz of NAME.txt (details), NAME_source.csv (SASS with stall samples) and
# NAME_stalls.txt (the raw stall metrics); the device returns at most 8 files.
# GROUP@ROWS runs only those row counts (KERNEL_BENCH_ROWS, groups linear_fp8_batch, linear_fp8
# and linear_batch), e.g. linear_fp8_batch@32:linear_fp8_wgmma_quad_kernel:10:NAME for gate|up's
# first call of 32 rows (each shape and row count runs 25 launches per mode up to 64 rows: 5
# warm-up, 20 timed; 13 above), or linear_batch@32:linear_wgmma_kernel:10:NAME for bf16's.
# KERNEL_NAME_BASE=demangled matches the regex against the demangled name with its template
# arguments, to pick one configuration (e.g. 'linear_batch_kernel<.*BatchCfg<4,.4,.4,.1>').
set -uo pipefail
source scripts/device/devdeps_env.sh
build_cuda kernel_bench
P=/tmp/profiles && rm -rf $P && mkdir -p $P
PROFILES=${PROFILES:-"linear_fp8:linear_fp8_kernel:10:fp8_gateup_n1 linear_fp8:linear_persistent_kernel:10:bf16_gateup_n1 linear_fp8:linear_fp8_kernel:110:fp8_inproj_n1 linear_fp8:linear_fp8_kernel:310:fp8_down_n1"}
for p in $PROFILES; do
  IFS=: read -r group regex skip name <<< "$p"
  rows=; [[ $group == *@* ]] && rows=${group#*@} && group=${group%@*}
  KERNEL_BENCH_ROWS=$rows KERNEL_BENCH_ONLY=$group timeout "${NCU_LIMIT:-150}" ncu --set full --import-source yes \
    --kernel-name-base "${KERNEL_NAME_BASE:-function}" \
    --kernel-name "regex:$regex" --launch-skip "$skip" --launch-count 1 --kill yes \
    -o "/tmp/$name" -f "$B/bench/kernel_bench" /tmp/kb.json > "/tmp/$name.ncu.log" 2>&1
  summary "ncu $name rc=$? ($(stamp))"
  cp "/tmp/$name.ncu.log" "$P/$name.ncu.log"  # what ncu matched, or why nothing
  ncu --import "/tmp/$name.ncu-rep" --page details --print-details all > "$P/$name.txt" 2>&1
  ncu --import "/tmp/$name.ncu-rep" --page source --csv --print-source sass > "$P/${name}_source.csv" 2>&1
  ncu --import "/tmp/$name.ncu-rep" --page raw --csv 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) >= 3:
    for k, u, v in zip(rows[0], rows[1], rows[2]):
        if ("stall" in k and "pct" not in k) or "dram__bytes" in k or "duration" in k or "throughput" in k:
            print(f"{k} [{u}] = {v}")' > "$P/${name}_stalls.txt"
  grep -E 'Duration|DRAM Throughput|Memory Throughput|Registers|Achieved Occupancy' "$P/$name.txt" | head -8 | tee -a "$OUT/summary.txt"
done
tar -czf "$OUT/profiles.tar.gz" -C /tmp profiles
