// Request parsing and validation (server/protocol.h): every field of docs/server.md is mapped onto
// the engine's request, and every wrong body is an ApiError with the contract's status and the
// field named in `param`.
#include "server/protocol.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "server/api_error.h"

namespace tandem::server {
namespace {

const ProtocolLimits kLimits{.served_model = "tiny", .vocab_size = 100};

GenerationRequest parse(const std::string& body, Endpoint e) {
  return parse_generation_request(parse_body(body), e, kLimits);
}
GenerationRequest chat(const std::string& fields) {
  return parse(R"({"messages": [{"role": "user", "content": "hi"}])" + fields + "}",
               Endpoint::kChat);
}
GenerationRequest completion(const std::string& fields) {
  return parse(R"({"prompt": "hi")" + fields + "}", Endpoint::kCompletion);
}

struct BadCase {
  const char* name;
  Endpoint endpoint;
  std::string body;
  int status;
  std::string param;  // "" : null
};

std::string show(const BadCase& c) { return std::string(c.name) + ": " + c.body; }

TEST(Protocol, EveryBadRequestNamesItsFieldAndStatus) {
  const Endpoint C = Endpoint::kChat, P = Endpoint::kCompletion;
  const std::string m = R"("messages": [{"role": "user", "content": "hi"}])";
  const std::string p = R"("prompt": "hi")";
  const std::vector<BadCase> cases = {
      {"malformed", P, R"({"prompt": )", 400, ""},
      {"not an object", P, R"([1, 2])", 400, ""},
      {"trailing garbage", P, R"({"prompt": "a"} x)", 400, ""},
      {"invalid utf-8", P, "{\"prompt\": \"\xff\xfe\"}", 400, ""},
      {"lone surrogate escape", P, R"({"prompt": "\ud800"})", 400, ""},
      {"unknown model", P, "{" + p + R"(, "model": "other"})", 404, "model"},
      {"model not a string", P, "{" + p + R"(, "model": 3})", 400, "model"},
      {"missing messages", C, R"({"model": "tiny"})", 400, "messages"},
      {"messages not an array", C, R"({"messages": "hi"})", 400, "messages"},
      {"empty messages", C, R"({"messages": []})", 400, "messages"},
      {"message not an object", C, R"({"messages": [3]})", 400, "messages[0]"},
      {"missing role", C, R"({"messages": [{"content": "x"}]})", 400, "messages[0].role"},
      {"role not a string", C, R"({"messages": [{"role": 1}]})", 400, "messages[0].role"},
      {"content a number", C, R"({"messages": [{"role": "user", "content": 5}]})", 400,
       "messages[0].content"},
      {"image part", C,
       R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       400, "messages[0].content[0]"},
      {"text part not a string", C,
       R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]})", 400,
       "messages[0].content[0].text"},
      {"tools not an array", C, "{" + m + R"(, "tools": {}})", 400, "tools"},
      {"tool_choice a number", C, "{" + m + R"(, "tool_choice": 1})", 400, "tool_choice"},
      {"missing prompt", P, R"({"max_tokens": 3})", 400, "prompt"},
      {"empty prompt", P, R"({"prompt": ""})", 400, "prompt"},
      {"an empty prompt of two", P, R"({"prompt": ["a", ""]})", 400, "prompt[1]"},
      {"an id out of vocab in a batch", P, R"({"prompt": [[1], [1, 100]]})", 400, "prompt[1][1]"},
      {"prompts x n above 256", P, R"({"prompt": ["a", "b", "c"], "n": 100})", 400, "n"},
      {"prompt a number", P, R"({"prompt": 5})", 400, "prompt"},
      {"empty id list", P, R"({"prompt": []})", 400, "prompt"},
      {"id out of vocab", P, R"({"prompt": [1, 100]})", 400, "prompt[1]"},
      {"negative id", P, R"({"prompt": [[-1]]})", 400, "prompt[0]"},
      {"id not an integer", P, R"({"prompt": [1.5]})", 400, "prompt[0]"},
      {"n = 129", P, "{" + p + R"(, "n": 129})", 400, "n"},
      {"min_p above 1", P, "{" + p + R"(, "min_p": 1.5})", 400, "min_p"},
      {"min_tokens negative", P, "{" + p + R"(, "min_tokens": -1})", 400, "min_tokens"},
      {"min_tokens a string", P, "{" + p + R"(, "min_tokens": "3"})", 400, "min_tokens"},
      {"min_tokens above max_tokens", P, "{" + p + R"(, "max_tokens": 4, "min_tokens": 5})", 400,
       "min_tokens"},
      {"chat echo with max_tokens 0", C, "{" + m + R"(, "echo": true, "max_tokens": 0})", 400,
       "max_tokens"},
      {"echo max_tokens -1", P, "{" + p + R"(, "echo": true, "max_tokens": -1})", 400,
       "max_tokens"},
      {"suffix", P, "{" + p + R"(, "suffix": "x"})", 400, "suffix"},
      {"best_of 2", P, "{" + p + R"(, "best_of": 2})", 400, "best_of"},
      {"logit_bias list", P, "{" + p + R"(, "logit_bias": [1]})", 400, "logit_bias"},
      {"logit_bias key", P, "{" + p + R"(, "logit_bias": {"a": 1}})", 400, "logit_bias"},
      {"logit_bias negative key", P, "{" + p + R"(, "logit_bias": {"-1": 1}})", 400, "logit_bias"},
      {"logit_bias id out of vocab", P, "{" + p + R"(, "logit_bias": {"100": 1}})", 400,
       "logit_bias"},
      {"logit_bias too large", P, "{" + p + R"(, "logit_bias": {"3": 101}})", 400, "logit_bias"},
      {"logit_bias not a number", P, "{" + p + R"(, "logit_bias": {"3": "x"}})", 400,
       "logit_bias[\"3\"]"},
      {"n = 0", P, "{" + p + R"(, "n": 0})", 400, "n"},
      {"max_tokens 0", P, "{" + p + R"(, "max_tokens": 0})", 400, "max_tokens"},
      {"max_tokens string", P, "{" + p + R"(, "max_tokens": "5"})", 400, "max_tokens"},
      {"max_tokens fraction", P, "{" + p + R"(, "max_tokens": 2.5})", 400, "max_tokens"},
      {"number overflow", P, "{" + p + R"(, "max_tokens": 1e400})", 400, ""},
      {"max_tokens beyond int64", P, "{" + p + R"(, "max_tokens": 18446744073709551615})", 400,
       "max_tokens"},
      {"max_completion_tokens -1", C, "{" + m + R"(, "max_completion_tokens": -1})", 400,
       "max_completion_tokens"},
      {"temperature 2.5", P, "{" + p + R"(, "temperature": 2.5})", 400, "temperature"},
      {"temperature -0.1", P, "{" + p + R"(, "temperature": -0.1})", 400, "temperature"},
      {"temperature string", P, "{" + p + R"(, "temperature": "hot"})", 400, "temperature"},
      {"top_p 0", P, "{" + p + R"(, "top_p": 0})", 400, "top_p"},
      {"top_p 1.5", P, "{" + p + R"(, "top_p": 1.5})", 400, "top_p"},
      {"top_k -2", P, "{" + p + R"(, "top_k": -2})", 400, "top_k"},
      {"top_k bool", P, "{" + p + R"(, "top_k": true})", 400, "top_k"},
      {"seed string", P, "{" + p + R"(, "seed": "1"})", 400, "seed"},
      {"stop number", P, "{" + p + R"(, "stop": 5})", 400, "stop"},
      {"stop empty string", P, "{" + p + R"(, "stop": ""})", 400, "stop"},
      {"stop list item", P, "{" + p + R"(, "stop": ["a", 1]})", 400, "stop[1]"},
      {"stop 17", P,
       "{" + p +
           R"(, "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})",
       400, "stop"},
      {"stop_token_ids out of vocab", P, "{" + p + R"(, "stop_token_ids": [5, 200]})", 400,
       "stop_token_ids[1]"},
      {"stop_token_ids not a list", P, "{" + p + R"(, "stop_token_ids": 5})", 400,
       "stop_token_ids"},
      {"ignore_eos string", P, "{" + p + R"(, "ignore_eos": "yes"})", 400, "ignore_eos"},
      {"chat logprobs int", C, "{" + m + R"(, "logprobs": 3})", 400, "logprobs"},
      {"top_logprobs 21", C, "{" + m + R"(, "logprobs": true, "top_logprobs": 21})", 400,
       "top_logprobs"},
      {"top_logprobs without logprobs", C, "{" + m + R"(, "top_logprobs": 2})", 400,
       "top_logprobs"},
      {"completion logprobs 6", P, "{" + p + R"(, "logprobs": 6})", 400, "logprobs"},
      {"completion logprobs bool", P, "{" + p + R"(, "logprobs": true})", 400, "logprobs"},
      {"prompt_logprobs 21", P, "{" + p + R"(, "prompt_logprobs": 21})", 400, "prompt_logprobs"},
      {"truncate_prompt_tokens 0", P, "{" + p + R"(, "truncate_prompt_tokens": 0})", 400,
       "truncate_prompt_tokens"},
      {"include_stop_str_in_output string", P,
       "{" + p + R"(, "include_stop_str_in_output": "yes"})", 400, "include_stop_str_in_output"},
      {"skip_special_tokens number", C, "{" + m + R"(, "skip_special_tokens": 0})", 400,
       "skip_special_tokens"},
      {"continue_final_message with the generation prompt", C,
       "{" + m + R"(, "continue_final_message": true})", 400, "continue_final_message"},
      {"continue_final_message on completions", P,
       "{" + p + R"(, "continue_final_message": true, "add_generation_prompt": false})", 400,
       "continue_final_message"},
      {"prompt_logprobs -1", C, "{" + m + R"(, "prompt_logprobs": -1})", 400, "prompt_logprobs"},
      {"prompt_logprobs bool", C, "{" + m + R"(, "prompt_logprobs": true})", 400,
       "prompt_logprobs"},
      {"prompt_logprobs streamed", P, "{" + p + R"(, "prompt_logprobs": 1, "stream": true})", 400,
       "prompt_logprobs"},
      {"presence_penalty 3", P, "{" + p + R"(, "presence_penalty": 3})", 400, "presence_penalty"},
      {"frequency_penalty -2.5", P, "{" + p + R"(, "frequency_penalty": -2.5})", 400,
       "frequency_penalty"},
      {"repetition_penalty 0", P, "{" + p + R"(, "repetition_penalty": 0})", 400,
       "repetition_penalty"},
      {"repetition_penalty 2.1", P, "{" + p + R"(, "repetition_penalty": 2.1})", 400,
       "repetition_penalty"},
      {"response_format json_schema without name", C,
       "{" + m + R"(, "response_format": {"type": "json_schema", "json_schema": {}}})", 400,
       "response_format.json_schema.name"},
      {"response_format json_schema missing", C,
       "{" + m + R"(, "response_format": {"type": "json_schema"}})", 400,
       "response_format.json_schema"},
      {"response_format json_schema back-reference pattern", C,
       "{" + m +
           R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x",
           "schema": {"type": "string", "pattern": "(a)\\1"}}}})",
       400, "response_format.json_schema.schema"},
      {"guided_choice", C, "{" + m + R"(, "guided_choice": ["a", "b"]})", 400, "guided_choice"},
      {"guided_json not json", C, "{" + m + R"(, "guided_json": "{nope"})", 400, "guided_json"},
      {"guided_json beside response_format", C,
       "{" + m + R"(, "guided_json": {}, "response_format": {"type": "json_object"}})", 400,
       "guided_json"},
      {"structured_outputs regex", C, "{" + m + R"(, "structured_outputs": {"regex": "a+"}})", 400,
       "structured_outputs.regex"},
      {"structured_outputs list", C, "{" + m + R"(, "structured_outputs": []})", 400,
       "structured_outputs"},
      {"structured_outputs json lookbehind pattern", P,
       "{" + p + R"(, "structured_outputs": {"json": {"type": "string", "pattern": "(?<=a)b"}}})",
       400, "structured_outputs.json"},
      {"response_format unknown type", C, "{" + m + R"(, "response_format": {"type": "json_obj"}})",
       400, "response_format"},
      {"response_format string", C, "{" + m + R"(, "response_format": "text"})", 400,
       "response_format"},
      {"stream string", P, "{" + p + R"(, "stream": "true"})", 400, "stream"},
      {"stream_options list", P, "{" + p + R"(, "stream": true, "stream_options": []})", 400,
       "stream_options"},
      {"include_usage number", P,
       "{" + p + R"(, "stream": true, "stream_options": {"include_usage": 1}})", 400,
       "include_usage"},
  };
  for (const BadCase& c : cases) {
    try {
      parse(c.body, c.endpoint);
      ADD_FAILURE() << "accepted " << show(c);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, c.status) << show(c) << " -> " << e.what();
      EXPECT_EQ(e.param, c.param) << show(c) << " -> " << e.what();
      EXPECT_EQ(e.type, "invalid_request_error") << show(c);
      const auto body = error_body(e);
      ASSERT_TRUE(body["error"].is_object());
      EXPECT_EQ(body["error"]["message"], std::string(e.what()));
      EXPECT_EQ(body["error"]["param"].is_null(), c.param.empty()) << show(c);
      EXPECT_TRUE(body["error"].contains("code"));
    }
  }
}

TEST(Protocol, ModelNotFoundHasItsCode) {
  try {
    completion(R"(, "model": "gpt-4")");
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 404);
    EXPECT_EQ(e.code, "model_not_found");
  }
}

TEST(Protocol, HostileShapesAreRefusedBeforeParsing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THROW(parse_body(deep), ApiError);
  std::string wide = "{";
  for (int i = 0; i < 5000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": 0";
  wide += "}";
  EXPECT_THROW(parse_body(wide), ApiError);
  // Brackets and colons inside strings do not count.
  const std::string quoted =
      "{\"a\": \"" + std::string(1000, '[') + "\\\"" + std::string(5000, ':') + "\"}";
  EXPECT_NO_THROW(parse_body(quoted));
  const auto nested = [](int depth) {
    return "{\"a\": " + std::string(depth, '[') + std::string(depth, ']') + "}";
  };
  EXPECT_NO_THROW(parse_body(nested(kMaxJsonDepth - 1)));
  EXPECT_THROW(parse_body(nested(kMaxJsonDepth)), ApiError);
}

TEST(Protocol, DefaultsFollowOpenAI) {
  const GenerationRequest r = completion("");
  EXPECT_EQ(r.model, "tiny");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(*r.prompts[0].text, "hi");
  EXPECT_FALSE(r.max_tokens.has_value());  // the rest of the context
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_FALSE(r.ignore_eos);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.sampling.adjusts_logits());
  // Unseeded requests draw different seeds.
  EXPECT_NE(completion("").sampling.seed, completion("").sampling.seed);
}

TEST(Protocol, EveryFieldMapsOntoTheRequest) {
  const GenerationRequest r = completion(
      R"(, "model": "tiny", "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 4,
      "seed": -3, "stop": ["x", "yz"], "stop_token_ids": [9, 8], "ignore_eos": true, "n": 3,
      "logit_bias": {"5": -100, "7": 2.5}, "min_p": 0.25, "min_tokens": 7, "echo": false, "suffix": "",
      "logprobs": 2, "presence_penalty": 0.5, "frequency_penalty": -1, "repetition_penalty": 1.5,
      "response_format": {"type": "text"}, "stream": true, "stream_options": {"include_usage": true},
      "user": {"anything": [1]}, "unknown_field": 1, "best_of": null)");
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_TRUE(r.sampling.greedy());
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 4);
  EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(r.stop_token_ids, (std::vector<int32_t>{9, 8}));
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -1.f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.5f);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{5, -100.f}, {7, 2.5f}}));
  EXPECT_TRUE(r.sampling.adjusts_logits());
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.25f);
  EXPECT_FALSE(r.json_object);
  EXPECT_TRUE(chat(R"(, "response_format": {"type": "json_object"})").json_object);
  EXPECT_EQ(chat(R"(, "response_format": {"type": "json_object"})").json_schema, nullptr);
  const GenerationRequest schema = chat(
      R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true,
      "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}})");
  EXPECT_TRUE(schema.json_object);
  ASSERT_NE(schema.json_schema, nullptr);
  // vLLM's forms of the same: guided_json (an object or a JSON string), structured_outputs.
  for (const std::string extra :
       {R"(, "guided_json": "{\"type\": \"integer\"}")", R"(, "guided_json": {"type": "integer"})",
        R"(, "structured_outputs": {"json": {"type": "integer"}, "regex": null})"}) {
    const GenerationRequest g = chat(extra);
    EXPECT_TRUE(g.json_object) << extra;
    ASSERT_NE(g.json_schema, nullptr) << extra;
    EXPECT_EQ(g.json_schema->node(g.json_schema->root()).types, JsonSchema::kInteger) << extra;
  }
  const GenerationRequest jo = chat(R"(, "structured_outputs": {"json_object": true})");
  EXPECT_TRUE(jo.json_object);
  EXPECT_EQ(jo.json_schema, nullptr);
  EXPECT_EQ(schema.json_schema->node(schema.json_schema->root()).names,
            std::vector<std::string>{"a"});
  EXPECT_EQ(r.sampling.min_tokens, 7);
  EXPECT_EQ(completion(R"(, "min_tokens": 0)").sampling.min_tokens, 0);
  EXPECT_FALSE(completion(R"(, "min_tokens": 0)").sampling.adjusts_logits());
  EXPECT_EQ(completion(R"(, "min_tokens": 900)").sampling.min_tokens, 900);  // no max_tokens

  EXPECT_EQ(completion(R"(, "top_k": -1)").sampling.top_k, 0);
  EXPECT_EQ(completion(R"(, "top_k": 1000)").sampling.top_k, 100);  // at most the vocabulary
  EXPECT_EQ(completion(R"(, "max_tokens": 3.0)").max_tokens, 3);
  EXPECT_EQ(completion(R"(, "seed": 18446744073709551615)").sampling.seed, ~uint64_t{0});
  EXPECT_EQ(completion(R"(, "stop": "end")").stop, std::vector<std::string>{"end"});
  EXPECT_EQ(completion(R"(, "temperature": null, "max_tokens": null)").sampling.temperature, 1.f);
  EXPECT_EQ(completion(R"(, "logprobs": 0)").logprobs, 0);
}

TEST(Protocol, PromptForms) {
  EXPECT_EQ(*parse(R"({"prompt": ["one"]})", Endpoint::kCompletion).prompts.at(0).text, "one");
  EXPECT_EQ(parse(R"({"prompt": [1, 2, 3]})", Endpoint::kCompletion).prompts.at(0).ids,
            (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse(R"({"prompt": [[4, 5]]})", Endpoint::kCompletion).prompts.at(0).ids,
            (std::vector<int32_t>{4, 5}));
  // A batch of prompts (lm-eval's batched requests): texts or id lists, in order.
  const GenerationRequest b =
      parse(R"({"prompt": [[4, 5], [6], [7, 8, 9]], "n": 2})", Endpoint::kCompletion);
  ASSERT_EQ(b.prompts.size(), 3u);
  EXPECT_EQ(b.prompts[2].ids, (std::vector<int32_t>{7, 8, 9}));
  const GenerationRequest t = parse(R"({"prompt": ["a", "b"]})", Endpoint::kCompletion);
  ASSERT_EQ(t.prompts.size(), 2u);
  EXPECT_EQ(*t.prompts[1].text, "b");
}

TEST(Protocol, ChatFields) {
  const GenerationRequest r = parse(
      R"({"messages": [{"role": "system", "content": null},
                       {"role": "user", "content": [{"type": "text", "text": "a"},
                                                    {"type": "text", "text": "b"}], "name": "u"}],
          "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto",
          "max_tokens": 9, "max_completion_tokens": 4, "logprobs": true, "top_logprobs": 3,
          "chat_template_kwargs": {"enable_thinking": false}})",
      Endpoint::kChat);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0]["content"], "");
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_EQ(r.messages[1]["name"], "u");
  EXPECT_EQ(r.template_extra["tools"][0]["function"]["name"], "f");
  EXPECT_EQ(r.template_extra["tool_choice"], "auto");
  EXPECT_EQ(r.template_extra["enable_thinking"], false);
  EXPECT_EQ(*r.max_tokens, 4);  // max_completion_tokens wins
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(chat(R"(, "logprobs": true)").logprobs, 0);
  EXPECT_EQ(chat(R"(, "logprobs": false, "top_logprobs": 0)").logprobs, -1);
  // vLLM's prompt_logprobs, on both endpoints, independent of logprobs.
  EXPECT_EQ(r.prompt_logprobs, -1);
  EXPECT_EQ(chat(R"(, "prompt_logprobs": 0)").prompt_logprobs, 0);
  EXPECT_EQ(chat(R"(, "prompt_logprobs": null)").prompt_logprobs, -1);
  const GenerationRequest c =
      parse(R"({"prompt": "a", "prompt_logprobs": 20, "logprobs": 2})", Endpoint::kCompletion);
  EXPECT_EQ(c.prompt_logprobs, 20);
  EXPECT_EQ(c.logprobs, 2);
  // vLLM's output and prompt fields.
  EXPECT_FALSE(c.include_stop_str);
  EXPECT_TRUE(c.skip_special);
  EXPECT_FALSE(c.truncate_prompt_tokens);
  const GenerationRequest v = parse(
      R"({"prompt": "a", "include_stop_str_in_output": true, "skip_special_tokens": false,
          "truncate_prompt_tokens": 7})",
      Endpoint::kCompletion);
  EXPECT_TRUE(v.include_stop_str);
  EXPECT_FALSE(v.skip_special);
  EXPECT_EQ(*v.truncate_prompt_tokens, 7);
  const GenerationRequest cont =
      chat(R"(, "add_generation_prompt": false, "continue_final_message": true)");
  EXPECT_FALSE(cont.add_generation_prompt);
  EXPECT_TRUE(cont.continue_final_message);
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_FALSE(r.continue_final_message);
}

// A multi-turn tool conversation as the openai client sends it: the assistant's tool calls with
// null content and arguments as a JSON string (handed to the template as a mapping, as vLLM
// does), then the tool's answer.
TEST(Protocol, ToolTurnsAndToolChoice) {
  const GenerationRequest r = parse(
      R"({"messages": [{"role": "user", "content": "weather?"},
                       {"role": "assistant", "content": null, "tool_calls": [
                         {"id": "call_1", "type": "function",
                          "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
                         {"id": "call_2", "type": "function",
                          "function": {"name": "f", "arguments": "not json"}}]},
                       {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
          "tools": [{"type": "function", "function": {"name": "get_weather"}}]})",
      Endpoint::kChat);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1]["content"], "");
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"],
            Json::parse(R"({"city": "Oslo"})"));
  EXPECT_EQ(r.messages[1]["tool_calls"][1]["function"]["arguments"], "not json");  // kept
  EXPECT_EQ(r.messages[2]["tool_call_id"], "call_1");
  EXPECT_TRUE(r.tools.is_array());
  EXPECT_FALSE(r.tool_choice_none);
  EXPECT_TRUE(chat(R"(, "tools": [{"type": "function", "function": {"name": "f"}}],
                   "tool_choice": "none")")
                  .tool_choice_none);
  EXPECT_TRUE(chat(R"(, "tools": [])").tools.is_null());  // no tools: nothing to call
  EXPECT_TRUE(chat(R"(, "tools": null, "tool_choice": null)").tools.is_null());
  for (const char* bad : {R"("tool_calls": {})", R"("tool_calls": [1])",
                          R"("tool_calls": [{"function": {"arguments": "{}"}}])"}) {
    try {
      parse(std::string(R"({"messages": [{"role": "assistant", "content": "", )") + bad + "}]}",
            Endpoint::kChat);
      ADD_FAILURE() << bad;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << bad;
      EXPECT_EQ(e.param.rfind("messages[0].tool_calls", 0), 0u) << bad;
    }
  }
}

// The model's generation_config.json as the defaults of fields a request leaves out (vLLM's
// --generation-config auto): the keys vLLM reads, range-checked with the file named; a request's
// own values win.
TEST(Protocol, GenerationConfigDefaults) {
  const SamplingDefaults d = sampling_defaults_from(
      Json::parse(R"({"temperature": 0.6, "top_k": 20, "top_p": 0.95, "min_p": 0.05,
                      "repetition_penalty": 1.05, "max_new_tokens": 512, "do_sample": true,
                      "eos_token_id": [1, 2]})"),
      "g.json");
  EXPECT_DOUBLE_EQ(d.temperature, 0.6);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_DOUBLE_EQ(d.top_p, 0.95);
  EXPECT_DOUBLE_EQ(d.min_p, 0.05);
  EXPECT_DOUBLE_EQ(d.repetition_penalty, 1.05);
  EXPECT_EQ(d.max_tokens, 512);
  EXPECT_EQ(describe(d),
            "temperature 0.6, top_k 20, top_p 0.95, min_p 0.05, repetition_penalty 1.05, "
            "max_tokens 512");
  EXPECT_EQ(describe(sampling_defaults_from(Json::parse(R"({"do_sample": false})"), "g")), "none");
  for (const char* bad :
       {R"({"temperature": 3})", R"({"top_p": 0})", R"({"top_k": 2.5})", R"({"top_k": -2})",
        R"({"max_new_tokens": 0})", R"({"min_p": "x"})", R"([1])"}) {
    try {
      sampling_defaults_from(Json::parse(bad), "dir/generation_config.json");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dir/generation_config.json"), std::string::npos)
          << e.what();
    }
  }
  const ProtocolLimits limits{.served_model = "tiny", .vocab_size = 100, .defaults = d};
  const auto with = [&](const std::string& fields) {
    return parse_generation_request(parse_body(R"({"prompt": "hi")" + fields + "}"),
                                    Endpoint::kCompletion, limits);
  };
  const GenerationRequest r = with("");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.6f);
  EXPECT_EQ(r.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.95f);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.05f);
  const GenerationRequest own =
      with(R"(, "temperature": 0, "top_k": -1, "top_p": 1, "min_p": 0, "repetition_penalty": 1)");
  EXPECT_TRUE(own.sampling.greedy());
  EXPECT_EQ(own.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(own.sampling.top_p, 1.f);
  EXPECT_FLOAT_EQ(own.sampling.repetition_penalty, 1.f);
}

TEST(Protocol, TokenizeAndDetokenize) {
  TokenizeRequest t = parse_tokenize_request(parse_body(R"({"prompt": "abc"})"));
  EXPECT_EQ(*t.prompt, "abc");
  t = parse_tokenize_request(parse_body(
      R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": false})"));
  EXPECT_FALSE(t.prompt.has_value());
  EXPECT_FALSE(t.add_generation_prompt);
  auto bad = [](const std::string& body, const std::string& param) {
    try {
      parse_tokenize_request(parse_body(body));
      ADD_FAILURE() << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, param) << body;
    }
  };
  bad(R"({})", "prompt");
  bad(R"({"prompt": "a", "messages": []})", "messages");
  bad(R"({"prompt": 1})", "prompt");
  bad(R"({"prompt": "a", "add_special_tokens": 1})", "add_special_tokens");
  EXPECT_EQ(parse_detokenize_request(parse_body(R"({"tokens": [1, 99]})"), kLimits),
            (std::vector<int32_t>{1, 99}));
  for (const char* body : {R"({})", R"({"tokens": "1"})", R"({"tokens": [100]})"}) {
    EXPECT_THROW(parse_detokenize_request(parse_body(body), kLimits), ApiError) << body;
  }
}

}  // namespace
}  // namespace tandem::server
