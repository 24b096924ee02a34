// NFC through utf8proc (with HF's Unicode 9.0 view of newer code points, via ICU's u_charAge) and
// regex splitting through PCRE2 (UTF + UCP, JIT-compiled). HF uses Oniguruma; the Qwen patterns
// only need \p{L}, \p{N}, \p{M}, \s and a lookahead, which PCRE2 has. \s is spelled out as
// Unicode White_Space because PCRE2's UCP \s also matches U+180E.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>
#include <unicode/uchar.h>
#include <utf8proc.h>

#include <cstdlib>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace tandem::tok {

Normalizer::Normalizer(const nlohmann::json& spec) {
  if (spec.is_null()) return;
  auto type = spec.value("type", std::string());
  if (type == "NFC") {
    nfc_ = true;
  } else if (type == "Sequence") {
    for (const auto& s : spec.at("normalizers")) {
      Normalizer inner(s);
      nfc_ = nfc_ || inner.nfc_;
    }
  } else {
    fail("unsupported tokenizer normalizer '{}' (supported: NFC, Sequence of NFC, none)", type);
  }
}

namespace {

// HF `tokenizers` normalises with Unicode 9.0 data (its unicode-normalization-alignments crate).
// A code point assigned later is, to it, an unassigned starter: no combining class, no
// decomposition, no composition. Splitting the text at such code points and normalising the
// pieces with current data gives exactly the Unicode 9.0 result, because normalisation of
// characters that already existed is stable across versions.
constexpr uint8_t kHfUnicodeMajor = 9;

bool newer_than_hf(char32_t cp) {
  if (cp < 0x300) return false;  // everything below U+0300 dates from Unicode 1.1
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(cp), age);
  return age[0] > kHfUnicodeMajor;
}

void nfc_append(std::string_view text, std::string& out) {
  if (text.empty()) return;
  utf8proc_uint8_t* buf = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &buf,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("NFC normalisation failed: {}", utf8proc_errmsg(n));
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  std::free(buf);
}

// True when NFC can change text around cp: it has a non-zero combining class, a canonical
// decomposition, composes as the second of a pair (utf8proc marks those with bit 15 of
// comb_index), or is a Hangul vowel/trailing jamo (composed algorithmically).
bool nfc_relevant(char32_t cp) {
  if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) return true;
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  return p->combining_class != 0 || (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) ||
         (p->comb_index != UINT16_MAX && (p->comb_index & 0x8000) != 0);
}

}  // namespace

std::string Normalizer::apply(std::string_view text) const {
  if (!nfc_) return std::string(text);
  bool needed = false;  // most text (ASCII, CJK) is already NFC: skip the copy through utf8proc
  for (size_t i = 0; i < text.size() && !needed;) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    needed = nfc_relevant(next_code_point(text, i));
  }
  if (!needed) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t seg = 0;
  for (size_t i = 0; i < text.size();) {
    size_t at = i;
    if (!newer_than_hf(next_code_point(text, i))) continue;
    nfc_append(text.substr(seg, at - seg), out);
    out.append(text.substr(at, i - at));
    seg = i;
  }
  nfc_append(text.substr(seg), out);
  return out;
}

namespace {

// Unicode White_Space, which is what Oniguruma's \s matches.
constexpr const char* kWhiteSpaceClass =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

// Rewrites \s and \S so that PCRE2 matches exactly Unicode White_Space.
std::string rewrite_whitespace(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char d = p[i + 1];
      ++i;
      if (d == 's') {
        out += in_class ? std::string(kWhiteSpaceClass) : "[" + std::string(kWhiteSpaceClass) + "]";
      } else if (d == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceClass) + "]";
      } else if (d == 'S') {
        fail("unsupported pre-tokenizer regex: \\S inside a character class in '{}'", p);
      } else {
        out += c;
        out += d;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // literal ']' first in class
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const nlohmann::json& spec) : regex_(std::make_unique<Regex>()) {
  TANDEM_CHECK(!spec.is_null(), "unsupported tokenizer: no pre_tokenizer (expected ByteLevel)");
  std::vector<nlohmann::json> steps;
  if (spec.value("type", "") == "Sequence") {
    for (const auto& s : spec.at("pretokenizers")) steps.push_back(s);
  } else {
    steps.push_back(spec);
  }
  bool byte_level = false;
  for (const auto& s : steps) {
    auto type = s.value("type", std::string());
    if (type == "Split") {
      TANDEM_CHECK(pattern_.empty() && !byte_level,
                   "unsupported pre-tokenizer: more than one Split, or Split after ByteLevel");
      TANDEM_CHECK(s.contains("pattern") && s["pattern"].contains("Regex"),
                   "unsupported pre-tokenizer: Split without a Regex pattern");
      pattern_ = s["pattern"]["Regex"].get<std::string>();
      auto behavior = s.value("behavior", std::string());
      TANDEM_CHECK(behavior == "Isolated", "unsupported Split behavior '{}' (only Isolated)",
                   behavior);
      TANDEM_CHECK(!s.value("invert", false), "unsupported pre-tokenizer: Split with invert");
    } else if (type == "ByteLevel") {
      byte_level = true;
      TANDEM_CHECK(!s.value("add_prefix_space", false),
                   "unsupported pre-tokenizer: ByteLevel add_prefix_space=true");
      if (s.value("use_regex", true)) {
        TANDEM_CHECK(pattern_.empty(), "unsupported pre-tokenizer: Split and ByteLevel regex");
        pattern_ = kGpt2Pattern;
      }
    } else {
      fail("unsupported pre-tokenizer '{}' (supported: Split, ByteLevel, Sequence)", type);
    }
  }
  TANDEM_CHECK(byte_level, "unsupported pre-tokenizer: no ByteLevel step (not a byte-level BPE)");

  std::string pcre_pattern = rewrite_whitespace(pattern_);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  regex_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre_pattern.data()), pcre_pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_off, nullptr);
  if (regex_->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    fail("pre-tokenizer regex does not compile at offset {}: {} ('{}')", err_off,
         reinterpret_cast<char*>(msg), pattern_);
  }
  regex_->jit = pcre2_jit_compile(regex_->code, PCRE2_JIT_COMPLETE) == 0;
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text,
                         std::vector<std::pair<uint32_t, uint32_t>>& pieces) const {
  // Match data and JIT stack are per thread: the compiled pattern is shared and read-only.
  struct ThreadState {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
    ThreadState() { pcre2_jit_stack_assign(ctx, nullptr, stack); }
    ~ThreadState() {
      pcre2_match_context_free(ctx);
      pcre2_jit_stack_free(stack);
      pcre2_match_data_free(md);
    }
  };
  thread_local ThreadState ts;
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  uint32_t gap_start = 0;
  while (pos < text.size()) {
    int rc = regex_->jit
                 ? pcre2_jit_match(regex_->code, subject, text.size(), pos, 0, ts.md, ts.ctx)
                 : pcre2_match(regex_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, ts.md,
                               ts.ctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    TANDEM_CHECK(rc >= 0, "pre-tokenizer regex match failed with PCRE2 code {}", rc);
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ts.md);
    auto start = static_cast<uint32_t>(ov[0]), end = static_cast<uint32_t>(ov[1]);
    if (start > gap_start) pieces.emplace_back(gap_start, start - gap_start);  // Isolated gaps
    if (end > start) {
      pieces.emplace_back(start, end - start);
      pos = end;
    } else {
      // Empty match: step one code point so the loop makes progress.
      pos = start + 1;
      while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    gap_start = end;
  }
  if (gap_start < text.size()) {
    pieces.emplace_back(gap_start, static_cast<uint32_t>(text.size()) - gap_start);
  }
}

}  // namespace tandem::tok
