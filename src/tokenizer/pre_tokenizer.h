// Normaliser and pre-tokeniser stages of an HF tokenizer.json pipeline, limited to what byte-level
// BPE tokenizers (GPT-2, Qwen2/3/3.5) use: NFC (utf8proc) and a regex Split (PCRE2, UTF+UCP, JIT)
// followed by ByteLevel. Anything else in tokenizer.json is rejected with a tandem::Error.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::tok {

class Normalizer {
 public:
  // Accepts null, {"type":"NFC"} or a Sequence of those.
  explicit Normalizer(const nlohmann::json& spec);
  bool active() const { return nfc_; }
  // NFC-normalises valid UTF-8 text (ASCII-only text is returned unchanged without copying work).
  std::string apply(std::string_view text) const;

 private:
  bool nfc_ = false;
};

// Splits text into pre-tokens; each is then byte-level BPE encoded.
class PreTokenizer {
 public:
  // Accepts Split(Regex, Isolated) + ByteLevel(use_regex=false), or ByteLevel(use_regex=true).
  explicit PreTokenizer(const nlohmann::json& spec);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends (offset, length) of each pre-token of valid UTF-8 text.
  void split(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& pieces) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Regex;
  std::string pattern_;
  std::unique_ptr<Regex> regex_;
};

}  // namespace tandem::tok
