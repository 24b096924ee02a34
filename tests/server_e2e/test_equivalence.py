"""Exactness through the server: greedy text from `tandem serve` equals `tandem generate` (each
prompt run alone) for plain and chat prompts, with plain decoding, MTP with k = 3 always drafting,
and adaptive MTP; sent one at a time and all at once; streamed text concatenated equals the
non-streamed text, with UTF-8 characters split over byte tokens never split in a delta."""

import concurrent.futures as cf

import pytest

from conftest import BASE_ARGS, MTP_ARGS
from prompts import CHAT, INVALID_UTF8_TEXT, TEXT
from support import MODEL, generate_batch, parse_sse, post, scrape, stream_text

MAX = 48
CASES = [("text", p) for p in TEXT + [INVALID_UTF8_TEXT]] + [("chat", p) for p in CHAT]


def body(kind, prompt, **kw):
    b = {"model": MODEL, "max_tokens": MAX, "temperature": 0}
    if kind == "chat":
        b["messages"] = [{"role": "user", "content": prompt}]
    else:
        b["prompt"] = prompt
    b.update(kw)
    return b


def path(kind):
    return "/v1/chat/completions" if kind == "chat" else "/v1/completions"


def text_of(kind, j):
    c = j["choices"][0]
    return c["message"]["content"] if kind == "chat" else c["text"]


@pytest.fixture(scope="module")
def refs(binary):
    out = generate_batch(binary, [dict({"prompt": p, "max_tokens": MAX},
                                       **({"chat": True} if k == "chat" else {}))
                                  for k, p in CASES])
    return [(o["text"], len(o["tokens"]), o["finish_reason"]) for o in out]


@pytest.fixture(scope="module", params=["plain", "mtp-k3-fixed", "mtp-k2-adaptive"])
def any_server(request, pool):
    args = {"plain": BASE_ARGS, "mtp-k3-fixed": BASE_ARGS + MTP_ARGS,
            "mtp-k2-adaptive": BASE_ARGS + ["--speculative", "mtp", "--num-speculative-tokens",
                                            "2", "--speculation-control", "adaptive"]}
    return pool.start(args[request.param])


def one(server, kind, prompt, **kw):
    r = post(server.port, path(kind), body(kind, prompt, **kw))
    assert r.status == 200, r
    return r


def test_greedy_equals_generate_one_at_a_time(any_server, refs):
    got = []
    for kind, prompt in CASES:
        j = one(any_server, kind, prompt).json()
        got.append((text_of(kind, j), j["usage"]["completion_tokens"],
                    j["choices"][0]["finish_reason"]))
    diffs = [(CASES[i], got[i], refs[i]) for i in range(len(CASES)) if got[i] != refs[i]]
    assert not diffs, f"{len(diffs)} of {len(CASES)} differ, first: {diffs[0]}"


def test_greedy_equals_generate_all_at_once(any_server, refs):
    jobs = [(i % len(CASES)) for i in range(4 * len(CASES))]
    with cf.ThreadPoolExecutor(16) as ex:
        futs = [ex.submit(one, any_server, *CASES[i]) for i in jobs]
        got = [f.result().json() for f in futs]
    diffs = [(jobs[n], text_of(CASES[jobs[n]][0], j)[:80], refs[jobs[n]][0][:80])
             for n, j in enumerate(got) if text_of(CASES[jobs[n]][0], j) != refs[jobs[n]][0]]
    assert not diffs, f"{len(diffs)} of {len(jobs)} differ, first: {diffs[0]}"


def test_streamed_text_equals_non_streamed(any_server, refs):
    for i, (kind, prompt) in enumerate(CASES):
        r = one(any_server, kind, prompt, stream=True)
        chunks = parse_sse(r.body)  # strict UTF-8: a split character fails here
        assert stream_text(chunks, kind == "chat") == refs[i][0], (kind, prompt)
        if "\ufffd" not in refs[i][0]:
            for c in chunks:
                for ch in c["choices"]:
                    delta = (ch.get("delta") or {}).get("content") if kind == "chat" else \
                        ch.get("text")
                    assert "\ufffd" not in (delta or ""), f"split character in {delta!r}"


def test_stop_string_across_token_boundaries_is_never_emitted(any_server, refs):
    """A stop string that spans tokens: the text before it comes out whole, no part of it."""
    kind, prompt = CASES[0]
    ref = refs[0][0]
    for length in (2, 5, 9):
        start = len(ref) // 2
        stop = ref[start:start + length]
        expect = ref[:ref.find(stop)]
        for stream in (False, True):
            r = one(any_server, kind, prompt, stop=[stop], stream=stream)
            if stream:
                chunks = parse_sse(r.body)
                text = stream_text(chunks, False)
                assert [c["choices"][0]["finish_reason"] for c in chunks
                        if c["choices"][0].get("finish_reason")] == ["stop"]
            else:
                text = text_of(kind, r.json())
                assert r.json()["choices"][0]["finish_reason"] == "stop"
            assert text == expect, (stop, stream)


def test_seeded_sample_amid_other_requests_equals_it_alone(pool):
    """Each request's output is bit-identical to the same request run alone (README), sampled
    ones included: a seeded request among 15 others in flight gives the text it gives alone."""
    s = pool.start(BASE_ARGS + MTP_ARGS + ["--max-num-seqs", "16"])
    probe = body("text", TEXT[0], temperature=0.8, top_k=50, seed=99, max_tokens=40)
    alone = post(s.port, path("text"), probe).json()["choices"][0]["text"]
    others = [body(k, p, temperature=1.0, seed=i, max_tokens=60) for i, (k, p) in
              enumerate(CASES * 2)][:15]
    with cf.ThreadPoolExecutor(16) as ex:
        futs = [ex.submit(post, s.port, path("chat" if "messages" in o else "text"), o)
                for o in others]
        mid = ex.submit(post, s.port, path("text"), probe)
        assert all(f.result().status == 200 for f in futs)
        assert mid.result().json()["choices"][0]["text"] == alone


def test_preemption_keeps_outputs_exact(pool, binary):
    """A KV pool far too small for the batch: the scheduler preempts (swaps) sequences, and every
    output still equals its prompt decoded alone."""
    s = pool.start(["--max-model-len", "512", "--max-num-seqs", "8", "--kv-blocks", "12",
                    "--max-num-batched-tokens", "128"] + MTP_ARGS)
    n = 8
    reqs = [body(k, p, max_tokens=300) for k, p in CASES[:n]]
    want = generate_batch(binary, [dict({"prompt": p, "max_tokens": 300},
                                        **({"chat": True} if k == "chat" else {}))
                                   for k, p in CASES[:n]])
    with cf.ThreadPoolExecutor(n) as ex:
        got = list(ex.map(lambda i: post(s.port, path(CASES[i][0]), reqs[i], timeout=180),
                          range(n)))
    m = scrape(s.port)
    assert m.get("tandem:num_preemptions_total") > 0, "the pool was meant to force preemption"
    for i, r in enumerate(got):
        assert r.status == 200, r
        assert text_of(CASES[i][0], r.json()) == want[i]["text"], CASES[i]


def test_multibyte_stop_string_split_over_byte_tokens(any_server, refs):
    """δ comes out as two byte tokens: neither its first byte nor a replacement character may
    leak before the stop."""
    i = CASES.index(("text", TEXT[3]))
    ref = refs[i][0]
    assert "δ" in ref
    for stream in (False, True):
        r = one(any_server, "text", TEXT[3], stop="δ", stream=stream)
        text = stream_text(parse_sse(r.body), False) if stream else text_of("text", r.json())
        assert text == ref[:ref.find("δ")], stream
