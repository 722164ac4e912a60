// Unit tests of host/checkpoint/checkpoint_history: how checkpoint records are merged,
// bounded and counted.
#include "checkpoint/checkpoint_history.h"

#include <gtest/gtest.h>

namespace jobhost::host {
namespace {

using Status = CheckpointRecord::Status;

CheckpointRecord rec(uint64_t id, int64_t triggerTimeMs, Status status, bool savepoint = false) {
  CheckpointRecord r;
  r.id = id;
  r.triggerTimeMs = triggerTimeMs;
  r.status = status;
  r.savepoint = savepoint;
  return r;
}

TEST(CheckpointHistory, AnUpdateReplacesTheRecordWithTheSameIdAndTriggerTime) {
  CheckpointHistory h;
  h.record(rec(1, 100, Status::kInProgress));
  h.record(rec(2, 200, Status::kInProgress));
  CheckpointRecord done = rec(1, 100, Status::kCompleted);
  done.path = "/ck/job/chk-1";
  h.record(done);
  ASSERT_EQ(h.records().size(), 2u);
  EXPECT_EQ(h.records()[0].id, 1u);
  EXPECT_EQ(h.records()[0].status, Status::kCompleted);
  EXPECT_EQ(h.records()[0].path, "/ck/job/chk-1");
  EXPECT_EQ(h.records()[1].id, 2u);
}

TEST(CheckpointHistory, TheSameIdTriggeredAgainByALaterAttemptIsANewRecord) {
  CheckpointHistory h;
  h.record(rec(3, 100, Status::kFailed));
  h.record(rec(3, 900, Status::kCompleted));  // the next attempt restored chk-2 and took 3 again
  ASSERT_EQ(h.records().size(), 2u);
  EXPECT_EQ(h.records()[0].status, Status::kFailed);
  EXPECT_EQ(h.records()[1].status, Status::kCompleted);
  EXPECT_EQ(h.failed(), 1u);
  EXPECT_EQ(h.completed(), 1u);
}

TEST(CheckpointHistory, OnlyTheNewestLimitRecordsAreKeptOldestFirstAndTheirCountsStay) {
  CheckpointHistory h;
  const uint64_t n = CheckpointHistory::kLimit + 5;
  for (uint64_t id = 1; id <= n; ++id) h.record(rec(id, static_cast<int64_t>(id) * 10, Status::kCompleted));
  ASSERT_EQ(h.records().size(), CheckpointHistory::kLimit);
  EXPECT_EQ(h.records().front().id, 6u);
  EXPECT_EQ(h.records().back().id, n);
  EXPECT_EQ(h.completed(), n);
}

TEST(CheckpointHistory, ACheckpointIsCountedOncePerChangeOfStatusAndSavepointsNotAtAll) {
  CheckpointHistory h;
  h.record(rec(1, 100, Status::kInProgress));
  EXPECT_EQ(h.completed() + h.failed(), 0u);
  h.record(rec(1, 100, Status::kCompleted));
  h.record(rec(1, 100, Status::kCompleted));  // the same news twice (e.g. subsumed later)
  EXPECT_EQ(h.completed(), 1u);
  h.record(rec(2, 200, Status::kFailed));  // first seen already failed
  EXPECT_EQ(h.failed(), 1u);
  h.record(rec(7, 300, Status::kCompleted, /*savepoint=*/true));
  h.record(rec(8, 400, Status::kFailed, /*savepoint=*/true));
  EXPECT_EQ(h.completed(), 1u);
  EXPECT_EQ(h.failed(), 1u);
  EXPECT_EQ(h.records().size(), 4u) << "savepoints are kept in the history";
}

TEST(CheckpointHistory, FailingMarksTheNewestInProgressRecordWithItsReasonAndDuration) {
  CheckpointHistory h;
  h.record(rec(4, 1000, Status::kInProgress));
  auto r = h.fail(4, "declined by task 2: No space left on device", 1250);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, Status::kFailed);
  EXPECT_EQ(r->failureReason, "declined by task 2: No space left on device");
  EXPECT_EQ(r->durationMicros, 250000u);
  EXPECT_EQ(h.records().back().status, Status::kFailed);
  EXPECT_EQ(h.failed(), 1u);
  EXPECT_FALSE(h.fail(4, "again", 2000).has_value()) << "no longer in progress";
  EXPECT_FALSE(h.fail(9, "unknown", 2000).has_value());
  EXPECT_EQ(h.failed(), 1u);
}

TEST(CheckpointHistory, WhenAnAttemptEndsEveryInProgressRecordFails) {
  CheckpointHistory h;
  h.record(rec(1, 100, Status::kCompleted));
  h.record(rec(2, 200, Status::kInProgress));
  h.record(rec(5, 300, Status::kInProgress, /*savepoint=*/true));
  auto changed = h.failAllInProgress("the worker process ended", 300);
  ASSERT_EQ(changed.size(), 2u);
  EXPECT_EQ(changed[0].id, 2u);
  EXPECT_EQ(changed[1].id, 5u);
  EXPECT_EQ(changed[1].durationMicros, 0u) << "never negative";
  for (const auto& r : h.records()) EXPECT_NE(r.status, Status::kInProgress);
  EXPECT_EQ(h.records()[1].failureReason, "the worker process ended");
  EXPECT_EQ(h.failed(), 1u) << "the savepoint is not counted";
  EXPECT_EQ(h.completed(), 1u);
}

}  // namespace
}  // namespace jobhost::host
