// Per-second task numbers from cumulative counters: see task_rates.h.
#include "metrics/task_rates.h"

#include <algorithm>

namespace jobhost::host {

bool TaskRates::continues(const Sample& before, const std::vector<TaskMetricsSample>& now) {
  if (before.tasks.size() != now.size()) return false;
  for (size_t i = 0; i < now.size(); ++i) {
    const TaskMetricsSample& a = before.tasks[i];
    const TaskMetricsSample& b = now[i];
    if (a.name != b.name || a.subtask != b.subtask || b.recordsIn < a.recordsIn || b.recordsOut < a.recordsOut ||
        b.idleNanos < a.idleNanos || b.backPressuredNanos < a.backPressuredNanos)
      return false;
  }
  return true;
}

std::vector<TaskStatusInfo> TaskRates::add(int64_t atMs, std::vector<TaskMetricsSample> tasks) {
  if (!samples_.empty() && (!continues(samples_.back(), tasks) || atMs < samples_.back().atMs)) samples_.clear();
  samples_.push_back(Sample{atMs, std::move(tasks)});
  // Keep the newest sample at least `window` old (the span's start), and nothing older.
  while (samples_.size() > 2 && samples_[1].atMs <= atMs - window_.count()) samples_.pop_front();
  const Sample& first = samples_.front();
  const Sample& last = samples_.back();
  const double seconds = static_cast<double>(last.atMs - first.atMs) / 1000.0;
  std::vector<TaskStatusInfo> out;
  out.reserve(last.tasks.size());
  for (size_t i = 0; i < last.tasks.size(); ++i) {
    const TaskMetricsSample& a = first.tasks[i];
    const TaskMetricsSample& b = last.tasks[i];
    TaskStatusInfo t;
    t.name = b.name;
    t.subtask = b.subtask;
    t.parallelism = b.parallelism;
    t.recordsIn = b.recordsIn;
    t.recordsOut = b.recordsOut;
    t.inputWatermark = b.inputWatermark;
    for (const auto& be : b.backends) t.backends.push_back({be.operatorUid, be.backend, be.entries});
    if (seconds > 0) {
      t.recordsInPerSecond = static_cast<double>(b.recordsIn - a.recordsIn) / seconds;
      t.recordsOutPerSecond = static_cast<double>(b.recordsOut - a.recordsOut) / seconds;
      auto msPerSecond = [&](uint64_t nanos) { return std::clamp(static_cast<double>(nanos) / 1e6 / seconds, 0.0, 1000.0); };
      t.idleTimeMsPerSecond = msPerSecond(b.idleNanos - a.idleNanos);
      t.backPressuredTimeMsPerSecond = msPerSecond(b.backPressuredNanos - a.backPressuredNanos);
      t.busyTimeMsPerSecond = std::max(0.0, 1000.0 - t.idleTimeMsPerSecond - t.backPressuredTimeMsPerSecond);
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace jobhost::host
