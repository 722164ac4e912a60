// host/checkpoint/checkpoint_history.h — a running job's checkpoint history: the newest
// records of the checkpoints and savepoints it triggered, merged as updates arrive.
//
// The one place that merges CheckpointRecords (the worker's CheckpointCoordinator keeps
// one per attempt, the supervisor one across attempts from the worker's events): a
// record is identified by (id, triggerTimeMs) — checkpoint ids repeat across attempts
// that restore the same checkpoint — and an update replaces the record it identifies.
// It also counts completed and failed checkpoints for the job's status.
//
// Thread-safety: not thread-safe; the owner guards it with its own lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_record.h"

namespace jobhost::host {

class CheckpointHistory {
 public:
  /// Records kept; older ones are dropped (their counts stay).
  static constexpr size_t kLimit = 200;

  /// Replaces the record with the same id and trigger time, or appends `r` as the newest
  /// (dropping the oldest beyond kLimit). A checkpoint (not a savepoint) is counted as
  /// completed or failed when a record takes that status, once per change of status.
  void record(const CheckpointRecord& r);

  /// The newest in-progress record with `id` becomes FAILED with `reason`, its duration
  /// measured up to `nowMs` (epoch ms). Returns the updated record, or nullopt if there
  /// is no such record.
  std::optional<CheckpointRecord> fail(uint64_t id, const std::string& reason, int64_t nowMs);

  /// Every in-progress record becomes FAILED with `reason` (e.g. the attempt that was
  /// taking them ended). Returns the updated records, oldest first.
  std::vector<CheckpointRecord> failAllInProgress(const std::string& reason, int64_t nowMs);

  /// Oldest first; at most kLimit.
  const std::deque<CheckpointRecord>& records() const { return records_; }
  /// Checkpoints (not savepoints) that completed / failed, also those no longer kept.
  uint64_t completed() const { return completed_; }
  uint64_t failed() const { return failed_; }

 private:
  static CheckpointRecord asFailed(CheckpointRecord r, const std::string& reason, int64_t nowMs);

  std::deque<CheckpointRecord> records_;
  uint64_t completed_ = 0;
  uint64_t failed_ = 0;
};

}  // namespace jobhost::host
