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

  /// `channel` delivered its end marker. Returns the checkpoint whose alignment this
  /// completes (the other live channels had all delivered its barrier), else nullopt.
  std::optional<uint64_t> onEndOfChannel(int channel);

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

  std::vector<bool> blocked_;
  std::vector<bool> ended_;
  int endedCount_ = 0;
  uint64_t newest_ = 0;      // the newest barrier seen on any channel
  bool inProgress_ = false;  // newest_ is being aligned
  std::chrono::steady_clock::time_point alignmentStart_{};
  uint64_t lastAlignmentMicros_ = 0;
};

}  // namespace jobhost::host
