// ResponseStore (response_store.h): a list in recency order and an index into it, under one mutex;
// and the JSON of the stored-response routes.
#include "server/response_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <vector>

#include "server/api_error.h"

namespace tandem::server {

namespace {

ApiError not_found(const ResponseStore& store, const std::string& id, const std::string& type,
                   const std::string& param) {
  return ApiError(
      404,
      fmt::format("Response with id '{}' not found{}", id,
                  store.enabled() ? "" : " (--max-stored-responses 0: none are stored)"),
      type, param);
}

}  // namespace

ResponseStore::ResponseStore(int64_t capacity)
    : capacity_(static_cast<size_t>(std::max<int64_t>(capacity, 0))) {}

void ResponseStore::put(StoredResponse entry) {
  if (!enabled()) return;
  std::string id = entry.response.at("id").get<std::string>();
  auto stored = std::make_shared<const StoredResponse>(std::move(entry));
  Entries evicted;  // freed after the lock is released: a conversation can be large
  {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(id); it != index_.end()) {
      evicted.splice(evicted.end(), lru_, it->second);
      index_.erase(it);
    }
    lru_.emplace_front(id, std::move(stored));
    index_.emplace(std::move(id), lru_.begin());
    while (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      evicted.splice(evicted.end(), lru_, std::prev(lru_.end()));
    }
  }
}

std::shared_ptr<const StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mu_);
  const auto it = index_.find(id);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);  // iterators stay valid
  return it->second->second;
}

bool ResponseStore::erase(const std::string& id) {
  Entries erased;
  std::lock_guard lock(mu_);
  const auto it = index_.find(id);
  if (it == index_.end()) return false;
  erased.splice(erased.end(), lru_, it->second);
  index_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

Json conversation_of(const StoredResponse& r) {
  std::vector<const StoredResponse*> turns;
  for (const StoredResponse* t = &r; t != nullptr; t = t->previous.get()) turns.push_back(t);
  Json all = Json::array();
  for (auto t = turns.rbegin(); t != turns.rend(); ++t) {
    for (const Json& item : (*t)->items) all.push_back(item);
  }
  return all;
}

Json input_items_of(const Json& input) {
  if (input.is_string())
    return Json::array({{{"type", "message"}, {"role", "user"}, {"content", input}}});
  return input;
}

std::shared_ptr<const StoredResponse> stored_or_404(ResponseStore& store, const std::string& id,
                                                    const std::string& type,
                                                    const std::string& param) {
  if (auto entry = store.get(id)) return entry;
  throw not_found(store, id, type, param);
}

Json retrieve_response(ResponseStore& store, const std::string& id) {
  return stored_or_404(store, id, "not_found_error", {})->response;
}

Json delete_response(ResponseStore& store, const std::string& id) {
  if (!store.erase(id)) throw not_found(store, id, "not_found_error", {});
  return {{"id", id}, {"object", "response.deleted"}, {"deleted", true}};
}

// The items that made the response: its conversation without its own output.
Json response_input_items(ResponseStore& store, const std::string& id, const std::string& order) {
  if (order != "asc" && order != "desc") {
    throw bad_request("order", fmt::format("'order' must be \"asc\" or \"desc\", got '{}'", order));
  }
  const auto entry = stored_or_404(store, id, "not_found_error", {});
  const Json all = conversation_of(*entry);
  const size_t n = all.size() - std::min(all.size(), entry->response.at("output").size());
  Json data = Json::array();
  for (size_t i = 0; i < n; ++i) data.push_back(all[order == "asc" ? i : n - 1 - i]);
  const auto id_of = [](const Json& item) {
    const auto it = item.find("id");
    return it != item.end() && it->is_string() ? *it : Json();
  };
  Json first = data.empty() ? Json() : id_of(data.front());
  Json last = data.empty() ? Json() : id_of(data.back());
  return {{"object", "list"},
          {"data", std::move(data)},
          {"first_id", std::move(first)},
          {"last_id", std::move(last)},
          {"has_more", false}};
}

}  // namespace tandem::server
