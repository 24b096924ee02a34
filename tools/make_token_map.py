#!/usr/bin/env python3
"""Writes a draft vocabulary for `--speculative-token-map`: the N most frequent token ids of a
text corpus under the model's own tokenizer, plus the model's end-of-sequence ids, as a JSON array.

    python3 tools/make_token_map.py --model models/tandem-tiny-qwen35 --top 4096 \
        --out token_map.json corpus.txt [more.txt ...]

Each input line is one text (a .jsonl line's "prompt" or "text" field, else the line itself).
Tokenizing goes through `tandem tokenize` (--binary), so nothing beyond the standard library is
needed. Drafts are only proposals: a map changes how many drafts are accepted, never an output.
"""
import argparse
import collections
import json
import pathlib
import subprocess
import sys


def texts(paths):
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if not line.strip():
                    continue
                if path.endswith(".jsonl"):
                    obj = json.loads(line)
                    line = obj.get("prompt") or obj.get("text") or ""
                yield line


def eos_ids(model_dir):
    ids = set()
    for name in ("config.json", "generation_config.json"):
        p = pathlib.Path(model_dir) / name
        if not p.exists():
            continue
        cfg = json.loads(p.read_text())
        for c in (cfg, cfg.get("text_config", {})):
            v = c.get("eos_token_id")
            ids.update(v if isinstance(v, list) else [] if v is None else [v])
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint directory (tokenizer.json)")
    ap.add_argument("--binary", default="build/tandem", help="the tandem binary")
    ap.add_argument("--top", type=int, required=True, help="how many of the most frequent ids")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("corpus", nargs="+", help="text files (.txt: one text a line; .jsonl)")
    a = ap.parse_args()
    if a.top < 1:
        sys.exit("--top must be >= 1")
    lines = "".join(json.dumps(t) + "\n" for t in texts(a.corpus))
    if not lines:
        sys.exit("the corpus holds no text")
    r = subprocess.run([a.binary, "tokenize", "--model", a.model], input=lines,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tandem tokenize failed: {r.stderr.strip()}")
    counts = collections.Counter()
    for line in r.stdout.splitlines():
        counts.update(json.loads(line))
    ids = [t for t, _ in counts.most_common(a.top)]
    ids += sorted(eos_ids(a.model) - set(ids))
    pathlib.Path(a.out).write_text(json.dumps(ids) + "\n")
    print(f"{len(ids)} ids ({len(counts)} distinct in the corpus) -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
