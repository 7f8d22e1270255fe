// RequestTable: entries by handle, absent handles (never put, erased, past the end) found as
// null, replacement, size, and iteration in handle order.
#include "base/request_table.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace kestrel {
namespace {

TEST(RequestTable, PutFindEraseAndSize) {
  RequestTable<std::string> t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.find(0), nullptr);
  EXPECT_EQ(t.find(1000), nullptr);
  t.put(3, "three");
  t.put(0, "zero");
  EXPECT_EQ(t.size(), 2u);
  ASSERT_NE(t.find(3), nullptr);
  EXPECT_EQ(*t.find(3), "three");
  EXPECT_EQ(t.find(1), nullptr);  // between entries
  EXPECT_EQ(t.find(4), nullptr);  // past the end
  t.put(3, "again");              // replaces: no new entry
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.at(3), "again");
  EXPECT_TRUE(t.erase(3));
  EXPECT_FALSE(t.erase(3));
  EXPECT_FALSE(t.contains(3));
  EXPECT_EQ(t.size(), 1u);
  t[7] += "made";  // operator[] default-constructs
  EXPECT_EQ(t.at(7), "made");
  EXPECT_EQ(t.size(), 2u);
  std::vector<std::pair<RequestHandle, std::string>> seen;
  t.for_each([&](RequestHandle h, std::string& v) { seen.emplace_back(h, v); });
  EXPECT_EQ(seen, (std::vector<std::pair<RequestHandle, std::string>>{{0, "zero"}, {7, "made"}}));
}

TEST(RequestTable, EntriesStayWhereTheyAreUntilTheTableGrows) {
  RequestTable<std::vector<int>> t;
  t.put(1, {1, 2});
  const std::vector<int>* before = t.find(1);
  t.put(1, {3});  // replacing in place keeps the slot
  EXPECT_EQ(t.find(1), before);
  EXPECT_EQ(*t.find(1), (std::vector<int>{3}));
  const RequestTable<std::vector<int>>& ct = t;
  EXPECT_EQ(ct.at(1).size(), 1u);
  EXPECT_EQ(ct.find(2), nullptr);
}

}  // namespace
}  // namespace kestrel
