// Generated tokens to the text a client may see, incrementally: token bytes are assembled so that
// a piece never ends inside a UTF-8 character (ill-formed bytes become U+FFFD, as a full decode
// gives them), and text that could begin a stop string is held back until it cannot; a stop
// string itself is never emitted. Generation stops at the stop string completed first (the one
// ending earliest; of those ending together, the longest), so the concatenation of every piece is
// the full decode cut before that stop string, however the text was split. One object per
// request; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/text_codec.h"

namespace tandem::server {

// UTF-8 helpers (the server does not depend on the tokenizer layer).
// Length of the well-formed sequence at s[i], 0 when the bytes there are none.
size_t utf8_sequence_length(std::string_view s, size_t i);
// Trailing bytes of s that begin a well-formed sequence still missing bytes (0..3).
size_t utf8_incomplete_tail(std::string_view s);
// s with every maximal ill-formed subpart replaced by U+FFFD.
std::string utf8_lossy(std::string_view s);
// The length of the longest end of s that begins tag (shorter than tag): text a stream holds back
// while it could still become the tag (reasoning.h, tool_calls.h).
size_t partial_tag(std::string_view s, std::string_view tag);

// Holds back text that could begin one of the stop strings. Each stop string has a KMP automaton
// whose state is the longest prefix of it that the text ends with, so the work is linear in the
// text whatever the stop strings are (hostile ones included).
class StopMatcher {
 public:
  // include_stop: the stop string that ends the text is emitted with it (vLLM's
  // include_stop_str_in_output).
  explicit StopMatcher(std::vector<std::string> stops, bool include_stop = false);
  // Adds text (whole characters); returns what can be emitted now. After a stop string the
  // matcher is stopped and returns nothing more. Unless `armed`, a stop string completed in this
  // text is passed over (emitted like any text; min_tokens).
  std::string push(std::string_view text, bool armed = true);
  // No more text comes: the held-back rest.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  struct Stop {
    std::string text;
    std::vector<size_t> fail;  // KMP: longest proper border of text[0..i]
    size_t state = 0;          // text[0..state) is a suffix of everything pushed
  };
  std::vector<Stop> stops_;
  std::string held_;  // pushed, not yet emitted: the longest state among the stops, at most
  bool stopped_ = false;
  bool include_stop_ = false;
};

class TextStream {
 public:
  // A stop string counts only where it ends in the text of a token after the first min_tokens
  // (vLLM's min_tokens: the text those tokens complete is not checked).
  // include_stop, skip_special: vLLM's include_stop_str_in_output and skip_special_tokens.
  TextStream(const TextCodec& codec, std::vector<std::string> stops, int64_t min_tokens = 0,
             bool include_stop = false, bool skip_special = true)
      : codec_(&codec),
        stops_(std::move(stops), include_stop),
        min_tokens_(min_tokens),
        skip_special_(skip_special) {}
  // Adds one generated token; returns the text it makes safe to emit (often empty). Ignored once
  // stopped.
  std::string push(int32_t id);
  // The end of generation: the rest of an incomplete character (as U+FFFD) and the held-back
  // text.
  std::string finish();
  // A stop string was found: generation should end.
  bool stopped() const { return stops_.stopped(); }
  // Tokens consumed, up to and including the one that completed a stop string.
  int64_t tokens() const { return tokens_; }

 private:
  const TextCodec* codec_;
  StopMatcher stops_;
  std::string bytes_;  // an incomplete UTF-8 character (at most 3 bytes)
  int64_t min_tokens_ = 0;
  bool skip_special_ = true;
  int64_t tokens_ = 0;
};

}  // namespace tandem::server
