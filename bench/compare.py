#!/usr/bin/env python3
"""Side-by-side table of benchmark JSONs: the first file is the baseline, every other column is
its ratio to it (time over the baseline's: below 1 is faster).

  tandem bench JSONs (`tandem bench --json`): per batch, the decode step (ms, fraction of the
  memory bound), verify at each draft count (ms), and MTP tokens/s projected at the JSON's stated
  acceptance with speculation control.
  kernel_bench JSONs (`kernel_bench OUT.json`): every row whose `what` is in the baseline, in ms.

Usage: python3 bench/compare.py BASE.json OTHER.json [...] [--filter TEXT]
e.g.   python3 bench/compare.py bench_27b.json bench_27b_v18.json
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def bench_rows(doc):
    """(label, value) pairs of a tandem bench JSON, in order."""
    rows = []
    for r in doc["results"]:
        b = r["batch"]
        rows.append((f"batch {b:>3} decode ms", r["decode_ms"]))
        rows.append((f"batch {b:>3} decode of memory bound", r.get("fraction_of_memory_bound")))
        for v in r.get("verify", []):
            rows.append((f"batch {b:>3} verify {v['drafts']} drafts ms", v["ms"]))
        if "draft_ms" in r:
            rows.append((f"batch {b:>3} drafts ms", r["draft_ms"]))
        proj = r.get("mtp_projection")
        if proj:
            label = f"batch {b:>3} MTP tok/s at {proj['acceptance_per_draft']} (k={proj['controlled_k']})"
            rows.append((label, proj["controlled_tokens_per_second"]))
    return rows


def kernel_rows(doc):
    return [(r["what"], r["ms"]) for r in doc["rows"]]


def rows_of(doc):
    if "results" in doc:
        return bench_rows(doc), "bench"
    if "rows" in doc:
        return kernel_rows(doc), "kernel"
    raise SystemExit("neither a tandem bench JSON (results) nor a kernel_bench JSON (rows)")


def fmt(v):
    if v is None:
        return "-"
    return f"{v:.4g}"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--filter", default="", help="only rows whose label contains this")
    a = ap.parse_args(argv)
    docs = [load(p) for p in a.files]
    tables = [rows_of(d) for d in docs]
    kinds = {k for _, k in tables}
    if len(kinds) != 1:
        raise SystemExit("mixed kinds: compare tandem bench JSONs or kernel_bench JSONs, not both")
    base = tables[0][0]
    others = [dict(t[0]) for t in tables[1:]]
    for d, p in zip(docs, a.files):
        print(f"# {p}: commit {d.get('commit', '?')}, {d.get('command', '')}")
    width = max((len(label) for label, _ in base), default=10)
    print(f"{'':{width}}  {'base':>9}" + "".join(f"  {'ratio ' + str(i + 1):>9}" for i in range(len(others))))
    for label, v in base:
        if a.filter not in label:
            continue
        cells = []
        for o in others:
            w = o.get(label)
            cells.append("-" if w is None or not v else f"{w / v:.3f}")
        print(f"{label:{width}}  {fmt(v):>9}" + "".join(f"  {c:>9}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
