// Shared by the JSON mode and structured-output tests (json_constraint_test.cpp,
// json_schema_test.cpp): texts through the automaton, the shipped vocabulary's token texts, the
// row mask compared with walking every token, and requests run through a batched engine.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "batch_support.h"
#include "spec/json_constraint.h"
#include "spec/mtp_drafter.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace tandem::testing {

// Feeds text; the index of the first refused byte, or -1.
inline int64_t refused_at(JsonAutomaton& a, const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!a.feed(static_cast<unsigned char>(text[i]))) return static_cast<int64_t>(i);
  }
  return -1;
}

// One random corruption of a text: a byte of `noise` inserted, a byte deleted or replaced.
inline void corrupt(std::string& text, std::mt19937& rng, const std::string& noise) {
  const size_t at = rng() % (text.size() + 1);
  const char c = noise[rng() % noise.size()];
  switch (rng() % 3) {
    case 0:
      text.insert(at, 1, c);
      break;
    case 1:
      if (at < text.size()) text.erase(at, 1);
      break;
    default:
      if (at < text.size()) text[at] = c;
  }
}

// Every token's text (special tokens empty), as the engine's JSON masks read them.
inline std::shared_ptr<std::vector<std::string>> token_texts(const tok::Tokenizer& tokenizer,
                                                             int32_t vocab) {
  auto bytes = std::make_shared<std::vector<std::string>>();
  for (int32_t t = 0; t < vocab; ++t)
    bytes->push_back(std::string(tokenizer.token_bytes(t, /*skip_special=*/true)));
  return bytes;
}

// The mask's shortcuts (plain text inside strings, the first byte, the byte after a leading
// space) refuse exactly what walking every token's bytes refuses, on the shipped vocabulary, from
// each prefix (as pending tokens); `schema` null: JSON mode.
inline void expect_mask_is_the_walk(const std::shared_ptr<const JsonSchema>& schema,
                                    const std::vector<std::string>& prefixes) {
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_dir(fixture_dir(kTrainedModel));
  const auto bytes = token_texts(tokenizer, tokenizer.vocab_size());
  const int32_t stop = 8189;
  const JsonConstraint c(bytes, {stop}, false, schema);
  int64_t compared = 0;
  for (const std::string& prefix : prefixes) {
    const std::vector<int32_t> pending = tokenizer.encode(prefix);
    JsonAutomaton walked = schema ? JsonAutomaton(schema.get(), 0) : JsonAutomaton();
    ASSERT_EQ(refused_at(walked, prefix), -1) << prefix;
    std::vector<float> row(bytes->size(), 0.f);
    c.apply(row.data(), static_cast<int64_t>(row.size()), pending);
    for (size_t t = 0; t < bytes->size(); ++t) {
      bool ok;
      if (static_cast<int32_t>(t) == stop) {
        ok = walked.can_end();
      } else if (walked.complete() || (*bytes)[t].empty()) {
        ok = false;
      } else {
        JsonAutomaton b = walked;
        ok = refused_at(b, (*bytes)[t]) == -1;
      }
      EXPECT_EQ(std::isinf(row[t]), !ok)
          << "prefix '" << prefix << "' token " << t << " '" << (*bytes)[t] << "'";
      ++compared;
    }
  }
  EXPECT_EQ(compared, static_cast<int64_t>(prefixes.size() * bytes->size()));
}

// Each request's output tokens from one batched engine (MTP with k drafts when k > 0).
inline std::vector<std::vector<int32_t>> run_requests(
    Qwen35Model& model, const std::shared_ptr<std::vector<std::string>>& bytes, int k,
    int64_t max_seqs, const std::vector<Request>& rs) {
  BatchEngineOptions o = batch_options(k, ControlMode::kFixed, max_seqs);
  o.token_bytes = bytes;
  BatchEngine engine(model, k > 0 ? std::make_unique<MtpDrafter>(model) : nullptr, o);
  std::map<RequestId, size_t> index;
  for (size_t i = 0; i < rs.size(); ++i) index[engine.add(rs[i])] = i;
  std::vector<std::vector<int32_t>> out(rs.size());
  while (!engine.idle()) {
    for (RequestOutput& o2 : engine.step()) {
      auto& t = out[index.at(o2.id)];
      t.insert(t.end(), o2.new_tokens.begin(), o2.new_tokens.end());
    }
  }
  return out;
}

// Six requests on two prompts, max_tokens base + 8 i, stopping at `stops`, request 3 sampled
// (seed 5); the callers mark which are constrained.
inline std::vector<Request> json_prompt_requests(const tok::Tokenizer& tokenizer,
                                                 const std::vector<int32_t>& stops, int base) {
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.prompt = tokenizer.encode(i % 2 ? "Return a JSON object describing the ls command."
                                      : "The options of tar, as JSON:");
    r.max_tokens = base + 8 * i;
    r.stop_ids = stops;
    if (i == 3) r.sampling = {.temperature = 0.8f, .seed = 5};
    reqs.push_back(r);
  }
  return reqs;
}

// Each request alone without speculation; then all batched with MTP k = 0, 1, 3, expected to
// give each its solo tokens. Returns the solo outputs.
inline std::vector<std::vector<int32_t>> expect_batched_is_solo(
    Qwen35Model& model, const std::shared_ptr<std::vector<std::string>>& bytes,
    const std::vector<Request>& reqs) {
  std::vector<std::vector<int32_t>> solo;
  for (const Request& r : reqs) solo.push_back(run_requests(model, bytes, 0, 1, {r})[0]);
  for (int k : {0, 1, 3}) {
    const auto got = run_requests(model, bytes, k, static_cast<int64_t>(reqs.size()), reqs);
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i], solo[i]) << "k=" << k << " " << i;
  }
  return solo;
}

// The text of an output up to its stop token; stopped: whether one ended it.
inline std::string text_until_stop(const std::vector<int32_t>& out,
                                   const std::vector<std::string>& bytes,
                                   const std::vector<int32_t>& stops, bool& stopped) {
  std::string text;
  stopped = false;
  for (int32_t t : out) {
    if (std::find(stops.begin(), stops.end(), t) != stops.end()) {
      stopped = true;
      break;
    }
    text += bytes[static_cast<size_t>(t)];
  }
  return text;
}

}  // namespace tandem::testing
