#!/usr/bin/env python3
"""Encoding speed of tandem's tokenizer vs HF `tokenizers`, same machine, same run, one core.

Corpora are built from text every Debian machine has: English prose from
/usr/share/common-licenses (GPL-3, Apache-2.0, GFDL-1.3, LGPL-2.1, MPL-2.0) and Chinese from the
zh_CN gettext catalogs in /usr/share/locale (their sha256 is recorded). Both tokenizers encode the
whole corpus `--repeat` times after one warm-up; the median is reported and the ids must agree.
Usage (repo root, after building build*/tandem):
    python3 tools/tokenizer/bench_tokenizer.py --tandem build-tok/tandem --out bench/tokenizer_bench.json
"""
import argparse
import gettext
import glob
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests/fixtures/tokenizer/qwen3"


def english_corpus():
    names = ["GPL-3", "Apache-2.0", "GFDL-1.3", "LGPL-2.1", "MPL-2.0"]
    text = "".join(Path("/usr/share/common-licenses", n).read_text(encoding="utf-8") for n in names)
    return text * 4  # ~450 KB


def cjk_corpus():
    out = []
    for mo in sorted(glob.glob("/usr/share/locale/zh_CN/LC_MESSAGES/*.mo")):
        try:
            with open(mo, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog
        except Exception:  # malformed catalogs are skipped
            continue
        out += [v for k, v in catalog.items() if isinstance(v, str) and v and k]
    return "\n".join(out)[:200000]  # ~450 KB of UTF-8


def fnv1a(ids):
    h = 1469598103934665603
    for i in ids:
        for k in range(4):
            h = ((h ^ ((i >> (8 * k)) & 0xFF)) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def bench_hf(tok, text, repeat):
    tok.encode(text, add_special_tokens=False)  # warm-up (fills the word cache)
    times, ids = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        ids = tok.encode(text, add_special_tokens=False).ids
        times.append(time.perf_counter() - t0)
    return times, ids


def bench_tandem(binary, path, repeat):
    out = subprocess.run([binary, "tokenize", "--model", str(MODEL), "--bench", str(path),
                          "--repeat", str(repeat + 1)], check=True, capture_output=True, text=True)
    r = json.loads(out.stdout)
    return r["seconds"][1:], r  # first run is the warm-up


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tandem", default=str(ROOT / "build/tandem"))
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--cpu", type=int, default=0, help="core both runs are pinned to")
    ap.add_argument("--out", default=str(ROOT / "bench/tokenizer_bench.json"))
    args = ap.parse_args()

    os.sched_setaffinity(0, {args.cpu})  # inherited by the tandem subprocess
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import tokenizers  # after RAYON_NUM_THREADS so the pool has one thread

    tok = tokenizers.Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in (("english", english_corpus()), ("cjk", cjk_corpus())):
            path = Path(tmp) / f"{name}.txt"
            path.write_bytes(text.encode("utf-8"))
            hf_times, hf_ids = bench_hf(tok, text, args.repeat)
            td_times, td = bench_tandem(args.tandem, path, args.repeat)
            hf_s, td_s = statistics.median(hf_times), statistics.median(td_times)
            mb = len(text.encode("utf-8")) / 1e6
            results[name] = {
                "bytes": len(text.encode("utf-8")),
                "corpus_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                "tokens": len(hf_ids),
                "ids_identical": td["tokens"] == len(hf_ids) and td["ids_fnv1a"] == fnv1a(hf_ids),
                "hf_median_s": hf_s, "tandem_median_s": td_s,
                "hf_MB_per_s": mb / hf_s, "tandem_MB_per_s": mb / td_s,
                "speedup_vs_hf": hf_s / td_s,
            }
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
    report = {
        "command": " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
        "commit": commit,
        "machine": {"cpu": cpu, "cores_online": os.cpu_count(), "pinned_core": args.cpu,
                    "platform": platform.platform()},
        "versions": {"tokenizers": tokenizers.__version__, "python": platform.python_version()},
        "repeat": args.repeat,
        "results": results,
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    for name, r in results.items():
        print(f"{name}: {r['bytes']} bytes, {r['tokens']} tokens, HF {r['hf_MB_per_s']:.2f} MB/s, "
              f"tandem {r['tandem_MB_per_s']:.2f} MB/s, x{r['speedup_vs_hf']:.1f}, "
              f"ids identical: {r['ids_identical']}")


if __name__ == "__main__":
    main()
