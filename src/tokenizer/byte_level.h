// The GPT-2 byte-level alphabet: each of the 256 bytes stands as one printable code point so that
// vocab entries in tokenizer.json are valid strings. tandem works on raw bytes internally and only
// uses this table to translate vocab strings at load time; it is not a pre-tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::tok {

// Code point that stands for byte b in vocab strings.
char32_t byte_to_char(uint8_t b);

// Byte that code point cp stands for, or -1 when cp is outside the alphabet.
int char_to_byte(char32_t cp);

// Translates a vocab string to the raw bytes it stands for. When some code point is outside the
// alphabet the string's own UTF-8 bytes are used, as HF's ByteLevel decoder does.
std::string vocab_string_to_bytes(std::string_view s);

}  // namespace tandem::tok
