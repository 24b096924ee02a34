"""Pre-tokenize the corpus into compact uint16 token arrays for training.

What: encodes every document of .corpus/{train,val}.jsonl with the trained tokenizer and appends
<|endoftext|> after each one, writing .corpus/tok/{train,val}.bin (raw little-endian uint16) and
.corpus/tok/meta.json (vocab size, eos id, token counts, sha256). Only .corpus/tok travels to the
GPU machine (`carry: [".corpus/tok"]`).

Run (repo root, after corpus.py and train_tokenizer.py; CPU):
  python3 tools/train/tokenize_corpus.py --corpus .corpus --tokenizer models/tandem-tiny-qwen35/tokenizer.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=".corpus")
    ap.add_argument("--tokenizer", default="models/tandem-tiny-qwen35/tokenizer.json")
    args = ap.parse_args()
    tok = Tokenizer.from_file(args.tokenizer)
    eos = tok.token_to_id("<|endoftext|>")
    assert tok.get_vocab_size() <= 65536
    out = Path(args.corpus) / "tok"
    out.mkdir(parents=True, exist_ok=True)
    meta = {"vocab_size": tok.get_vocab_size(), "eos_id": eos, "dtype": "uint16"}
    for split in ("train", "val"):
        texts = [json.loads(l)["text"] for l in open(Path(args.corpus) / f"{split}.jsonl", encoding="utf-8")]
        chunks = []
        nbytes = 0
        for i in range(0, len(texts), 256):
            for enc in tok.encode_batch(texts[i:i + 256], add_special_tokens=False):
                chunks.append(np.asarray(enc.ids + [eos], dtype=np.uint16))
            nbytes += sum(len(t.encode()) for t in texts[i:i + 256])
        arr = np.concatenate(chunks)
        arr.tofile(out / f"{split}.bin")
        meta[split] = {"tokens": int(arr.size), "documents": len(texts), "bytes": nbytes,
                       "bytes_per_token": round(nbytes / arr.size, 3),
                       "sha256": hashlib.sha256(arr.tobytes()).hexdigest()}
        print(split, meta[split])
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    main()
