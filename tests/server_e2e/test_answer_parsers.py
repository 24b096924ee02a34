"""`tandem serve --tool-call-parser` and `--reasoning-parser`: the flags' errors, requests on a
parsing server (the shipped model answers in plain text, with no think block, which must come back
unchanged: content, no reasoning_content, finish reason, and the same stream), and a multi-turn
tool conversation as the openai client sends it. The parsing itself (formats, types, streams cut
anywhere) is tests/server/tool_calls_test.cpp's and reasoning_test.cpp's."""

import subprocess

import openai
import pytest

from prompts import CHAT
from support import MODEL, chat_template_ids

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


@pytest.fixture(scope="module")
def tool_client(pool):
    s = pool.start(["--max-model-len", "1024", "--tool-call-parser", "qwen3_coder",
                    "--enable-auto-tool-choice", "--reasoning-parser", "qwen3"])
    with openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def plain_client(pool):
    s = pool.start(["--max-model-len", "1024"])
    with openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120) as c:
        yield c


def ask(client, **kw):
    kw.setdefault("max_tokens", 16)
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": CHAT[0]}], temperature=0, **kw)


def test_text_answers_are_unchanged_with_a_parser(tool_client, plain_client):
    want = ask(plain_client, tools=TOOLS)
    for tool_choice in ("auto", "none"):
        got = ask(tool_client, tools=TOOLS, tool_choice=tool_choice)
        assert got.choices[0].message.content == want.choices[0].message.content
        assert got.choices[0].message.tool_calls is None
        assert (got.choices[0].message.model_extra or {}).get("reasoning_content") is None
        assert got.choices[0].finish_reason == want.choices[0].finish_reason
    chunks = list(ask(tool_client, tools=TOOLS, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == want.choices[0].message.content
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert not any(c.choices and (c.choices[0].delta.model_extra or {}).get("reasoning_content")
                   for c in chunks)


def test_a_tool_conversation_as_the_client_sends_it(tool_client, binary):
    messages = [
        {"role": "user", "content": "What is the weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ]
    r = tool_client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS,
                                            temperature=0, max_tokens=4)
    assert r.choices[0].finish_reason in ("stop", "length")
    # Accepted and rendered (the shipped template ignores tool calls, so the prompt is the
    # CLI's rendering of the same messages).
    rendered = [dict(m, content=m["content"] or "") for m in messages]
    assert r.usage.prompt_tokens == len(chat_template_ids(binary, rendered, TOOLS))
    with pytest.raises(openai.BadRequestError) as e:
        tool_client.chat.completions.create(
            model=MODEL, max_tokens=2,
            messages=[{"role": "assistant", "content": "", "tool_calls": [{"id": "x"}]}])
    assert e.value.param == "messages[0].tool_calls[0]"


# The shipped template with a generation prompt that opens a think block (as Qwen3.5's does).
THINK_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}")


def test_reasoning_through_a_template_that_opens_a_think_block(pool, tmp_path):
    path = tmp_path / "think.jinja"
    path.write_text(THINK_TEMPLATE)
    args = ["--max-model-len", "1024", "--chat-template", str(path)]
    plain_s, think_s = pool.start(args), pool.start(args + ["--reasoning-parser", "qwen3"])
    with openai.OpenAI(base_url=plain_s.url + "/v1", api_key="x", max_retries=0) as plain, \
            openai.OpenAI(base_url=think_s.url + "/v1", api_key="x", max_retries=0) as think:
        text = ask(plain, max_tokens=24).choices[0].message.content  # no parser: all content
        reasoning, closed, content = text.partition("</think>")
        got = ask(think, max_tokens=24).choices[0].message
        assert got.model_extra["reasoning_content"] == reasoning
        assert (got.content or "") == (content if closed else "")
        chunks = list(ask(think, max_tokens=24, stream=True))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) == \
            reasoning
        assert "".join(d.content or "" for d in deltas) == (content if closed else "")
        # JSON mode leaves the think block free (the object follows "</think>", as vLLM starts a
        # grammar after the reasoning): the same reasoning.
        js = ask(think, max_tokens=24, response_format={"type": "json_object"}).choices[0].message
        assert js.model_extra["reasoning_content"] == reasoning


@pytest.mark.parametrize("args,needle", [
    (["--tool-call-parser", "nope"], b"unknown tool-call parser 'nope'"),
    (["--enable-auto-tool-choice"], b"--enable-auto-tool-choice needs --tool-call-parser"),
    (["--reasoning-parser", "r2"], b"unknown reasoning parser 'r2'"),
    (["--chat-template", "/no/such.jinja"], b"--chat-template /no/such.jinja: no such file"),
])
def test_bad_parser_flags_fail_clearly(binary, args, needle):
    p = subprocess.run([binary, "serve", "--model", MODEL, "--port", "0", *args],
                       capture_output=True, timeout=60)
    assert p.returncode == 1
    assert needle in p.stderr, p.stderr[-500:]
