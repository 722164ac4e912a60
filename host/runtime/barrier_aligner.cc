// Barrier alignment bookkeeping. See the header for the rules.
#include "runtime/barrier_aligner.h"

#include <stdexcept>
#include <string>

namespace jobhost::host {

BarrierAligner::BarrierAligner(int channels) {
  if (channels < 1) throw std::invalid_argument("BarrierAligner needs at least one channel, got " + std::to_string(channels));
  blocked_.assign(static_cast<size_t>(channels), false);
  ended_.assign(static_cast<size_t>(channels), false);
}

std::optional<uint64_t> BarrierAligner::onBarrier(int channel, uint64_t checkpointId) {
  auto c = static_cast<size_t>(channel);
  if (ended_[c]) return std::nullopt;  // nothing arrives after an end marker
  if (checkpointId < newest_ || (checkpointId == newest_ && !inProgress_)) return std::nullopt;  // stale
  if (checkpointId > newest_) {
    // A newer checkpoint: the unfinished alignment (if any) is abandoned.
    unblockLive();
    newest_ = checkpointId;
    inProgress_ = true;
    alignmentStart_ = std::chrono::steady_clock::now();
  }
  blocked_[c] = true;
  return maybeComplete();
}

std::optional<uint64_t> BarrierAligner::onEndOfChannel(int channel) {
  auto c = static_cast<size_t>(channel);
  if (ended_[c]) return std::nullopt;
  ended_[c] = true;
  blocked_[c] = true;
  ++endedCount_;
  return maybeComplete();
}

std::optional<uint64_t> BarrierAligner::maybeComplete() {
  if (!inProgress_) return std::nullopt;
  for (size_t c = 0; c < blocked_.size(); ++c)
    if (!blocked_[c]) return std::nullopt;  // a live channel has not delivered the barrier
  inProgress_ = false;
  unblockLive();
  lastAlignmentMicros_ = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - alignmentStart_).count());
  return newest_;
}

void BarrierAligner::unblockLive() {
  for (size_t c = 0; c < blocked_.size(); ++c) blocked_[c] = ended_[c];
}

}  // namespace jobhost::host
