// host/runtime/watermark_valve.h — a task's input watermark from its channels' watermarks
// and idle status (Flink's StatusWatermarkValve).
//
// Rules:
//  - Each channel's watermark only advances; an older one is ignored.
//  - The input watermark is the minimum over the channels that are neither idle nor
//    ended, and never goes back. A channel that delivers a watermark is active again.
//  - An ended channel delivers nothing more and counts as kMaxWatermark; once every
//    channel has ended the input watermark is kMaxWatermark.
//  - When every channel that has not ended is idle, the input is idle: its watermark
//    stays where it was (downstream tasks then stop waiting for this task).
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
  std::optional<int64_t> recompute();
  struct Channel {
    int64_t watermark;
    bool idle = false;
    bool ended = false;
  };
  std::vector<Channel> channels_;
  int64_t watermark_;
  bool idle_ = false;
};

}  // namespace jobhost::host
