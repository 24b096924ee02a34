"""1,000+ malformed or hostile requests against one `tandem serve` (fixed seed, so a failure
replays): mutated JSON bytes, huge numbers, deep nesting, NUL bytes, invalid UTF-8, wrong content
types, truncated bodies, wrong field types, and broken HTTP framing. Each must get a 2xx/4xx answer
(an OpenAI error envelope for every 4xx the handlers give) or, for input that is not HTTP, a
closed connection; never a 5xx, a hang or a crash. Afterwards /health is OK and a greedy request
gives the same text as before."""

import json
import random

import pytest

from support import (MODEL, chunked, post, raw_exchange, raw_request_bytes, request, scrape,
                     wait_for)

SEED = 15
COMP = "/v1/completions"
CHAT = "/v1/chat/completions"
RESP = "/v1/responses"
PROBE = {"model": MODEL, "prompt": "In the beginning God created", "max_tokens": 24,
         "temperature": 0}

HOSTILE_VALUES = [
    None, True, False, 0, -1, 1, 2 ** 31, 2 ** 63, 2 ** 64, -2 ** 63 - 1, 10 ** 30, -10 ** 30,
    1e308, -1e308, 5e-324, 0.5, -0.0, "", "x", "\u0000", "\ud7ff\ue000", "a" * 70000, [], [[]],
    {}, {"a": None}, [1, "a", None], ["\u0000"], {"type": "text"}, [2 ** 70], "1e999",
]
RAW_NUMBERS = [b"1e999", b"-1e999", b"123456789012345678901234567890123456789", b"NaN",
               b"Infinity", b"-Infinity", b"0x10", b"01", b"1.", b".5", b"+1", b"1e", b"--1",
               b"1" * 5000, b"-0", b"1E400", b"true1"]
FIELDS_COMP = ["model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop",
               "stop_token_ids", "ignore_eos", "n", "logprobs", "presence_penalty",
               "frequency_penalty", "repetition_penalty", "stream", "stream_options", "user",
               "echo", "suffix", "best_of", "logit_bias", "min_p", "min_tokens"]
FIELDS_CHAT = ["model", "messages", "max_tokens", "max_completion_tokens", "temperature",
               "top_p", "seed", "stop", "logprobs", "top_logprobs", "response_format", "tools",
               "tool_choice", "stream", "stream_options", "n", "logit_bias", "min_tokens"]
FIELDS_RESP = ["model", "input", "instructions", "max_output_tokens", "temperature", "top_p",
               "stream", "tools", "tool_choice", "text", "top_logprobs", "include", "reasoning",
               "metadata", "previous_response_id", "background", "parallel_tool_calls",
               "truncation", "store", "stop", "seed"]
INVALID_UTF8 = [b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf8\x88\x80",
                b"\x80", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xf4\x90\x80\x80"]
CONTENT_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x",
                 "application/json; charset=latin-1", "application/xml", "", "\x01\x02",
                 "application/json, text/html", "*/*"]


def base_comp(rng):
    return {"model": MODEL, "prompt": rng.choice(["Hello", "def f(x):", "a b c"]),
            "max_tokens": rng.randint(1, 4), "temperature": 0}


def base_chat(rng):
    return {"model": MODEL, "messages": [{"role": "user", "content": rng.choice(["Hi", "2+2?"])}],
            "max_tokens": rng.randint(1, 4), "temperature": 0}


def base_resp(rng):
    return {"model": MODEL, "input": rng.choice(["Hi", "2+2?"]),
            "max_output_tokens": rng.randint(1, 4), "temperature": 0}


def resp_item(rng):
    v = lambda: rng.choice(HOSTILE_VALUES)  # noqa: E731
    return rng.choice([
        {"type": "function_call", "call_id": v(), "name": "f", "arguments": v()},
        {"type": "function_call", "call_id": "c", "name": v(), "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": v()},
        {"role": "user", "content": [{"type": v(), "text": "x"}]},
        {"role": "user", "content": [{"type": "input_text", "text": v()}]},
        {"role": v(), "content": "x"},
        {"type": "message", "role": "assistant", "content": v()},
        {"type": "reasoning", "content": v()}, {"type": v()}, v(), {"role": "user", "content": [v()]},
        {"type": "input_image", "image_url": "x"}])


def http_post(port, path, body, ctype="application/json", extra=None):
    headers = {"Content-Type": ctype} if ctype else {}
    headers.update(extra or {})
    return raw_request_bytes("POST", path, body, port=port, headers=headers)


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(5)
        i = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(i, len(data) - 1)] = rng.randrange(256)
        elif op == 1:
            data[i:i] = bytes([rng.choice([0, 0xff, 0x22, 0x5c, 0x7b, 0x7d, 0x5b, 0x5d, 0x2c,
                                           0x3a, rng.randrange(256)])])
        elif op == 2 and data:
            del data[i:i + rng.randint(1, 8)]
        elif op == 3:
            data = data[:i]
        else:
            data[i:i] = rng.choice(RAW_NUMBERS + INVALID_UTF8 + [b"\\u0000", b"\\ud800", b"\x00"])
    return bytes(data)


def cases(port):
    """Yields (kind, request bytes, half-close after sending)."""
    rng = random.Random(SEED)
    # 1. Mutated bytes of valid bodies.
    for _ in range(320):
        chat = rng.random() < 0.5
        body = json.dumps(base_chat(rng) if chat else base_comp(rng)).encode()
        yield "json", http_post(port, CHAT if chat else COMP, mutate(rng, body)), False
    # 2. Wrong field types and hostile values, field by field.
    for _ in range(300):
        chat = rng.random() < 0.5
        body = base_chat(rng) if chat else base_comp(rng)
        for _ in range(rng.randint(1, 3)):
            body[rng.choice(FIELDS_CHAT if chat else FIELDS_COMP)] = rng.choice(HOSTILE_VALUES)
        if chat and rng.random() < 0.4:
            body["messages"] = [rng.choice([
                {"role": rng.choice(["user", "system", "assistant", "tool", "developer", "x",
                                     "", None, 5]), "content": rng.choice(HOSTILE_VALUES)},
                {"content": "hi"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
                {"role": "user", "content": "hi", "tool_calls": [1, 2]}, "user", None, []])]
        data = json.dumps(body).encode()
        yield "json", http_post(port, CHAT if chat else COMP, data), False
    # 3. Numbers JSON cannot hold, spliced in raw.
    for i in range(len(RAW_NUMBERS) * 4):
        num = RAW_NUMBERS[i % len(RAW_NUMBERS)]
        field = ["max_tokens", "temperature", "seed", "top_k"][i // len(RAW_NUMBERS)]
        body = b'{"model": "%s", "prompt": "Hi", "%s": %s}' % (MODEL.encode(), field.encode(),
                                                                num)
        yield "json", http_post(port, COMP, body), False
    # 4. Deep nesting, balanced and not, at the root and inside fields.
    for depth in (64, 512, 4096, 50000, 200000):
        for open_, close in ((b"[", b"]"), (b'{"a":', b"}")):
            yield "json", http_post(port, COMP, open_ * depth + close * depth), False
            yield "json", http_post(port, COMP, open_ * depth), False
            inner = open_ * depth + b"1" + close * depth if open_ == b"[" else \
                open_ * depth + b"1" + close * depth
            yield "json", http_post(port, CHAT, b'{"model": "%s", "messages": %s}' % (
                MODEL.encode(), inner)), False
            yield "json", http_post(port, COMP, b'{"model": "%s", "prompt": "x", "stop": %s}' % (
                MODEL.encode(), inner)), False
    # 5. NUL bytes: escaped (valid JSON), raw in the body, in the path and in headers.
    for where in ("prompt", "model", "stop", "content", "role"):
        for nul in (b"\\u0000", b"\x00", b"a\\u0000b", b"\x00" * 100):
            if where in ("content", "role"):
                msg = b'{"role": "user", "content": "x%sy"}' % nul if where == "content" else \
                    b'{"role": "us%ser", "content": "x"}' % nul
                body = b'{"model": "%s", "max_tokens": 2, "messages": [%s]}' % (MODEL.encode(),
                                                                                  msg)
                yield "json", http_post(port, CHAT, body), False
            else:
                vals = {"prompt": b'"Hi"', "model": b'"%s"' % MODEL.encode(), "stop": b'"."'}
                vals[where] = b'"%s%s"' % (vals[where][1:-1], nul)
                body = b'{"model": %s, "prompt": %s, "stop": %s, "max_tokens": 2}' % (
                    vals["model"], vals["prompt"], vals["stop"])
                yield "json", http_post(port, COMP, body), False
    yield "http", b"POST /v1/comp\x00letions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", True
    yield "http", b"GET /health HTTP/1.1\r\nHost: x\r\nX-N\x00ul: a\x00b\r\n\r\n", True
    yield "http", b"\x00" * 64, True
    # 6. Invalid UTF-8 in every string field.
    for i in range(120):
        bad = rng.choice(INVALID_UTF8) * rng.randint(1, 3)
        where = rng.choice(["prompt", "model", "stop", "content", "role", "key"])
        if where in ("content", "role", "key"):
            msg = {"content": b'{"role": "user", "content": "a%sb"}',
                   "role": b'{"role": "u%s", "content": "a"}',
                   "key": b'{"role": "user", "content": "a", "k%s": 1}'}[where] % bad
            body = b'{"model": "%s", "max_tokens": 2, "messages": [%s]}' % (MODEL.encode(), msg)
            yield "json", http_post(port, CHAT, body), False
        else:
            body = {"prompt": b'{"model": "%s", "prompt": "x%sy", "max_tokens": 2}',
                    "model": b'{"model": "%s%s", "prompt": "x", "max_tokens": 2}',
                    "stop": b'{"model": "%s", "prompt": "x", "stop": ["%s"], "max_tokens": 2}'}[
                        where] % (MODEL.encode(), bad)
            yield "json", http_post(port, COMP, body), False
    # 7. Wrong content types (with valid and invalid bodies).
    for ct in CONTENT_TYPES:
        for body in (json.dumps(base_comp(rng)).encode(), b"prompt=hi&model=x", b"--x\r\n\r\n"):
            yield "ctype", http_post(port, COMP, body, ctype=ct), False
            yield "ctype", http_post(port, CHAT, body, ctype=ct), False
    # 8. Truncated bodies: the Content-Length promises more than comes.
    for i in range(60):
        body = json.dumps(base_chat(rng) if i % 2 else base_comp(rng)).encode()
        cut = rng.randrange(len(body))
        data = raw_request_bytes("POST", CHAT if i % 2 else COMP, body[:cut], port=port,
                                 headers={"Content-Type": "application/json"},
                                 content_length=len(body))
        yield "truncated", data, True
    # 9. Broken HTTP: request lines, headers, lengths, chunked coding.
    body = json.dumps(base_comp(rng)).encode()
    broken = [
        b"\r\n\r\n", b"GARBAGE\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
        b"GET /health HTTP/1.1\r\n\r\n", b"get /health HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET http://evil/health HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 100000 + b"\r\n\r\n",
        b"GET /health HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(2000)) + b"\r\n",
        b"GET /health HTTP/1.1\r\nHost x\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n" + body,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n" + body,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n"
        b"\r\n" + body,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6"
        b"\r\n\r\n" + body,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nTransfer-Encoding: "
        b"chunked\r\n\r\n" % len(body) + body,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
        b"abc\r\n0\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"ffffffffffffffffff\r\nabc\r\n0\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n" + body,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length:"
        b" %d\r\n\r\n" % len(body) + body,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: "
        b"%d\r\n\r\n" % len(body) + body,
        b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % len(body) + body,
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)),  # a TLS hello
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        bytes(rng.randrange(256) for _ in range(4096)),
    ]
    for data in broken:
        yield "http", data, True
    for _ in range(40):  # random header-block damage on a valid request
        req = bytearray(http_post(port, COMP, json.dumps(base_comp(rng)).encode()))
        head_end = req.index(b"\r\n\r\n")
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(head_end)
            req[i] = rng.choice([0, 0x0a, 0x0d, 0x3a, 0x20, 0xff, rng.randrange(256)])
        yield "http", bytes(req), True
    # 10. Chunked bodies of hostile JSON, split at random.
    for _ in range(40):
        body = mutate(rng, json.dumps(base_comp(rng)).encode())
        sizes = [rng.randint(1, 9) for _ in range(rng.randint(1, 10))]
        data = raw_request_bytes("POST", COMP, None, port=port,
                                 headers={"Content-Type": "application/json",
                                          "Transfer-Encoding": "chunked"}) + chunked(body, sizes)
        yield "json", data, False


    # 11. The Responses API: mutated bodies, hostile values field by field, hostile input items,
    # tools and formats (its adapter validates before the chat parser does).
    for i in range(200):
        body = base_resp(rng)
        if i % 4 == 0:
            yield "responses", http_post(port, RESP, mutate(rng, json.dumps(body).encode())), False
            continue
        for _ in range(rng.randint(1, 3)):
            body[rng.choice(FIELDS_RESP)] = rng.choice(HOSTILE_VALUES)
        if rng.random() < 0.5:
            body["input"] = [resp_item(rng) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.2:
            body["tools"] = [rng.choice([{"type": "function", "name": rng.choice(HOSTILE_VALUES)},
                                         {"type": rng.choice(HOSTILE_VALUES)},
                                         rng.choice(HOSTILE_VALUES)])]
            body["tool_choice"] = rng.choice([{"type": rng.choice(HOSTILE_VALUES)},
                                              {"type": "function", "name": "f"}, "auto"])
        if rng.random() < 0.2:
            body["text"] = {"format": rng.choice([{"type": rng.choice(HOSTILE_VALUES)},
                                                  {"type": "json_schema",
                                                   "schema": rng.choice(HOSTILE_VALUES)},
                                                  rng.choice(HOSTILE_VALUES)])}
        if rng.random() < 0.2:
            body["stream"] = True
        yield "responses", http_post(port, RESP, json.dumps(body).encode()), False


def check(kind, reply):
    """What each kind of case may answer."""
    if reply is None:
        assert kind in ("http", "truncated"), "closed without an answer to a well-framed request"
        return
    assert reply.status < 500, f"{reply.status}: {reply.body[:300]!r}"
    if kind in ("http", "truncated"):
        return  # the HTTP library's own 400s need not carry the OpenAI envelope
    assert reply.status in (200, 400, 404, 405, 413, 415), reply
    if reply.status == 200 and kind == "responses":
        if reply.header("Content-Type", ).startswith("text/event-stream"):
            last = reply.body.rstrip(b"\n").rsplit(b"\n", 1)[-1]
            assert last.startswith(b"data: "), reply.body[-200:]
            assert json.loads(last[6:])["type"] in ("response.completed",
                                                    "response.incomplete"), last
        else:
            j = reply.json()
            assert j["object"] == "response" and j["output"] and "usage" in j, j
    elif reply.status == 200:
        if reply.header("Content-Type", ).startswith("text/event-stream"):
            assert reply.body.endswith(b"data: [DONE]\n\n"), reply.body[-200:]
        else:
            j = reply.json()
            assert j["choices"] and "usage" in j, j
    else:
        j = reply.json()
        assert set(j["error"]) == {"message", "type", "param", "code"}, j


@pytest.fixture(scope="module")
def fuzz_server(pool):
    return pool.start(["--max-model-len", "512", "--max-body-bytes", "1048576"])


def test_hostile_requests_never_break_the_server(fuzz_server):
    port = fuzz_server.port
    before = post(port, COMP, PROBE)
    assert before.status == 200, before
    n, statuses, failures = 0, {}, []
    for kind, data, half_close in cases(port):
        n += 1
        try:
            reply = raw_exchange(port, data, shutdown_write=half_close, timeout=30)
            check(kind, reply)
            key = f"{kind}:{reply.status if reply else 'closed'}"
            statuses[key] = statuses.get(key, 0) + 1
        except Exception as e:  # noqa: BLE001 -- every case is reported, not only the first
            failures.append(f"case {n} ({kind}) {data[:160]!r}: {type(e).__name__}: {e}")
            if not fuzz_server.alive():
                break
        if n % 100 == 0:
            assert fuzz_server.alive(), f"server died at case {n}:\n{failures[-3:]}"
            assert request(port, "GET", "/health").status == 200, f"unhealthy after case {n}"
    print(f"{n} hostile requests; answers: {dict(sorted(statuses.items()))}")
    assert fuzz_server.alive(), "the server crashed:\n" + fuzz_server.stderr_text()[-3000:]
    assert n >= 1000
    assert not failures, f"{len(failures)} of {n} cases failed:\n" + "\n".join(failures[:30])
    assert request(port, "GET", "/health").status == 200
    after = post(port, COMP, PROBE)
    assert after.status == 200
    assert after.json()["choices"][0]["text"] == before.json()["choices"][0]["text"]
    wait_for(lambda: (lambda m: m.get("tandem:num_requests_running") == 0 and
                      m.get("tandem:num_requests_waiting") == 0)(scrape(port)), 10,
             "no request left running or waiting")


def test_hostile_requests_from_many_clients_at_once(fuzz_server):
    """The same cases from 8 clients at once while greedy streams run beside them: the streams'
    text is exactly what it is alone, and every hostile case is answered as above."""
    import concurrent.futures as cf

    from support import parse_sse, stream_text
    port = fuzz_server.port
    probe = dict(PROBE, stream=True)
    alone = stream_text(parse_sse(post(port, COMP, probe).body), False)

    def one(case):
        kind, data, half_close = case
        try:
            check(kind, raw_exchange(port, data, shutdown_write=half_close, timeout=60))
            return None
        except Exception as e:  # noqa: BLE001
            return f"({kind}) {data[:120]!r}: {type(e).__name__}: {e}"

    with cf.ThreadPoolExecutor(10) as ex:
        streams = [ex.submit(lambda: stream_text(parse_sse(post(port, COMP, probe).body), False))
                   for _ in range(4)]
        failures = [f for f in ex.map(one, list(cases(port))) if f]
        texts = [s.result() for s in streams]
    assert fuzz_server.alive(), fuzz_server.stderr_text()[-3000:]
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])
    assert texts == [alone] * 4
    assert request(port, "GET", "/health").status == 200
