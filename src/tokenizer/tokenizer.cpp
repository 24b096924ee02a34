// Tokenizer loading and the encode/decode pipeline: added tokens are split out of the raw text
// first (leftmost-longest), the rest is NFC-normalised, split by the pre-tokenizer regex and BPE
// encoded per pre-token. Not chat templates (chat_template.cpp) nor streaming (stream_decoder.cpp).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace tandem::tok {
namespace {

using nlohmann::json;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  TANDEM_CHECK(f.good(), "cannot read {}", path.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json parse_json(std::string_view text, const char* what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}", what, e.what());
  }
}

// tokenizer_config.json writes special tokens either as a string or as {"content": ...}.
std::optional<std::string> token_string(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return std::nullopt;
}

// Leftmost-longest search for an added token from `from`; returns its index or -1.
int32_t find_added(std::string_view text, size_t from, const std::vector<AddedToken>& added,
                   const std::vector<std::vector<int32_t>>& by_byte, size_t* at) {
  if (by_byte.empty()) return -1;
  for (size_t i = from; i < text.size(); ++i) {
    const auto& cands = by_byte[static_cast<uint8_t>(text[i])];
    for (int32_t k : cands) {
      const std::string& c = added[k].content;
      if (text.compare(i, c.size(), c) == 0) {
        *at = i;
        return k;
      }
    }
  }
  return -1;
}

std::vector<std::vector<int32_t>> index_by_first_byte(const std::vector<AddedToken>& added,
                                                      bool normalized) {
  std::vector<std::vector<int32_t>> by_byte(256);
  bool any = false;
  for (int32_t k = 0; k < static_cast<int32_t>(added.size()); ++k) {
    if (added[k].normalized != normalized || added[k].content.empty()) continue;
    by_byte[static_cast<uint8_t>(added[k].content[0])].push_back(k);
    any = true;
  }
  for (auto& v : by_byte) {
    std::stable_sort(v.begin(), v.end(), [&](int32_t a, int32_t b) {
      return added[a].content.size() > added[b].content.size();
    });
  }
  if (!any) by_byte.clear();
  return by_byte;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_dir(const std::string& model_dir) {
  namespace fs = std::filesystem;
  fs::path dir(model_dir);
  TANDEM_CHECK(fs::is_directory(dir), "model directory {} does not exist", model_dir);
  fs::path tj = dir / "tokenizer.json";
  TANDEM_CHECK(fs::exists(tj),
               "{} has no tokenizer.json (tandem needs the HF fast-tokenizer file; a "
               "vocab.json/merges.txt-only or sentencepiece checkpoint is not supported)",
               model_dir);
  std::string config_text;
  if (fs::exists(dir / "tokenizer_config.json"))
    config_text = read_file(dir / "tokenizer_config.json");
  Tokenizer t = from_json(read_file(tj), config_text);
  // transformers >= 4.43 may store the template next to the config; that file wins.
  if (fs::exists(dir / "chat_template.jinja"))
    t.chat_template_ = read_file(dir / "chat_template.jinja");
  if (fs::exists(dir / "generation_config.json")) {
    json gen = parse_json(read_file(dir / "generation_config.json"), "generation_config.json");
    if (gen.contains("eos_token_id") && !gen["eos_token_id"].is_null()) {
      const json& e = gen["eos_token_id"];
      t.eos_ids_.clear();
      if (e.is_array()) {
        for (const auto& x : e) t.eos_ids_.push_back(x.get<int32_t>());
      } else {
        t.eos_ids_.push_back(e.get<int32_t>());
      }
    }
  }
  return t;
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json) {
  json tj = parse_json(tokenizer_json, "tokenizer.json");
  Tokenizer t;
  TANDEM_CHECK(tj.contains("model"), "tokenizer.json has no model");
  t.model_ = std::make_unique<BpeModel>(tj["model"]);
  t.normalizer_ = std::make_unique<Normalizer>(tj.value("normalizer", json()));
  t.pre_tokenizer_ = std::make_unique<PreTokenizer>(tj.value("pre_tokenizer", json()));
  json decoder = tj.value("decoder", json());
  TANDEM_CHECK(!decoder.is_null() && decoder.value("type", "") == "ByteLevel",
               "unsupported tokenizer decoder '{}' (only ByteLevel)",
               decoder.is_null() ? std::string("null") : decoder.value("type", std::string()));
  json post = tj.value("post_processor", json());
  TANDEM_CHECK(post.is_null() || post.value("type", "") == "ByteLevel",
               "unsupported tokenizer post_processor '{}' (only ByteLevel or none)",
               post.is_null() ? std::string() : post.value("type", std::string()));

  int32_t size = t.model_->size();
  for (const auto& a : tj.value("added_tokens", json::array())) {
    AddedToken tok;
    tok.id = a.at("id").get<int32_t>();
    tok.content = a.at("content").get<std::string>();
    tok.special = a.value("special", false);
    tok.normalized = a.value("normalized", !tok.special);
    tok.lstrip = a.value("lstrip", false);
    tok.rstrip = a.value("rstrip", false);
    TANDEM_CHECK(!a.value("single_word", false),
                 "unsupported added token '{}': single_word is not supported", tok.content);
    size = std::max(size, tok.id + 1);
    t.added_.push_back(std::move(tok));
  }
  t.decode_bytes_.resize(size);
  t.special_.assign(size, 0);
  for (int32_t id = 0; id < t.model_->size(); ++id) t.decode_bytes_[id] = t.model_->token_bytes(id);
  for (const auto& a : t.added_) {
    // HF passes added tokens through the ByteLevel decoder too.
    t.decode_bytes_[a.id] = vocab_string_to_bytes(a.content);
    t.special_[a.id] = a.special ? 1 : 0;
  }
  t.raw_by_byte_ = index_by_first_byte(t.added_, false);
  t.norm_by_byte_ = index_by_first_byte(t.added_, true);

  if (!config_json.empty()) {
    json cfg = parse_json(config_json, "tokenizer_config.json");
    t.bos_token_ = token_string(cfg, "bos_token");
    t.eos_token_ = token_string(cfg, "eos_token");
    t.pad_token_ = token_string(cfg, "pad_token");
    t.unk_token_ = token_string(cfg, "unk_token");
    if (cfg.contains("chat_template")) {
      const json& ct = cfg["chat_template"];
      if (ct.is_string()) {
        t.chat_template_ = ct.get<std::string>();
      } else if (ct.is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const auto& e : ct) {
          if (e.value("name", "") == "default")
            t.chat_template_ = e.at("template").get<std::string>();
        }
      }
    }
    if (t.eos_token_) {
      int32_t id = t.token_to_id(*t.eos_token_);
      if (id >= 0) t.eos_ids_ = {id};
    }
  }
  return t;
}

namespace {

// Rust char::is_whitespace (Unicode White_Space), what HF's lstrip/rstrip absorb.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

size_t strip_left(std::string_view s, size_t start, size_t floor) {
  while (start > floor) {
    size_t prev = start - 1;
    while (prev > floor && (static_cast<uint8_t>(s[prev]) & 0xC0) == 0x80) --prev;
    size_t i = prev;
    if (!is_white_space(next_code_point(s, i))) break;
    start = prev;
  }
  return start;
}

size_t strip_right(std::string_view s, size_t stop) {
  while (stop < s.size()) {
    size_t i = stop;
    if (!is_white_space(next_code_point(s, i))) break;
    stop = i;
  }
  return stop;
}

}  // namespace

template <typename Gap>
void Tokenizer::split_added(std::string_view text, const std::vector<std::vector<int32_t>>& by_byte,
                            std::vector<int32_t>& out, Gap encode_gap) const {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t at = 0;
    int32_t k = find_added(text, pos, added_, by_byte, &at);
    if (k < 0) break;
    const AddedToken& a = added_[k];
    size_t start = a.lstrip ? strip_left(text, at, pos) : at;
    size_t stop = a.rstrip ? strip_right(text, at + a.content.size()) : at + a.content.size();
    if (start > pos) encode_gap(text.substr(pos, start - pos));
    out.push_back(a.id);
    pos = stop;
  }
  if (pos < text.size()) encode_gap(text.substr(pos));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  TANDEM_CHECK(is_valid_utf8(text), "cannot tokenize: input is not valid UTF-8");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  split_added(text, raw_by_byte_, out, [&](std::string_view gap) { encode_text(gap, out); });
  return out;
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  std::string norm = normalizer_->apply(text);
  split_added(norm, norm_by_byte_, out, [&](std::string_view gap) { encode_normalized(gap, out); });
}

void Tokenizer::encode_normalized(std::string_view text, std::vector<int32_t>& out) const {
  thread_local std::vector<std::pair<uint32_t, uint32_t>> pieces;
  pieces.clear();
  pre_tokenizer_->split(text, pieces);
  for (auto [off, len] : pieces) model_->encode_word(text.substr(off, len), out);
}

std::string_view Tokenizer::token_bytes(int32_t id, bool skip_special) const {
  if (id < 0 || id >= static_cast<int32_t>(decode_bytes_.size())) return {};
  if (skip_special && special_[id]) return {};
  return decode_bytes_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) bytes.append(token_bytes(id, skip_special));
  return utf8_lossy(bytes);
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  for (const auto& a : added_) {
    if (a.content == token) return a.id;
  }
  return model_->find(vocab_string_to_bytes(token));
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(decode_bytes_.size()); }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_[id] != 0;
}

}  // namespace tandem::tok
