"""Prompts the tests share. The shipped model is a 13.5M-parameter toy that rarely ends with EOS,
so greedy outputs run to max_tokens; some prompts make it emit characters split over byte tokens
(Greek, Cyrillic, CJK), which streaming must never split."""

TEXT = [
    "In the beginning God created",
    "Q: What is the capital of France?\nA:",
    "def fibonacci(n):",
    "The Greek letters α β γ δ ε",  # δ comes out as two byte tokens
    "Привет мир, как дела",
    "x ≤ y ≥ z ≠ w ± 1 × 2 ÷ 3",
]
CHAT = [
    "What color is the sky? Answer with one word.",
    "Return a JSON object with keys name and age for Alice, 30. Output only JSON.",
    "Tell me a fortune.",
]
# Generates invalid UTF-8 byte runs, decoded to U+FFFD.
INVALID_UTF8_TEXT = "日本語のテキスト"
