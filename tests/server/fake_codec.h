// A TextCodec whose tokens are chosen byte strings (parts of UTF-8 characters, ill-formed bytes,
// special tokens), so that the stream tests can split text exactly where they want to.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"
#include "server/text_codec.h"

namespace tandem::server::testing {

class FakeCodec final : public TextCodec {
 public:
  // Token i has bytes tokens[i]; ids in `special` decode to nothing when skipped.
  explicit FakeCodec(std::vector<std::string> tokens, std::vector<int32_t> special = {})
      : tokens_(std::move(tokens)), special_(std::move(special)) {}
  // One token per byte value: id b is the byte b.
  static FakeCodec bytes() {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
    return FakeCodec(std::move(t));
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (char c : text) ids.push_back(static_cast<unsigned char>(c) % vocab_size());
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string s;
    for (int32_t id : ids) s += token_bytes(id, skip_special);
    return s;
  }
  std::string token_bytes(int32_t id, bool skip_special) const override {
    if (id < 0 || id >= vocab_size()) return {};
    if (skip_special && std::find(special_.begin(), special_.end(), id) != special_.end()) {
      return {};
    }
    return tokens_[id];
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(tokens_.size()); }
  std::string render_chat(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                          const nlohmann::ordered_json& extra) const override {
    std::string s;
    for (const auto& m : messages)
      s += m["role"].get<std::string>() + ":" + m["content"].get<std::string>() + "\n";
    if (extra.contains("tools")) s += "tools:" + extra["tools"].dump() + "\n";
    if (add_generation_prompt) s += "assistant:";
    return s;
  }

 private:
  std::vector<std::string> tokens_;
  std::vector<int32_t> special_;
};

}  // namespace tandem::server::testing
