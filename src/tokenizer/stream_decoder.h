// Incremental detokenisation for streaming: push ids one at a time and get back text that ends on
// a UTF-8 character boundary; the concatenation of all pieces plus flush() equals
// Tokenizer::decode of the whole sequence. Not thread-safe; one decoder per stream.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace tandem::tok {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}

  // Text completed by this id (possibly empty while a multi-byte character is still open).
  std::string push(int32_t id);
  // Whatever is still held back (an incomplete character decodes to U+FFFD, as in decode()).
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete trailing UTF-8 sequence (at most 3)
};

}  // namespace tandem::tok
