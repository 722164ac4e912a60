// Waiting out an unavailable checkpoint store: see store_outage.h.
#include "checkpoint/store_outage.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "config/units.h"
#include "wall_clock.h"

namespace jobhost::host {

namespace {
}  // namespace

StoreOutage::StoreOutage(std::chrono::milliseconds initial, std::chrono::milliseconds max, std::string subject)
    : initial_(initial), max_(std::max(initial, max)), subject_(std::move(subject)), next_(initial),
      rng_(std::random_device{}()) {}

std::chrono::milliseconds StoreOutage::failed(const state::Status& s, const std::string& what) {
  if (sinceMs_ == 0) {
    sinceMs_ = wallClockMs();
    waitingFor_ = s.isNoSpace() ? "free space on the local disk" : subject_;
    spdlog::warn("{} failed: {}; the job waits for {} and tries again ({} since {}, not counted by the restart "
                 "strategy)",
                 what, s.toString(), waitingFor_, s.isNoSpace() ? "full" : "unavailable", formatLocalTime(sinceMs_));
  } else {
    spdlog::info("{} failed again (waiting for {} since {}, {} tries): {}", what, waitingFor_,
                 formatLocalTime(sinceMs_), failures_ + 1, s.toString());
  }
  ++failures_;
  auto pause = next_;
  next_ = std::min(max_, next_ * 2);
  auto lo = pause.count() / 2;
  return std::chrono::milliseconds(std::uniform_int_distribution<long long>(lo, std::max<long long>(lo, pause.count()))(rng_));
}

void StoreOutage::recovered() {
  if (sinceMs_ == 0) return;
  spdlog::info("{} after {} ({} failed tries)",
               waitingFor_ == subject_ ? subject_ + " answers again" : "there is " + waitingFor_ + " again",
               formatDuration(std::chrono::milliseconds(wallClockMs() - sinceMs_)), failures_);
  sinceMs_ = 0;
  failures_ = 0;
  next_ = initial_;
}

}  // namespace jobhost::host
