#include "train/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace ringmaster::train {
namespace {

TEST(DistributedSampler, RanksShareTheDatasetWithoutOverlapBeyondPadding) {
  const size_t n = 103;
  const int world = 4;  // 103 = 4 * 26 - 1: one padded index
  std::multiset<size_t> all;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, r, world, 42);
    s.SetEpoch(3);
    auto idx = s.Indices();
    EXPECT_EQ(idx.size(), 26u);
    all.insert(idx.begin(), idx.end());
  }
  EXPECT_EQ(all.size(), 104u);
  for (size_t i = 0; i < n; ++i) EXPECT_GE(all.count(i), 1u) << i;  // every sample is seen
  size_t repeated = 0;
  for (size_t i = 0; i < n; ++i) repeated += all.count(i) - 1;
  EXPECT_EQ(repeated, 1u);  // exactly the padding
}

TEST(DistributedSampler, TheEpochSeedsTheOrderAndRanksAgreeOnIt) {
  DistributedSampler a(1000, 1, 2, 7), b(1000, 1, 2, 7);
  a.SetEpoch(5);
  b.SetEpoch(5);
  EXPECT_EQ(a.Indices(), b.Indices());  // computed apart, the same
  auto e5 = a.Indices();
  a.SetEpoch(6);
  EXPECT_NE(a.Indices(), e5);  // a new epoch reshuffles
  DistributedSampler other_seed(1000, 1, 2, 8);
  other_seed.SetEpoch(5);
  EXPECT_NE(other_seed.Indices(), e5);
}

TEST(DistributedSampler, WithoutShuffleAndWithDropLast) {
  DistributedSampler s(10, 1, 3, 0, /*shuffle=*/false, /*drop_last=*/true);
  EXPECT_EQ(s.Indices(), (std::vector<size_t>{1, 4, 7}));
  DistributedSampler one(5, 0, 1, 9);
  auto idx = one.Indices();
  std::sort(idx.begin(), idx.end());
  EXPECT_EQ(idx, (std::vector<size_t>{0, 1, 2, 3, 4}));  // one rank: a permutation of everything
}

}  // namespace
}  // namespace ringmaster::train
