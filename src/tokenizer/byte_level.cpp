// Byte-level alphabet of GPT-2: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order. Built once from that rule rather than from a pasted table.
#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace tandem::tok {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 512> to_byte{};  // all alphabet code points are < 0x200
  Tables() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return tables().to_char[b]; }

int char_to_byte(char32_t cp) { return cp < 512 ? tables().to_byte[cp] : -1; }

std::string vocab_string_to_bytes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    int b = char_to_byte(next_code_point(s, i));
    if (b < 0) return std::string(s);
    out.push_back(static_cast<char>(b));
  }
  return out;
}

}  // namespace tandem::tok
