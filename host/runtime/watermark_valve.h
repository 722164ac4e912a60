// host/runtime/watermark_valve.h — a task's input watermark from its channels' watermarks
// and idle status, as Flink's StatusWatermarkValve.
//
// Rules:
//  - Each channel's watermark only advances; an older one is ignored, and so is a
//    watermark that arrives on an idle channel (a producer announces that it is active
//    again before it sends anything).
//  - The input watermark is the minimum over the channels that are active and aligned,
//    and never goes back. A channel that turns active again with a watermark behind the
//    input watermark is not aligned — it does not hold the input back — until its
//    watermark catches up.
//  - When the last active channel goes idle, the input is idle, and its watermark jumps
//    to the maximum over all channels (nothing waits for an input that produces nothing).
//  - An ended channel delivers nothing more and counts as active, aligned, at
//    kMaxWatermark; once every channel has ended the input watermark is kMaxWatermark.
//
// Thread-safety: not thread-safe; owned and used by one task thread.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace jobhost::host {

class WatermarkValve {
 public:
  explicit WatermarkValve(int channels);

  /// Each returns the new input watermark when it advanced, else nullopt.
  std::optional<int64_t> onWatermark(int channel, int64_t watermark);
  std::optional<int64_t> onStatus(int channel, bool idle);
  std::optional<int64_t> onEnd(int channel);

  int64_t watermark() const { return watermark_; }
  /// Every channel that has not ended is idle (and at least one has not ended).
  bool idle() const { return idle_; }

 private:
  /// The minimum over active aligned channels, if it is above the input watermark.
  std::optional<int64_t> advanceToMinOfAligned();
  /// The maximum over all channels, if it is above the input watermark.
  std::optional<int64_t> advanceToMaxOfAll();
  struct Channel {
    int64_t watermark;
    bool idle = false;
    bool aligned = true;
    bool ended = false;
  };
  std::vector<Channel> channels_;
  int64_t watermark_;
  bool idle_ = false;
};

}  // namespace jobhost::host
