// The responses POST /v1/responses stored (`store`, default true), for `previous_response_id` and
// GET / DELETE /v1/responses/{id}: in memory, thread-safe, at most `capacity` responses, the least
// recently used evicted first. Not persistent, not shared between server processes. A response
// holds only its own turn's items and the response it continued (shared, so a long chain of turns
// costs its items once, not once per turn; an evicted response stays alive while a stored one
// continues it). docs/server.md, "The Responses API".
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "server/protocol.h"

namespace tandem::server {

struct StoredResponse {
  Json response;  // the `response` object as it was returned (its "id" is the key)
  // The response this one continued (previous_response_id), null for a first turn.
  std::shared_ptr<const StoredResponse> previous;
  // This turn as Responses items: the request's input items, then the response's output items.
  // Instructions are not part of it: a next turn's do not carry over (as OpenAI has it).
  Json items = Json::array();
};

// The whole conversation up to and including r, oldest item first.
Json conversation_of(const StoredResponse& r);

class ResponseStore {
 public:
  explicit ResponseStore(int64_t capacity);  // 0: stores nothing
  ResponseStore(const ResponseStore&) = delete;
  ResponseStore& operator=(const ResponseStore&) = delete;

  bool enabled() const { return capacity_ > 0; }
  // Stores (or replaces) the entry under its response's id, as the most recently used; evicts
  // the least recently used beyond the capacity. Does nothing when disabled.
  void put(StoredResponse entry);
  // The entry, now the most recently used; null when absent (never stored, evicted, deleted).
  std::shared_ptr<const StoredResponse> get(const std::string& id);
  // false when absent.
  bool erase(const std::string& id);
  size_t size() const;

 private:
  using Entries = std::list<std::pair<std::string, std::shared_ptr<const StoredResponse>>>;
  size_t capacity_;
  mutable std::mutex mu_;
  Entries lru_;  // the most recently used first
  std::unordered_map<std::string, Entries::iterator> index_;
};

// A request's `input` (a string or items, validated) as items: a string is one user message.
Json input_items_of(const Json& input);

// The stored entry of id, else ApiError 404 naming the id ("Response with id '...' not found"),
// of `type` and naming `param` (empty: none).
std::shared_ptr<const StoredResponse> stored_or_404(ResponseStore& store, const std::string& id,
                                                    const std::string& type,
                                                    const std::string& param);

// The bodies of GET /v1/responses/{id}, DELETE /v1/responses/{id} and
// GET /v1/responses/{id}/input_items (order "asc" or "desc"; every item, no pages); ApiError 404
// (not_found_error) when id is not stored, 400 for another order.
Json retrieve_response(ResponseStore& store, const std::string& id);
Json delete_response(ResponseStore& store, const std::string& id);
Json response_input_items(ResponseStore& store, const std::string& id, const std::string& order);

}  // namespace tandem::server
