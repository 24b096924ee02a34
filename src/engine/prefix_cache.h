// Prefix caching (`--enable-prefix-caching`): a request whose prompt begins with the prompt prefix
// of an earlier one starts from that prefix's state instead of prefilling it again. What is kept:
// a sequence's whole state (GDN state, conv history, KV blocks, its MTP layer's KV) right after
// the prefill chunk that ends at the last granule boundary before its prompt's end, copied to host
// memory (StatePool::snapshot), keyed by those tokens. Prefill chunks end at granule multiples
// counted from the sequence start (DESIGN.md invariant 2), so the rows after a restored prefix are
// computed exactly as a cold run computes them: a hit changes no bit of any output (tested). A
// decode step's state is never kept (its rows take other kernels than a prefill of the same
// tokens). The MTP layer's deferred first pass may not have reached the prefix when it was kept:
// drafts may be worse after a hit, never the output. Bounded by bytes of host memory, the least
// recently used entry evicted first.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/state_pool.h"

namespace tandem {

class PrefixCache {
 public:
  // max_bytes 0: disabled (stores and finds nothing).
  PrefixCache(int64_t max_bytes, int64_t granule);
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  bool enabled() const { return max_bytes_ > 0; }
  // The prefix a prompt of this length is kept at: its last granule boundary before its end (0:
  // none, for prompts of at most one granule).
  int64_t snapshot_length(int64_t prompt_len) const;
  // The longest kept prefix of prompt that is shorter than it (the last prompt row must run, for
  // its logits); null if none. Counts as a use (LRU).
  const SwappedState* lookup(std::span<const int32_t> prompt, int64_t& length);
  bool contains(std::span<const int32_t> prefix) const;
  // Keeps state as the state after `prefix`; evicts the least recently used beyond max_bytes (a
  // state larger than max_bytes alone is not kept).
  void insert(std::span<const int32_t> prefix, SwappedState state);

  int64_t entries() const { return static_cast<int64_t>(lru_.size()); }
  int64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    SwappedState state;
    int64_t bytes = 0;
  };
  using List = std::list<Entry>;
  static std::string key_of(std::span<const int32_t> tokens);
  List::iterator find(std::span<const int32_t> prefix) const;

  int64_t max_bytes_, granule_, bytes_ = 0;
  mutable List lru_;  // the most recently used first
  std::unordered_map<std::string, List::iterator> index_;
  std::map<int64_t, int64_t> lengths_;  // entries by prefix length: a lookup probes only these
};

}  // namespace tandem
