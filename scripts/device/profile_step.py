#!/usr/bin/env python3
"""Sums an ncu CSV (--metrics gpu__time_duration.sum --csv) by kernel name: where a step's time goes.

Usage: profile_step.py NCU_CSV [STEPS]  (STEPS: how many decode steps the capture covers)

ncu's --launch-count can end a capture mid-step, and a bench's warm-up steps are captured too:
count one kernel's launches against its launches per step to know STEPS, or read only the shares
and the per-launch times.
"""
import csv
import sys
from collections import defaultdict


def main() -> None:
    path = sys.argv[1]
    steps = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
    total_ns = defaultdict(float)
    count = defaultdict(int)
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0].split("<")[0].strip()
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        scale = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}
        total_ns[name] += value * scale.get(unit, 1.0)
        count[name] += 1
    grand = sum(total_ns.values())
    print(f"{'kernel':<48} {'launches':>9} {'ms/step':>9} {'us/launch':>10} {'share':>6}")
    for name, ns in sorted(total_ns.items(), key=lambda kv: -kv[1]):
        print(f"{name[:48]:<48} {count[name] / steps:>9.0f} {ns / 1e6 / steps:>9.3f} "
              f"{ns / 1e3 / count[name]:>10.2f} {100 * ns / grand:>5.1f}%")
    print(f"{'sum of kernel times':<48} {sum(count.values()) / steps:>9.0f} {grand / 1e6 / steps:>9.3f}")


if __name__ == "__main__":
    main()
