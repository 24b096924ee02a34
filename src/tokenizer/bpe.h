// Byte-level BPE model: vocab and merges from tokenizer.json's "model" object, applied to the raw
// bytes of one pre-token (merges by rank, lowest first, leftmost on ties, as HF `tokenizers`).
// Not the splitting into pre-tokens (pre_tokenizer.h) nor added tokens (tokenizer.h).
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem::tok {

// Open-addressing map from a token pair (left id, right id) to (merge rank, merged id).
class PairRankMap {
 public:
  struct Entry {
    uint64_t key;
    int32_t rank;
    int32_t merged;
  };
  void build(const std::vector<Entry>& entries);
  // Returns the entry for (left, right) or nullptr.
  const Entry* find(int32_t left, int32_t right) const {
    uint64_t key = pack(left, right);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = table_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }
  static uint64_t pack(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  size_t slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  std::vector<Entry> table_;
  size_t mask_ = 0;
  int shift_ = 64;
};

class BpeModel {
 public:
  // Parses {"type":"BPE", "vocab":{...}, "merges":[...]}; unsupported options are a tandem::Error.
  explicit BpeModel(const nlohmann::json& model);

  // Appends the ids of one pre-token given as raw bytes.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  // Raw bytes of model token id (0 <= id < size()).
  const std::string& token_bytes(int32_t id) const { return id_to_bytes_[id]; }
  int32_t size() const { return static_cast<int32_t>(id_to_bytes_.size()); }
  // Id of a token given by its raw bytes, or -1.
  int32_t find(std::string_view bytes) const;

 private:
  void merge(std::string_view word, std::vector<int32_t>& out) const;

  std::vector<std::string> id_to_bytes_;
  std::unordered_map<std::string, int32_t> bytes_to_id_;
  int32_t byte_id_[256];
  PairRankMap merges_;
  bool ignore_merges_ = false;

  // Cache of pre-token -> ids; pre-tokens repeat heavily in natural text.
  static constexpr size_t kCacheCapacity = 1 << 17;
  static constexpr size_t kMaxCachedWord = 256;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace tandem::tok
