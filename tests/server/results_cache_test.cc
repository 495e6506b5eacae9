#include "server/results_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace paratune::server {
namespace {

std::shared_ptr<const v1::PlanResult> Ranking(int64_t considered) {
  auto p = std::make_shared<v1::PlanResult>();
  p->set_candidates_considered(considered);
  return p;
}

TEST(ResultsCacheTest, KeepsTheMostRecentlyUsedUpToItsCapacity) {
  const std::string a = "job-a", b = "job-b", c = "job-c";
  ResultsCache cache(2);
  cache.Put(a, Ranking(1));
  cache.Put(b, Ranking(2));
  ASSERT_TRUE(cache.Get(a) != nullptr);  // a is now the most recently used
  cache.Put(c, Ranking(3));              // b goes
  EXPECT_EQ(cache.size(), 2);
  EXPECT_TRUE(cache.Get(b) == nullptr);
  EXPECT_EQ(cache.Get(a)->candidates_considered(), 1);
  EXPECT_EQ(cache.Get(c)->candidates_considered(), 3);
  cache.Put(a, Ranking(4));  // replaced, not duplicated
  EXPECT_EQ(cache.size(), 2);
  EXPECT_EQ(cache.Get(a)->candidates_considered(), 4);
}

TEST(ResultsCacheTest, AStoredRankingIsParsedOnceAndGarbageIsDataLoss) {
  const std::string job = "job-a";
  ResultsCache cache(4);
  v1::PlanResult stored;
  stored.set_candidates_considered(7);
  stored.add_ranked()->set_rank(1);
  absl::StatusOr<std::shared_ptr<const v1::PlanResult>> parsed =
      cache.PutSerialized(job, stored.SerializeAsString());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)->candidates_considered(), 7);
  EXPECT_TRUE(cache.Get(job) == *parsed);  // the same object, cached
  absl::StatusOr<std::shared_ptr<const v1::PlanResult>> bad =
      cache.PutSerialized("job-b", std::string("\xff\xff\xff", 3));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(bad.status().message(), "job 'job-b': cannot parse its stored ranking");
  EXPECT_EQ(cache.size(), 1);
}

}  // namespace
}  // namespace paratune::server
