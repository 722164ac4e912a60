// A task's input watermark. See the header for the rules (those of Flink's
// StatusWatermarkValve).
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
  if (c.ended || c.idle || watermark <= c.watermark) return std::nullopt;
  c.watermark = watermark;
  if (!c.aligned && watermark >= watermark_) c.aligned = true;
  return advanceToMinOfAligned();
}

std::optional<int64_t> WatermarkValve::onStatus(int channel, bool idle) {
  Channel& c = channels_.at(static_cast<size_t>(channel));
  if (c.ended || c.idle == idle) return std::nullopt;
  c.idle = idle;
  if (!idle) {
    c.aligned = c.watermark >= watermark_;
    idle_ = false;
    return std::nullopt;
  }
  const bool wasAligned = c.aligned;
  c.aligned = false;
  const bool allIdle = std::all_of(channels_.begin(), channels_.end(), [](const Channel& x) { return x.ended || x.idle; });
  if (allIdle) {
    idle_ = true;
    return advanceToMaxOfAll();
  }
  // The slowest channel went idle: the others may allow more.
  if (wasAligned && c.watermark == watermark_) return advanceToMinOfAligned();
  return std::nullopt;
}

std::optional<int64_t> WatermarkValve::onEnd(int channel) {
  Channel& c = channels_.at(static_cast<size_t>(channel));
  if (c.ended) return std::nullopt;
  c.ended = true;
  c.idle = false;
  c.aligned = true;
  c.watermark = kMaxWatermark;
  // An input whose other channels are all idle stays idle; an ended channel does not
  // make it active.
  idle_ = std::all_of(channels_.begin(), channels_.end(), [](const Channel& x) { return x.ended || x.idle; }) &&
          std::any_of(channels_.begin(), channels_.end(), [](const Channel& x) { return !x.ended; });
  if (idle_) return advanceToMaxOfAll();
  return advanceToMinOfAligned();
}

std::optional<int64_t> WatermarkValve::advanceToMinOfAligned() {
  int64_t min = kMaxWatermark;
  bool any = false;
  for (const Channel& c : channels_) {
    if (c.idle || !c.aligned) continue;
    any = true;
    min = std::min(min, c.watermark);
  }
  if (!any || min <= watermark_) return std::nullopt;
  watermark_ = min;
  return min;
}

std::optional<int64_t> WatermarkValve::advanceToMaxOfAll() {
  int64_t max = kMinWatermark;
  for (const Channel& c : channels_)
    if (!c.ended) max = std::max(max, c.watermark);
  if (max <= watermark_) return std::nullopt;
  watermark_ = max;
  return max;
}

}  // namespace jobhost::host
