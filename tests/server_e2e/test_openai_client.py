"""The official openai Python client against a real `tandem serve`: chat and completions, streaming
and not, usage, stop strings, seeds, logprobs, penalties, tools, and every error surfacing as the
client's own exception type with the contract's param and code. Exactness against `tandem
generate` over many prompts is test_equivalence.py's; here one or two prompts per feature.
Structured outputs (JSON mode, json_schema, forced tool calls) are test_structured_outputs.py's."""

import re
import time

import openai
import pytest

from conftest import BASE_ARGS, MTP_ARGS
from prompts import CHAT, TEXT
from support import MODEL, OPENAI_MAX, chat, chat_template_ids, client_for, complete, generate_batch, request

MAX = OPENAI_MAX


@pytest.fixture(scope="module")
def refs(binary):
    reqs = [{"prompt": p, "max_tokens": MAX} for p in TEXT[:2]]
    reqs += [{"prompt": p, "chat": True, "max_tokens": MAX} for p in CHAT[:2]]
    out = generate_batch(binary, reqs)
    return {"text": out[:2], "chat": out[2:]}


def test_models_list_names_the_served_model(client):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL]  # --served-model-name defaults to --model as given
    assert models[0].object == "model"
    assert models[0].owned_by == "tandem"
    assert models[0].model_extra["max_model_len"] == 1024


def test_chat_completion_greedy_equals_generate_with_usage(client, refs):
    ref = refs["chat"][0]
    r = chat(client, CHAT[0])
    assert r.id.startswith("chatcmpl-")
    assert r.object == "chat.completion"
    assert r.model == MODEL
    assert abs(r.created - time.time()) < 600
    assert len(r.choices) == 1 and r.choices[0].index == 0
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == ref["text"]
    assert r.choices[0].finish_reason == ref["finish_reason"] == "length"
    assert r.usage.prompt_tokens == ref["stats"]["prompt_tokens"]
    assert r.usage.completion_tokens == len(ref["tokens"]) == MAX
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    spec = r.model_extra["speculation"]
    assert set(spec) >= {"draft_tokens", "accepted_tokens", "drafting_steps",
                         "mean_acceptance_length"}
    assert spec["draft_tokens"] == 0  # a plain server drafts nothing


def test_completion_greedy_equals_generate_with_usage(client, refs):
    ref = refs["text"][0]
    r = complete(client, TEXT[0])
    assert r.id.startswith("cmpl-")
    assert r.object == "text_completion"
    assert r.choices[0].text == ref["text"]
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == ref["stats"]["prompt_tokens"]
    assert r.usage.completion_tokens == MAX
    assert r.usage.total_tokens == r.usage.prompt_tokens + MAX


def test_mtp_server_gives_the_same_greedy_text_and_reports_speculation(mtp_client, refs):
    r = chat(mtp_client, CHAT[1])
    assert r.choices[0].message.content == refs["chat"][1]["text"]
    spec = r.model_extra["speculation"]
    assert spec["drafting_steps"] > 0 and spec["draft_tokens"] >= spec["drafting_steps"]
    assert 0 <= spec["accepted_tokens"] <= spec["draft_tokens"]
    expect = 1 + spec["accepted_tokens"] / spec["drafting_steps"]
    assert spec["mean_acceptance_length"] == pytest.approx(expect, rel=1e-6)


def test_num_speculative_tokens_caps_a_requests_drafts_and_keeps_its_text(mtp_client, refs):
    # This server's per-request cap (the MTP server drafts up to 3): 0 drafts nothing, 1 at most
    # one a step; the text is the plain greedy one either way (through the Responses API too).
    for cap in (0, 1):
        r = chat(mtp_client, CHAT[1], extra_body={"num_speculative_tokens": cap})
        assert r.choices[0].message.content == refs["chat"][1]["text"]
        spec = r.model_extra["speculation"]
        assert spec["draft_tokens"] <= cap * spec["drafting_steps"], spec
        assert (spec["drafting_steps"] > 0) == (cap > 0), spec
    r = mtp_client.responses.create(model=MODEL, input=CHAT[1], max_output_tokens=MAX,
                                    temperature=0, extra_body={"num_speculative_tokens": 0})
    assert r.model_extra["speculation"]["draft_tokens"] == 0
    with pytest.raises(openai.BadRequestError) as e:
        chat(mtp_client, CHAT[1], extra_body={"num_speculative_tokens": -1})
    assert e.value.param == "num_speculative_tokens"


def test_prefix_caching_restores_a_shared_prompt_and_keeps_the_text(pool, client):
    # --enable-prefix-caching: a second request that repeats a long system prompt starts from the
    # kept prefix (usage.prompt_tokens_details.cached_tokens, the metrics' counters) and answers
    # with the same text as a server without it; under MTP too.
    system = " ".join(TEXT) * 3
    ask = lambda c, q, **kw: c.chat.completions.create(  # noqa: E731
        model=MODEL, messages=[{"role": "system", "content": system},
                               {"role": "user", "content": q}],
        max_tokens=MAX, temperature=0, **kw)
    for args in ([], MTP_ARGS):
        s = pool.start(BASE_ARGS + args + ["--enable-prefix-caching"])
        with client_for(s) as c:
            first = ask(c, CHAT[0])
            assert first.usage.prompt_tokens > 128
            for q in (CHAT[1], CHAT[2]):
                r = ask(c, q)
                details = r.usage.prompt_tokens_details
                assert details is not None and details.cached_tokens >= 128, r.usage
                assert details.cached_tokens < r.usage.prompt_tokens
                assert r.choices[0].message.content == ask(client, q).choices[0].message.content
            metrics = request(s.port, "GET", "/metrics").body.decode()
            assert re.search(r"^tandem:prefix_cache_hits_total [1-9]", metrics, re.M), metrics
        assert ask(client, CHAT[0]).usage.prompt_tokens_details is None  # no cache: no field


def test_streaming_chat_with_usage(client, refs):
    ref = refs["chat"][0]
    chunks = list(chat(client, CHAT[0], stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ref["text"]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices
                and c.choices[0].finish_reason]
    assert finishes == ["length"]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == MAX
    assert last.usage.prompt_tokens == ref["stats"]["prompt_tokens"]
    assert all(c.usage is None for c in chunks[:-1])


def test_streaming_completion_without_usage(client, refs):
    chunks = list(complete(client, TEXT[1], stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == refs["text"][1]["text"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and
            c.choices[0].finish_reason] == ["length"]
    assert all(c.usage is None for c in chunks)  # only with stream_options.include_usage
    assert all(c.choices for c in chunks)


def stop_case(text):
    """A stop string inside the reference text and the text expected before it."""
    for start in range(6, len(text) - 4):
        s = text[start:start + 4]
        if s.strip() and text.find(s) == start:
            return s, text[:start]
    pytest.skip("no usable stop string in the reference")


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_ends_the_text_before_it(client, refs, stream):
    stop, expect = stop_case(refs["text"][0]["text"])
    if stream:
        chunks = list(complete(client, TEXT[0], stop=[stop], stream=True))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and
                  c.choices[0].finish_reason]
        assert finish == ["stop"]
    else:
        r = complete(client, TEXT[0], stop=stop)
        text = r.choices[0].text
        assert r.choices[0].finish_reason == "stop"
    assert text == expect


def test_chat_stop_list_earliest_match_wins(client, refs):
    ref = refs["chat"][1]["text"]
    stop, expect = stop_case(ref)
    late = ref[len(ref) - 3:]
    r = chat(client, CHAT[1], stop=[late, stop])
    assert r.choices[0].message.content == expect
    assert r.choices[0].finish_reason == "stop"


def test_stop_token_ids(client, refs):
    ref = refs["text"][1]
    stop_id = ref["tokens"][3]
    r = complete(client, TEXT[1], extra_body={"stop_token_ids": [stop_id]})
    assert r.choices[0].finish_reason == "stop"
    first = ref["tokens"].index(stop_id)
    assert r.usage.completion_tokens in (first, first + 1)  # with or without the stop token
    assert ref["text"].startswith(r.choices[0].text)


def test_min_tokens_holds_off_stop_tokens_and_stop_strings(client, mtp_client, refs):
    ref = refs["text"][1]
    stop_id = ref["tokens"][3]
    first = ref["tokens"].index(stop_id)
    kw = dict(extra_body={"stop_token_ids": [stop_id], "min_tokens": 12}, logprobs=0)
    r = complete(client, TEXT[1], **kw)
    assert r.usage.completion_tokens >= 12
    # Up to the stop token's first place the greedy text is the free one.
    assert ref["text"].startswith("".join(r.choices[0].logprobs.tokens[:first]))
    assert complete(mtp_client, TEXT[1], **kw).choices[0].text == r.choices[0].text
    # A stop string inside the first min_tokens tokens' text is passed over: all MAX tokens come.
    stop, _ = stop_case(refs["text"][0]["text"])
    r = complete(client, TEXT[0], stop=[stop], extra_body={"min_tokens": MAX})
    assert r.choices[0].text == refs["text"][0]["text"]
    assert r.choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, TEXT[0], max_tokens=4, extra_body={"min_tokens": 5})
    assert e.value.param == "min_tokens"


def test_max_completion_tokens(client):
    r = chat(client, CHAT[2], max_completion_tokens=5)
    assert r.usage.completion_tokens == 5
    assert r.choices[0].finish_reason == "length"


def test_seeded_sampling_is_reproducible_and_exact_under_mtp(client, mtp_client):
    kw = dict(temperature=1.0, top_p=0.95, max_tokens=32)
    a = complete(client, TEXT[0], seed=1234, **kw).choices[0].text
    b = complete(client, TEXT[0], seed=1234, **kw).choices[0].text
    assert a == b
    others = {complete(client, TEXT[0], seed=s, **kw).choices[0].text for s in (1, 2, 3)}
    assert len(others | {a}) > 1, "different seeds all gave the same sample"
    # Seeded sampling emits the same tokens with and without speculation (README).
    assert complete(mtp_client, TEXT[0], seed=1234, **kw).choices[0].text == a


def test_n_choices_are_the_requests_with_seeds_seed_plus_i(client, mtp_client, refs):
    # Greedy: n identical choices, each the plain greedy text; usage counts the prompt once.
    r = chat(client, CHAT[0], n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert {c.message.content for c in r.choices} == {refs["chat"][0]["text"]}
    assert r.usage.prompt_tokens == refs["chat"][0]["stats"]["prompt_tokens"]
    assert r.usage.completion_tokens == 3 * MAX
    # Sampled: choice i is the single request with seed + i, on a plain or an MTP server.
    kw = dict(temperature=1.0, top_p=0.95, max_tokens=32)
    many = complete(client, TEXT[0], seed=50, n=3, **kw)
    singles = [complete(client, TEXT[0], seed=50 + i, **kw).choices[0].text for i in range(3)]
    assert [c.text for c in many.choices] == singles
    assert len(set(singles)) > 1, "different seeds all gave the same sample"
    assert [c.text for c in complete(mtp_client, TEXT[0], seed=50, n=3, **kw).choices] == singles


@pytest.mark.parametrize("endpoint", ["chat", "completion"])
def test_streamed_n_choices_match_the_whole_response(client, endpoint):
    kw = dict(temperature=1.0, max_tokens=16, seed=9, n=3)
    call, prompt = (chat, CHAT[1]) if endpoint == "chat" else (complete, TEXT[1])
    whole = call(client, prompt, **kw)
    texts, finishes, usage = {}, {}, None
    for ch in call(client, prompt, stream=True, stream_options={"include_usage": True}, **kw):
        if ch.usage is not None:
            usage = ch.usage
        for c in ch.choices:
            piece = c.delta.content if endpoint == "chat" else c.text
            texts[c.index] = texts.get(c.index, "") + (piece or "")
            if c.finish_reason is not None:
                finishes[c.index] = c.finish_reason
    got = [whole.choices[i].message.content if endpoint == "chat" else whole.choices[i].text
           for i in range(3)]
    assert [texts[i] for i in range(3)] == got
    assert [finishes[i] for i in range(3)] == [c.finish_reason for c in whole.choices]
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_logit_bias_steers_greedy_output_also_under_mtp(client, mtp_client, refs):
    # +100 on one token: greedy decoding emits it every time.
    up = complete(client, TEXT[0], max_tokens=8, logprobs=0, logit_bias={"777": 100})
    assert len(up.choices[0].logprobs.tokens) == 8
    assert len(set(up.choices[0].logprobs.tokens)) == 1
    # -100 on the greedy output's first token: another first token, the same text under MTP.
    first_id = refs["text"][0]["tokens"][0]
    plain = complete(client, TEXT[0], max_tokens=1, logprobs=0).choices[0].logprobs.tokens[0]
    out = complete(client, TEXT[0], max_tokens=8, logprobs=0, logit_bias={str(first_id): -100})
    assert out.choices[0].logprobs.tokens[0] != plain
    spec = complete(mtp_client, TEXT[0], max_tokens=8, logit_bias={str(first_id): -100})
    assert spec.choices[0].text == out.choices[0].text


def test_min_p(client, mtp_client, refs):
    # min_p = 1 keeps the most likely token alone: sampling at temperature 1 is greedy decoding.
    r = complete(client, TEXT[0], temperature=1.0, seed=3, extra_body={"min_p": 1.0})
    assert r.choices[0].text == refs["text"][0]["text"]
    # A seeded min_p sample is the same with and without speculation.
    kw = dict(temperature=1.0, seed=11, max_tokens=32, extra_body={"min_p": 0.1})
    assert (complete(mtp_client, TEXT[0], **kw).choices[0].text ==
            complete(client, TEXT[0], **kw).choices[0].text)


def test_completion_logprobs_greedy(client, refs):
    r = complete(client, TEXT[0], logprobs=2, max_tokens=8)
    lp = r.choices[0].logprobs
    assert lp is not None
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    assert "".join(lp.tokens) == r.choices[0].text
    assert refs["text"][0]["text"].startswith(r.choices[0].text)
    for tok, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert logprob <= 0
        assert 1 <= len(top) <= 2
        assert max(top.values()) == pytest.approx(logprob, abs=1e-5)  # greedy takes the argmax
        assert tok in top


def test_chat_logprobs_greedy(client):
    r = chat(client, CHAT[0], logprobs=True, top_logprobs=3, max_tokens=8)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 8
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        tops = [t.logprob for t in entry.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        assert tops[0] == pytest.approx(entry.logprob, abs=1e-5)
        assert entry.top_logprobs[0].token == entry.token
    assert "".join(e.token for e in content) == r.choices[0].message.content


def test_repetition_penalty_changes_a_repetitive_greedy_output(client):
    plain = chat(client, "Hello", max_tokens=32).choices[0].message.content
    assert plain.count("y") > 20  # the toy model repeats 'y'; a penalty must break that
    pen = chat(client, "Hello", max_tokens=32,
               extra_body={"repetition_penalty": 1.8}).choices[0].message.content
    assert pen != plain
    pen2 = chat(client, "Hello", max_tokens=32, frequency_penalty=1.5).choices[0].message.content
    assert pen2 != plain


def test_tools_are_passed_to_the_template(client, binary):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}}}}}]
    messages = [{"role": "user", "content": CHAT[0]}]
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=tools,
                                       tool_choice="auto", temperature=0, max_tokens=4)
    assert r.usage.prompt_tokens == len(chat_template_ids(binary, messages, tools))


def test_multi_turn_chat_counts_the_rendered_prompt(client, binary):
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": CHAT[0]}]
    r = client.chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                       max_tokens=4)
    assert r.usage.prompt_tokens == len(chat_template_ids(binary, messages))


# --- errors as the client's exception types ---------------------------------------------------


def test_n_above_128_is_a_bad_request_naming_n(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, CHAT[0], n=129)
    assert e.value.param == "n"
    assert e.value.type == "invalid_request_error"


def test_unknown_model_is_not_found(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user",
                                                                         "content": "hi"}])
    assert e.value.code == "model_not_found"


@pytest.mark.parametrize("field,value", [
    ("temperature", 2.5), ("top_p", 0), ("top_p", 1.5), ("presence_penalty", 2.5),
    ("frequency_penalty", -3), ("top_logprobs", 21),
])
def test_out_of_range_chat_field_names_the_field(client, field, value):
    kw = {field: value}
    if field == "top_logprobs":
        kw["logprobs"] = True
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, CHAT[0], **kw)
    assert e.value.param == field


def test_completion_logprobs_above_five_names_logprobs(client):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, TEXT[0], logprobs=6)
    assert e.value.param == "logprobs"


def test_prompt_plus_max_tokens_beyond_the_context_names_both_numbers(client):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, TEXT[0], max_tokens=5000)
    msg = str(e.value)
    assert "1024" in msg and "5000" in msg, msg


def test_wrong_api_key_is_an_authentication_error(pool):
    s = pool.start(["--api-key", "sekrit", "--max-model-len", "256"])
    with client_for(s, "wrong") as bad, pytest.raises(openai.AuthenticationError) as e:
        bad.models.list()
    assert e.value.type == "authentication_error"
    with client_for(s, "sekrit") as ok:
        assert ok.completions.create(model=MODEL, prompt="Hi", max_tokens=2,
                                     temperature=0).usage.completion_tokens == 2
    # /health and /metrics need no key.
    assert request(s.port, "GET", "/health").status == 200
    assert request(s.port, "GET", "/metrics").status == 200


def test_api_key_from_the_environment(pool):
    s = pool.start(["--max-model-len", "256"], env={"TANDEM_API_KEY": "envkey"})
    with client_for(s, "nope") as bad, pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with client_for(s, "envkey") as ok:
        assert [m.id for m in ok.models.list().data] == [MODEL]


def test_max_tokens_defaults_to_the_rest_of_the_context(pool):
    s = pool.start(["--max-model-len", "128"])
    with client_for(s) as c:
        r = c.completions.create(model=MODEL, prompt=TEXT[0], temperature=0,
                                 extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.total_tokens == 128


def test_streamed_logprobs_match_the_non_streamed_ones(client):
    whole = complete(client, TEXT[1], logprobs=2, max_tokens=10).choices[0].logprobs
    chunks = [c for c in complete(client, TEXT[1], logprobs=2, max_tokens=10, stream=True)
              if c.choices]
    tokens = [t for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    lps = [x for c in chunks if c.choices[0].logprobs for x in c.choices[0].logprobs.token_logprobs]
    assert tokens == whole.tokens
    assert lps == whole.token_logprobs  # the same bits, streamed or not
    chat_whole = chat(client, CHAT[1], logprobs=True, top_logprobs=2, max_tokens=10)
    chat_chunks = [c for c in chat(client, CHAT[1], logprobs=True, top_logprobs=2,
                                   max_tokens=10, stream=True) if c.choices]
    streamed = [e for c in chat_chunks if c.choices[0].logprobs and c.choices[0].logprobs.content
                for e in c.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == \
        [(e.token, e.logprob) for e in chat_whole.choices[0].logprobs.content]
