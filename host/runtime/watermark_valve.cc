// A task's input watermark. See the header for the rules.
#include "runtime/watermark_valve.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "jobhost/operator.h"

namespace jobhost::host {

WatermarkValve::WatermarkValve(int channels) : watermark_(kMinWatermark) {
  if (channels < 1) throw std::invalid_argument("WatermarkValve needs at least one channel, got " + std::to_string(channels));
  channels_.assign(static_cast<size_t>(channels), Channel{kMinWatermark});
}

std::optional<int64_t> WatermarkValve::onWatermark(int channel, int64_t watermark) {
  Channel& c = channels_.at(static_cast<size_t>(channel));
  if (c.ended) return std::nullopt;
  c.idle = false;
  c.watermark = std::max(c.watermark, watermark);
  return recompute();
}

std::optional<int64_t> WatermarkValve::onStatus(int channel, bool idle) {
  Channel& c = channels_.at(static_cast<size_t>(channel));
  if (c.ended) return std::nullopt;
  c.idle = idle;
  return recompute();
}

std::optional<int64_t> WatermarkValve::onEnd(int channel) {
  Channel& c = channels_.at(static_cast<size_t>(channel));
  if (c.ended) return std::nullopt;
  c.ended = true;
  c.idle = false;
  c.watermark = kMaxWatermark;
  return recompute();
}

std::optional<int64_t> WatermarkValve::recompute() {
  int64_t min = kMaxWatermark;
  bool anyLive = false, anyActive = false;
  for (const Channel& c : channels_) {
    if (c.ended) continue;
    anyLive = true;
    if (c.idle) continue;
    anyActive = true;
    min = std::min(min, c.watermark);
  }
  idle_ = anyLive && !anyActive;
  if (idle_) return std::nullopt;
  if (min <= watermark_) return std::nullopt;
  watermark_ = min;
  return min;
}

}  // namespace jobhost::host
