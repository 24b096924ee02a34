// Incremental detokenisation with UTF-8 and stop-string holdback (text_stream.h).
#include "server/text_stream.h"

#include <algorithm>

namespace tandem::server {

namespace {

bool cont(unsigned char c) { return (c & 0xC0) == 0x80; }

// Bytes a sequence led by b needs (0: b leads none) and the allowed range of its second byte.
int needed(unsigned char b, unsigned char& lo, unsigned char& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) {
    if (b == 0xE0) lo = 0xA0;  // no overlong forms
    if (b == 0xED) hi = 0x9F;  // no surrogates
    return 3;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    return 4;
  }
  return 0;
}

// Bytes at s[i] that are a prefix of a well-formed sequence (at least 1 for any lead), and the
// sequence's full length.
size_t valid_prefix(std::string_view s, size_t i, int& full) {
  unsigned char lo, hi;
  const auto b = static_cast<unsigned char>(s[i]);
  full = needed(b, lo, hi);
  if (full <= 1) return 1;
  size_t n = 1;
  while (n < static_cast<size_t>(full) && i + n < s.size()) {
    const auto c = static_cast<unsigned char>(s[i + n]);
    if (n == 1 ? (c < lo || c > hi) : !cont(c)) break;
    ++n;
  }
  return n;
}

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  int full = 0;
  const size_t n = valid_prefix(s, i, full);
  return full >= 1 && n == static_cast<size_t>(full) ? n : 0;
}

size_t utf8_incomplete_tail(std::string_view s) {
  for (size_t k = 1; k <= 3 && k <= s.size(); ++k) {
    const size_t p = s.size() - k;
    const auto b = static_cast<unsigned char>(s[p]);
    if (cont(b)) continue;  // keep looking for the lead byte
    int full = 0;
    const size_t n = valid_prefix(s, p, full);
    return full > static_cast<int>(k) && n == k ? k : 0;
  }
  return 0;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (const size_t n = utf8_sequence_length(s, i)) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      int full = 0;
      out += "\xEF\xBF\xBD";  // U+FFFD for the maximal ill-formed subpart
      i += valid_prefix(s, i, full);
    }
  }
  return out;
}

size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop)
    : include_stop_(include_stop) {
  for (std::string& text : stops) {
    if (text.empty()) continue;  // matches nowhere useful; the protocol refuses it anyway
    Stop st{.text = std::move(text)};
    st.fail.assign(st.text.size(), 0);
    for (size_t i = 1, k = 0; i < st.text.size(); ++i) {
      while (k > 0 && st.text[i] != st.text[k]) k = st.fail[k - 1];
      if (st.text[i] == st.text[k]) ++k;
      st.fail[i] = k;
    }
    stops_.push_back(std::move(st));
  }
}

std::string StopMatcher::push(std::string_view text, bool armed) {
  if (stopped_) return {};
  const size_t base = held_.size();
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, {});
  for (size_t i = base; i < held_.size(); ++i) {
    const char c = held_[i];
    // The stop string completed first ends at the earliest byte; of those ending there, the
    // longest starts earliest. So the answer does not depend on how the text was split.
    size_t cut = std::string::npos;
    for (Stop& st : stops_) {
      while (st.state > 0 && st.text[st.state] != c) st.state = st.fail[st.state - 1];
      if (st.text[st.state] == c) ++st.state;
      if (st.state == st.text.size()) {
        // With include_stop the text ends where the stop string does (byte i, whichever).
        if (armed) cut = std::min(cut, include_stop_ ? i + 1 : i + 1 - st.text.size());
        st.state = st.fail[st.state - 1];  // passed over: go on as after a mismatch
      }
    }
    if (cut != std::string::npos) {
      stopped_ = true;
      std::string out = held_.substr(0, cut);
      held_.clear();
      return out;
    }
  }
  // Keep what could still become a stop string: the longest matched prefix. It starts where a
  // stop string starts, so the cut falls on a character boundary.
  size_t hold = 0;
  for (const Stop& st : stops_) hold = std::max(hold, st.state);
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  return std::exchange(held_, {});
}

std::string TextStream::push(int32_t id) {
  if (stopped()) return {};
  ++tokens_;
  bytes_ += codec_->token_bytes(id, skip_special_);
  const size_t tail = utf8_incomplete_tail(bytes_);
  const std::string text = utf8_lossy(std::string_view(bytes_).substr(0, bytes_.size() - tail));
  bytes_.erase(0, bytes_.size() - tail);
  return stops_.push(text, tokens_ > min_tokens_);
}

std::string TextStream::finish() {
  std::string out;
  if (!stopped() && !bytes_.empty()) out = stops_.push(utf8_lossy(bytes_), tokens_ > min_tokens_);
  bytes_.clear();
  return out + stops_.flush();
}

}  // namespace tandem::server
