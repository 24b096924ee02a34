"""Train tandem's byte-level BPE tokenizer (Qwen2/Qwen3 style) on the corpus train split.

What: a byte-level BPE with HF `tokenizers`, laid out like a released Qwen tokenizer:
NFC normalizer; pre-tokenizer = Split(Qwen regex, isolated) then ByteLevel(add_prefix_space=false,
use_regex=false); ByteLevel decoder and post-processor; no unk token; the regular vocabulary takes
ids [0, V-3) and the special tokens <|endoftext|>, <|im_start|>, <|im_end|> the last three ids
(added tokens, special=True), as in Qwen where they follow the BPE vocabulary.
Writes tokenizer.json, tokenizer_config.json (ChatML chat_template, eos <|endoftext|> since this
is a base model trained on raw documents separated by <|endoftext|>) and generation_config.json.

Run (repo root, after tools/train/corpus.py; CPU, about a minute):
  python3 tools/train/train_tokenizer.py --corpus .corpus --out models/tandem-tiny-qwen35 --vocab 8192
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' and system_message is defined %}"
    "{{- '<|im_start|>system\\n' + system_message + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def iter_texts(path: Path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)["text"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=".corpus")
    ap.add_argument("--out", default="models/tandem-tiny-qwen35")
    ap.add_argument("--vocab", type=int, default=8192)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False, fuse_unk=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    n_regular = args.vocab - len(SPECIALS)
    trainer = trainers.BpeTrainer(vocab_size=n_regular, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(iter_texts(Path(args.corpus) / "train.jsonl"), trainer=trainer)
    assert tok.get_vocab_size() == n_regular, tok.get_vocab_size()
    tok.add_special_tokens(SPECIALS)
    ids = [tok.token_to_id(s) for s in SPECIALS]
    assert ids == list(range(n_regular, args.vocab)), ids
    tok.save(str(out / "tokenizer.json"))

    added = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for i, s in zip(ids, SPECIALS)}
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    gen = {"bos_token_id": ids[0], "eos_token_id": [ids[0], ids[2]], "pad_token_id": ids[0],
           "do_sample": False, "transformers_version": "5.17.0"}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    sample = "In the beginning God created the heaven and the earth. It's 2024: def f(x):\n    return x"
    enc = tok.encode(sample)
    print(f"vocab {tok.get_vocab_size()}, specials {dict(zip(SPECIALS, ids))}")
    print(f"sample -> {len(enc.ids)} tokens: {enc.tokens[:24]}")
    assert tok.decode(enc.ids) == sample


if __name__ == "__main__":
    main()
