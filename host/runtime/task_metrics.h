// host/runtime/task_metrics.h — what one task (a stage's subtask: its chain of operators,
// Flink's task) counts while it runs: records received and sent across exchanges, the
// time it waited for input (idle) and for room in a full downstream channel (back
// pressure), its input watermark and the size of its keyed state backends. The worker
// sends samples to the supervisor (worker_protocol.capnp `stats`), which turns them into
// rates (host/metrics/task_rates.h) for the dashboard and /metrics.
//
// Thread-safety: each value has one writer, the task's own thread, which adds with a
// relaxed load and store (no locked instruction on the record path); any thread reads
// with relaxed loads. Backend slots are created in JobExecution::prepare(), before the
// task thread starts and before any reader.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "jobhost/operator.h"  // kMinWatermark

namespace jobhost::host {

/// A counter with a single writer.
class TaskCounter {
 public:
  void add(uint64_t n) { value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  uint64_t get() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

struct TaskMetrics {
  TaskCounter recordsIn;           // records taken from the task's input gate
  TaskCounter recordsOut;          // records sent to the next stage
  TaskCounter idleNanos;           // waiting for input (an input task) or suspended (a source)
  TaskCounter backPressuredNanos;  // waiting for room in a full downstream channel
  std::atomic<int64_t> inputWatermark{kMinWatermark};  // input tasks only
  /// Keys per keyed backend of the task (in the task's backend order), sampled after the
  /// restore and in each checkpoint's synchronous part (the task thread).
  std::deque<std::atomic<uint64_t>> backendEntries;
};

/// One task's values at one moment (JobExecution::taskMetrics()).
struct TaskMetricsSample {
  std::string name;  // the chain, Flink style: "Source: Lines -> Flat Map"
  int subtask = 0;   // 0-based
  int parallelism = 1;
  uint64_t recordsIn = 0;
  uint64_t recordsOut = 0;
  uint64_t idleNanos = 0;
  uint64_t backPressuredNanos = 0;
  int64_t inputWatermark = kMinWatermark;  // kMinWatermark: none yet (or a source task)
  struct Backend {
    std::string operatorUid;
    std::string backend;  // "hashmap", "rocksdb"
    uint64_t entries = 0;
  };
  std::vector<Backend> backends;
};

}  // namespace jobhost::host
