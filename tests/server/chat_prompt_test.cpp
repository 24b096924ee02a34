// A chat request's prompt text (server/chat_prompt.h): the generation prompt, or the final
// message continued (the text cut right after its content, as transformers does it).
#include "server/chat_prompt.h"

#include <gtest/gtest.h>

#include "fake_codec.h"
#include "server/api_error.h"

namespace tandem::server {
namespace {

TEST(ChatPrompt, GenerationPromptOrTheFinalMessageContinued) {
  const testing::FakeCodec codec({"a"});  // renders "role:content\n" per message
  const Json msgs = Json::parse(
      R"([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": " It is "}])");
  EXPECT_EQ(render_chat_prompt(codec, msgs, true, false, Json::object()),
            "user:2+2?\nassistant: It is \nassistant:");
  EXPECT_EQ(render_chat_prompt(codec, msgs, false, false, Json::object()),
            "user:2+2?\nassistant: It is \n");
  // Continued: cut after the content (blank space around it trimmed), its turn left open.
  EXPECT_EQ(render_chat_prompt(codec, msgs, false, true, Json::object()),
            "user:2+2?\nassistant: It is");
  const Json empty = Json::parse(R"([{"role": "user", "content": "x"},
                                     {"role": "assistant", "content": "  "}])");
  try {
    render_chat_prompt(codec, empty, false, true, Json::object());
    ADD_FAILURE() << "an empty final message was continued";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "messages");
  }
}

}  // namespace
}  // namespace tandem::server
