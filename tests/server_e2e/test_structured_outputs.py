"""Structured outputs through the official openai Python client against a real `tandem serve`:
json_schema answers (pydantic models with bounds, patterns, uniqueItems) that parse into their
models, forced tool calls, JSON mode, and schemas the server cannot enforce refused naming them;
each answer also the same under MTP (speculation is exact)."""

import json
import re
from typing import Annotated, Literal, Optional

import openai
import pytest
from pydantic import BaseModel, Field

from prompts import CHAT, TEXT
from support import MODEL, chat, complete


class Verdict(BaseModel):
    level: Literal["low", "medium", "high"]
    ok: bool
    count: Optional[int]


def test_json_schema_answers_parse_into_the_model_and_are_the_same_under_mtp(client, mtp_client):
    # response_format json_schema from a pydantic model (the client's parse() helper sends its
    # strict schema): the answer parses into the model; with MTP and streamed the same text.
    ask = [{"role": "user", "content": "Rate the ls command as JSON."}]
    for kw in (dict(temperature=0), dict(temperature=0.9, seed=4)):
        r = client.chat.completions.parse(model=MODEL, messages=ask, response_format=Verdict,
                                          max_tokens=300, **kw)
        assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
        assert isinstance(r.choices[0].message.parsed, Verdict)
        text = r.choices[0].message.content
        spec = mtp_client.chat.completions.parse(model=MODEL, messages=ask,
                                                 response_format=Verdict, max_tokens=300, **kw)
        assert spec.choices[0].message.content == text
        schema = {"type": "json_schema", "json_schema": {
            "name": "Verdict", "strict": True, "schema": Verdict.model_json_schema()}}
        chunks = list(client.chat.completions.create(model=MODEL, messages=ask, max_tokens=300,
                                                     response_format=schema, stream=True, **kw))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    # Completions take it too; a root enum ends as soon as it is whole.
    r = complete(client, TEXT[0], max_tokens=40, extra_body={"response_format": {
        "type": "json_schema", "json_schema": {"name": "c", "schema": {"enum": ["yes", "no"]}}}})
    assert r.choices[0].finish_reason == "stop"
    assert json.loads(r.choices[0].text) in ("yes", "no")
    # vLLM's extra fields for the same.
    for extra in ({"guided_json": {"enum": ["yes", "no"]}},
                  {"structured_outputs": {"json": '{"enum": ["yes", "no"]}'}}):
        assert complete(client, TEXT[0], max_tokens=40, extra_body=extra).choices[0].text == \
            r.choices[0].text


WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
               "type": "object", "properties": {"unit": {"enum": ["c", "f"]},
                                                "metric": {"type": "boolean"}},
               "required": ["unit", "metric"]}}},
           {"type": "function", "function": {"name": "now"}}]


def test_forced_tool_choice_answers_are_calls_and_the_same_under_mtp(client, mtp_client):
    # tool_choice "required" or a named function, without --tool-call-parser (as vLLM, by
    # structured output): the answer is tool calls that fit the tools' schemas, content null; the
    # same calls with MTP and streamed.
    ask = [{"role": "user", "content": CHAT[0]}]
    named = {"type": "function", "function": {"name": "get_weather"}}

    # (one call: a small model may go on adding calls to an open array until max_tokens)
    def calls_of(c, choice, **kw):
        return c.chat.completions.create(model=MODEL, messages=ask, tools=WEATHER,
                                         tool_choice=choice, temperature=0, max_tokens=200,
                                         parallel_tool_calls=False, **kw)

    for choice, finish in ((named, "stop"), ("required", "tool_calls")):
        r = calls_of(client, choice).choices[0]
        assert r.finish_reason == finish, r
        assert r.message.content is None, r
        got = [(t.function.name, json.loads(t.function.arguments)) for t in r.message.tool_calls]
        assert got and all(name in ("get_weather", "now") for name, _ in got), got
        for name, args in got:
            if name == "get_weather":
                assert args["unit"] in ("c", "f") and isinstance(args["metric"], bool), args
            else:
                assert args == {}, args
        assert len(got) == 1
        if choice is named:
            assert [name for name, _ in got] == ["get_weather"]
        spec = calls_of(mtp_client, choice).choices[0]
        assert [(t.function.name, t.function.arguments) for t in spec.message.tool_calls] == \
            [(t.function.name, t.function.arguments) for t in r.message.tool_calls]
        chunks = [c for c in calls_of(client, choice, stream=True) if c.choices]
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == ""
        streamed = [(t.function.name, t.function.arguments) for c in chunks
                    for t in (c.choices[0].delta.tool_calls or [])]
        assert streamed == [(t.function.name, t.function.arguments) for t in r.message.tool_calls]
        assert chunks[-1].choices[0].finish_reason == finish
    with pytest.raises(openai.BadRequestError) as e:
        calls_of(client, {"type": "function", "function": {"name": "later"}})
    assert e.value.param == "tool_choice"


class Gauge(BaseModel):  # pydantic's ge / le / gt on floats: bounds on numbers with fractions
    confidence: float = Field(ge=0, le=1)
    temperature: float = Field(gt=-273.15, le=100.5)


def test_json_schema_bounds_on_floats_hold_and_are_the_same_under_mtp(client, mtp_client):
    ask = [{"role": "user", "content": "How sure are you, and how warm is it? JSON."}]
    for kw in (dict(temperature=0), dict(temperature=1.0, seed=11), dict(temperature=1.0, seed=12)):
        r = client.chat.completions.parse(model=MODEL, messages=ask, response_format=Gauge,
                                          max_tokens=120, **kw)
        c = r.choices[0]
        if c.finish_reason == "stop":  # (a small model may write digits until max_tokens)
            g = c.message.parsed
            assert 0 <= g.confidence <= 1 and -273.15 < g.temperature <= 100.5, c.message.content
            assert "e" not in c.message.content.lower().replace("temperature", "").replace(
                "confidence", "")  # bounded numbers are written without exponents
        spec = mtp_client.chat.completions.parse(model=MODEL, messages=ask, response_format=Gauge,
                                                 max_tokens=120, **kw)
        assert spec.choices[0].message.content == c.message.content


class Palette(BaseModel):  # pydantic's set[Literal[...]]: an array of an enum, uniqueItems
    colours: set[Literal["red", "green", "blue"]]


def test_json_schema_unique_items_hold_and_are_the_same_under_mtp(client, mtp_client):
    ask = [{"role": "user", "content": "Which colours? JSON."}]
    assert Palette.model_json_schema()["properties"]["colours"]["uniqueItems"] is True
    schema = {"type": "json_schema", "json_schema": {
        "name": "Palette", "schema": Palette.model_json_schema()}}
    stopped = 0
    for kw in (dict(temperature=0), dict(temperature=1.0, seed=5), dict(temperature=1.0, seed=6)):
        c = client.chat.completions.create(model=MODEL, messages=ask, response_format=schema,
                                           max_tokens=120, **kw).choices[0]
        if c.finish_reason == "stop":  # (a small model may leave blank space until max_tokens)
            stopped += 1
            got = json.loads(c.message.content)["colours"]
            assert len(got) == len(set(got)) and set(got) <= {"red", "green", "blue"}, got
        spec = mtp_client.chat.completions.create(model=MODEL, messages=ask,
                                                  response_format=schema, max_tokens=120, **kw)
        assert spec.choices[0].message.content == c.message.content
    assert stopped >= 1


class Inventory(BaseModel):  # pydantic's set[str] and set[int]: uniqueItems on plain items
    tags: Annotated[set[str], Field(max_length=3)]
    ids: Annotated[set[int], Field(max_length=3)]


def test_json_schema_unique_strings_and_integers_hold_and_are_the_same_under_mtp(client,
                                                                                  mtp_client):
    ask = [{"role": "user", "content": "Tags and ids of the ls command, as JSON."}]
    props = Inventory.model_json_schema()["properties"]
    assert props["tags"]["uniqueItems"] is True and props["tags"]["items"] == {"type": "string"}
    schema = {"type": "json_schema", "json_schema": {
        "name": "Inventory", "schema": Inventory.model_json_schema()}}
    stopped = 0
    for kw in (dict(temperature=0), dict(temperature=1.0, seed=5), dict(temperature=1.0, seed=6),
               dict(temperature=1.0, seed=7)):
        c = client.chat.completions.create(model=MODEL, messages=ask, response_format=schema,
                                           max_tokens=160, **kw).choices[0]
        if c.finish_reason == "stop":
            stopped += 1
            got = json.loads(c.message.content)
            for key in ("tags", "ids"):  # distinct by value (json.loads decodes escapes)
                assert len(got[key]) == len({json.dumps(v) for v in got[key]}), got
        spec = mtp_client.chat.completions.create(model=MODEL, messages=ask,
                                                  response_format=schema, max_tokens=160, **kw)
        assert spec.choices[0].message.content == c.message.content
    assert stopped >= 1


def test_json_schema_pattern_is_enforced(client, mtp_client):
    code = r"^[A-Z]{3}-\d{2}$"
    schema = {"type": "json_schema", "json_schema": {"name": "ticket", "schema": {
        "type": "object", "properties": {"code": {"type": "string", "pattern": code}},
        "required": ["code"]}}}
    ask = [{"role": "user", "content": "Give me a ticket code."}]
    c = client.chat.completions.create(model=MODEL, messages=ask, response_format=schema,
                                       max_tokens=40, temperature=0)
    if c.choices[0].finish_reason == "stop":
        assert re.fullmatch(code[1:-1], json.loads(c.choices[0].message.content)["code"])
    else:  # cut by max_tokens: still a prefix of a matching value
        assert c.choices[0].message.content.startswith('{')
    spec = mtp_client.chat.completions.create(model=MODEL, messages=ask, response_format=schema,
                                              max_tokens=40, temperature=0)
    assert spec.choices[0].message.content == c.choices[0].message.content


def test_json_schema_pattern_beside_length_bounds(client, mtp_client):
    # pydantic's constr(pattern=..., min_length=..., max_length=...): the value matches and has an
    # allowed length whenever the model closed it; the same text under MTP.
    field = {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 5}
    schema = {"type": "json_schema", "json_schema": {"name": "word", "schema": {
        "type": "object", "properties": {"word": field}, "required": ["word"]}}}
    ask = [{"role": "user", "content": "Give me a short word."}]
    c = client.chat.completions.create(model=MODEL, messages=ask, response_format=schema,
                                       max_tokens=40, temperature=0)
    if c.choices[0].finish_reason == "stop":
        word = json.loads(c.choices[0].message.content)["word"]
        assert re.fullmatch("[a-z]{2,5}", word), word
    spec = mtp_client.chat.completions.create(model=MODEL, messages=ask, response_format=schema,
                                              max_tokens=40, temperature=0)
    assert spec.choices[0].message.content == c.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as e:  # no allowed length matches
        chat(client, CHAT[1], response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "string", "pattern": "^a{2}$", "minLength": 3}}})
    assert e.value.param == "response_format.json_schema.schema"
    assert "matches no string of at least 3 characters" in str(e.value)


def test_json_schema_the_server_cannot_enforce_is_refused_naming_it(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, CHAT[1], response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "string", "pattern": "(a)\\1"}}})
    assert e.value.param == "response_format.json_schema.schema"
    assert "'pattern'" in str(e.value) and "back-reference" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, CHAT[1], response_format={"type": "json_schema", "json_schema": {}})
    assert e.value.param == "response_format.json_schema.name"
    assert chat(client, CHAT[1], response_format={"type": "text"}, max_tokens=2).choices


def test_json_mode_answers_are_json_and_the_same_under_mtp(client, mtp_client):
    # JSON mode: the text is a JSON prefix, a whole object when the model stopped; streamed the
    # same; with MTP the same text (greedy, and seeded sampling).
    for kw in (dict(), dict(temperature=0.9, seed=4)):
        r = chat(client, "Describe the ls command as JSON.", max_tokens=48,
                 response_format={"type": "json_object"}, **kw)
        text = r.choices[0].message.content
        assert text.lstrip().startswith("{"), text
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(text), dict), text
        spec = chat(mtp_client, "Describe the ls command as JSON.", max_tokens=48,
                    response_format={"type": "json_object"}, **kw)
        assert spec.choices[0].message.content == text
        chunks = list(chat(client, "Describe the ls command as JSON.", max_tokens=48,
                           response_format={"type": "json_object"}, stream=True, **kw))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
