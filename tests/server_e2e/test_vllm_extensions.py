"""The openai client against a real `tandem serve` on what lm-eval and vLLM's users send beyond
OpenAI's core fields: completions echo with prompt logprobs, vLLM's prompt_logprobs,
include_stop_str_in_output, skip_special_tokens, continue_final_message and chat echo,
truncate_prompt_tokens, a batch of prompts, continuous usage stats (docs/server.md)."""

import openai
import pytest

from prompts import CHAT, TEXT
from support import MODEL, chat, complete, request


def test_completion_echo_scores_the_prompt_as_lm_eval_reads_it(client, mtp_client):
    # lm-eval's loglikelihood: a token-id prompt, echo, logprobs, max_tokens 1 (or 0), greedy;
    # it reads token_logprobs and top_logprobs past the context.
    ids = [(7 * i + 3) % 200 + 10 for i in range(150)]  # past one 64-row prefill chunk
    plain = complete(client, ids, max_tokens=1, logprobs=1).choices[0]
    r = complete(client, ids, echo=True, logprobs=1, max_tokens=1)
    c = r.choices[0]
    lp = c.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(ids) + 1
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert "".join(lp.tokens) == c.text
    assert c.text.endswith(plain.text) and r.usage.completion_tokens == 1
    # Byte offsets into the text (a token that is part of a character shows as U+FFFD).
    assert lp.text_offset[0] == 0
    for i, tok in enumerate(lp.tokens[:-1]):
        step = lp.text_offset[i + 1] - lp.text_offset[i]
        assert step == len(tok.encode()) if "\ufffd" not in tok else step >= 0
    for tok, logprob, top in zip(lp.tokens[1:], lp.token_logprobs[1:], lp.top_logprobs[1:]):
        assert logprob <= 0 and tok in top and 1 <= len(top) <= 2
        assert max(top.values()) >= logprob
    # The generated token is scored as without echo (the same row), the prompt as with max_tokens 0.
    assert lp.token_logprobs[-1] == plain.logprobs.token_logprobs[0]
    only = complete(client, ids, echo=True, logprobs=1, max_tokens=0)
    assert only.choices[0].logprobs.token_logprobs == lp.token_logprobs[:-1]
    assert only.choices[0].text == c.text[:len(c.text) - len(plain.text)]
    assert only.usage.completion_tokens == 0 and only.choices[0].finish_reason == "length"
    # Speculation changes no score.
    spec = complete(mtp_client, ids, echo=True, logprobs=1, max_tokens=1).choices[0]
    assert spec.logprobs.token_logprobs == lp.token_logprobs and spec.text == c.text
    # Streamed: the prompt leads the first chunk; text and logprobs add up to the whole answer.
    chunks = list(complete(client, ids, echo=True, logprobs=1, max_tokens=1, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks) == c.text
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        got = [x for ch in chunks if ch.choices[0].logprobs for x in getattr(ch.choices[0].logprobs, key)]
        assert got == getattr(lp, key), key
    # A one-token prompt has only the null entry; two choices each lead with the prompt.
    one = complete(client, ids[:1], echo=True, logprobs=0, max_tokens=0).choices[0].logprobs
    assert one.token_logprobs == [None] and one.top_logprobs == [None]
    two = complete(client, ids, echo=True, logprobs=1, max_tokens=1, n=2).choices
    assert [t.logprobs.token_logprobs for t in two] == [lp.token_logprobs] * 2
    # echo without logprobs: the prompt's text leads.
    text = complete(client, TEXT[0], echo=True, max_tokens=4).choices[0]
    assert text.text.startswith(TEXT[0]) and text.logprobs is None


def test_prompt_logprobs_score_every_prompt_token_as_vllm_returns_them(client, mtp_client):
    # vLLM's prompt_logprobs (what its users read for perplexity): per prompt token a map from
    # token id to logprob, rank and text, the prompt's token and the top alternatives.
    ids = [(7 * i + 3) % 200 + 10 for i in range(150)]
    c = complete(client, ids, max_tokens=1, extra_body={"prompt_logprobs": 2}).choices[0]
    plp = c.model_extra["prompt_logprobs"]
    assert len(plp) == len(ids) and plp[0] is None
    echo = complete(client, ids, echo=True, logprobs=2, max_tokens=1).choices[0].logprobs
    compared = 0
    for i in range(1, len(ids)):
        entry, own = plp[i], plp[i][str(ids[i])]
        # The same scores as echo's (one row each), the ranks vLLM's: 1 + tokens above.
        assert own["logprob"] == echo.token_logprobs[i] and own["decoded_token"] == echo.tokens[i]
        assert 2 <= len(entry) <= 3 and min(e["rank"] for e in entry.values()) == 1
        above = sum(e["logprob"] > own["logprob"] for e in entry.values())
        assert own["rank"] >= above + 1 and (own["rank"] <= 2) == (len(entry) == 2)
        # The alternatives are echo's (whose map is keyed by text: compared where texts differ).
        texts = [e["decoded_token"] for e in entry.values()]
        if len(set(texts)) == len(texts) and "\ufffd" not in "".join(texts):
            compared += 1
            assert {e["decoded_token"]: e["logprob"] for e in entry.values()} == echo.top_logprobs[i]
    assert compared >= 20
    # Speculation changes no score; n = 2 gives each choice the same; echo keeps its own count.
    spec = complete(mtp_client, ids, max_tokens=1, extra_body={"prompt_logprobs": 2}).choices[0]
    assert spec.model_extra["prompt_logprobs"] == plp
    two = complete(client, ids, max_tokens=1, n=2, extra_body={"prompt_logprobs": 2}).choices
    assert [t.model_extra["prompt_logprobs"] for t in two] == [plp, plp]
    both = complete(client, ids, echo=True, logprobs=1, max_tokens=1,
                    extra_body={"prompt_logprobs": 4}).choices[0]
    assert all(1 <= len(t) <= 2 for t in both.logprobs.top_logprobs[1:])
    assert all(4 <= len(e) <= 5 for e in both.model_extra["prompt_logprobs"][1:])
    # Chat: at the top of the response, the rendered prompt's tokens; 0: the prompt's token alone.
    r = chat(client, TEXT[0], max_tokens=1, extra_body={"prompt_logprobs": 0})
    cp = r.model_extra["prompt_logprobs"]
    assert len(cp) == r.usage.prompt_tokens and cp[0] is None
    assert all(len(e) == 1 and next(iter(e.values()))["rank"] >= 1 for e in cp[1:])
    assert "prompt_logprobs" not in (chat(client, TEXT[0], max_tokens=1).model_extra or {})
    # Not streamed (as vLLM).
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, ids, max_tokens=1, stream=True, extra_body={"prompt_logprobs": 1})
    assert e.value.param == "prompt_logprobs"


def test_vllm_include_stop_str_in_output_keeps_the_stop_string(client, mtp_client):
    # include_stop_str_in_output: the text runs through the stop string that ended it.
    plain = complete(client, TEXT[0], max_tokens=24).choices[0].text
    stop = plain[8:11]
    cut = complete(client, TEXT[0], max_tokens=24, stop=[stop]).choices[0]
    kept = complete(client, TEXT[0], max_tokens=24, stop=[stop],
                    extra_body={"include_stop_str_in_output": True}).choices[0]
    assert cut.finish_reason == kept.finish_reason == "stop"
    assert kept.text == cut.text + stop and plain.startswith(kept.text)
    spec = complete(mtp_client, TEXT[0], max_tokens=24, stop=[stop],
                    extra_body={"include_stop_str_in_output": True}).choices[0]
    assert spec.text == kept.text

def test_vllm_skip_special_tokens_shows_them_and_the_stop_token_with_include(client, server):
    # Special tokens forced by logit_bias: skipped by default (vLLM's skip_special_tokens),
    # shown with it false; the end-of-turn token that ends generation shows only with
    # include_stop_str_in_output too.
    def token_id(text):
        ids = request(server.port, "POST", "/tokenize", {"prompt": text}).json()["tokens"]
        assert len(ids) == 1, ids
        return ids[0]

    start, end = token_id("<|im_start|>"), token_id("<|im_end|>")
    forced = complete(client, TEXT[0], max_tokens=3, logit_bias={str(start): 100})
    assert forced.choices[0].text == "" and forced.usage.completion_tokens == 3
    shown = complete(client, TEXT[0], max_tokens=3, logit_bias={str(start): 100},
                     extra_body={"skip_special_tokens": False})
    assert shown.choices[0].text == "<|im_start|>" * 3
    ended = chat(client, CHAT[0], max_tokens=8, logit_bias={str(end): 100},
                 extra_body={"skip_special_tokens": False}).choices[0]
    assert ended.finish_reason == "stop" and ended.message.content == ""
    kept = chat(client, CHAT[0], max_tokens=8, logit_bias={str(end): 100}, extra_body={
        "skip_special_tokens": False, "include_stop_str_in_output": True}).choices[0]
    assert kept.finish_reason == "stop" and kept.message.content == "<|im_end|>"


def test_vllm_prompt_fields_continue_the_final_message_and_truncate(client, server):
    # continue_final_message: the assistant's turn is continued from its content (the prompt
    # ends there: /tokenize with the same flags has the same tokens).
    msgs = [{"role": "user", "content": CHAT[0]},
            {"role": "assistant", "content": "The answer is"}]
    flags = {"add_generation_prompt": False, "continue_final_message": True}
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0,
                                       extra_body=flags)
    tok = request(server.port, "POST", "/tokenize", {"messages": msgs, **flags}).json()
    assert r.usage.prompt_tokens == tok["count"]
    text = request(server.port, "POST", "/detokenize", {"tokens": tok["tokens"]}).json()["prompt"]
    assert text.endswith("The answer is"), text
    # echo (vLLM's, on chat): the answer starts with the continued message.
    echoed = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8,
                                            temperature=0, extra_body={**flags, "echo": True})
    assert echoed.choices[0].message.content == "The answer is" + r.choices[0].message.content
    chunks = list(client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8,
                                                 temperature=0, stream=True,
                                                 extra_body={**flags, "echo": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        echoed.choices[0].message.content
    assert chat(client, CHAT[0], max_tokens=4, extra_body={"echo": True}).choices[0] \
        .message.content == chat(client, CHAT[0], max_tokens=4).choices[0].message.content
    opened = request(server.port, "POST", "/tokenize", {"messages": msgs}).json()
    assert opened["count"] > tok["count"]  # the turn closed and a new one opened
    with pytest.raises(openai.BadRequestError) as e:  # both: as vLLM, a 400
        client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8,
                                       extra_body={"continue_final_message": True})
    assert e.value.param == "continue_final_message"
    # truncate_prompt_tokens: only the prompt's last k tokens, as if sent alone.
    ids = [(7 * i + 3) % 200 + 10 for i in range(50)]
    short = complete(client, ids, max_tokens=6, extra_body={"truncate_prompt_tokens": 10})
    alone = complete(client, ids[-10:], max_tokens=6)
    assert short.usage.prompt_tokens == 10 and short.choices[0].text == alone.choices[0].text
    assert complete(client, ids, max_tokens=1, extra_body={"truncate_prompt_tokens": 80}) \
        .usage.prompt_tokens == 50


def test_a_batch_of_prompts_answers_each_as_alone(client, mtp_client):
    # A list of prompts (what lm-eval sends with batch_size > 1): choice p n + i is prompt p's
    # choice i, each equal to that prompt sent alone; usage counts every prompt once.
    singles = [complete(client, t, max_tokens=8) for t in TEXT[:2]]
    r = complete(client, TEXT[:2], max_tokens=8)
    assert [c.index for c in r.choices] == [0, 1]
    assert [c.text for c in r.choices] == [s.choices[0].text for s in singles]
    assert r.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles)
    seeded = complete(client, TEXT[:2], max_tokens=8, n=2, temperature=0.9, seed=3)
    for p, text in enumerate(TEXT[:2]):
        alone = complete(client, text, max_tokens=8, n=2, temperature=0.9, seed=3)
        assert [c.text for c in seeded.choices[2 * p:2 * p + 2]] == [c.text for c in alone.choices]
    chunks = list(complete(client, TEXT[:2], max_tokens=8, stream=True))
    for i in range(2):
        assert "".join(c.choices[0].text for c in chunks if c.choices and c.choices[0].index == i) \
            == r.choices[i].text
    # lm-eval's loglikelihood batch: token-id prompts with echo and logprobs, each choice led by
    # its own prompt; the same under MTP.
    ids = [[(7 * i + 3) % 200 + 10 for i in range(n)] for n in (30, 80)]
    batch = complete(client, ids, echo=True, logprobs=1, max_tokens=1).choices
    for p in range(2):
        one = complete(client, ids[p], echo=True, logprobs=1, max_tokens=1).choices[0]
        assert batch[p].text == one.text
        assert batch[p].logprobs.token_logprobs == one.logprobs.token_logprobs
    spec = complete(mtp_client, ids, echo=True, logprobs=1, max_tokens=1).choices
    assert [c.logprobs.token_logprobs for c in spec] == [c.logprobs.token_logprobs for c in batch]


def test_continuous_usage_stats_count_every_chunk(client):
    # vLLM's stream_options.continuous_usage_stats: each chunk's usage so far, per choice.
    so = {"include_usage": True, "continuous_usage_stats": True}
    chunks = list(complete(client, TEXT[:2], max_tokens=12, stream=True,
                           extra_body={"stream_options": so}))
    final = chunks[-1]
    assert final.choices == [] and final.usage.completion_tokens > 0
    seen = {0: 0, 1: 0}
    for c in chunks[:-1]:
        i, u = c.choices[0].index, c.usage
        assert u.completion_tokens >= seen[i] and u.total_tokens == u.prompt_tokens + u.completion_tokens
        seen[i] = u.completion_tokens
    assert sum(seen.values()) == final.usage.completion_tokens
    singles = [complete(client, t, max_tokens=1).usage.prompt_tokens for t in TEXT[:2]]
    assert {c.choices[0].index: c.usage.prompt_tokens for c in chunks[:-1]} == dict(enumerate(singles))
    plain = list(complete(client, TEXT[0], max_tokens=4, stream=True,
                          stream_options={"include_usage": True}))
    assert all(c.usage is None for c in plain[:-1])
