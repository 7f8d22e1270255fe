// `bench serve` arrival schedule: seeded statistics of the gaps against the gamma distribution's
// closed forms (mean 1/rate, coefficient of variation 1/sqrt(shape), exponential median
// ln 2 / rate), vLLM's rescaling of the last arrival to n / rate, and the edge cases.
#include "bench/serve_arrivals.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kestrel::bench {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> gaps_of(const std::vector<double>& times) {
  std::vector<double> gaps(times.size());
  double prev = 0.0;
  for (size_t i = 0; i < times.size(); ++i) {
    gaps[i] = times[i] - prev;
    prev = times[i];
  }
  return gaps;
}

double mean_of(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return s / double(v.size());
}

double cv_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double ss = 0.0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / double(v.size())) / m;
}

TEST(ServeArrivals, PoissonGapsHaveExponentialStatistics) {
  const std::vector<double> t = arrival_times(20000, 10.0, 1.0, 7);
  ASSERT_EQ(t.size(), 20000u);
  const std::vector<double> gaps = gaps_of(t);
  EXPECT_NEAR(mean_of(gaps), 0.1, 0.1 * 0.02);
  EXPECT_NEAR(cv_of(gaps), 1.0, 0.03);
  std::vector<double> sorted = gaps;
  std::nth_element(sorted.begin(), sorted.begin() + 10000, sorted.end());
  EXPECT_NEAR(sorted[10000], std::log(2.0) * 0.1, std::log(2.0) * 0.1 * 0.04);
  EXPECT_GT(gaps.front(), 0.0);  // the first request waits one gap too, as in vLLM
}

TEST(ServeArrivals, BurstinessSetsTheCoefficientOfVariation) {
  EXPECT_NEAR(cv_of(gaps_of(arrival_times(20000, 10.0, 0.5, 3))), std::sqrt(2.0),
              std::sqrt(2.0) * 0.05);
  EXPECT_NEAR(cv_of(gaps_of(arrival_times(20000, 10.0, 4.0, 3))), 0.5, 0.5 * 0.05);
  const std::vector<double> bursty = gaps_of(arrival_times(20000, 10.0, 0.5, 3));
  EXPECT_NEAR(mean_of(bursty), 0.1, 0.1 * 0.02);
}

TEST(ServeArrivals, LastArrivalIsScaledToCountOverRate) {
  for (double b : {0.25, 1.0, 3.0}) {
    const std::vector<double> t = arrival_times(500, 4.0, b, 11);
    EXPECT_NEAR(t.back(), 500.0 / 4.0, 1e-9) << "burstiness " << b;
  }
}

TEST(ServeArrivals, MonotoneAndDeterministicPerSeed) {
  const std::vector<double> a = arrival_times(5000, 25.0, 0.3, 42);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_GE(a.front(), 0.0);
  EXPECT_EQ(a, arrival_times(5000, 25.0, 0.3, 42));
  EXPECT_NE(a, arrival_times(5000, 25.0, 0.3, 43));
}

TEST(ServeArrivals, InfiniteRateSendsEverythingAtOnce) {
  const std::vector<double> t = arrival_times(100, kInf, 1.0, 1);
  ASSERT_EQ(t.size(), 100u);
  for (double x : t) EXPECT_EQ(x, 0.0);
  EXPECT_TRUE(arrival_times(0, 10.0, 1.0, 1).empty());
}

TEST(ServeArrivals, InfiniteBurstinessIsEvenlySpaced) {
  const std::vector<double> t = arrival_times(4, 2.0, kInf, 1);
  ASSERT_EQ(t.size(), 4u);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_DOUBLE_EQ(t[i], 0.5 * double(i + 1));
}

TEST(ServeArrivals, RejectsBadParameters) {
  EXPECT_TRUE(check_arrival_params(10.0, 1.0).ok());
  EXPECT_TRUE(check_arrival_params(kInf, kInf).ok());
  const Status zero_rate = check_arrival_params(0.0, 1.0);
  ASSERT_FALSE(zero_rate.ok());
  EXPECT_NE(zero_rate.message().find("--request-rate"), std::string::npos);
  EXPECT_FALSE(check_arrival_params(-1.0, 1.0).ok());
  EXPECT_FALSE(check_arrival_params(std::nan(""), 1.0).ok());
  const Status zero_burst = check_arrival_params(10.0, 0.0);
  ASSERT_FALSE(zero_burst.ok());
  EXPECT_NE(zero_burst.message().find("--burstiness"), std::string::npos);
  EXPECT_FALSE(check_arrival_params(10.0, -2.0).ok());
}

}  // namespace
}  // namespace kestrel::bench
