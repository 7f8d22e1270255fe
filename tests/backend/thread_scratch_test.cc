// The CPU kernels' per-thread scratch (backend/cpu/thread_scratch.h): an arena keeps one object
// per type for as long as it lives, and arenas share nothing.
#include "backend/cpu/thread_scratch.h"

#include <gtest/gtest.h>

#include <vector>

namespace kestrel::cpu {
namespace {

struct Floats {
  std::vector<float> v;
};
struct Ints {
  std::vector<int> v;
};

TEST(ThreadScratch, OneObjectPerTypeKeptAcrossCalls) {
  ScratchArena a;
  Floats& f = a.get<Floats>();
  EXPECT_TRUE(f.v.empty());
  f.v.assign(100, 1.0f);
  const float* data = f.v.data();
  a.get<Ints>().v.push_back(7);
  EXPECT_EQ(&a.get<Floats>(), &f);
  EXPECT_EQ(a.get<Floats>().v.data(), data);
  EXPECT_EQ(a.get<Ints>().v, std::vector<int>{7});
  EXPECT_NE(static_cast<void*>(&a.get<Ints>()), static_cast<void*>(&f));
}

TEST(ThreadScratch, ArenasShareNothing) {
  ThreadScratch s(3);
  s[1].get<Floats>().v.push_back(1.0f);
  EXPECT_TRUE(s[0].get<Floats>().v.empty());
  EXPECT_TRUE(s[2].get<Floats>().v.empty());
  EXPECT_NE(&s[0].get<Floats>(), &s[1].get<Floats>());
  EXPECT_DEATH(s[3], "thread 3 of a pool of 3");
}

}  // namespace
}  // namespace kestrel::cpu
