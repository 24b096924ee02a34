// BPE merge loop: symbols in a doubly linked array, candidate pairs in a min-heap keyed by
// (rank, position); a popped candidate is applied only if both symbols are still the ones it was
// made from. Equivalent to "merge the lowest-rank pair, leftmost first, until none applies".
#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace tandem::tok {

void PairRankMap::build(const std::vector<Entry>& entries) {
  size_t cap = 16;
  shift_ = 60;
  while (cap < entries.size() * 2) {
    cap <<= 1;
    --shift_;
  }
  mask_ = cap - 1;
  table_.assign(cap, Entry{kEmpty, 0, 0});
  for (const Entry& e : entries) {
    size_t i = slot(e.key);
    while (table_[i].key != kEmpty && table_[i].key != e.key) i = (i + 1) & mask_;
    // The first occurrence of a duplicate merge keeps its (lower) rank, as in HF.
    if (table_[i].key == kEmpty) table_[i] = e;
  }
}

BpeModel::BpeModel(const nlohmann::json& model) {
  auto type = model.value("type", std::string("BPE"));
  TANDEM_CHECK(type == "BPE", "unsupported tokenizer model type '{}' (only BPE is supported)",
               type);
  TANDEM_CHECK(model.value("dropout", nlohmann::json()).is_null(),
               "unsupported tokenizer: BPE dropout is set");
  TANDEM_CHECK(model.value("continuing_subword_prefix", nlohmann::json()).is_null() ||
                   model["continuing_subword_prefix"].get<std::string>().empty(),
               "unsupported tokenizer: BPE continuing_subword_prefix is set");
  TANDEM_CHECK(model.value("end_of_word_suffix", nlohmann::json()).is_null() ||
                   model["end_of_word_suffix"].get<std::string>().empty(),
               "unsupported tokenizer: BPE end_of_word_suffix is set");
  TANDEM_CHECK(!model.value("byte_fallback", false),
               "unsupported tokenizer: BPE byte_fallback is set (not a byte-level BPE)");
  ignore_merges_ = model.value("ignore_merges", false);
  TANDEM_CHECK(model.contains("vocab") && model["vocab"].is_object(),
               "tokenizer.json: model.vocab is missing");
  const auto& vocab = model["vocab"];
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    max_id = std::max(max_id, it->get<int32_t>());
  id_to_bytes_.assign(max_id + 1, std::string());
  bytes_to_id_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    std::string bytes = vocab_string_to_bytes(it.key());
    int32_t id = it->get<int32_t>();
    id_to_bytes_[id] = bytes;
    bytes_to_id_.emplace(std::move(bytes), id);
  }
  for (int b = 0; b < 256; ++b) {
    byte_id_[b] = find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    TANDEM_CHECK(byte_id_[b] >= 0,
                 "unsupported tokenizer: byte 0x{:02x} has no token (not a byte-level BPE)", b);
  }
  TANDEM_CHECK(model.contains("merges") && model["merges"].is_array(),
               "tokenizer.json: model.merges is missing");
  std::vector<PairRankMap::Entry> entries;
  entries.reserve(model["merges"].size());
  int32_t rank = 0;
  for (const auto& m : model["merges"]) {
    std::string left, right;
    if (m.is_string()) {  // legacy "a b" form
      const auto& s = m.get_ref<const std::string&>();
      size_t sp = s.find(' ', 1);
      TANDEM_CHECK(sp != std::string::npos, "tokenizer.json: malformed merge '{}'", s);
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else {
      TANDEM_CHECK(m.is_array() && m.size() == 2, "tokenizer.json: malformed merge {}", m.dump());
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    std::string lb = vocab_string_to_bytes(left), rb = vocab_string_to_bytes(right);
    int32_t l = find(lb), r = find(rb), merged = find(lb + rb);
    TANDEM_CHECK(l >= 0 && r >= 0 && merged >= 0,
                 "tokenizer.json: merge '{} {}' refers to a token not in the vocab", left, right);
    entries.push_back({PairRankMap::pack(l, r), rank++, merged});
  }
  merges_.build(entries);
}

int32_t BpeModel::find(std::string_view bytes) const {
  auto it = bytes_to_id_.find(std::string(bytes));
  return it == bytes_to_id_.end() ? -1 : it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_id_[static_cast<uint8_t>(word[0])]);
    return;
  }
  if (word.size() > kMaxCachedWord) {
    merge(word, out);
    return;
  }
  thread_local std::string key;
  key.assign(word);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t start = out.size();
  merge(word, out);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() < kCacheCapacity) {
    cache_.emplace(key, std::vector<int32_t>(out.begin() + start, out.end()));
  }
}

void BpeModel::merge(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    int32_t id = find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  struct Symbol {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, pos, left, right, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Candidate> heap_storage;
  const int32_t n = static_cast<int32_t>(word.size());
  sym.resize(n);
  for (int32_t i = 0; i < n; ++i) sym[i] = {byte_id_[static_cast<uint8_t>(word[i])], i - 1, i + 1};
  sym[n - 1].next = -1;

  heap_storage.clear();
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap(
      std::greater<>(), std::move(heap_storage));
  auto push_pair = [&](int32_t pos) {
    int32_t nx = sym[pos].next;
    if (nx < 0) return;
    if (const auto* e = merges_.find(sym[pos].id, sym[nx].id)) {
      heap.push({e->rank, pos, sym[pos].id, sym[nx].id, e->merged});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& s = sym[c.pos];
    // Stale if this symbol was absorbed (id -1) or either side changed since the push.
    if (s.id != c.left || s.next < 0 || sym[s.next].id != c.right) continue;
    int32_t right = s.next;
    s.id = c.merged;
    s.next = sym[right].next;
    sym[right].id = -1;
    if (s.next >= 0) sym[s.next].prev = c.pos;
    if (s.prev >= 0) push_pair(s.prev);
    push_pair(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace tandem::tok
