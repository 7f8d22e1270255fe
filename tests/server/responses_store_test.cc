// The Responses store: retrieval, cancel of running vs finished responses, a cancelled response
// keeping its object, and bounded size that never evicts a running response.
#include "server/responses_store.h"

#include <gtest/gtest.h>

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

ojson object(const std::string& id, const std::string& status) {
  return {{"id", id}, {"status", status}, {"output", ojson::array({1})}, {"usage", 5}};
}

TEST(ResponsesStore, PutGetAndFinish) {
  ResponsesStore store(8);
  store.put("a", object("a", "completed"), nlohmann::json::array({{{"role", "user"}}}));
  const auto got = store.get("a");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->response["status"], "completed");
  EXPECT_EQ(got->messages.size(), 1u);
  EXPECT_FALSE(store.get("b"));
}

TEST(ResponsesStore, CancelStopsOnlyRunningResponses) {
  ResponsesStore store(8);
  int stopped = 0;
  store.put("run", object("run", "queued"), {}, [&] { ++stopped; });
  store.put("done", object("done", "completed"), {}, [&] { ++stopped; });
  ojson out;
  EXPECT_EQ(store.cancel("done", out), ResponsesStore::CancelResult::kNotRunning);
  EXPECT_EQ(store.cancel("nope", out), ResponsesStore::CancelResult::kNotFound);
  EXPECT_EQ(store.cancel("run", out), ResponsesStore::CancelResult::kCancelled);
  EXPECT_EQ(stopped, 1);
  EXPECT_EQ(out["status"], "cancelled");
  EXPECT_EQ(out["output"], ojson::array());
  EXPECT_TRUE(out["usage"].is_null());
  // The run's own end arrives afterwards: the cancelled object stays.
  store.finish("run", object("run", "completed"));
  EXPECT_EQ(store.get("run")->response["status"], "cancelled");
  EXPECT_EQ(store.cancel("run", out), ResponsesStore::CancelResult::kNotRunning);
}

TEST(ResponsesStore, FinishReplacesARunningObject) {
  ResponsesStore store(8);
  store.put("bg", object("bg", "queued"), {}, [] {});
  store.finish("bg", object("bg", "incomplete"));
  EXPECT_EQ(store.get("bg")->response["status"], "incomplete");
}

TEST(ResponsesStore, OldestFinishedAreDroppedFirst) {
  ResponsesStore store(2);
  store.put("running", object("running", "queued"), {}, [] {});
  store.put("old", object("old", "completed"), {});
  store.put("new", object("new", "completed"), {});
  EXPECT_EQ(store.size(), 2u);
  EXPECT_TRUE(store.get("running"));  // older, but still running
  EXPECT_FALSE(store.get("old"));
  EXPECT_TRUE(store.get("new"));
}

}  // namespace
}  // namespace kestrel::server
