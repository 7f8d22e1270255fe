// The PD proxy's instance pool: least-load choice in tokens, failed instances skipped until a
// probe answers, instances added at run time waiting for their first answer, removed ones
// draining.
#include "proxy/instances.h"

#include <gtest/gtest.h>

namespace kestrel::proxy {
namespace {

Instance inst(Role role, const std::string& host, uint16_t port) {
  return Instance{role, host, port};
}

TEST(ProxyInstances, ParsesHostPort) {
  auto a = parse_instance(Role::kDecode, "10.0.0.1:7100");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "10.0.0.1");
  EXPECT_EQ(a->port, 7100);
  EXPECT_EQ(a->address(), "10.0.0.1:7100");
  auto v6 = parse_instance(Role::kDecode, "[::1]:80");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->address(), "[::1]:80");
  EXPECT_FALSE(parse_instance(Role::kDecode, "host").ok());
  EXPECT_FALSE(parse_instance(Role::kDecode, "host:").ok());
  EXPECT_FALSE(parse_instance(Role::kDecode, "host:99999").ok());
  EXPECT_FALSE(parse_instance(Role::kDecode, "host:12x").ok());
}

TEST(ProxyInstances, LeastLoadInTokensThenFewestRequestsThenOldestPick) {
  InstancePool pool;
  pool.add_ready(inst(Role::kDecode, "a", 1));
  pool.add_ready(inst(Role::kDecode, "b", 2));
  pool.add_ready(inst(Role::kPrefill, "p", 3));
  auto first = pool.pick(Role::kDecode, 1000);
  auto second = pool.pick(Role::kDecode, 10);
  ASSERT_TRUE(first && second);
  EXPECT_NE((*first)->port, (*second)->port);
  // b holds 10 tokens, a 1000: the next goes to the lighter one, twice.
  auto third = pool.pick(Role::kDecode, 10);
  EXPECT_EQ((*third)->port, (*second)->port);
  pool.release(*first, 1000);
  auto fourth = pool.pick(Role::kDecode, 5);
  EXPECT_EQ((*fourth)->port, (*first)->port);
  // Roles never mix.
  EXPECT_EQ((*pool.pick(Role::kPrefill, 1))->port, 3);
  // Equal tokens and requests: turns.
  InstancePool even;
  even.add_ready(inst(Role::kPrefill, "a", 1));
  even.add_ready(inst(Role::kPrefill, "b", 2));
  auto x = even.pick(Role::kPrefill, 0);
  even.release(*x, 0);
  auto y = even.pick(Role::kPrefill, 0);
  EXPECT_NE((*x)->port, (*y)->port);
}

TEST(ProxyInstances, DownInstancesAreSkippedUntilAProbeAnswers) {
  InstancePool pool;
  pool.add_ready(inst(Role::kDecode, "a", 1));
  pool.add_ready(inst(Role::kDecode, "b", 2));
  auto a = pool.pick(Role::kDecode, 0);
  pool.release(*a, 0);
  pool.mark_down(*a);
  for (int i = 0; i < 3; ++i) {
    auto p = pool.pick(Role::kDecode, 100);
    EXPECT_NE((*p)->port, (*a)->port);
  }
  ASSERT_EQ(pool.to_probe().size(), 1u);
  EXPECT_EQ(pool.counts().decode, 2);  // down, not gone
  pool.probed(*a, true);
  EXPECT_TRUE(pool.to_probe().empty());
  EXPECT_EQ((*pool.pick(Role::kDecode, 0))->port, (*a)->port);  // the lighter one again
  // Every instance down: a request still tries one rather than failing.
  InstancePool lone;
  lone.add_ready(inst(Role::kPrefill, "p", 9));
  auto p = lone.pick(Role::kPrefill, 0);
  lone.release(*p, 0);
  lone.mark_down(*p);
  EXPECT_TRUE(lone.pick(Role::kPrefill, 0).has_value());
}

TEST(ProxyInstances, AddedInstancesWaitForTheirFirstAnswer) {
  InstancePool pool;
  pool.add_ready(inst(Role::kDecode, "a", 1));
  EXPECT_TRUE(pool.add_waiting(inst(Role::kDecode, "b", 2), 2));
  EXPECT_FALSE(pool.add_waiting(inst(Role::kDecode, "b", 2), 2));  // already known
  EXPECT_EQ(pool.counts().decode, 1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*pool.pick(Role::kDecode, 0))->port, 1);
  auto probe = pool.to_probe();
  ASSERT_EQ(probe.size(), 1u);
  pool.probed(probe[0], true);
  EXPECT_EQ(pool.counts().decode, 2);
  EXPECT_EQ((*pool.pick(Role::kDecode, 0))->port, 2);  // a holds three requests
  // One that never answers is dropped after its probes.
  EXPECT_TRUE(pool.add_waiting(inst(Role::kDecode, "c", 3), 2));
  for (int i = 0; i < 2; ++i) {
    auto c = pool.to_probe();
    ASSERT_EQ(c.size(), 1u);
    pool.probed(c[0], false);
  }
  EXPECT_TRUE(pool.to_probe().empty());
  EXPECT_TRUE(pool.add_waiting(inst(Role::kDecode, "c", 3), 1));  // unknown again
}

TEST(ProxyInstances, RemovedInstancesDrainThenGo) {
  InstancePool pool;
  pool.add_ready(inst(Role::kDecode, "a", 1));
  pool.add_ready(inst(Role::kDecode, "b", 2));
  auto a = pool.pick(Role::kDecode, 50);
  ASSERT_EQ((*a)->port, 1);
  EXPECT_TRUE(pool.remove(Role::kDecode, "a:1"));
  EXPECT_FALSE(pool.remove(Role::kPrefill, "a:1"));
  EXPECT_FALSE(pool.remove(Role::kDecode, "zz:1"));
  EXPECT_EQ(pool.counts().decode, 1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*pool.pick(Role::kDecode, 100))->port, 2);
  EXPECT_EQ(pool.all(Role::kDecode).size(), 2u);  // still draining
  pool.release(*a, 50);
  EXPECT_EQ(pool.all(Role::kDecode).size(), 1u);
  EXPECT_FALSE(pool.pick(Role::kPrefill, 0).has_value());
}

}  // namespace
}  // namespace kestrel::proxy
