// Unit tests for host/runtime/barrier_aligner: barrier alignment driven directly, event by
// event, as a task's input loop drives it.
#include "runtime/barrier_aligner.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace jobhost::host {
namespace {

std::vector<bool> blockedOf(std::initializer_list<bool> b) { return b; }

TEST(BarrierAlignerTest, OneChannelAlignsOnItsBarrierAndStaysOpen) {
  BarrierAligner a(1);
  EXPECT_EQ(a.onBarrier(0, 1), std::optional<uint64_t>(1));
  EXPECT_EQ(a.blocked(), blockedOf({false}));
  EXPECT_EQ(a.aligning(), 0u);
  EXPECT_EQ(a.onBarrier(0, 2), std::optional<uint64_t>(2));
}

TEST(BarrierAlignerTest, ACheckpointAlignsOnlyOnceEveryChannelDeliveredItsBarrier) {
  BarrierAligner a(3);
  EXPECT_EQ(a.onBarrier(1, 5), std::nullopt);
  EXPECT_EQ(a.blocked(), blockedOf({false, true, false}));  // records behind the barrier wait
  EXPECT_EQ(a.aligning(), 5u);
  EXPECT_EQ(a.onBarrier(0, 5), std::nullopt);
  EXPECT_EQ(a.blocked(), blockedOf({true, true, false}));
  EXPECT_EQ(a.onBarrier(2, 5), std::optional<uint64_t>(5));
  EXPECT_EQ(a.blocked(), blockedOf({false, false, false}));  // all channels open again
  EXPECT_EQ(a.aligning(), 0u);
}

TEST(BarrierAlignerTest, AnEndedChannelCountsAsAlignedAndStaysBlocked) {
  BarrierAligner a(3);
  EXPECT_EQ(a.onEndOfChannel(2), std::nullopt);
  EXPECT_EQ(a.blocked(), blockedOf({false, false, true}));
  EXPECT_EQ(a.onBarrier(0, 1), std::nullopt);
  EXPECT_EQ(a.onBarrier(1, 1), std::optional<uint64_t>(1));
  EXPECT_EQ(a.blocked(), blockedOf({false, false, true}));
  EXPECT_FALSE(a.allEnded());
}

TEST(BarrierAlignerTest, AChannelEndingWhileTheOthersWaitCompletesTheAlignment) {
  BarrierAligner a(3);
  EXPECT_EQ(a.onBarrier(0, 4), std::nullopt);
  EXPECT_EQ(a.onBarrier(1, 4), std::nullopt);
  EXPECT_EQ(a.onEndOfChannel(2), std::optional<uint64_t>(4));
  EXPECT_EQ(a.blocked(), blockedOf({false, false, true}));
}

TEST(BarrierAlignerTest, AllChannelsEndedIsReportedAndCompletesNothing) {
  BarrierAligner a(2);
  EXPECT_EQ(a.onEndOfChannel(0), std::nullopt);
  EXPECT_FALSE(a.allEnded());
  EXPECT_EQ(a.onEndOfChannel(1), std::nullopt);
  EXPECT_TRUE(a.allEnded());
  EXPECT_EQ(a.onEndOfChannel(1), std::nullopt);  // a repeated end marker changes nothing
  EXPECT_TRUE(a.allEnded());
}

TEST(BarrierAlignerTest, ANewerBarrierAbandonsTheUnfinishedAlignment) {
  // Checkpoint 3 was aborted before source 1 emitted its barrier: channel 1 goes
  // straight to 4. Channel 0's records must not stay blocked behind barrier 3.
  BarrierAligner a(2);
  EXPECT_EQ(a.onBarrier(0, 3), std::nullopt);
  EXPECT_EQ(a.onBarrier(1, 4), std::nullopt);
  EXPECT_EQ(a.aligning(), 4u);
  EXPECT_EQ(a.blocked(), blockedOf({false, true}));  // channel 0 open again, 1 waits for 4
  EXPECT_EQ(a.onBarrier(0, 4), std::optional<uint64_t>(4));
  EXPECT_EQ(a.blocked(), blockedOf({false, false}));
}

TEST(BarrierAlignerTest, AStaleBarrierOfAnAbandonedCheckpointIsIgnored) {
  BarrierAligner a(2);
  EXPECT_EQ(a.onBarrier(0, 4), std::nullopt);
  EXPECT_EQ(a.onBarrier(1, 3), std::nullopt);  // late barrier of an abandoned checkpoint
  EXPECT_EQ(a.blocked(), blockedOf({true, false}));
  EXPECT_EQ(a.aligning(), 4u);
  EXPECT_EQ(a.onBarrier(1, 4), std::optional<uint64_t>(4));
  // After 4 completed, a barrier of 4 or older changes nothing.
  EXPECT_EQ(a.onBarrier(0, 4), std::nullopt);
  EXPECT_EQ(a.onBarrier(0, 2), std::nullopt);
  EXPECT_EQ(a.blocked(), blockedOf({false, false}));
  EXPECT_EQ(a.aligning(), 0u);
}

TEST(BarrierAlignerTest, ConsecutiveCheckpointsAlignIndependently) {
  BarrierAligner a(2);
  for (uint64_t id = 1; id <= 5; ++id) {
    SCOPED_TRACE(id);
    int first = static_cast<int>(id % 2);  // the faster channel alternates
    EXPECT_EQ(a.onBarrier(first, id), std::nullopt);
    EXPECT_EQ(a.onBarrier(1 - first, id), std::optional<uint64_t>(id));
  }
}

TEST(BarrierAlignerTest, AnAbandonedAlignmentWithAnEndedChannelKeepsThatChannelBlocked) {
  BarrierAligner a(3);
  EXPECT_EQ(a.onEndOfChannel(2), std::nullopt);
  EXPECT_EQ(a.onBarrier(0, 7), std::nullopt);
  EXPECT_EQ(a.onBarrier(1, 8), std::nullopt);  // abandons 7
  EXPECT_EQ(a.blocked(), blockedOf({false, true, true}));
  EXPECT_EQ(a.onBarrier(0, 8), std::optional<uint64_t>(8));
  EXPECT_EQ(a.blocked(), blockedOf({false, false, true}));
}

// Unaligned checkpoints

TEST(BarrierAlignerTest, AnUnalignedCheckpointSnapshotsAtItsFirstBarrierBlocksNothingAndRecordsTheLateChannels) {
  BarrierAligner a(3);
  auto s = a.onUnalignedBarrier(1, 5);
  EXPECT_EQ(s.snapshot, 5u);
  EXPECT_EQ(s.accepted, 5u);
  EXPECT_EQ(s.complete, 0u);
  EXPECT_EQ(a.blocked(), blockedOf({false, false, false}));  // nothing waits
  EXPECT_TRUE(a.recording(0));
  EXPECT_FALSE(a.recording(1));  // its barrier came: what follows is after the snapshot
  EXPECT_TRUE(a.recording(2));
  s = a.onUnalignedBarrier(0, 5);
  EXPECT_EQ(s.snapshot, 0u);
  EXPECT_EQ(s.accepted, 5u);
  EXPECT_FALSE(a.recording(0));
  EXPECT_EQ(a.onEndOfChannel(2), std::optional<uint64_t>(5));  // the last live channel ended
  EXPECT_TRUE(a.lastCompletedUnaligned());
  EXPECT_FALSE(a.recording(0));
}

// Aligned checkpoint timeout (channel.h): the gate turned the late barriers of the
// checkpoint being aligned unaligned; the first of them switches the alignment.
TEST(BarrierAlignerTest, AnUnalignedBarrierOfTheCheckpointBeingAlignedSwitchesItToUnaligned) {
  BarrierAligner a(3);
  EXPECT_EQ(a.onBarrier(0, 4), std::nullopt);  // aligned: channel 0 waits
  EXPECT_EQ(a.blocked(), blockedOf({true, false, false}));
  auto s = a.onUnalignedBarrier(1, 4);
  EXPECT_EQ(s.snapshot, 4u) << "no snapshot was taken for the aligned barrier: take it now";
  EXPECT_EQ(s.accepted, 4u);
  EXPECT_EQ(s.complete, 0u);
  EXPECT_EQ(a.blocked(), blockedOf({false, false, false})) << "nothing waits any more";
  EXPECT_FALSE(a.recording(0)) << "what follows its aligned barrier is after the snapshot";
  EXPECT_FALSE(a.recording(1));
  EXPECT_TRUE(a.recording(2)) << "sent before its barrier, taken after the snapshot";
  s = a.onUnalignedBarrier(2, 4);
  EXPECT_EQ(s.snapshot, 0u);
  EXPECT_EQ(s.complete, 4u);
  EXPECT_TRUE(a.lastCompletedUnaligned());
  // The next checkpoint starts aligned again.
  EXPECT_EQ(a.onBarrier(2, 5), std::nullopt);
  EXPECT_EQ(a.blocked(), blockedOf({false, false, true}));
}

TEST(BarrierAlignerTest, OneChannelTakesAnUnalignedSnapshotAndCompletesAtOnce) {
  BarrierAligner a(1);
  auto s = a.onUnalignedBarrier(0, 2);
  EXPECT_EQ(s.snapshot, 2u);
  EXPECT_EQ(s.complete, 2u);
  EXPECT_FALSE(a.recording(0));
  s = a.onUnalignedBarrier(0, 2);  // stale
  EXPECT_EQ(s.accepted, 0u);
  EXPECT_EQ(s.snapshot, 0u);
}

TEST(BarrierAlignerTest, ANewerBarrierAbandonsAnUnalignedCheckpointAndAnAlignedOneAfterItBlocksAgain) {
  BarrierAligner a(2);
  EXPECT_EQ(a.onUnalignedBarrier(0, 3).snapshot, 3u);
  auto s = a.onUnalignedBarrier(1, 4);
  EXPECT_EQ(s.snapshot, 4u);  // checkpoint 3 is given up: the task drops its channel state
  EXPECT_EQ(s.complete, 0u);
  EXPECT_TRUE(a.recording(0));
  EXPECT_EQ(a.onUnalignedBarrier(0, 3).accepted, 0u);  // the abandoned one's late barrier is stale
  EXPECT_EQ(a.onUnalignedBarrier(0, 4).complete, 4u);
  // A savepoint after it is aligned: its barrier blocks its channel.
  EXPECT_EQ(a.onBarrier(0, 5), std::nullopt);
  EXPECT_EQ(a.blocked(), blockedOf({true, false}));
  EXPECT_FALSE(a.recording(1));
  EXPECT_EQ(a.onBarrier(1, 5), std::optional<uint64_t>(5));
  EXPECT_FALSE(a.lastCompletedUnaligned());
}

TEST(BarrierAlignerTest, ZeroChannelsIsRefused) { EXPECT_THROW(BarrierAligner(0), std::invalid_argument); }

}  // namespace
}  // namespace jobhost::host
