#!/usr/bin/env python3
"""Makes the tokenizer parity goldens: >= 2,000 strings (seeded) encoded by HF `tokenizers`.

Writes tests/fixtures/tokenizer/qwen3/encode_goldens.jsonl: a first line {"meta": ...} with the
command, versions and tokenizer hash, then one {"text", "ids", "decoded"} object per line.
Also writes qwen3/qwen35_regex_goldens.jsonl: the same strings encoded with the Qwen3 vocab but the
Qwen3.5 / Qwen3.6 pre-tokenizer regex (letters and marks, [\p{L}\p{M}]+), which no PyPI package
ships as a tokenizer.json; the C++ test patches the pattern the same way. And
qwen3/strip_goldens.jsonl: strings around added tokens, with lstrip on <|im_end|>, rstrip on
<|im_start|> and both on <think> (flags other tokenizers use; the C++ test sets them likewise).
Run from the repo root:  python3 tools/tokenizer/make_encode_goldens.py
"""
import hashlib
import json
import platform
import random
import sys
from pathlib import Path

import tokenizers

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/tokenizer"

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How are you doing today?",
    "It's a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife.",
    "I'm sure they'll say we've done what we'd planned; you're right, it's THEIR call.",
    "Don't stop believing -- hold on to that feeling.",
    "In 1969, Apollo 11 landed on the Moon; 600 million people watched.",
    "    indented text with    several   spaces",
    "Mr. O'Neil's dog's bone isn't there.",
    "UPPER CASE SENTENCE WITH 'S AND 'LL AND 'VE.",
    "e-mail: someone@example.com, phone +1 (555) 010-9999",
]
WORDS = ("time person year way day thing man world life hand part child eye woman place work week "
         "case point government company number group problem fact be have do say get make go know "
         "take see come think look want give use find tell ask seem feel try leave call good new "
         "first last long great little own other old right big high different small large next "
         "early young important few public bad same able to of in for on with at by from up about "
         "into over after beneath under above the and a that I it not he as you this but his they "
         "her she or an will my one all would there their tokenizer merges Qwen transformer").split()
CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size(); }",
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC LIMIT 10;",
    "$ ls -la /usr/local/bin | grep -E '^-rwx' && echo \"done\" > /tmp/out.txt",
    "const f = async (x) => { await sleep(100); return x?.y ?? 0; };",
    "<div class=\"row\"><span id='a'>&nbsp;</span></div>",
    "    return self._cache[key]  # type: ignore[index]\r\n",
    "fn main() { let v: Vec<u8> = (0..=255).collect(); println!(\"{:?}\", v); }",
]
SCRIPTS = {
    "zh": "我们今天去公园散步，天气非常好。人工智能正在改变世界。这是一个测试句子，包含标点符号！",
    "ja": "今日はいい天気ですね。カタカナとひらがなを混ぜた文章です。東京タワーに行きました。",
    "ko": "안녕하세요. 오늘 날씨가 정말 좋네요! 한국어 토크나이저 테스트입니다.",
    "ar": "مرحبا بالعالم. هذه جملة اختبار باللغة العربية، مع علامات الترقيم؟",
    "hi": "नमस्ते दुनिया। यह हिंदी में एक परीक्षण वाक्य है। क्षत्रिय ज्ञान",
    "th": "สวัสดีครับ นี่คือประโยคทดสอบภาษาไทย",
    "he": "שלום עולם, זה משפט בדיקה בעברית.",
    "ru": "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "el": "Γειά σου Κόσμε! Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "vi": "Tiếng Việt có nhiều dấu: ă â ê ô ơ ư đ, ả ã ạ ấ ầ ẩ ẫ ậ.",
}
EMOJI = [
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇯🇵🇺🇸", "❤️", "1️⃣", "🧑🏿‍💻", "👩‍❤️‍💋‍👨", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "🙂🙃", "🐍 python", "✨ sparkles ✨", "🤖🦾", "☺︎ vs ☺️",
]
COMBINING = [
    "e\u0301", "cafe\u0301 re\u0301sume\u0301", "A\u030a", "\u1100\u1161\u11a8", "n\u0303o",
    "o\u0308\u0304", "Å vs A\u030a vs \u212b", "\u0915\u094d\u0937", "a\u0328\u0301",
    "\u0041\u0300\u0301\u0302\u0303", "\u0301leading mark", "Z\u0351\u036b\u0343\u036a\u0302a\u0357lgo",
    # Marks assigned after Unicode 9.0, which HF's NFC data does not know (no reordering).
    "x\u0352\u1df8", "a\u1df6\u0486", "\u0d15\u0d3b\u0d4d", "b\u08d3\u0316", "c\u1abf\u0334\u0301",
    "\U0001e130\u0334", "e\u1dfa\u0301\u0300\u0316",
]
FULLWIDTH = ["ＡＢＣ１２３！？", "ｈｅｌｌｏ　ｗｏｒｌｄ", "（全角括号）【】「」", "ﾊﾝｶｸｶﾀｶﾅ", "①②③ ⅰⅱⅲ ½ ¼"]
WHITESPACE = [
    " ", "  ", "\t", "\n", "\r\n", "\n\n\n", " \n ", "a  b   c", "a\tb\t\tc", "line1\r\nline2\r\n",
    "trailing   ", "   leading", "\u3000全角空格\u3000", "nbsp\u00a0here", "mongolian\u180evowel",
    "line\u2028sep\u2029para", "vt\x0bff\x0c", "nel\x85x", "fs\x1cgs\x1drs\x1eus\x1f", "zw\u200bsp",
    "\t\t  \n\t", "a \n\n b", "x\r\r\ny", " \t \r\n \t ",
]
NUMBERS = ["1234567890", "3.14159265358979", "1,000,000.00", "-42", "2024-01-31T12:34:56Z",
           "0x7fffffff", "1e-10", "٣٤٥ ١٢", "१२३४", "Ⅻ", "99 bottles", "v1.2.3-rc.4"]
URLS = ["https://example.com/path?q=1&r=two#frag", "http://localhost:8080/v1/chat/completions",
        "ftp://files.example.org/a%20b.txt", "www.例子.测试/路径", "mailto:a.b+c@d-e.io"]
SPECIAL = [
    "<|im_start|>user\nHello<|im_end|>\n", "<|endoftext|>", "a<|im_end|>b", "<think>\nhmm\n</think>",
    "<tool_call>{}</tool_call>", "<|im_start|", "<|im_start|><|im_start|>", "x <|vision_start|>y",
    "<|fim_prefix|>def<|fim_suffix|>ret<|fim_middle|>", "<<|im_end|>>", "<tool_response>ok</tool_response>",
    "text<|box_start|>(1,2)<|box_end|>", "<|endoftext|><|endoftext|>", "< |im_end| >",
]
APOSTROPHES = ["'s 'S 'll 'LL 'Re", "\u017f'\u017f 'ſ", "it'S", "''", "'\u212a", "x'sy", "'t'm'd"]
LONG = ["a" * 3000, "supercalifragilistic" * 150, "我" * 1500, "的是了" * 600, "🙂" * 400,
        "9" * 2500, " " * 2000, "\n" * 500, "ab" * 1200, "-" * 1800, "λ" * 1000,
        "Donaudampfschifffahrtsgesellschaftskapitän" * 40]

BLOCKS = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF),
          (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F),
          (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF),
          (0x1F300, 0x1F64F), (0x0300, 0x036F)]


def random_unicode(rng, n):
    out = []
    for _ in range(n):
        lo, hi = rng.choice(BLOCKS)
        cp = rng.randint(lo, hi)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        out.append(chr(cp))
    return "".join(out)


def make_cases(rng):
    cases = [""]
    base = ENGLISH + CODE + list(SCRIPTS.values()) + EMOJI + COMBINING + FULLWIDTH + WHITESPACE
    base += NUMBERS + URLS + SPECIAL + APOSTROPHES + LONG
    cases += base
    for s in SCRIPTS.values():  # every prefix-ish chunk exercises partial words
        for k in range(1, len(s), max(1, len(s) // 12)):
            cases.append(s[:k])
    pools = [ENGLISH, CODE, list(SCRIPTS.values()), EMOJI, COMBINING, FULLWIDTH, WHITESPACE,
             NUMBERS, URLS, SPECIAL, APOSTROPHES]
    for _ in range(900):  # mixtures of the categories with random joiners
        parts = [rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 5))]
        joiner = rng.choice(["", " ", "\n", "\t", "  ", "\r\n", "。", ", "])
        cases.append(joiner.join(parts))
    for _ in range(500):  # English-like prose from the word list
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 40))]
        s = " ".join(words)
        if rng.random() < 0.3:
            s = s.capitalize() + rng.choice([".", "!", "?", "...", ""])
        if rng.random() < 0.2:
            s = s.upper()
        cases.append(s)
    for _ in range(500):  # random code points from many blocks
        cases.append(random_unicode(rng, rng.randint(1, 60)))
    for _ in range(150):  # ASCII noise incl. control characters
        cases.append("".join(chr(rng.randint(0, 127)) for _ in range(rng.randint(1, 80))))
    return cases


QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                  r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


STRIP_LEFT = ["<|im_end|>", "<think>"]
STRIP_RIGHT = ["<|im_start|>", "<think>"]


def make_strip_cases(rng):
    pieces = ["<|im_end|>", "<|im_start|>", "<think>", "</think>", "x", "hello", "你好", " ", "  ",
              "\n", "\t", "\u3000", "\u00a0", "\r\n", "\x1c", "é", "🙂"]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(400)]


def write_goldens(tok, cases, out, meta, with_decode):
    with out.open("w", encoding="utf-8") as f:
        f.write(json.dumps({"meta": meta}, ensure_ascii=False) + "\n")
        for text in cases:
            row = {"text": text, "ids": tok.encode(text, add_special_tokens=False).ids}
            if with_decode:
                row["decoded"] = tok.decode(row["ids"], skip_special_tokens=False)
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main():
    rng = random.Random(20240531)
    tok_path = FIX / "qwen3/tokenizer.json"
    tok = tokenizers.Tokenizer.from_file(str(tok_path))
    cases = make_cases(rng)
    meta = {
        "command": "python3 tools/tokenizer/make_encode_goldens.py",
        "tokenizers": tokenizers.__version__,
        "python": platform.python_version(),
        "tokenizer_json_sha256": hashlib.sha256(tok_path.read_bytes()).hexdigest(),
        "seed": 20240531,
        "count": len(cases),
    }
    out = FIX / "qwen3/encode_goldens.jsonl"
    write_goldens(tok, cases, out, meta, True)
    spec = json.loads(tok_path.read_text(encoding="utf-8"))
    split = spec["pre_tokenizer"]["pretokenizers"][0]
    assert split["type"] == "Split"
    split["pattern"]["Regex"] = QWEN35_PATTERN
    tok35 = tokenizers.Tokenizer.from_str(json.dumps(spec))
    write_goldens(tok35, cases, FIX / "qwen3/qwen35_regex_goldens.jsonl",
                  dict(meta, pre_tokenizer_regex=QWEN35_PATTERN), False)
    strip_cases = make_strip_cases(random.Random(7))
    spec = json.loads(tok_path.read_text(encoding="utf-8"))
    for a in spec["added_tokens"]:
        a["lstrip"] = a["content"] in STRIP_LEFT
        a["rstrip"] = a["content"] in STRIP_RIGHT
    write_goldens(tokenizers.Tokenizer.from_str(json.dumps(spec)), strip_cases,
                  FIX / "qwen3/strip_goldens.jsonl",
                  dict(meta, count=len(strip_cases), lstrip=STRIP_LEFT, rstrip=STRIP_RIGHT), False)
    print(f"wrote {len(cases)} cases to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
