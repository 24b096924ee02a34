"""POST /v1/responses (the Responses API, as vLLM serves it) through the official openai client:
an adapter over chat completions, so every answer is checked against the chat completion of the
same messages (text, usage, tool calls, structured output), streamed and not, and with MTP; stored
responses (previous_response_id against the whole conversation sent as items, retrieve, delete,
input_items, store: false, eviction); plus what it refuses (conversations, non-function tools,
images) with the Responses field named."""

import json

import openai
import pytest

from prompts import CHAT
from support import MODEL, OPENAI_MAX, chat, client_for, post, request

MAX = OPENAI_MAX


def respond(client, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_output_tokens", MAX)
    return client.responses.create(model=MODEL, **kw)


def test_text_input_answers_as_the_chat_completion_does(client):
    want = chat(client, CHAT[0], max_tokens=MAX)
    r = respond(client, input=CHAT[0])
    assert r.id.startswith("resp_") and r.object == "response" and r.model == MODEL
    assert r.output_text == want.choices[0].message.content
    [item] = r.output
    assert item.type == "message" and item.role == "assistant" and item.id.startswith("msg_")
    assert [c.type for c in item.content] == ["output_text"]
    # The toy model runs to max_output_tokens: incomplete, as OpenAI reports it.
    assert want.choices[0].finish_reason == "length"
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.input_tokens == want.usage.prompt_tokens
    assert r.usage.output_tokens == want.usage.completion_tokens == MAX
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.max_output_tokens == MAX and r.store is True and r.temperature == 0
    assert r.previous_response_id is None
    assert r.model_extra["speculation"]["draft_tokens"] == 0


def test_instructions_and_message_items_are_the_chat_messages(client):
    messages = [{"role": "system", "content": "You answer briefly."},
                {"role": "user", "content": CHAT[2]},
                {"role": "assistant", "content": "A fortune."},
                {"role": "user", "content": CHAT[0]}]
    want = client.chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                          max_tokens=MAX)
    r = respond(client, instructions="You answer briefly.", input=[
        {"role": "user", "content": CHAT[2]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "A fortune."}]},
        {"role": "user", "content": [{"type": "input_text", "text": CHAT[0]}]}])
    assert r.output_text == want.choices[0].message.content
    assert r.usage.input_tokens == want.usage.prompt_tokens
    assert r.instructions == "You answer briefly."
    # developer is system
    d = respond(client, input=[{"role": "developer", "content": "You answer briefly."},
                               {"role": "user", "content": CHAT[2]},
                               {"role": "assistant", "content": "A fortune."},
                               {"role": "user", "content": CHAT[0]}])
    assert d.output_text == r.output_text


def test_the_stream_is_the_typed_events_of_the_same_answer(client):
    whole = respond(client, input=CHAT[1])
    events = list(respond(client, input=CHAT[1], stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.incomplete"  # max_output_tokens reached
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert types.count("response.output_item.added") == types.count("response.output_item.done") == 1
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert deltas and "".join(e.delta for e in deltas) == whole.output_text
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == whole.output_text
    final = events[-1].response
    assert final.id == events[0].response.id and final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.incomplete_details.reason == "max_output_tokens"
    # The client's stream helper accumulates the same response.
    with client.responses.stream(model=MODEL, input=CHAT[1], temperature=0,
                                 max_output_tokens=MAX) as s:
        got = "".join(e.delta for e in s if e.type == "response.output_text.delta")
    assert got == whole.output_text


def test_the_same_answers_under_mtp(client, mtp_client):
    for prompt in CHAT:
        plain = respond(client, input=prompt)
        spec = respond(mtp_client, input=prompt)
        assert spec.output_text == plain.output_text
        streamed = "".join(e.delta for e in respond(mtp_client, input=prompt, stream=True)
                           if e.type == "response.output_text.delta")
        assert streamed == plain.output_text
    assert spec.model_extra["speculation"]["draft_tokens"] > 0


def test_a_stop_before_max_output_tokens_completes(client):
    want = chat(client, CHAT[0], max_tokens=MAX)
    text = want.choices[0].message.content
    stop = text[len(text) // 2:len(text) // 2 + 2]
    r = respond(client, input=CHAT[0], extra_body={"stop": [stop]})
    assert r.status == "completed" and r.incomplete_details is None
    w = chat(client, CHAT[0], max_tokens=MAX, stop=[stop])
    assert r.output_text == w.choices[0].message.content
    events = list(respond(client, input=CHAT[0], stream=True, extra_body={"stop": [stop]}))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == r.output_text


WEATHER = {"type": "function", "name": "get_weather", "description": "weather of a city",
           "parameters": {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}},
                          "required": ["unit"]}}


def test_forced_function_calls_are_function_call_items(client, mtp_client):
    chat_tool = {"type": "function", "function": {k: v for k, v in WEATHER.items()
                                                  if k != "type"}}
    want = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": CHAT[0]}], tools=[chat_tool],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=0,
        max_tokens=200).choices[0].message.tool_calls
    kw = dict(input=CHAT[0], tools=[WEATHER], max_output_tokens=200,
              tool_choice={"type": "function", "name": "get_weather"})
    r = respond(client, **kw)
    assert r.status == "completed"
    calls = [o for o in r.output if o.type == "function_call"]
    assert [(c.name, c.arguments) for c in calls] == \
        [(t.function.name, t.function.arguments) for t in want]
    assert json.loads(calls[0].arguments)["unit"] in ("c", "f")
    assert calls[0].call_id and calls[0].id.startswith("fc_") and calls[0].status == "completed"
    assert [(c.name, c.arguments) for c in respond(mtp_client, **kw).output
            if c.type == "function_call"] == [(c.name, c.arguments) for c in calls]
    events = list(respond(client, stream=True, **kw))
    args = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [(e.name, e.arguments) for e in args] == [(c.name, c.arguments) for c in calls]
    assert events[-1].type == "response.completed"
    # The next turn sends the call and its output back as items: the chat conversation's prompt.
    turn = [{"role": "user", "content": CHAT[0]},
            {"type": "function_call", "call_id": calls[0].call_id, "name": calls[0].name,
             "arguments": calls[0].arguments},
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}]
    nxt = respond(client, input=turn, tools=[WEATHER])
    ref = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=MAX,
                                         tools=[chat_tool], messages=[
        {"role": "user", "content": CHAT[0]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": calls[0].call_id, "type": "function",
             "function": {"name": calls[0].name, "arguments": calls[0].arguments}}]},
        {"role": "tool", "tool_call_id": calls[0].call_id, "content": "sunny"}])
    assert nxt.usage.input_tokens == ref.usage.prompt_tokens
    assert nxt.output_text == ref.choices[0].message.content
    # The same turn on the stored first one: only the call's output is sent.
    chained = respond(client, previous_response_id=r.id, input=turn[2:], tools=[WEATHER])
    assert chained.previous_response_id == r.id
    assert chained.usage.input_tokens == nxt.usage.input_tokens
    assert chained.output_text == nxt.output_text


def test_text_format_json_schema_is_structured_output(client):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    r = respond(client, input=CHAT[1], max_output_tokens=200,
                text={"format": {"type": "json_schema", "name": "v", "schema": schema,
                                 "strict": True}})
    assert r.status == "completed"
    assert isinstance(json.loads(r.output_text)["ok"], bool)
    want = chat(client, CHAT[1], max_tokens=200, response_format={
        "type": "json_schema", "json_schema": {"name": "v", "schema": schema, "strict": True}})
    assert r.output_text == want.choices[0].message.content
    assert r.text.format.type == "json_schema"


def test_top_logprobs_are_the_chat_logprobs(client):
    want = chat(client, CHAT[0], max_tokens=8, logprobs=True, top_logprobs=2)
    r = respond(client, input=CHAT[0], max_output_tokens=8, top_logprobs=2,
                include=["message.output_text.logprobs"])
    lps = r.output[0].content[0].logprobs
    assert [(lp.token, lp.logprob) for lp in lps] == \
        [(lp.token, lp.logprob) for lp in want.choices[0].logprobs.content]
    assert all(len(lp.top_logprobs) == 2 for lp in lps)


def test_reasoning_is_a_reasoning_item(pool, tmp_path):
    # A template that opens a think block and the qwen3 reasoning parser (test_answer_parsers.py):
    # the chat answer's reasoning_content becomes a reasoning item before the message, streamed as
    # reasoning_text deltas.
    from test_answer_parsers import THINK_TEMPLATE
    path = tmp_path / "think.jinja"
    path.write_text(THINK_TEMPLATE)
    s = pool.start(["--max-model-len", "1024", "--chat-template", str(path),
                    "--reasoning-parser", "qwen3"])
    with openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0) as c:
        want = chat(c, CHAT[0], max_tokens=MAX).choices[0].message
        r = respond(c, input=CHAT[0])
        assert r.output[0].type == "reasoning" and r.output[0].id.startswith("rs_")
        assert r.output[0].content[0].text == want.model_extra["reasoning_content"]
        assert r.output_text == (want.content or "")
        events = list(respond(c, input=CHAT[0], stream=True))
        assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == \
            want.model_extra["reasoning_content"]
        final = events[-1].response
        assert [o.type for o in final.output] == [o.type for o in r.output]
        assert final.output_text == r.output_text


def items_of(response):
    """A response's output items as a next request sends them back."""
    return [o.model_dump(exclude_none=True) for o in response.output]


def client_port(client):
    return client.base_url.port


def test_previous_response_id_is_the_whole_conversation_sent_as_items(client):
    first = respond(client, input=CHAT[0], instructions="You answer briefly.")
    assert first.store is True
    # The first turn's instructions do not carry over; the new ones come first.
    nxt = respond(client, input=CHAT[1], previous_response_id=first.id, instructions="Be kind.")
    assert nxt.previous_response_id == first.id and nxt.store is True
    explicit = respond(client, instructions="Be kind.", input=[
        {"role": "user", "content": CHAT[0]}, *items_of(first),
        {"role": "user", "content": CHAT[1]}])
    assert nxt.output_text == explicit.output_text
    assert nxt.usage.input_tokens == explicit.usage.input_tokens
    want = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=MAX, messages=[
        {"role": "system", "content": "Be kind."}, {"role": "user", "content": CHAT[0]},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": CHAT[1]}])
    assert nxt.output_text == want.choices[0].message.content
    assert nxt.usage.input_tokens == want.usage.prompt_tokens
    # A third turn on the second: the chain of stored conversations.
    third = respond(client, input=CHAT[2], previous_response_id=nxt.id)
    explicit3 = respond(client, input=[
        {"role": "user", "content": CHAT[0]}, *items_of(first),
        {"role": "user", "content": CHAT[1]}, *items_of(nxt),
        {"role": "user", "content": CHAT[2]}])
    assert third.output_text == explicit3.output_text
    assert third.usage.input_tokens == explicit3.usage.input_tokens
    # input_items: what the response was made from, newest first unless order=asc.
    port = client_port(client)
    listed = request(port, "GET", f"/v1/responses/{nxt.id}/input_items?order=asc")
    assert listed.status == 200, listed
    body = listed.json()
    assert body["object"] == "list" and body["has_more"] is False
    first_output = request(port, "GET", f"/v1/responses/{first.id}").json()["output"]
    assert body["data"] == [{"type": "message", "role": "user", "content": CHAT[0]},
                            *first_output,
                            {"type": "message", "role": "user", "content": CHAT[1]}]
    desc = request(port, "GET", f"/v1/responses/{nxt.id}/input_items").json()
    assert desc["data"] == body["data"][::-1]


def test_a_stored_response_is_retrieved_and_deleted(client):
    r = respond(client, input=CHAT[0])
    got = client.responses.retrieve(r.id)
    assert got.model_dump() == r.model_dump()
    assert client.responses.delete(r.id) is None
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as e:
        respond(client, input=CHAT[1], previous_response_id=r.id)
    assert e.value.param == "previous_response_id"
    # The raw bodies.
    r = respond(client, input=CHAT[0])
    d = request(client_port(client), "DELETE", f"/v1/responses/{r.id}")
    assert d.status == 200 and d.json() == {"id": r.id, "object": "response.deleted",
                                            "deleted": True}
    for method, path in (("GET", r.id), ("DELETE", r.id), ("GET", r.id + "/input_items")):
        missing = request(client_port(client), method, f"/v1/responses/{path}")
        assert missing.status == 404, missing
        error = missing.json()["error"]
        assert error["type"] == "not_found_error" and r.id in error["message"], error


def test_store_false_is_not_stored_but_may_continue_a_stored_one(client):
    first = respond(client, input=CHAT[0])
    r = respond(client, input=CHAT[1], store=False, previous_response_id=first.id)
    assert r.store is False and r.previous_response_id == first.id
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    stored = respond(client, input=CHAT[1], previous_response_id=first.id)
    assert r.output_text == stored.output_text
    events = list(respond(client, input=CHAT[0], stream=True, store=False))
    assert events[-1].response.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(events[-1].response.id)


def test_an_unknown_previous_response_id_is_a_404_naming_it(client, server):
    with pytest.raises(openai.NotFoundError) as e:
        respond(client, input=CHAT[0], previous_response_id="resp_unknown")
    assert e.value.param == "previous_response_id" and "resp_unknown" in e.value.message
    assert e.value.type == "invalid_request_error"
    r = post(server.port, "/v1/responses", {"model": MODEL, "input": "x", "stream": True,
                                            "previous_response_id": "resp_unknown"})
    assert r.status == 404 and r.json()["error"]["param"] == "previous_response_id", r


def test_a_streamed_response_is_stored_as_its_final_event_says(client):
    events = list(respond(client, input=CHAT[1], stream=True))
    final = events[-1].response
    assert final.store is True
    assert client.responses.retrieve(final.id).model_dump() == final.model_dump()
    # A streamed next turn on it answers as the whole conversation does.
    streamed = list(respond(client, input=CHAT[0], stream=True, previous_response_id=final.id))
    whole = respond(client, input=[{"role": "user", "content": CHAT[1]}, *items_of(final),
                                   {"role": "user", "content": CHAT[0]}])
    assert streamed[-1].response.output_text == whole.output_text
    assert streamed[-1].response.previous_response_id == final.id
    assert client.responses.retrieve(streamed[-1].response.id).output_text == whole.output_text


def test_max_stored_responses_evicts_the_least_recently_used(pool):
    s = pool.start(["--max-model-len", "1024", "--max-stored-responses", "2", "--api-key", "k"])
    with client_for(s, api_key="k") as c:
        a, b = respond(c, input=CHAT[0]), respond(c, input=CHAT[1])
        c.responses.retrieve(a.id)  # a is now used more recently than b
        respond(c, input=CHAT[2])
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(b.id)
        assert c.responses.retrieve(a.id).output_text == a.output_text
    # The routes need the key, as the other /v1 routes do.
    for method in ("GET", "DELETE"):
        assert request(s.port, method, f"/v1/responses/{a.id}").status == 401
    off = pool.start(["--max-model-len", "1024", "--max-stored-responses", "0"])
    with client_for(off) as c:
        r = respond(c, input=CHAT[0])
        assert r.store is False
        with pytest.raises(openai.NotFoundError) as e:
            respond(c, input=CHAT[1], previous_response_id=r.id)
        assert "--max-stored-responses 0" in e.value.message


@pytest.mark.parametrize("kw, param", [
    (dict(previous_response_id=5), "previous_response_id"),
    (dict(store="yes"), "store"),
    (dict(extra_body={"conversation": "conv_1"}), "conversation"),
    (dict(tools=[{"type": "web_search_preview"}]), "tools[0].type"),
    (dict(input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": "http://x/y.png"}]}]), "input[0].content[0].type"),
    (dict(input=[]), "input"),
    (dict(input=[{"type": "item_reference", "id": "x"}]), "input[0].type"),
    (dict(max_output_tokens=100000), "max_output_tokens"),
    (dict(max_output_tokens="many"), "max_output_tokens"),
    (dict(text={"format": {"type": "yaml"}}), "text.format.type"),
    (dict(tool_choice={"type": "file_search"}), "tool_choice"),
    (dict(background=True), "background"),
])
def test_what_it_refuses_names_the_responses_field(client, kw, param):
    kw.setdefault("input", CHAT[0])
    with pytest.raises(openai.BadRequestError) as e:
        respond(client, **kw)
    assert e.value.param == param, e.value
    if param == "max_output_tokens" and kw["max_output_tokens"] == 100000:
        assert "input" in e.value.message and "max_completion_tokens" not in e.value.message


def test_a_missing_input_and_malformed_bodies_are_400(server):
    for body, param in (({"model": MODEL}, "input"), ({"model": MODEL, "input": 5}, "input"),
                        ({"model": MODEL, "input": "x", "stream": "yes"}, "stream"),
                        ({"model": MODEL, "input": [{"role": "user"}]}, "input[0].content")):
        r = post(server.port, "/v1/responses", body)
        assert r.status == 400, (body, r)
        error = json.loads(r.body)["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert post(server.port, "/v1/responses", {"model": "other", "input": "x"}).status == 404
    assert post(server.port, "/v1/responses", b"{not json").status == 400
