#!/usr/bin/env python3
"""Fits the wave model of a wgmma decode kernel's item configurations to kernel_bench JSON.

A call of out_f weight rows, `in` k and n tokens in a configuration of tile_m x tile_n items runs
items = ceil(out_f / tile_m) * ceil(n / tile_n) items on a persistent grid of sms * blocks_per_sm
blocks, so its busiest block runs waves = ceil(items / slots) of them; the model is
us = waves * (alpha * in + beta), alpha and beta per configuration by least squares. This is how
src/kernels/linear/linear_fp8_wgmma_shape.h's rates were found (2026-12-07, H100); the same table
for the bf16 wgmma kernel comes from `KERNEL_BENCH_ONLY=linear_shapes` (its "wgmma TxN" rows).

    python3 bench/fit_wave_model.py kb.json [more.json ...] [--min-rows 65] [--sms 132]

(linear_fp8_wgmma_shape.h's rates: the twenty-sixth session's `b/` and `c/` files of
bench/results/h100-2026-12-07.tar.xz with --min-rows 64.)

Reads the rows named "linear fp8 decode n=N wgmma ... [out_f,in]" (FP8) or "linear decode n=N
wgmma TxN [out_f,in]" (bf16); 64-row items run two blocks per SM, the others one. Prints each
configuration's alpha (us per 1,000 k) and beta (us), the model's worst relative error, and per
call the model's pick against the fastest measured and against production's time.
"""
import argparse
import json
import math
import re
from collections import defaultdict

ROW = re.compile(r"linear (?:fp8 )?decode n=(\d+) (.+?) \[(\d+),(\d+)\]")
SHAPE = re.compile(r"wgmma (\d+)x(\d+)")


def load(paths):
    """{(out_f, in, n): {name: us}} from kernel_bench JSON files."""
    table = defaultdict(dict)
    for path in paths:
        with open(path) as f:
            for row in json.load(f)["rows"]:
                m = ROW.match(row["what"])
                if m:
                    n, name, out_f, k = int(m[1]), m[2], int(m[3]), int(m[4])
                    table[(out_f, k, n)][name] = row["ms"] * 1000.0
    return table


def waves(out_f, n, tile_m, tile_n, sms):
    items = math.ceil(out_f / tile_m) * math.ceil(n / tile_n)
    slots = sms * (2 if tile_m == 64 else 1)
    return math.ceil(items / slots)


def fit(points):
    """Least squares of us = w * (a * k + b) over (w, k, us): the 2x2 normal equations."""
    sxx = sum((w * k) ** 2 for w, k, _ in points)
    sxy = sum((w * k) * w for w, k, _ in points)
    syy = sum(w * w for w, _, _ in points)
    bx = sum(w * k * us for w, k, us in points)
    by = sum(w * us for w, _, us in points)
    det = sxx * syy - sxy * sxy
    return (bx * syy - by * sxy) / det, (sxx * by - sxy * bx) / det


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("--min-rows", type=int, default=65, help="calls from this many rows")
    ap.add_argument("--sms", type=int, default=132)
    args = ap.parse_args()
    table = {key: v for key, v in load(args.json).items() if key[2] >= args.min_rows}
    configs = sorted({name for v in table.values() for name in v if SHAPE.match(name)})
    if not configs:
        raise SystemExit("no 'wgmma TxN' rows at or above --min-rows in these files")
    rates = {}
    for name in configs:
        tm, tn = map(int, SHAPE.match(name).groups())
        pts = [(waves(o, n, tm, tn, args.sms), k, v[name]) for (o, k, n), v in table.items()
               if name in v]
        a, b = fit(pts)
        worst = max(abs(w * (a * k + b) / us - 1) for w, k, us in pts)
        rates[name] = (tm, tn, a, b)
        print(f"{name:24s} alpha {a * 1000:6.2f} us per 1,000 k  beta {b:6.1f} us  "
              f"worst error {worst:.0%} ({len(pts)} calls)")
    losses, gains = [], []
    for (o, k, n), v in sorted(table.items()):
        est = {name: waves(o, n, tm, tn, args.sms) * (a * k + b)
               for name, (tm, tn, a, b) in rates.items() if name in v}
        pick = min(est, key=est.get)
        best = min(est, key=lambda name: v[name])
        losses.append(v[pick] / v[best])
        line = f"[{o},{k}] n={n}: pick {pick} {v[pick]:.1f} us, best {best} {v[best]:.1f}"
        if "production" in v:
            gains.append(v["production"] / v[pick])
            line += f", production {v['production']:.1f} ({gains[-1]:.2f}x)"
        print(line)
    print(f"pick against the fastest measured: worst {max(losses):.3f}x, "
          f"mean {sum(losses) / len(losses):.3f}x over {len(losses)} calls")
    if gains:
        print(f"production's time over the pick's: mean {sum(gains) / len(gains):.3f}x")


if __name__ == "__main__":
    main()
