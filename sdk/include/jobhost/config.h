// jobhost/config.h — the settings a job class chooses in Job::configure().
//
// JobConfig is a flat map of Flink-style keys ("state.backend.type", ...). The typed
// setters below are shorthands for those keys; the host layers the values
//   built-in defaults < configuration file < Job::configure() < `-D key=value`
// so a user can override anything a job sets. Keys and their defaults are listed in
// the README ("Configuration").
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace jobhost {

enum class StateBackendKind { kHashMap, kRocksDb };

class JobConfig {
 public:
  /// Sets any key. Values are strings as in the YAML file ("500ms", "true", "4").
  JobConfig& set(const std::string& key, std::string value) {
    values_[key] = std::move(value);
    return *this;
  }
  std::optional<std::string> get(const std::string& key) const {
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  const std::map<std::string, std::string>& values() const { return values_; }

  /// execution.checkpointing.interval; 0 disables periodic checkpoints. Default: off.
  JobConfig& checkpointInterval(std::chrono::milliseconds interval) {
    return set("execution.checkpointing.interval", std::to_string(interval.count()) + "ms");
  }
  /// state.backend.type and state.backend.incremental. Deprecated: a class's backend is
  /// declared once, in JOBHOST_JOB(Class, description, backend) or
  /// JOBHOST_JOB_INCREMENTAL(…, 1); the host applies that declaration and refuses a
  /// configure() that contradicts it.
  [[deprecated("declare the backend in JOBHOST_JOB(Class, description, \"rocksdb\") or "
               "JOBHOST_JOB_INCREMENTAL(Class, description, \"rocksdb\", 1) instead")]]
  JobConfig& stateBackend(StateBackendKind kind, bool incremental = false) {
    set("state.backend.type", kind == StateBackendKind::kRocksDb ? "rocksdb" : "hashmap");
    return set("state.backend.incremental", incremental ? "true" : "false");
  }
  /// restart-strategy.type = fixed-delay with its attempts and delay.
  JobConfig& fixedDelayRestart(int attempts, std::chrono::milliseconds delay) {
    set("restart-strategy.type", "fixed-delay");
    set("restart-strategy.fixed-delay.attempts", std::to_string(attempts));
    return set("restart-strategy.fixed-delay.delay", std::to_string(delay.count()) + "ms");
  }
  /// restart-strategy.type = none: the first failure fails the job.
  JobConfig& noRestart() { return set("restart-strategy.type", "none"); }
  /// parallelism.default. Default: 1.
  JobConfig& parallelism(int p) { return set("parallelism.default", std::to_string(p)); }
  /// pipeline.window.mini-batch.size: event-time aggregate and reduce windows (tumbling,
  /// sliding) fold records into up to `accumulators` (key, pane) accumulators in memory
  /// before writing them to keyed state; their merge() is then called for these windows
  /// too. Default: 0 (off); 16384 is a good size.
  JobConfig& windowMiniBatch(size_t accumulators) {
    return set("pipeline.window.mini-batch.size", std::to_string(accumulators));
  }
  /// pipeline.max-parallelism: the number of key groups. Default: 128.
  JobConfig& maxParallelism(int p) { return set("pipeline.max-parallelism", std::to_string(p)); }

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace jobhost
