// Streaming decode: hold back only a trailing, still-completable UTF-8 prefix. Everything before
// it decodes the same whether or not more bytes follow, because a held prefix starts with a lead
// byte, which can never extend an earlier (ill-formed or complete) sequence.
#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace tandem::tok {

std::string StreamDecoder::push(int32_t id) {
  pending_.append(tokenizer_->token_bytes(id, skip_special_));
  size_t hold = incomplete_tail_length(pending_);
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace tandem::tok
