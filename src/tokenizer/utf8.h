// UTF-8 helpers shared by the tokenizer and the chat-template interpreter: decoding code points,
// validation, the lossy conversion HF `tokenizers` applies on decode (Rust from_utf8_lossy), and
// the streaming boundary rule. Not a Unicode database: properties come from utf8proc and PCRE2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::tok {

// Appends the UTF-8 encoding of code point cp to out.
void append_utf8(char32_t cp, std::string& out);

// Decodes the code point at s[i] (valid UTF-8 assumed), advancing i.
char32_t next_code_point(std::string_view s, size_t& i);

// Code points of a valid UTF-8 string, and back.
std::u32string to_u32(std::string_view s);
std::string to_utf8(std::u32string_view s);

// Length of a well-formed UTF-8 sequence starting at s[i]; 0 if the bytes there are not one
// (truncated, overlong, surrogate, out of range).
size_t valid_sequence_length(std::string_view s, size_t i);

bool is_valid_utf8(std::string_view s);

// Rust's String::from_utf8_lossy: every maximal ill-formed subpart becomes U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Number of trailing bytes of s that form an incomplete but still valid prefix of a UTF-8
// sequence (0..3): the bytes a streaming decoder must hold back until more arrive.
size_t incomplete_tail_length(std::string_view s);

}  // namespace tandem::tok
