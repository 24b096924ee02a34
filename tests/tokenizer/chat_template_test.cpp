// Chat templates: identical output to transformers' apply_chat_template on the committed goldens
// (tools/tokenizer/make_chat_goldens.py) for the Qwen3 and Qwen3.5 templates, plus interpreter
// behaviour and error reporting (unsupported construct named with its line).
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/tokenizer/test_util.h"

namespace tandem::tok {
namespace {

using nlohmann::ordered_json;
using testing::fixture;
using testing::qwen3;
using testing::read_text;

TEST(ChatTemplate, GoldensMatchTransformers) {
  auto goldens = ordered_json::parse(read_text(fixture("chat_goldens.json")));
  ChatTemplate qwen3_t(*qwen3().chat_template(), &qwen3());
  ChatTemplate qwen35_t(read_text(fixture("qwen35/chat_template.jinja")), &qwen3());
  size_t n = 0, rendered = 0;
  for (const auto& c : goldens["cases"]) {
    const ChatTemplate& t = c["template"] == "qwen3" ? qwen3_t : qwen35_t;
    SCOPED_TRACE(c["name"].get<std::string>());
    ++n;
    if (c.contains("error")) {
      try {
        t.render(c["messages"], c["add_generation_prompt"].get<bool>(), c["extra"]);
        ADD_FAILURE() << "expected an error like: " << c["error"].get<std::string>();
      } catch (const Error& e) {
        SUCCEED() << e.what();
      }
      continue;
    }
    std::string got = t.render(c["messages"], c["add_generation_prompt"].get<bool>(), c["extra"]);
    EXPECT_EQ(got, c["rendered"].get<std::string>());
    rendered += got == c["rendered"].get<std::string>();
  }
  EXPECT_EQ(n, goldens["meta"]["count"].get<size_t>());
  EXPECT_GE(rendered, 40u);
}

TEST(ChatTemplate, RaiseExceptionMessageIsKept) {
  ChatTemplate t(read_text(fixture("qwen35/chat_template.jinja")), &qwen3());
  auto msgs = ordered_json::parse(R"([{"role":"system","content":"s"}])");
  try {
    t.render(msgs, true);
    FAIL() << "expected raise_exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("No user query found in messages."), std::string::npos);
  }
}

TEST(ChatTemplate, RenderChatUsesModelTemplate) {
  // Plain nlohmann::json converts to ordered_json at the call.
  auto msgs = nlohmann::json::parse(R"([{"role":"user","content":"Hello!"}])");
  ordered_json extra = {{"enable_thinking", false}};
  EXPECT_EQ(render_chat(qwen3(), msgs, true, extra),
            "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

std::string render(const std::string& src, const std::string& ctx_json = "{}") {
  ChatTemplate t(src);
  auto ctx = ordered_json::parse(ctx_json);
  auto msgs = ordered_json::parse(R"([{"role":"user","content":"u"}])");
  return t.render(msgs, false, ctx);
}

TEST(ChatTemplate, InterpreterSemantics) {
  EXPECT_EQ(render("{% for x in [1,2,3] %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif "
                   "%}{% endfor %}"),
            "11,22,33");
  EXPECT_EQ(
      render(
          "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 1 / 4 }} {{ 2 ** 10 }} {{ 1e-5 }} {{ 3.0 }}"),
      "3 -4 1 0.25 1024 1e-05 3.0");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ '  x y  '.split() }} {{ 'abc'[::-1] }}"),
            "['a', 'b', '', 'c'] ['x', 'y'] cba");
  EXPECT_EQ(
      render("{{ {'k': [1, none, true, 'q\"']} | tojson }} {{ {'k': 1} | tojson(indent=2) }}"),
      "{\"k\": [1, null, true, \"q\\\"\"]} {\n  \"k\": 1\n}");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(5) %}{% if i == 3 %}{% break %}"
                   "{% endif %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(
      render("{% macro m(a, b='d') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}"),
      "[1d][23]");
  EXPECT_EQ(render("{{ x | default('none') }} {{ y is defined }} {{ 'ab' ~ 1 }}", R"({"y": null})"),
            "none True ab1");
  EXPECT_EQ(render("  {%- if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  EXPECT_EQ(
      render("{{ messages[0].role | upper }} {{ messages | length }} {{ 'X' if 0 else 'Y' }}"),
      "USER 1 Y");
}

TEST(ChatTemplate, UnsupportedConstructNamesItAndLine) {
  try {
    ChatTemplate t("line one\n{% if true %}\n{% include 'x.jinja' %}\n{% endif %}");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("include"), std::string::npos) << msg;
    EXPECT_NE(msg.find("line 3"), std::string::npos) << msg;
  }
  try {
    ChatTemplate t("{{ x }}\n\n{{ x | frobnicate }}");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("frobnicate"), std::string::npos) << msg;
    EXPECT_NE(msg.find("line 3"), std::string::npos) << msg;
  }
  EXPECT_THROW(ChatTemplate("{% for x in y %}no end"), Error);
}

}  // namespace
}  // namespace tandem::tok

namespace tandem::tok {
namespace {

// Small templates rendered by transformers' own Jinja environment
// (tools/tokenizer/make_jinja_goldens.py): whitespace control, operators, filters, scoping.
TEST(JinjaInterpreter, GoldensMatchTransformersEnvironment) {
  auto goldens = ordered_json::parse(read_text(fixture("jinja_goldens.json")));
  jinja::Value ctx = jinja::from_json(goldens["context"]);
  size_t n = 0;
  for (const auto& c : goldens["cases"]) {
    std::string src = c["template"].get<std::string>();
    SCOPED_TRACE(src);
    ++n;
    if (c.contains("error")) {
      EXPECT_THROW(jinja::Template(src).render(ctx), Error) << c["error"];
      continue;
    }
    try {
      EXPECT_EQ(jinja::Template(src).render(ctx), c["rendered"].get<std::string>());
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
  EXPECT_EQ(n, goldens["meta"]["count"].get<size_t>());
}

}  // namespace
}  // namespace tandem::tok
