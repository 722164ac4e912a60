// host/wall_clock.h — the wall clock in milliseconds since the epoch: what checkpoints,
// leases, outages and the dashboard print and compare across processes.
#pragma once

#include <chrono>
#include <cstdint>

namespace jobhost::host {

inline int64_t wallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace jobhost::host
