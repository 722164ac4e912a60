#include "runtime/restart_strategy.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "config/units.h"

namespace jobhost::host {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

class NoRestart : public RestartStrategy {
 public:
  bool onFailure(milliseconds*) override { return false; }
  std::string describe() const override { return "NoRestartStrategy"; }
};

class FixedDelay : public RestartStrategy {
 public:
  FixedDelay(int64_t attempts, milliseconds delay) : attempts_(attempts), delay_(delay) {}
  bool onFailure(milliseconds* delay) override {
    if (used_ >= attempts_) return false;
    ++used_;
    *delay = delay_;
    return true;
  }
  std::string describe() const override {
    return "FixedDelayRestartStrategy(maxAttempts=" + std::to_string(attempts_) + ", delay=" + formatDuration(delay_) + ")";
  }

 private:
  int64_t attempts_, used_ = 0;
  milliseconds delay_;
};

class FailureRate : public RestartStrategy {
 public:
  FailureRate(int64_t max, milliseconds interval, milliseconds delay) : max_(max), interval_(interval), delay_(delay) {}
  bool onFailure(milliseconds* delay) override {
    auto now = Clock::now();
    failures_.push_back(now);
    while (!failures_.empty() && now - failures_.front() > interval_) failures_.pop_front();
    if (static_cast<int64_t>(failures_.size()) > max_) return false;
    *delay = delay_;
    return true;
  }
  std::string describe() const override {
    return "FailureRateRestartStrategy(maxFailuresPerInterval=" + std::to_string(max_) +
           ", interval=" + formatDuration(interval_) + ", delay=" + formatDuration(delay_) + ")";
  }

 private:
  int64_t max_;
  milliseconds interval_, delay_;
  std::deque<Clock::time_point> failures_;
};

// Flink's ExponentialDelayRestartBackoffTimeStrategy: the pause grows by the multiplier
// up to the maximum; a failure after `resetThreshold` without one starts over at the
// initial pause (and the attempt count with it); each pause is jittered by +-jitter.
class ExponentialDelay : public RestartStrategy {
 public:
  ExponentialDelay(milliseconds initial, milliseconds max, double mult, int64_t attempts, milliseconds resetThreshold,
                   double jitter)
      : initial_(initial), max_(max), mult_(mult), attempts_(attempts), resetThreshold_(resetThreshold),
        jitter_(jitter), next_(std::min(initial, max)), rng_(std::random_device{}()) {}
  bool onFailure(milliseconds* delay) override {
    const auto now = Clock::now();
    if (lastFailure_ && now - *lastFailure_ >= resetThreshold_) {
      next_ = std::min(initial_, max_);
      used_ = 0;
    }
    lastFailure_ = now;
    if (used_ >= attempts_) return false;
    ++used_;
    double pause = static_cast<double>(next_.count());
    if (jitter_ > 0) pause *= std::uniform_real_distribution<double>(1 - jitter_, 1 + jitter_)(rng_);
    *delay = milliseconds(static_cast<int64_t>(pause));
    next_ = std::min(max_, milliseconds(static_cast<int64_t>(static_cast<double>(next_.count()) * mult_)));
    return true;
  }
  std::string describe() const override {
    return "ExponentialDelayRestartStrategy(initialBackoff=" + formatDuration(initial_) +
           ", maxBackoff=" + formatDuration(max_) + ", multiplier=" + fmt::format("{:g}", mult_) +
           ", resetBackoffThreshold=" + formatDuration(resetThreshold_) + ", jitter=" + fmt::format("{:g}", jitter_) +
           ", attempts=" + std::to_string(attempts_) + ")";
  }

 private:
  milliseconds initial_, max_;
  double mult_;
  int64_t attempts_, used_ = 0;
  milliseconds resetThreshold_;
  double jitter_;
  milliseconds next_;
  std::optional<Clock::time_point> lastFailure_;
  std::mt19937_64 rng_;
};

}  // namespace

std::unique_ptr<RestartStrategy> createRestartStrategy(const Configuration& c) {
  std::string type = c.getString("restart-strategy.type");
  if (type == "none" || type == "off" || type == "disable") return std::make_unique<NoRestart>();
  if (type == "fixed-delay" || type == "fixeddelay")
    return std::make_unique<FixedDelay>(c.getInt("restart-strategy.fixed-delay.attempts", 0, INT_MAX),
                                        c.getDuration("restart-strategy.fixed-delay.delay"));
  if (type == "failure-rate" || type == "failurerate")
    return std::make_unique<FailureRate>(c.getInt("restart-strategy.failure-rate.max-failures-per-interval", 1, INT_MAX),
                                         c.getDuration("restart-strategy.failure-rate.failure-rate-interval"),
                                         c.getDuration("restart-strategy.failure-rate.delay"));
  if (type == "exponential-delay") {
    double mult;
    try {
      mult = std::stod(c.getString("restart-strategy.exponential-delay.backoff-multiplier"));
    } catch (...) {
      throw ConfigError("restart-strategy.exponential-delay.backoff-multiplier must be a number");
    }
    if (mult < 1) throw ConfigError("restart-strategy.exponential-delay.backoff-multiplier must be >= 1");
    double jitter;
    try {
      jitter = std::stod(c.getString("restart-strategy.exponential-delay.jitter-factor"));
    } catch (...) {
      throw ConfigError("restart-strategy.exponential-delay.jitter-factor must be a number between 0 and 1");
    }
    if (!(jitter >= 0 && jitter <= 1))
      throw ConfigError("restart-strategy.exponential-delay.jitter-factor must be between 0 and 1 (from " +
                        c.origin("restart-strategy.exponential-delay.jitter-factor") + ")");
    return std::make_unique<ExponentialDelay>(
        c.getDuration("restart-strategy.exponential-delay.initial-backoff"),
        c.getDuration("restart-strategy.exponential-delay.max-backoff"), mult,
        c.getInt("restart-strategy.exponential-delay.attempts-before-reset-backoff", 0, INT64_MAX),
        c.getDuration("restart-strategy.exponential-delay.reset-backoff-threshold"), jitter);
  }
  throw ConfigError("restart-strategy.type = '" + type + "' (from " + c.origin("restart-strategy.type") +
                    ") is unknown; use none, fixed-delay, failure-rate or exponential-delay");
}

}  // namespace jobhost::host
