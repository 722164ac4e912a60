#include "runtime/buffer_debloat.h"

#include <algorithm>

namespace jobhost::host {

bool BufferDebloater::onPeriod(uint64_t bytes, std::chrono::nanoseconds busy, std::chrono::nanoseconds idle) {
  if (!enabled() || busy < std::chrono::milliseconds(1)) return false;
  const double sample = static_cast<double>(bytes) / std::chrono::duration<double>(busy).count();
  const double idleSample = std::chrono::duration<double>(std::max(idle, std::chrono::nanoseconds(0))).count() /
                            std::chrono::duration<double>(busy + std::max(idle, std::chrono::nanoseconds(0))).count();
  // Exponential moving averages: a period with a pause (a checkpoint's synchronous part,
  // a compaction stall) lowers the rate but does not collapse the channel at once.
  const bool first = rate_ == 0;
  rate_ = first ? sample : rate_ + 0.3 * (sample - rate_);
  idleShare_ = first ? idleSample : idleShare_ + 0.3 * (idleSample - idleShare_);
  const double most = static_cast<double>(idleShare_ >= kKeepsUpIdleShare ? mostChannelBytes_ : kMaxChannelBytes);
  const double wanted = rate_ * std::chrono::duration<double>(options_.target).count();
  const size_t bytesNow = static_cast<size_t>(std::clamp(wanted, static_cast<double>(kMinChannelBytes), most));
  // Ignore changes under 10 %: they move the producers' buffer size for nothing.
  const size_t diff = bytesNow > channelBytes_ ? bytesNow - channelBytes_ : channelBytes_ - bytesNow;
  if (diff * 10 < channelBytes_) return false;
  channelBytes_ = bytesNow;
  return true;
}

size_t BufferDebloater::bufferBytes() const {
  return std::clamp(channelBytes_ / 4, kMinBufferBytes, kMaxBufferBytes);
}

}  // namespace jobhost::host
