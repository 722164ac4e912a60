// Barrier alignment bookkeeping. See the header for the rules.
#include "runtime/barrier_aligner.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace jobhost::host {

BarrierAligner::BarrierAligner(int channels) {
  if (channels < 1) throw std::invalid_argument("BarrierAligner needs at least one channel, got " + std::to_string(channels));
  blocked_.assign(static_cast<size_t>(channels), false);
  arrived_.assign(static_cast<size_t>(channels), false);
  ended_.assign(static_cast<size_t>(channels), false);
}

bool BarrierAligner::accept(int channel, uint64_t checkpointId, bool unaligned) {
  auto c = static_cast<size_t>(channel);
  if (ended_[c]) return false;  // nothing arrives after an end marker
  if (checkpointId < newest_ || (checkpointId == newest_ && !inProgress_)) return false;  // stale
  if (checkpointId > newest_) {
    // A newer checkpoint: the unfinished alignment (if any) is abandoned.
    unblockLive();
    newest_ = checkpointId;
    inProgress_ = true;
    unaligned_ = unaligned;
    alignmentStart_ = std::chrono::steady_clock::now();
  }
  arrived_[c] = true;
  blocked_[c] = !unaligned_;
  return true;
}

std::optional<uint64_t> BarrierAligner::onBarrier(int channel, uint64_t checkpointId) {
  if (!accept(channel, checkpointId, false)) return std::nullopt;
  return maybeComplete();
}

BarrierAligner::UnalignedStep BarrierAligner::onUnalignedBarrier(int channel, uint64_t checkpointId,
                                                                 std::chrono::steady_clock::time_point arrived) {
  UnalignedStep step;
  const bool first = checkpointId > newest_;
  // The checkpoint being aligned turned unaligned (aligned checkpoint timeout): the
  // channels that delivered it stay arrived and are read again; the task snapshots now.
  const bool switched = checkpointId == newest_ && inProgress_ && !unaligned_ && !ended_[static_cast<size_t>(channel)];
  if (switched) {
    unaligned_ = true;
    for (size_t c = 0; c < blocked_.size(); ++c) blocked_[c] = ended_[c];
    lastArrival_ = alignmentStart_;
  }
  if (!accept(channel, checkpointId, true)) return step;
  if (arrived == std::chrono::steady_clock::time_point{}) arrived = std::chrono::steady_clock::now();
  if (first || arrived < alignmentStart_) alignmentStart_ = arrived;
  if (first || arrived > lastArrival_) lastArrival_ = arrived;
  step.accepted = checkpointId;
  if (first || switched) step.snapshot = checkpointId;
  if (auto done = maybeComplete()) step.complete = *done;
  return step;
}

std::optional<uint64_t> BarrierAligner::onEndOfChannel(int channel) {
  auto c = static_cast<size_t>(channel);
  if (ended_[c]) return std::nullopt;
  ended_[c] = true;
  blocked_[c] = true;
  arrived_[c] = true;
  ++endedCount_;
  if (inProgress_ && unaligned_) lastArrival_ = std::chrono::steady_clock::now();
  return maybeComplete();
}

std::optional<uint64_t> BarrierAligner::maybeComplete() {
  if (!inProgress_) return std::nullopt;
  for (size_t c = 0; c < arrived_.size(); ++c)
    if (!arrived_[c]) return std::nullopt;  // a live channel has not delivered the barrier
  inProgress_ = false;
  lastUnaligned_ = unaligned_;
  unblockLive();
  const auto end = unaligned_ ? lastArrival_ : std::chrono::steady_clock::now();
  lastAlignmentMicros_ = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::max(end, alignmentStart_) - alignmentStart_).count());
  return newest_;
}

void BarrierAligner::unblockLive() {
  for (size_t c = 0; c < blocked_.size(); ++c) blocked_[c] = arrived_[c] = ended_[c];
}

}  // namespace jobhost::host
