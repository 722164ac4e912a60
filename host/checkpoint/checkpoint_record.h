// host/checkpoint/checkpoint_record.h — one entry of a running job's checkpoint history
// (issue 9): what the coordinator knows about a checkpoint or savepoint it triggered,
// including those that failed or were subsumed since. Kept by the worker's
// CheckpointCoordinator, carried to the supervisor (worker_protocol.capnp
// `checkpointEvent`), served by the control endpoint (`checkpointHistory`) and by
// `jobhost ui` (`GET /api/jobs/<id>/checkpoints`).
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jobhost/state/checkpoint_metadata.h"

namespace jobhost::host {

/// Files of an older checkpoint that a checkpoint still references (rocksdb incremental:
/// shared SSTs uploaded by that checkpoint). Restoring needs them all.
struct CheckpointDependency {
  uint64_t checkpointId = 0;
  uint32_t files = 0;
  uint64_t bytes = 0;
};

struct CheckpointRecord {
  enum class Status { kInProgress, kCompleted, kFailed };
  uint64_t id = 0;
  Status status = Status::kInProgress;
  bool savepoint = false;    // kind: savepoint or checkpoint
  bool incremental = false;  // rocksdb native with shared files (else full / self-contained)
  bool canonical = false;    // canonical (backend-independent) format
  int64_t triggerTimeMs = 0;  // epoch ms; with `id` it identifies the record
  /// End to end, from the trigger until `_metadata` was published.
  uint64_t durationMicros = 0;
  /// The synchronous part (the slowest task's snapshot while it held its records), and the
  /// rest (uploads, metadata): durationMicros - syncMicros.
  uint64_t syncMicros = 0;
  uint64_t asyncMicros = 0;
  /// The longest barrier alignment of any task: from the first barrier of the checkpoint
  /// on one of its input channels to the last.
  uint64_t alignmentMicros = 0;
  uint64_t newBytes = 0;    // files this checkpoint wrote
  uint64_t totalBytes = 0;  // every file it references, shared files of older checkpoints included
  std::vector<CheckpointDependency> dependsOn;  // ascending checkpoint id
  std::string path;           // absolute chk-<n> or savepoint directory
  std::string failureReason;  // kFailed only
  /// Retention deleted it after a newer one completed (num-retained): no longer restorable.
  bool subsumed = false;
};

const char* checkpointStatusName(CheckpointRecord::Status s);  // "COMPLETED", "FAILED", "IN_PROGRESS"

/// The older checkpoints whose files `m` references (its incremental dependency chain).
std::vector<CheckpointDependency> checkpointDependencies(const state::CheckpointMetadata& m);

/// A COMPLETED record from a published `_metadata` (`path`: its absolute directory).
CheckpointRecord recordFromMetadata(const state::CheckpointMetadata& m, const std::string& path);

}  // namespace jobhost::host
