// Tests of runParallel (state/src/parallel_transfer.h), which runs the RocksDB backend's
// transfers and a storage batch's directory fsyncs: every index once, at most `threads`
// at a time, the lowest failed index's error, and no job running once it has returned —
// also when helper threads start only after every job was taken (they are not joined).
#include "parallel_transfer.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace jobhost::state {
namespace {

TEST(RunParallelTest, RunsEveryIndexOnceAndAtMostThreadsAtATime) {
  struct Case {
    size_t n;
    int threads;
  };
  for (const Case& c : std::vector<Case>{{0, 4}, {1, 4}, {6, 4}, {20, 3}, {5, 1}, {3, 0}, {2, 64}}) {
    SCOPED_TRACE(std::to_string(c.n) + " jobs on " + std::to_string(c.threads) + " threads");
    std::vector<std::atomic<int>> runs(c.n);
    std::atomic<int> now{0}, most{0};
    Status s = runParallel(c.n, c.threads, [&](size_t i) {
      const int at = now.fetch_add(1) + 1;
      for (int m = most.load(); at > m && !most.compare_exchange_weak(m, at);) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      runs[i].fetch_add(1);
      now.fetch_sub(1);
      return Status::OK();
    });
    EXPECT_TRUE(s.ok()) << s;
    for (size_t i = 0; i < c.n; ++i) EXPECT_EQ(runs[i].load(), 1) << "index " << i;
    EXPECT_LE(most.load(), std::max(c.threads, 1));
  }
}

TEST(RunParallelTest, TheLowestFailedIndexWinsAndIndicesNotStartedAreSkipped) {
  std::atomic<int> ran{0};
  Status s = runParallel(100, 4, [&](size_t i) {
    ran.fetch_add(1);
    if (i == 2 || i == 3) return Status::IOError("job " + std::to_string(i));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return Status::OK();
  });
  EXPECT_TRUE(s.isIOError()) << s;
  EXPECT_EQ(s.message(), "job 2");
  EXPECT_LT(ran.load(), 100) << "jobs went on after a failure";
}

TEST(RunParallelTest, NoJobRunsAfterItReturnsAndLateThreadsDoNotTouchTheJob) {
  // Many more threads than jobs: most start after both jobs were taken, some after
  // runParallel returned and the job (and what it refers to) is gone.
  for (int round = 0; round < 50; ++round) {
    auto calls = std::make_shared<std::atomic<int>>(0);
    auto returned = std::make_shared<std::atomic<bool>>(false);
    auto late = std::make_shared<std::atomic<int>>(0);
    {
      auto job = std::make_unique<std::function<Status(size_t)>>([calls, returned, late](size_t) {
        if (returned->load()) late->fetch_add(1);
        calls->fetch_add(1);
        return Status::OK();
      });
      ASSERT_TRUE(runParallel(2, 64, *job).ok());
      returned->store(true);
    }  // the job is destroyed here; a late thread calling it would be a use after free
    EXPECT_EQ(calls->load(), 2);
    EXPECT_EQ(late->load(), 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the last helpers end
}

}  // namespace
}  // namespace jobhost::state
