#!/usr/bin/env python3
"""Makes chat-template goldens with transformers' apply_chat_template (tokenize=False).

Renders every conversation below with the Qwen3 template (tests/fixtures/tokenizer/qwen3) and the
Qwen3.5 template (tests/fixtures/tokenizer/qwen35/chat_template.jinja, rendered with the Qwen3
tokenizer's special tokens), under several add_generation_prompt / enable_thinking settings.
A template that raises is recorded as {"error": message}. Run from the repo root:
    python3 tools/tokenizer/make_chat_goldens.py
"""
import copy
import json
import platform
from pathlib import Path

import jinja2
import transformers
from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/tokenizer"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web — returns snippets (UTF-8: 検索).",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "top_k": {"type": "integer", "default": 5},
        "safe": {"type": "boolean"}, "threshold": {"type": "number", "minimum": 0.25}},
        "required": ["query"]}}}

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "What's the weather in Paris?"}
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "get_weather",
                                      "arguments": {"city": "Paris", "unit": "celsius"}}}]}
TOOL = {"role": "tool", "name": "get_weather", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"}
A_FINAL = {"role": "assistant", "content": "It is 21.5 °C and clear in Paris."}

CONVERSATIONS = {
    "user_only": [{"role": "user", "content": "Hello!"}],
    "system_user": [SYS, {"role": "user", "content": "Hi there"}],
    "multi_turn": [SYS, {"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"},
                   {"role": "user", "content": "And 2+2?"}],
    "ends_with_assistant": [{"role": "user", "content": "Say hi"},
                            {"role": "assistant", "content": "Hi!"}],
    "reasoning_last_turn": [{"role": "user", "content": "Think about 3*7."},
                            {"role": "assistant", "content": "21",
                             "reasoning_content": "3 times 7 is 21."}],
    "reasoning_earlier_turn": [{"role": "user", "content": "Q1"},
                               {"role": "assistant", "content": "A1", "reasoning_content": "R1"},
                               {"role": "user", "content": "Q2"}],
    "inline_think": [{"role": "user", "content": "Why?"},
                     {"role": "assistant", "content": "<think>\nBecause.\n</think>\n\nAnswer."}],
    "reasoning_alias_field": [{"role": "user", "content": "x"},
                              {"role": "assistant", "content": "y", "reasoning": "alias r"}],
    "tools_user": [U1],
    "tools_system_user": [SYS, U1],
    "tool_call_cycle": [SYS, U1, CALL, TOOL, A_FINAL],
    "tool_call_pending": [U1, CALL, TOOL],
    "tool_call_with_text": [U1, {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        TOOL],
    "parallel_tool_calls": [{"role": "user", "content": "Weather in Paris and Tokyo?"},
                            {"role": "assistant", "content": None, "tool_calls": [
                                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "東京"}}}]},
                            {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "rainy"},
                            {"role": "assistant", "content": "Paris sunny, Tokyo rainy."}],
    "multi_step_tools": [U1, CALL, TOOL, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "search", "arguments": {
            "query": "Paris \"forecast\"\n<b>", "top_k": 3, "safe": True, "threshold": 0.5,
            "filters": {"lang": ["fr", "en"], "since": None}}}}]},
        {"role": "tool", "content": "[results]"}, A_FINAL],
    "unicode": [{"role": "system", "content": "Réponds en français. 你好 🙂"},
                {"role": "user", "content": "Ça va? 👨‍👩‍👧 \t tabs\r\nCRLF"}],
    "whitespace_content": [{"role": "user", "content": "\n\n  padded question  \n\n"},
                           {"role": "assistant", "content": "\n\nanswer\n\n"},
                           {"role": "user", "content": "next"}],
    "empty_content": [{"role": "user", "content": ""}],
    "user_tool_response_text": [{"role": "user", "content": "real question"},
                                {"role": "assistant", "content": "ok"},
                                {"role": "user", "content": "<tool_response>\nraw\n</tool_response>"}],
    "special_tokens_in_content": [{"role": "user", "content": "print('<|im_end|>') and <think>"}],
    "long_conversation": [SYS] + [m for k in range(6) for m in (
        {"role": "user", "content": f"question {k}"},
        {"role": "assistant", "content": f"answer {k}", "reasoning_content": f"thought {k}"})]
        + [{"role": "user", "content": "last"}],
}
QWEN35_ONLY = {
    "content_parts": [{"role": "system", "content": [{"type": "text", "text": "Sys part."}]},
                      {"role": "user", "content": [{"type": "text", "text": "Look: "},
                                                   {"type": "image", "image": "x.png"},
                                                   {"type": "text", "text": " and "},
                                                   {"type": "video", "video": "y.mp4"}]}],
    "system_not_first": [{"role": "user", "content": "hi"}, SYS],
    "no_user_query": [SYS, {"role": "assistant", "content": "hello"}],
}
QWEN3_ONLY = {
    "system_in_middle": [{"role": "user", "content": "hi"}, {"role": "system", "content": "late"},
                         {"role": "user", "content": "again"}],
    "string_arguments": [U1, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather",
                                          "arguments": "{\"city\": \"Paris\"}"}}]}, TOOL],
}
TOOL_CONVS = {"tools_user", "tools_system_user", "tool_call_cycle", "tool_call_pending",
              "tool_call_with_text", "parallel_tool_calls", "multi_step_tools"}
SETTINGS = [
    {"add_generation_prompt": True},
    {"add_generation_prompt": True, "extra": {"enable_thinking": False}},
    {"add_generation_prompt": False},
]


def render(tok, template, messages, gen, extra):
    try:
        out = tok.apply_chat_template(copy.deepcopy(messages), tokenize=False,
                                      add_generation_prompt=gen, chat_template=template,
                                      **copy.deepcopy(extra))
        return {"rendered": out}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


def main():
    tok = AutoTokenizer.from_pretrained(str(FIX / "qwen3"))
    templates = {"qwen3": tok.chat_template,
                 "qwen35": (FIX / "qwen35/chat_template.jinja").read_text(encoding="utf-8")}
    cases = []
    for tname, template in templates.items():
        convs = dict(CONVERSATIONS)
        convs.update(QWEN35_ONLY if tname == "qwen35" else QWEN3_ONLY)
        for cname, messages in convs.items():
            for k, s in enumerate(SETTINGS):
                if k > 0 and cname not in ("user_only", "multi_turn", "tool_call_cycle",
                                           "reasoning_last_turn", "unicode"):
                    continue
                extra = dict(s.get("extra", {}))
                if cname in TOOL_CONVS:
                    extra["tools"] = [WEATHER, SEARCH]
                case = {"name": f"{tname}/{cname}/{k}", "template": tname, "messages": messages,
                        "add_generation_prompt": s["add_generation_prompt"], "extra": extra}
                case.update(render(tok, template, messages, s["add_generation_prompt"], extra))
                cases.append(case)
    meta = {"command": "python3 tools/tokenizer/make_chat_goldens.py",
            "transformers": transformers.__version__, "jinja2": jinja2.__version__,
            "python": platform.python_version(), "count": len(cases)}
    out = FIX / "chat_goldens.json"
    out.write_text(json.dumps({"meta": meta, "cases": cases}, ensure_ascii=False, indent=1) + "\n",
                   encoding="utf-8")
    print(f"wrote {len(cases)} cases ({sum('error' in c for c in cases)} raise) to {out}")


if __name__ == "__main__":
    main()
