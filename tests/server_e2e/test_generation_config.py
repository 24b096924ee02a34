"""`tandem serve --generation-config` (vLLM's option; default auto): fields a request leaves out
take the values of a generation_config.json (the model's, or a directory's), a request's own win,
`vllm` keeps OpenAI's, and a missing or bad file stops start-up with a message naming it."""

import json
import os
import subprocess
import tempfile

import openai
import pytest

from prompts import CHAT
from support import MODEL, generate_batch


def config_dir(content):
    d = tempfile.mkdtemp(prefix="tandem-gc-")
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        f.write(content if isinstance(content, str) else json.dumps(content))
    return d


def client_for(pool, args):
    s = pool.start(["--max-model-len", "1024", *args])
    return openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120)


def chat(client, **kw):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": CHAT[0]}], **kw)


def test_defaults_come_from_the_file_and_requests_override_them(pool, binary):
    greedy = generate_batch(binary, [{"prompt": CHAT[0], "chat": True, "max_tokens": 5}])[0]
    with client_for(pool, ["--generation-config",
                           config_dir({"temperature": 0, "max_new_tokens": 5})]) as c:
        r = chat(c)  # no temperature, no max_tokens: the file's greedy decoding, 5 tokens
        assert r.choices[0].message.content == greedy["text"]
        assert r.usage.completion_tokens == 5
        assert r.choices[0].finish_reason == "length"
        # The request's own values win: 7 tokens, sampled (seeded: reproducible).
        a = chat(c, temperature=1.0, seed=3, max_tokens=7)
        assert a.usage.completion_tokens == 7
        assert a.choices[0].message.content == chat(c, temperature=1.0, seed=3,
                                                    max_tokens=7).choices[0].message.content
    with client_for(pool, ["--generation-config", "vllm"]) as c:  # OpenAI's: temperature 1
        texts = {chat(c, seed=s, max_tokens=8).choices[0].message.content for s in (1, 2, 3, 4)}
        assert len(texts) > 1, "OpenAI's default temperature 1 should sample"


@pytest.mark.parametrize("arg,needle", [
    ("/no/such/dir", b"there is no generation_config.json there"),
    ("BAD_JSON", b"is not valid JSON"),
    ("BAD_VALUE", b"'temperature' must be in [0, 2], got 7"),
])
def test_a_missing_or_bad_file_stops_start_up(binary, arg, needle):
    if arg == "BAD_JSON":
        arg = config_dir("{nope")
    elif arg == "BAD_VALUE":
        arg = config_dir({"temperature": 7})
    p = subprocess.run([binary, "serve", "--model", MODEL, "--port", "0",
                        "--generation-config", arg], capture_output=True, timeout=60)
    assert p.returncode == 1
    assert needle in p.stderr, p.stderr[-500:]
