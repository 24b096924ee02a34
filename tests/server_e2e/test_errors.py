"""Every error status of the contract (docs/server.md, Errors) over raw HTTP, each with the
OpenAI error envelope: 400 naming the field (malformed JSON, wrong types, missing fields, bad
ranges, invalid UTF-8, context overflow), 401, 404 (model, path), 405, 413 (also for a chunked
body), and 503 with Retry-After when the queue is full; the server keeps serving after each."""

import json
import socket
import subprocess
import threading
import time

import openai
import pytest

from prompts import TEXT
from support import (MODEL, chat_template_ids, chunked, post, raw_exchange, raw_request_bytes, request, scrape,
                     wait_for)

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MSGS = [{"role": "user", "content": "Hi"}]


def assert_error(r, status, param=None, etype=None):
    assert r is not None, "no answer"
    assert r.status == status, r
    assert r.header("Content-Type").startswith("application/json"), r.headers
    j = r.json()
    assert set(j) == {"error"}, j
    e = j["error"]
    assert set(e) == {"message", "type", "param", "code"}, e
    assert isinstance(e["message"], str) and e["message"]
    assert isinstance(e["type"], str) and e["type"]
    assert e["param"] is None or isinstance(e["param"], str)
    assert e["code"] is None or isinstance(e["code"], (str, int))
    if param is not None:
        assert e["param"] is not None and e["param"].split("[")[0].split(".")[0] == param, e
    if etype is not None:
        assert e["type"] == etype, e
    return e


def chat(**kw):
    body = {"model": MODEL, "messages": MSGS, "max_tokens": 2, "temperature": 0}
    body.update(kw)
    return body


def comp(**kw):
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 2, "temperature": 0}
    body.update(kw)
    return body


def test_malformed_json(server):
    for body in (b"{", b"{not json}", b"", b"[1,2", b'{"model": }', b"null", b"[]", b"42"):
        r = post(server.port, COMP, body, headers={"Content-Type": "application/json"})
        assert_error(r, 400, etype="invalid_request_error")


def test_invalid_utf8(server):
    bad = b'{"model": "' + MODEL.encode() + b'", "prompt": "caf\xe9 \xff\xfe", "max_tokens": 2}'
    assert_error(post(server.port, COMP, bad), 400, etype="invalid_request_error")
    surrogate = json.dumps(comp()).replace('"Hi"', '"\\ud800"').encode()
    assert_error(post(server.port, COMP, surrogate), 400)
    overlong = b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", ' \
        b'"content": "\xc0\xaf"}], "max_tokens": 2}'
    assert_error(post(server.port, CHAT, overlong), 400)


WRONG = [
    # (path, body, the param the error must name)
    (COMP, comp(prompt=None), "prompt"),
    (COMP, {"model": MODEL, "max_tokens": 2}, "prompt"),
    (CHAT, {"model": MODEL, "max_tokens": 2}, "messages"),
    (COMP, comp(prompt=5), "prompt"),
    (COMP, comp(prompt={"a": 1}), "prompt"),
    (COMP, comp(prompt=["a", ""]), "prompt"),  # (a batch of prompts: each must be valid)
    (COMP, comp(prompt=[[1, 2], [8192]]), "prompt"),
    (COMP, comp(prompt=[]), "prompt"),
    (COMP, comp(prompt=[-1]), "prompt"),
    (COMP, comp(prompt=[8192]), "prompt"),
    (COMP, comp(prompt=[1.5]), "prompt"),
    (CHAT, chat(messages="hi"), "messages"),
    (CHAT, chat(messages=[]), "messages"),
    (CHAT, chat(messages=[5]), "messages"),
    (CHAT, chat(messages=[{"role": 1, "content": "x"}]), "messages"),
    (CHAT, chat(model=5), "model"),
    (COMP, comp(max_tokens="10"), "max_tokens"),
    (COMP, comp(max_tokens=-1), "max_tokens"),
    (COMP, comp(max_tokens=1.5), "max_tokens"),
    (CHAT, chat(max_completion_tokens="x"), "max_completion_tokens"),
    (COMP, comp(temperature="hot"), "temperature"),
    (COMP, comp(temperature=-0.1), "temperature"),
    (COMP, comp(temperature=2.01), "temperature"),
    (COMP, comp(top_p=0), "top_p"),
    (COMP, comp(top_p=1.01), "top_p"),
    (COMP, comp(top_p="x"), "top_p"),
    (COMP, comp(top_k=-2), "top_k"),
    (COMP, comp(top_k=1.5), "top_k"),
    (COMP, comp(seed="x"), "seed"),
    (COMP, comp(stop=5), "stop"),
    (COMP, comp(stop=[1]), "stop"),
    (COMP, comp(stop=[str(i) for i in range(17)]), "stop"),
    (COMP, comp(stop_token_ids="a"), "stop_token_ids"),
    (COMP, comp(stop_token_ids=["a"]), "stop_token_ids"),
    (COMP, comp(ignore_eos="yes"), "ignore_eos"),
    (COMP, comp(n=129), "n"),
    (COMP, comp(min_p=1.5), "min_p"),
    (COMP, comp(min_tokens=-1), "min_tokens"),
    (CHAT, chat(max_tokens=2, min_tokens=3), "min_tokens"),
    (CHAT, chat(echo=True, max_tokens=0), "max_tokens"),  # (chat's echo scores nothing)
    (COMP, comp(suffix="tail"), "suffix"),
    (COMP, comp(best_of=3), "best_of"),
    (COMP, comp(logit_bias=[1]), "logit_bias"),
    (COMP, comp(logit_bias={"x": 1}), "logit_bias"),
    (COMP, comp(logit_bias={"99999999": 1}), "logit_bias"),
    (CHAT, chat(logit_bias={"5": 101}), "logit_bias"),
    (COMP, comp(n="1"), "n"),
    (CHAT, chat(n=0), "n"),
    (CHAT, chat(logprobs="yes"), "logprobs"),
    (CHAT, chat(logprobs=True, top_logprobs=21), "top_logprobs"),
    (CHAT, chat(logprobs=True, top_logprobs=-1), "top_logprobs"),
    (COMP, comp(logprobs=6), "logprobs"),
    (COMP, comp(logprobs=-1), "logprobs"),
    (COMP, comp(presence_penalty=2.5), "presence_penalty"),
    (COMP, comp(frequency_penalty=-2.5), "frequency_penalty"),
    (COMP, comp(presence_penalty="x"), "presence_penalty"),
    (COMP, comp(repetition_penalty=0), "repetition_penalty"),
    (COMP, comp(repetition_penalty=2.5), "repetition_penalty"),
    (CHAT, chat(response_format={"type": "json_obj"}), "response_format"),
    (CHAT, chat(response_format={"type": "json_schema", "json_schema": {}}), "response_format"),
    (CHAT, chat(response_format={"type": "json_schema"}), "response_format"),
    (CHAT, chat(response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "integer", "multipleOf": 2}}}), "response_format"),
    (CHAT, chat(response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"$ref": "#/$defs/nowhere"}}}), "response_format"),
    (CHAT, chat(response_format="text"), "response_format"),
    (CHAT, chat(guided_choice=["yes", "no"]), "guided_choice"),
    (COMP, comp(structured_outputs={"regex": "[0-9]+"}), "structured_outputs"),
    (COMP, comp(guided_json={"type": "integer", "multipleOf": 2}), "guided_json"),
    (COMP, comp(stream="true"), "stream"),
    (COMP, comp(stream=True, stream_options=5), "stream_options"),
]


@pytest.mark.parametrize("path,body,param", WRONG,
                         ids=[f"{'chat' if p == CHAT else 'comp'}-{param}-{i}" for i, (p, _, param) in
                              enumerate(WRONG)])
def test_wrong_field_is_a_400_naming_it(server, path, body, param):
    body = {k: v for k, v in body.items() if v is not None}
    assert_error(post(server.port, path, body), 400, param=param, etype="invalid_request_error")


def test_message_without_content(server, binary):
    """A message without content renders as empty content, as vLLM does (OpenAI answers 400):
    tandem's choice, docs/server.md."""
    r = post(server.port, CHAT, chat(messages=[{"role": "user"}]))
    assert r.status == 200, r.text
    want = chat_template_ids(binary, [{"role": "user", "content": ""}])
    assert r.json()["usage"]["prompt_tokens"] == len(want)


def test_unknown_fields_are_ignored(server):
    r = post(server.port, COMP, comp(frobnicate={"x": [1]}, user="u1", logit_bias=None))
    assert r.status == 200, r


def test_context_overflow_names_both_numbers(server):
    e = assert_error(post(server.port, COMP, comp(max_tokens=1020, prompt=TEXT[0])), 400)
    assert "1024" in e["message"] and "1020" in e["message"], e
    long_prompt = "word " * 1500  # > 1024 tokens on its own
    e = assert_error(post(server.port, CHAT, chat(messages=[{"role": "user",
                                                             "content": long_prompt}])), 400)
    assert "1024" in e["message"], e


def test_unknown_model_is_404(server):
    for path, body in ((COMP, comp(model="gpt-4")), (CHAT, chat(model="gpt-4"))):
        e = assert_error(post(server.port, path, body), 404)
        assert e["code"] == "model_not_found", e


@pytest.mark.parametrize("method,path", [("GET", "/v2/models"), ("POST", "/v1/embeddings"),
                                         ("GET", "/"), ("GET", "/v1/models/extra/x"),
                                         ("POST", "/v1/chat/completions/x")])
def test_unknown_path_is_404(server, method, path):
    assert_error(request(server.port, method, path, comp() if method == "POST" else None), 404)


@pytest.mark.parametrize("method,path", [("GET", CHAT), ("GET", COMP), ("POST", "/health"),
                                         ("POST", "/v1/models"), ("DELETE", "/v1/models"),
                                         ("PUT", COMP), ("GET", "/tokenize"),
                                         ("POST", "/metrics")])
def test_wrong_method_is_405(server, method, path):
    assert_error(request(server.port, method, path, comp() if method in ("POST", "PUT") else
                         None), 405)


@pytest.fixture(scope="module")
def auth_server(pool):
    return pool.start(["--api-key", "k-123", "--max-model-len", "256"])


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": "k-123"},
                                     {"Authorization": "Basic k-123"},
                                     {"Authorization": "Bearer k-1234"},
                                     {"Authorization": "Bearer "}])
@pytest.mark.parametrize("method,path,body", [("GET", "/v1/models", None),
                                              ("POST", COMP, comp()),
                                              ("POST", CHAT, chat()),
                                              ("POST", "/tokenize", {"prompt": "hi"}),
                                              ("POST", "/detokenize", {"tokens": [1]})])
def test_missing_or_wrong_key_is_401(auth_server, headers, method, path, body):
    assert_error(request(auth_server.port, method, path, body, headers=headers), 401,
                 etype="authentication_error")


def test_right_key_and_open_endpoints(auth_server):
    good = {"Authorization": "Bearer k-123"}
    assert request(auth_server.port, "GET", "/v1/models", headers=good).status == 200
    assert post(auth_server.port, COMP, comp(), headers=good).status == 200
    assert post(auth_server.port, "/tokenize", {"prompt": "hi"}, headers=good).status == 200
    assert request(auth_server.port, "GET", "/health").status == 200
    assert request(auth_server.port, "GET", "/metrics").status == 200


@pytest.fixture(scope="module")
def small_body_server(pool):
    return pool.start(["--max-body-bytes", "2000", "--max-model-len", "256"])


def test_body_over_the_limit_is_413(small_body_server):
    port = small_body_server.port
    small = comp(prompt="x " * 100)
    assert len(json.dumps(small)) < 2000
    assert post(port, COMP, small).status == 200
    assert_error(post(port, COMP, comp(prompt="x " * 2000)), 413)
    # A Content-Length far over the limit is refused without waiting for the body.
    r = raw_exchange(port, raw_request_bytes("POST", COMP, b"{", port=port,
                                             content_length=10 ** 9), timeout=10)
    assert_error(r, 413)
    assert post(port, COMP, small).status == 200


def test_chunked_body_over_the_limit_is_413(small_body_server):
    """A chunked body has no Content-Length to check up front; the limit must still hold, or any
    client can make the server buffer an unbounded body (at 1e94f18 a 4 KB chunked body passed
    --max-body-bytes 2000 and failed later, as too long a prompt)."""
    port = small_body_server.port
    data = raw_request_bytes("POST", COMP, None, port=port,
                             headers={"Content-Type": "application/json",
                                      "Transfer-Encoding": "chunked"})
    big = json.dumps(comp(prompt="x " * 2000)).encode()
    assert_error(raw_exchange(port, data + chunked(big, [500] * 20)), 413)
    assert post(port, COMP, comp()).status == 200


def open_stream(port, body):
    """Sends a streaming request on a raw socket read by a background thread (a client that keeps
    up), and returns the socket."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(raw_request_bytes("POST", COMP, json.dumps(body).encode(), port=port,
                                headers={"Content-Type": "application/json"}))

    def drain():
        try:
            while s.recv(65536):
                pass
        except OSError:
            pass

    threading.Thread(target=drain, daemon=True).start()
    return s


def test_full_queue_is_503_with_retry_after(fresh_pool):
    """--max-num-seqs 1 --max-queue 1: one request runs, one waits, and every further request is
    a 503 with Retry-After at once, not a hang; three rounds, each ended by both clients going
    away. (At 1e94f18 a probe was at times queued as a second waiting request, metrics showing
    running 1 and waiting 2, and hung: submissions taken by the engine loop and not yet admitted
    were counted nowhere; 11dfabc counts them.)"""
    s = fresh_pool.start(["--max-num-seqs", "1", "--max-queue", "1", "--max-model-len", "4096"])
    long = comp(prompt=TEXT[0], max_tokens=4000, ignore_eos=True, stream=True)
    for round_ in range(3):
        a = open_stream(s.port, long)
        wait_for(lambda: scrape(s.port).get("tandem:num_requests_running") == 1, 20,
                 "the first request to run")
        b = open_stream(s.port, long)
        wait_for(lambda: scrape(s.port).get("tandem:num_requests_waiting") == 1, 20,
                 "the second request to wait")
        for probe in range(10):
            try:
                r = post(s.port, COMP, comp(), timeout=5)
            except TimeoutError:
                m = scrape(s.port)
                raise AssertionError(
                    f"round {round_}, probe {probe}: queued past --max-queue 1, no answer in "
                    f"5 s; running {m.get('tandem:num_requests_running')}, waiting "
                    f"{m.get('tandem:num_requests_waiting')}") from None
            assert_error(r, 503)
            retry = r.header("Retry-After")
            assert retry is not None and retry.strip().isdigit(), r.headers
        assert request(s.port, "GET", "/health").status == 200  # the HTTP side still answers
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=5)
        with pytest.raises(openai.InternalServerError) as e:  # the client's type for a 5xx
            client.completions.create(model=MODEL, prompt="Hi", max_tokens=2)
        assert e.value.status_code == 503
        client.close()
        a.close()
        b.close()
        wait_for(lambda: (lambda m: m.get("tandem:num_requests_running") == 0 and
                          m.get("tandem:num_requests_waiting") == 0)(scrape(s.port)), 30,
                 "the closed streams to be cancelled")
    assert post(s.port, COMP, comp(), timeout=20).status == 200


@pytest.mark.parametrize("path,body,param", [
    ("/tokenize", {"prompt": 5}, "prompt"),
    ("/tokenize", {}, None),  # prompt or messages
    ("/tokenize", {"messages": "x"}, "messages"),
    ("/detokenize", {"tokens": "x"}, "tokens"),
    ("/detokenize", {"tokens": [-1]}, "tokens"),
    ("/detokenize", {"tokens": [8192]}, "tokens"),
    ("/detokenize", {"tokens": [1.5]}, "tokens"),
    ("/detokenize", {}, "tokens"),
])
def test_tokenizer_endpoints_reject_bad_input(server, path, body, param):
    e = assert_error(post(server.port, path, body), 400, param=param,
                     etype="invalid_request_error")
    assert e["param"] in (("prompt", "messages") if param is None else (e["param"],)), e


def test_huge_prompts_are_refused_quickly(server):
    """A 1 MB text prompt and 100,000 token ids: a 400 naming the context, in seconds."""
    for body in (comp(prompt="lorem ipsum " * 90000), comp(prompt=[1] * 100000)):
        t0 = time.monotonic()
        e = assert_error(post(server.port, COMP, body, timeout=60), 400)
        assert "1024" in e["message"], e
        assert time.monotonic() - t0 < 20
    assert post(server.port, COMP, comp()).status == 200


def test_bad_start_up_fails_clearly(binary):
    """A port already taken and a missing model: exit non-zero with a message, no hang."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        p = subprocess.run([binary, "serve", "--model", MODEL, "--port", str(port)],
                           capture_output=True, timeout=60)
        assert p.returncode != 0
        assert str(port) in p.stderr.decode(errors="replace"), p.stderr[-500:]
    p = subprocess.run([binary, "serve", "--model", "/no/such/model", "--port", "0"],
                       capture_output=True, timeout=60)
    assert p.returncode == 1
    assert b"/no/such/model" in p.stderr, p.stderr[-500:]
