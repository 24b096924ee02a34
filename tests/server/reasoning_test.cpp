// Reasoning text in chat answers (server/reasoning.h): where the answer starts inside a <think>
// block, the split at the first </think>, and streams that give the same split however the text
// is cut into pieces.
#include "server/reasoning.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"

namespace tandem::server {
namespace {

TEST(Reasoning, APromptOpensAThinkBlockWhenItEndsWithOne) {
  EXPECT_TRUE(
      prompt_opens_think("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(
      prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n"));  // thinking off
  EXPECT_FALSE(prompt_opens_think("<|im_start|>assistant\n"));
  EXPECT_TRUE(prompt_opens_think("<think>old</think> then <think>"));
  // A user who writes <think> opens nothing: the prompt goes on after it.
  EXPECT_FALSE(
      prompt_opens_think("<|im_start|>user\nsay <think><|im_end|>\n<|im_start|>assistant\n"));
}

TEST(Reasoning, FormatNames) {
  EXPECT_EQ(parse_reasoning_format("qwen3"), ReasoningFormat::kQwen3);
  EXPECT_EQ(parse_reasoning_format("deepseek_r1"), ReasoningFormat::kQwen3);
  EXPECT_THROW(parse_reasoning_format("r1"), Error);
}

struct Case {
  bool in_think;
  std::string text, reasoning, content;
  bool had_reasoning;
};

// Every case split at random into pieces of 1..5 bytes, 200 times: the same reasoning and
// content as the whole text at once, and no tag ever sent.
TEST(Reasoning, StreamsSplitAlikeHoweverTheTextIsCut) {
  const std::vector<Case> cases = {
      {true, "Let me see.\n</think>\n\nParis.", "Let me see.\n", "\n\nParis.", true},
      {true, "cut off while thinking </thi", "cut off while thinking </thi", "", true},
      {true, "</think>direct", "", "direct", true},
      {false, "<think>a < b</think>yes", "a < b", "yes", true},
      {false, " \n<think>x</think>\ny", "x", "\ny", true},
      {false, "plain <think> in the middle</think>", "", "plain <think> in the middle</think>",
       false},
      {false, "<thi", "", "<thi", false},
      {false, "", "", "", false},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    for (int trial = 0; trial < 200; ++trial) {
      ReasoningStream s(c.in_think);
      std::string reasoning, content;
      for (size_t pos = 0; pos < c.text.size();) {
        const size_t len = std::min<size_t>(1 + rng() % 5, c.text.size() - pos);
        const ReasoningPiece p = s.push(std::string_view(c.text).substr(pos, len));
        reasoning += p.reasoning;
        content += p.content;
        pos += len;
      }
      const ReasoningPiece end = s.finish();
      reasoning += end.reasoning;
      content += end.content;
      ASSERT_EQ(reasoning, c.reasoning) << c.text;
      ASSERT_EQ(content, c.content) << c.text;
      EXPECT_EQ(s.had_reasoning(), c.had_reasoning) << c.text;
      if (c.had_reasoning) {
        EXPECT_EQ(reasoning.find("</think>"), std::string::npos) << c.text;
      }
    }
  }
}

}  // namespace
}  // namespace tandem::server
