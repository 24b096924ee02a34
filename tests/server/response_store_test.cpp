// The store of POST /v1/responses (server/response_store.h): least-recently-used eviction at the
// capacity (a get counts as a use), replace, erase, a disabled store, and the JSON of the GET /
// DELETE / input_items routes with their 404s. The real server's stored conversations:
// test_responses_api.py.
#include "server/response_store.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/api_error.h"

namespace tandem::server {
namespace {

StoredResponse entry(const std::string& id, const std::string& said = "hi") {
  const Json output = {{{"type", "message"}, {"id", "msg_" + id}, {"content", said}}};
  Json items = input_items_of(said);
  items.push_back(output[0]);
  return {.response = {{"id", id}, {"object", "response"}, {"output", output}},
          .items = std::move(items)};
}

std::vector<std::string> ids_present(ResponseStore& store, const std::vector<std::string>& ids) {
  std::vector<std::string> present;
  for (const std::string& id : ids) {
    if (store.get(id) != nullptr) present.push_back(id);
  }
  return present;
}

int status_of(const auto& call) {
  try {
    call();
  } catch (const ApiError& e) {
    return e.status;
  }
  return 200;
}

TEST(ResponseStore, EvictsTheLeastRecentlyUsedBeyondItsCapacity) {
  ResponseStore store(3);
  EXPECT_TRUE(store.enabled());
  for (const char* id : {"a", "b", "c"}) store.put(entry(id));
  EXPECT_EQ(store.size(), 3u);
  ASSERT_NE(store.get("a"), nullptr);  // a is now the most recently used: b goes first
  store.put(entry("d"));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.get("b"), nullptr);
  store.put(entry("e"));  // then c (a and d were used since: a by get, d by put)
  EXPECT_EQ(ids_present(store, {"a", "b", "c", "d", "e"}),
            (std::vector<std::string>{"a", "d", "e"}));
  // A capacity of 1 keeps the last one only.
  ResponseStore one(1);
  for (const char* id : {"x", "y", "z"}) one.put(entry(id));
  EXPECT_EQ(ids_present(one, {"x", "y", "z"}), (std::vector<std::string>{"z"}));
}

TEST(ResponseStore, PutReplacesAndEraseRemoves) {
  ResponseStore store(2);
  store.put(entry("a", "first"));
  store.put(entry("b"));
  store.put(entry("a", "second"));  // replaced, and now the most recently used
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(store.get("a")->response["output"][0]["content"], "second");
  store.put(entry("c"));  // evicts b, not a
  EXPECT_EQ(ids_present(store, {"a", "b", "c"}), (std::vector<std::string>{"a", "c"}));
  // An entry a caller holds outlives its eviction.
  const auto held = store.get("c");
  EXPECT_TRUE(store.erase("c"));
  EXPECT_FALSE(store.erase("c"));
  EXPECT_EQ(store.get("c"), nullptr);
  EXPECT_EQ(held->response["id"], "c");
  EXPECT_EQ(store.size(), 1u);
}

TEST(ResponseStore, ACapacityOfZeroStoresNothing) {
  ResponseStore store(0);
  EXPECT_FALSE(store.enabled());
  store.put(entry("a"));
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.get("a"), nullptr);
  try {
    retrieve_response(store, "a");
    FAIL() << "retrieved from a disabled store";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 404);
    EXPECT_NE(std::string(e.what()).find("--max-stored-responses 0"), std::string::npos);
  }
}

TEST(ResponseStore, AStringInputIsOneUserMessageItem) {
  EXPECT_EQ(input_items_of("hi"),
            (Json{{{"type", "message"}, {"role", "user"}, {"content", "hi"}}}));
  const Json items = {{{"role", "user"}, {"content", "x"}}};
  EXPECT_EQ(input_items_of(items), items);
}

// A chain of turns holds each turn's items once; the conversation is theirs in order, and a
// continued response evicted from the store stays in the conversation of the one continuing it.
TEST(ResponseStore, AChainOfTurnsKeepsEachTurnOnce) {
  ResponseStore store(1);
  store.put(entry("resp_1", "a"));
  StoredResponse second = entry("resp_2", "b");
  second.previous = store.get("resp_1");
  ASSERT_NE(second.previous, nullptr);
  store.put(std::move(second));  // evicts resp_1
  EXPECT_EQ(store.get("resp_1"), nullptr);
  const auto kept = store.get("resp_2");
  ASSERT_NE(kept, nullptr);
  const Json all = conversation_of(*kept);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0]["content"], "a");  // resp_1's input, then its output
  EXPECT_EQ(all[1]["id"], "msg_resp_1");
  EXPECT_EQ(all[2]["content"], "b");
  EXPECT_EQ(all[3]["id"], "msg_resp_2");
  EXPECT_EQ(kept->items.size(), 2u);  // its own turn only
}

TEST(ResponseStore, TheRoutesBodiesAndTheir404s) {
  ResponseStore store(4);
  StoredResponse e = entry("resp_1", "ho");
  e.previous = std::make_shared<const StoredResponse>(
      StoredResponse{.items = Json::array({{{"type", "message"}, {"id", "msg_0"}}})});
  store.put(std::move(e));
  EXPECT_EQ(retrieve_response(store, "resp_1")["output"][0]["content"], "ho");
  // The input items: the conversation without the response's own output, newest first unless
  // order is asc.
  const Json desc = response_input_items(store, "resp_1", "desc");
  EXPECT_EQ(desc["object"], "list");
  ASSERT_EQ(desc["data"].size(), 2u);
  EXPECT_EQ(desc["data"][0]["content"], "ho");
  EXPECT_EQ(desc["first_id"], nullptr);  // the input message has no id
  EXPECT_EQ(desc["last_id"], "msg_0");
  EXPECT_EQ(desc["has_more"], false);
  const Json asc = response_input_items(store, "resp_1", "asc");
  EXPECT_EQ(asc["data"][0]["id"], "msg_0");
  EXPECT_EQ(asc["first_id"], "msg_0");
  EXPECT_EQ(status_of([&] { response_input_items(store, "resp_1", "up"); }), 400);
  EXPECT_EQ(delete_response(store, "resp_1"),
            (Json{{"id", "resp_1"}, {"object", "response.deleted"}, {"deleted", true}}));
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { retrieve_response(store, "resp_1"); }, [&] { delete_response(store, "resp_1"); },
           [&] { response_input_items(store, "resp_1", "asc"); }}) {
    EXPECT_EQ(status_of(call), 404);
  }
  try {
    stored_or_404(store, "resp_9", "invalid_request_error", "previous_response_id");
    FAIL() << "found resp_9";
  } catch (const ApiError& err) {
    EXPECT_EQ(err.type, "invalid_request_error");
    EXPECT_EQ(err.param, "previous_response_id");
    EXPECT_EQ(std::string(err.what()), "Response with id 'resp_9' not found");
  }
}

}  // namespace
}  // namespace tandem::server
