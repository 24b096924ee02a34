// JSON mode (spec/json_constraint.h): the byte automaton against nlohmann's JSON parser on
// random objects and random corruptions of them, the row mask over a small vocabulary (what may
// start, continue and end the object; drafts pending), and on the shipped model a JSON-mode
// request's output, a valid JSON prefix that is a whole object when it stopped, identical with
// MTP k = 1 and 3 and among other requests.
#include "spec/json_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "spec/json_test_support.h"

namespace tandem {
namespace {

using namespace testing;

TEST(JsonAutomaton, AcceptsObjectsAndRefusesAtTheFirstWrongByte) {
  for (const std::string ok :
       {"{}",
        "{\"a\": [1, -2.5e+3, 0, 0.25, 1E2, true, false, null, \"x\\u00e9\\n\\\"\"],\n"
        "\"b\": {\"c\": {}}, \"d\": []}\n",
        "{\"\":\"\"}", "{\"k\":\"\xc3\xa9 caf\xc3\xa9\"}"}) {
    JsonAutomaton a;
    EXPECT_EQ(refused_at(a, ok), -1) << ok;
    EXPECT_TRUE(a.complete()) << ok;
  }
  const std::pair<std::string, int64_t> bad[] = {
      {"[1]", 0},
      {"\"s\"", 0},
      {"{\"a\" 1}", 5},
      {"{\"a\":01}", 6},
      {"{\"a\":1.}", 7},
      {"{\"a\":tru}", 8},
      {"{\"a\":1,}", 7},
      {"{\"a\":[1,]}", 8},
      {"{a:1}", 1},
      {"{\"a\":1}x", 7},
      {"{\"a\":\"\x01\"}", 6},
      {"{\"a\":\"\\x\"}", 7},
      {"{\"a\":-}", 6},
      {"{\"a\":1e}", 7},
      {"{\"a\":[}", 6},
      {"{\"a\":1]", 6},
      // UTF-8: a lead byte without its continuation, an overlong form, a surrogate.
      {"{\"a\":\"\xc3(\"}", 7},
      {"{\"a\":\"\xc0\x80\"}", 6},
      {"{\"a\":\"\xed\xa0\x80\"}", 7}};
  for (const auto& [text, at] : bad) {
    JsonAutomaton a;
    EXPECT_EQ(refused_at(a, text), at) << text;
  }
  JsonAutomaton lead;  // no blank space before the root object; runs of at most kMaxBlankRun
  EXPECT_FALSE(lead.feed(' '));
  JsonAutomaton run;
  EXPECT_EQ(refused_at(run, "{" + std::string(JsonAutomaton::kMaxBlankRun, ' ') + " "),
            JsonAutomaton::kMaxBlankRun + 1);
  JsonAutomaton prefix;
  EXPECT_EQ(refused_at(prefix, "{\"a\": [1, {\"b\""), -1);
  EXPECT_FALSE(prefix.complete());
  JsonAutomaton deep;  // nesting beyond kMaxDepth is refused
  std::string nest = "{\"a\":";
  for (int i = 1; i < JsonAutomaton::kMaxDepth; ++i) nest += "[";
  EXPECT_EQ(refused_at(deep, nest), -1);
  EXPECT_FALSE(deep.feed('['));
}

// Random objects, and each with one byte inserted, deleted or replaced: the automaton takes the
// whole text as a complete object exactly when nlohmann's parser reads it as an object.
TEST(JsonAutomaton, AgreesWithAJsonParserOnRandomTexts) {
  std::mt19937 rng(17);
  const std::function<nlohmann::json(int)> value = [&](int depth) -> nlohmann::json {
    switch (rng() % (depth > 3 ? 5 : 7)) {
      case 0:
        return nullptr;
      case 1:
        return rng() % 2 == 0;
      case 2:
        return static_cast<int64_t>(rng() % 2000) - 1000;
      case 3:
        return std::ldexp(static_cast<double>(rng() % 100000) - 50000, -7);
      case 4: {
        static const std::vector<std::string> pieces = {"a",  "b",        "\"", "\\", "\n",
                                                        "\t", "\xc3\xa9", " ",  "/"};
        std::string s;
        for (int i = 0, n = static_cast<int>(rng() % 6); i < n; ++i)
          s += pieces[rng() % pieces.size()];
        return s;
      }
      case 5: {
        nlohmann::json a = nlohmann::json::array();
        for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        nlohmann::json o = nlohmann::json::object();
        for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i)
          o[std::string(1, static_cast<char>('a' + i))] = value(depth + 1);
        return o;
      }
    }
  };
  const std::string noise = "{}[]:,\"\\ 0123456789.-+eEtrufalsn\x01x";
  int agreed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    nlohmann::json o = nlohmann::json::object();
    o["k"] = value(1);
    std::string text = o.dump(trial % 3 == 0 ? 2 : -1);
    if (trial % 2 == 1) corrupt(text, rng, noise);  // one corruption
    JsonAutomaton a;
    const bool mine = refused_at(a, text) == -1 && a.complete();
    const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
    // (less the blank space this grammar refuses: before the object; runs stay short here)
    const bool theirs = !parsed.is_discarded() && parsed.is_object() && !text.empty() &&
                        text[0] != ' ' && text[0] != '\n' && text[0] != '\t';
    EXPECT_EQ(mine, theirs) << text;
    agreed += mine == theirs;
  }
  EXPECT_EQ(agreed, 3000);
}

// The ids a row of `vocab` tokens keeps after the mask.
std::vector<int> allowed_ids(const JsonConstraint& c, int vocab, std::span<const int32_t> pending) {
  std::vector<float> row(static_cast<size_t>(vocab), 0.f);
  c.apply(row.data(), vocab, pending);
  std::vector<int> ids;
  for (int i = 0; i < vocab; ++i) {
    if (!std::isinf(row[static_cast<size_t>(i)])) ids.push_back(i);
  }
  return ids;
}

TEST(JsonConstraint, MasksWhatCannotStartContinueOrEndTheObject) {
  // Token 7 is the stop token (a special token: no text).
  auto bytes = std::make_shared<const std::vector<std::string>>(
      std::vector<std::string>{"{", "}", "\"a\"", ":", "1", " ", "x", "", "{\"a\":", "1}"});
  JsonConstraint c(bytes, {7});
  const auto allowed = [&](std::span<const int32_t> pending) {
    return allowed_ids(c, 10, pending);
  };
  EXPECT_EQ(allowed({}), (std::vector<int>{0, 8}));  // "{", "{\"a\":" (no blank first)
  const std::vector<int32_t> open{0};
  EXPECT_EQ(allowed(open), (std::vector<int>{1, 2, 5}));  // "}", "\"a\"", " "
  const std::vector<int32_t> key{8};
  EXPECT_EQ(allowed(key), (std::vector<int>{0, 2, 4, 5, 8, 9}));  // a value, or "1}"
  const std::vector<int32_t> whole{8, 9};
  EXPECT_EQ(allowed(whole), (std::vector<int>{7}));  // complete: the stop token only
  const std::vector<int32_t> refused{6};
  EXPECT_EQ(allowed(refused), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));  // never used
  c.add(8);
  c.add(9);
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(allowed({}), (std::vector<int>{7}));
}

// After a think block (the reasoning parser's answers): free text, special tokens and stops
// included, until "</think>" (even split over tokens), then the object, up to kLeadBlank blank
// bytes before it.
TEST(JsonConstraint, AfterThinkTheObjectFollowsTheCloseTag) {
  auto bytes = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{
      "hmm {", "</thi", "nk>", "</think>\n\n{", "</think>x", "{", "}", "", "\n", "<"});
  JsonConstraint c(bytes, {7}, /*after_think=*/true);
  const auto allowed = [&](std::span<const int32_t> pending) {
    return allowed_ids(c, 10, pending);
  };
  // Thinking: everything but a close tag followed by no JSON ("</think>x").
  EXPECT_EQ(allowed({}), (std::vector<int>{0, 1, 2, 3, 5, 6, 7, 8, 9}));
  const std::vector<int32_t> split{9, 1, 2};            // "<" "</thi" "nk>": the tag closes
  EXPECT_EQ(allowed(split), (std::vector<int>{5, 8}));  // "{" or a blank line
  const std::vector<int32_t> opened{3};
  EXPECT_EQ(allowed(opened), (std::vector<int>{6, 8}));  // in the object: "}" or blank
  c.add(0);
  c.add(3);
  c.add(6);
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(allowed({}), (std::vector<int>{7}));
}

// The mask's shortcuts refuse exactly what walking every token's bytes refuses, on the shipped
// vocabulary, from states of every kind (json_test_support.h).
TEST(JsonConstraint, ShortcutsMaskExactlyWhatAWalkWould) {
  expect_mask_is_the_walk(nullptr, {"", "{", "{\"na", "{\"name\": \"Jo", "{\"a\": [1, 2, 3",
                                    "{\"a\": {\"b\": tr", "{\"a\": -0.5e", "{\"a\": \"\\u00",
                                    "{\"a\": 1 ", "{\"a\": {}, \"b\": [] }", "{\"a\":\n  "});
}

// The shipped model in JSON mode: every output is a JSON prefix (the whole text, byte by byte)
// and a whole object when a stop token ended it; the same tokens with MTP k = 1 and 3, batched
// with plain requests or alone.
TEST(JsonConstraint, ShippedModelOutputsAreJsonAlsoUnderSpeculation) {
  auto model = load_fixture(kTrainedModel, 256);
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_dir(fixture_dir(kTrainedModel));
  const auto bytes = token_texts(tokenizer, model->config().vocab_size);
  const std::vector<int32_t> stops = model->config().eos_token_ids;
  std::vector<Request> reqs = json_prompt_requests(tokenizer, stops, 40);
  for (int i = 0; i < 4; ++i) reqs[static_cast<size_t>(i)].json_object = true;  // 2 plain ones
  const std::vector<std::vector<int32_t>> solo = expect_batched_is_solo(*model, bytes, reqs);
  int objects = 0;
  for (int i = 0; i < 4; ++i) {
    JsonAutomaton a;
    bool stopped = false;
    const std::string text = text_until_stop(solo[i], *bytes, stops, stopped);
    EXPECT_EQ(refused_at(a, text), -1) << text;
    if (stopped) {
      EXPECT_TRUE(a.complete()) << text;
      EXPECT_TRUE(nlohmann::json::parse(text).is_object()) << text;
      ++objects;
    }
    std::printf("[json mode] request %d (%s): %zu tokens, %s: %s\n", i,
                reqs[i].sampling.greedy() ? "greedy" : "sampled", solo[i].size(),
                stopped ? "a whole object" : "cut at max_tokens", text.c_str());
  }
  std::printf("[json mode] %d of 4 outputs closed their object before max_tokens\n", objects);
}

}  // namespace
}  // namespace tandem
