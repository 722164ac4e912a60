// host/metrics/task_rates.h — Flink's per-second task numbers from the worker's cumulative
// counters: numRecordsIn/OutPerSecond, and the milliseconds of each second a task was
// busy, back-pressured or idle (busyTimeMsPerSecond = 1000 - idle - back-pressured, as
// Flink computes it). Each figure is taken over the samples of the last `window` (5 s by
// default: Flink updates its meters and time gauges every 5 s), so it reads the same in
// the dashboard and in /metrics, which both show what this produced.
//
// Thread-safety: not thread-safe; the supervisor guards it with its lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

#include "control/job_control.h"
#include "runtime/task_metrics.h"

namespace jobhost::host {

class TaskRates {
 public:
  static constexpr std::chrono::milliseconds kDefaultWindow{5000};
  explicit TaskRates(std::chrono::milliseconds window = kDefaultWindow) : window_(window) {}

  /// Adds the sample the worker sent at `atMs` (a steady clock, ms) and returns every task
  /// with its counters and rates. The rates span from the oldest sample kept (at most
  /// `window` old, but at least the one before) to this one; with a single sample they are
  /// 0. A sample that does not continue the previous one (other tasks, or a counter that
  /// went down: a new attempt) starts over.
  std::vector<TaskStatusInfo> add(int64_t atMs, std::vector<TaskMetricsSample> tasks);
  /// Forgets every sample (a new attempt starts).
  void reset() { samples_.clear(); }

 private:
  struct Sample {
    int64_t atMs = 0;
    std::vector<TaskMetricsSample> tasks;
  };
  static bool continues(const Sample& before, const std::vector<TaskMetricsSample>& now);

  std::chrono::milliseconds window_;
  std::deque<Sample> samples_;  // oldest first
};

}  // namespace jobhost::host
