#include "runtime/buffer_debloat.h"

#include <algorithm>

namespace jobhost::host {

bool BufferDebloater::onPeriod(uint64_t bytes, std::chrono::nanoseconds busy) {
  if (!enabled() || busy < std::chrono::milliseconds(1)) return false;
  const double sample = static_cast<double>(bytes) / std::chrono::duration<double>(busy).count();
  // An exponential moving average: a period with a pause (a checkpoint's synchronous
  // part, a compaction stall) lowers the rate but does not collapse the channel at once.
  rate_ = rate_ == 0 ? sample : rate_ + 0.3 * (sample - rate_);
  const double wanted = rate_ * std::chrono::duration<double>(options_.target).count();
  const size_t bytesNow = static_cast<size_t>(
      std::clamp(wanted, static_cast<double>(kMinChannelBytes), static_cast<double>(kMaxChannelBytes)));
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
