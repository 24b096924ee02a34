// PrefixCache (prefix_cache.h): entries in recency order, indexed by their tokens' bytes.
#include "engine/prefix_cache.h"

#include <algorithm>
#include <cstring>

namespace tandem {

PrefixCache::PrefixCache(int64_t max_bytes, int64_t granule)
    : max_bytes_(std::max<int64_t>(max_bytes, 0)), granule_(granule) {}

int64_t PrefixCache::snapshot_length(int64_t prompt_len) const {
  if (!enabled() || prompt_len <= 1) return 0;
  return (prompt_len - 1) / granule_ * granule_;
}

std::string PrefixCache::key_of(std::span<const int32_t> tokens) {
  std::string key(tokens.size() * sizeof(int32_t), '\0');
  if (!tokens.empty()) std::memcpy(key.data(), tokens.data(), key.size());
  return key;
}

PrefixCache::List::iterator PrefixCache::find(std::span<const int32_t> prefix) const {
  const auto it = index_.find(key_of(prefix));
  return it == index_.end() ? lru_.end() : it->second;
}

bool PrefixCache::contains(std::span<const int32_t> prefix) const {
  return find(prefix) != lru_.end();
}

const SwappedState* PrefixCache::lookup(std::span<const int32_t> prompt, int64_t& length) {
  length = 0;
  if (!enabled() || index_.empty()) return nullptr;
  const int64_t most = snapshot_length(static_cast<int64_t>(prompt.size()));
  for (auto l = lengths_.upper_bound(most); l != lengths_.begin();) {
    const int64_t n = (--l)->first;
    const auto it = find(prompt.first(static_cast<size_t>(n)));
    if (it == lru_.end()) continue;
    lru_.splice(lru_.begin(), lru_, it);
    length = n;
    return &it->state;
  }
  return nullptr;
}

void PrefixCache::insert(std::span<const int32_t> prefix, SwappedState state) {
  if (!enabled() || contains(prefix)) return;
  int64_t bytes = 0;
  for (const Tensor& t : state.layers) bytes += t.nbytes();
  if (bytes > max_bytes_) return;
  while (bytes_ + bytes > max_bytes_ && !lru_.empty()) {
    bytes_ -= lru_.back().bytes;
    index_.erase(key_of(lru_.back().tokens));
    if (--lengths_[static_cast<int64_t>(lru_.back().tokens.size())] == 0) {
      lengths_.erase(static_cast<int64_t>(lru_.back().tokens.size()));
    }
    lru_.pop_back();
  }
  lru_.push_front(Entry{{prefix.begin(), prefix.end()}, std::move(state), bytes});
  index_.emplace(key_of(prefix), lru_.begin());
  ++lengths_[static_cast<int64_t>(prefix.size())];
  bytes_ += bytes;
}

}  // namespace tandem
