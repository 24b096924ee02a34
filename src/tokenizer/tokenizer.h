// Text <-> token ids for byte-level BPE checkpoints (Qwen3, Qwen3.5, Qwen3-Next): loads
// tokenizer.json, tokenizer_config.json and generation_config.json from a model directory and
// reproduces HF `tokenizers` ids exactly. Chat templates live in chat_template.h, streaming in
// stream_decoder.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::tok {

class BpeModel;
class Normalizer;
class PreTokenizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool normalized = false;  // matched after normalisation instead of on the raw text
  bool lstrip = false;      // the match also takes the whitespace on its left
  bool rstrip = false;      // ... and on its right
};

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json (required), DIR/tokenizer_config.json, DIR/chat_template.jinja and
  // DIR/generation_config.json (optional). Missing files or unsupported types: tandem::Error.
  static Tokenizer from_dir(const std::string& model_dir);
  // Builds from the text of a tokenizer.json (and optionally a tokenizer_config.json).
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {});

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Encodes UTF-8 text; added and special tokens written in the text are matched as tokens.
  // Invalid UTF-8 is a tandem::Error.
  std::vector<int32_t> encode(std::string_view text) const;
  // Decodes ids to text; ill-formed UTF-8 becomes U+FFFD and unknown ids are dropped, as in HF.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Raw bytes that id contributes to a decode ("" for unknown ids and skipped special tokens).
  std::string_view token_bytes(int32_t id, bool skip_special = false) const;
  // Id of a token given by its vocab string or added-token content; -1 when absent.
  int32_t token_to_id(std::string_view token) const;
  int32_t vocab_size() const;  // one past the largest id
  bool is_special(int32_t id) const;

  std::vector<int32_t> eos_ids() const { return eos_ids_; }
  const std::optional<std::string>& chat_template() const { return chat_template_; }
  // Special-token strings from tokenizer_config.json, passed to chat templates.
  const std::optional<std::string>& bos_token() const { return bos_token_; }
  const std::optional<std::string>& eos_token() const { return eos_token_; }
  const std::optional<std::string>& pad_token() const { return pad_token_; }
  const std::optional<std::string>& unk_token() const { return unk_token_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }

 private:
  Tokenizer();
  // Splits text on added tokens of one kind; gaps go to encode_gap, tokens to out.
  template <typename Gap>
  void split_added(std::string_view text, const std::vector<std::vector<int32_t>>& by_byte,
                   std::vector<int32_t>& out, Gap encode_gap) const;
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view text, std::vector<int32_t>& out) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::vector<AddedToken> added_;
  std::vector<std::string> decode_bytes_;  // per id: bytes a decode emits
  std::vector<uint8_t> special_;           // per id: 1 for special added tokens
  // Added tokens grouped by first byte, longest first (leftmost-longest matching).
  std::vector<std::vector<int32_t>> raw_by_byte_, norm_by_byte_;
  std::vector<int32_t> eos_ids_;
  std::optional<std::string> chat_template_, bos_token_, eos_token_, pad_token_, unk_token_;
};

}  // namespace tandem::tok
