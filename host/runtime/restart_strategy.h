// host/runtime/restart_strategy.h — Flink's restart strategies: none, fixed-delay,
// failure-rate, exponential-delay, configured by the restart-strategy.* keys.
//
// Thread-safety: not thread-safe; used by the job runner's thread.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>

#include "config/configuration.h"

namespace jobhost::host {

class RestartStrategy {
 public:
  virtual ~RestartStrategy() = default;
  /// Records a failure now; true if the job may restart, then `delay` is the pause.
  virtual bool onFailure(std::chrono::milliseconds* delay) = 0;
  /// E.g. "FixedDelayRestartStrategy(maxAttempts=3, delay=2 s)".
  virtual std::string describe() const = 0;
};

/// Throws ConfigError for an unknown type or a bad value.
std::unique_ptr<RestartStrategy> createRestartStrategy(const Configuration& config);

}  // namespace jobhost::host
