// host/runtime/barrier_aligner.h — checkpoint barrier alignment over a task's input
// channels (Flink's CheckpointBarrierHandler, aligned mode).
//
// A task with several input channels may snapshot checkpoint N only once every channel
// has delivered N's barrier: records behind the barrier on a channel belong after the
// snapshot, so a channel is blocked (not read) from its barrier until the alignment
// completes. The aligner is the bookkeeping of that rule; it reads no channel and
// snapshots nothing. The task feeds it every barrier and end-of-channel it takes from
// its InputGate, reads only from channels that blocked() leaves open, and acts on a
// completed alignment.
//
// Rules:
//  - An ended channel counts as aligned for every checkpoint: it delivers nothing more.
//  - A barrier newer than the one being aligned abandons that alignment (its checkpoint
//    was aborted, so some upstream task never emitted it): every channel is unblocked
//    and the newer checkpoint is aligned instead. The abandoned checkpoint completes
//    nowhere downstream either: downstream tasks see the newer barrier and abandon it too.
//  - A barrier older than the newest one seen is stale (a channel that still delivers
//    the barrier of an abandoned checkpoint) and is ignored.
//  - A completed alignment unblocks every channel that has not ended. The task must then
//    forward the barrier downstream whatever it does with the checkpoint itself — also
//    when the checkpoint was withdrawn meanwhile: a downstream task with several inputs
//    aligns on it, and a missing barrier would block its channels for good.
//
// Unaligned checkpoints (onUnalignedBarrier): the barrier of an unaligned checkpoint
// blocks no channel. The task snapshots at its first barrier (`snapshot`), records the
// data it then takes from channels whose barrier has not arrived yet (recording()), and
// the checkpoint's channel state is complete once every live channel has delivered the
// barrier or ended (`complete`). The abandonment rules above hold for both kinds; the
// task drops what it recorded for a checkpoint when a newer barrier of either kind
// arrives (StreamTask::onBarrierEvent).
//
// Aligned checkpoint timeout (channel.h): an unaligned barrier of the checkpoint being
// aligned switches it to unaligned: every live channel is unblocked, those that delivered
// the aligned barrier count as arrived (what follows their barrier is after the
// snapshot), and the step says to snapshot now.
//
// Thread-safety: not thread-safe; owned and used by one task thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

namespace jobhost::host {

class BarrierAligner {
 public:
  /// `channels` >= 1: the number of input channels of the task's gate.
  explicit BarrierAligner(int channels);

  /// The barrier of `checkpointId` arrived on `channel`. Returns `checkpointId` when
  /// this completes its alignment (every channel that has not ended has delivered it),
  /// nullopt otherwise (still waiting, or a stale barrier that was ignored).
  std::optional<uint64_t> onBarrier(int channel, uint64_t checkpointId);

  /// What an unaligned barrier means for the task. Each field is a checkpoint id, 0 for
  /// nothing; several may be set at once (a task with one channel: snapshot and complete).
  struct UnalignedStep {
    uint64_t snapshot = 0;   // the first barrier of this checkpoint: snapshot now
    uint64_t accepted = 0;   // the barrier counts (not stale): its overtaken data belongs to the channel state
    uint64_t complete = 0;   // every live channel delivered it: the channel state is complete
  };
  /// The barrier of unaligned checkpoint `checkpointId` arrived on `channel`; `arrived`:
  /// when it reached the task's input (InputGate), default now. Its alignment time is
  /// from the first barrier's arrival to the last's: no channel waits meanwhile, and the
  /// task's own snapshot in between does not count.
  UnalignedStep onUnalignedBarrier(int channel, uint64_t checkpointId,
                                   std::chrono::steady_clock::time_point arrived = {});

  /// `channel` delivered its end marker. Returns the checkpoint whose alignment this
  /// completes (the other live channels had all delivered its barrier), else nullopt;
  /// for an unaligned checkpoint (lastCompletedUnaligned()) its channel state is complete.
  std::optional<uint64_t> onEndOfChannel(int channel);

  /// Whether the checkpoint onBarrier/onEndOfChannel last reported complete was unaligned.
  bool lastCompletedUnaligned() const { return lastUnaligned_; }

  /// True while data taken from `channel` belongs to the channel state of the unaligned
  /// checkpoint in progress (its snapshot is taken, its barrier has not arrived there).
  bool recording(int channel) const {
    return inProgress_ && unaligned_ && !arrived_[static_cast<size_t>(channel)];
  }

  /// Per channel: true while the task must not read from it (its barrier arrived and
  /// the alignment is not complete, or it has ended). Index = channel.
  const std::vector<bool>& blocked() const { return blocked_; }

  /// True once every channel has ended.
  bool allEnded() const { return endedCount_ == static_cast<int>(ended_.size()); }

  /// The checkpoint being aligned, or 0 when no alignment is in progress.
  uint64_t aligning() const { return inProgress_ ? newest_ : 0; }

  /// How long the last completed alignment took: from the first barrier of its
  /// checkpoint to the last (0 for a task with one channel, or one whose other channels
  /// had ended).
  uint64_t lastAlignmentMicros() const { return lastAlignmentMicros_; }

  int channels() const { return static_cast<int>(ended_.size()); }

 private:
  /// Completes the alignment in progress if every live channel is blocked.
  std::optional<uint64_t> maybeComplete();
  void unblockLive();

  /// A barrier of checkpoint newest_ (a newer one than in progress: abandons it).
  /// Returns false for a stale barrier.
  bool accept(int channel, uint64_t checkpointId, bool unaligned);

  std::vector<bool> blocked_;
  std::vector<bool> arrived_;  // the barrier of newest_ arrived, or the channel ended
  std::vector<bool> ended_;
  bool unaligned_ = false;     // newest_ is an unaligned checkpoint
  bool lastUnaligned_ = false;
  int endedCount_ = 0;
  uint64_t newest_ = 0;      // the newest barrier seen on any channel
  bool inProgress_ = false;  // newest_ is being aligned
  std::chrono::steady_clock::time_point alignmentStart_{};
  std::chrono::steady_clock::time_point lastArrival_{};  // unaligned: the latest barrier's arrival
  uint64_t lastAlignmentMicros_ = 0;
};

}  // namespace jobhost::host
