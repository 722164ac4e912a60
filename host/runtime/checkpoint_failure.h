// host/runtime/checkpoint_failure.h — why a checkpoint did not complete, and whether that
// counts against `execution.checkpointing.tolerable-failed-checkpoints`.
//
// One owner for that decision, as Flink's CheckpointFailureManager: whoever reports a
// failed checkpoint names its reason here, and the coordinator asks
// countsAgainstTolerance(); nothing looks at a message's text to decide. A reason that
// does not count is still logged and recorded in the checkpoint history as FAILED.
//
// Thread-safety: plain values and a pure function.
#pragma once

#include <string_view>

#include "jobhost/state/status.h"

namespace jobhost::host {

enum class CheckpointFailureReason {
  /// A task's input ended (a bounded source finished) before the barrier could follow its
  /// last record. Not a fault of checkpointing: Flink ignores it too
  /// (CHECKPOINT_DECLINED_INPUT_END_OF_STREAM, CHECKPOINT_DECLINED_TASK_CLOSING).
  kTaskFinished,
  /// The job attempt ended (a task failure, cancellation) before the checkpoint completed.
  /// The restart strategy handles that ending; it is not counted a second time.
  kAttemptEnded,
  /// A task could not take or upload its snapshot (CHECKPOINT_ASYNC_EXCEPTION).
  kSnapshotFailed,
  /// Not complete within `execution.checkpointing.timeout` (CHECKPOINT_EXPIRED).
  kExpired,
  /// Every part was there, but its `_metadata` could not be published
  /// (FINALIZE_CHECKPOINT_FAILURE).
  kFinalizeFailed,
  /// The checkpoint store did not answer (state::Status::isUnavailable: 5xx, a reset or
  /// timed-out connection, EIO; also this process not holding the job directory's lease
  /// while it cannot reach the store, job_directory_lock.h) or the disk under it is full
  /// (NoSpace), at whatever step.
  /// Waited out, never counted: the job keeps running and checkpoints resume once the
  /// store answers (an outage of any length does not end the job).
  kStoreUnavailable,
};

/// Whether `detail`, an error of the checkpoint store or of the disk under it, is
/// waited out (kStoreUnavailable) rather than a failure: Unavailable or NoSpace. The one
/// place that decides it for checkpoints, restores and the start of a run.
inline bool isStoreUnavailability(const state::Status& detail) {
  return detail.isUnavailable() || detail.isNoSpace();
}

/// The reason of a checkpoint that failed at step `step` with `detail`: kStoreUnavailable
/// when the store did not answer or the disk is full, whatever the step; else `step`.
/// On a local file system (`localStorage`), write access lost while the job runs
/// (PermissionDenied: EACCES, EPERM, EROFS — a file system remounted read-only after a
/// disk error, a directory's mode or owner changed) is waited out the same way: the job
/// wrote there when it started, so it is an outage of the disk, and failing the attempt
/// would only rewind the job to a checkpoint it then cannot write either. (At the start
/// of a run the same error is said at once: isStoreUnavailability does not include it.)
/// An object store's 403 stays a failure of its checkpoint: a policy, not an outage.
inline CheckpointFailureReason failureReasonFor(CheckpointFailureReason step, const state::Status& detail,
                                                bool localStorage) {
  const bool lostWriteAccess = localStorage && detail.isPermissionDenied();
  return isStoreUnavailability(detail) || lostWriteAccess ? CheckpointFailureReason::kStoreUnavailable : step;
}

/// Whether a checkpoint failing for `reason` counts as one of the consecutive failures
/// that `execution.checkpointing.tolerable-failed-checkpoints` tolerates.
constexpr bool countsAgainstTolerance(CheckpointFailureReason reason) {
  switch (reason) {
    case CheckpointFailureReason::kTaskFinished:
    case CheckpointFailureReason::kAttemptEnded:
    case CheckpointFailureReason::kStoreUnavailable:
      return false;
    case CheckpointFailureReason::kSnapshotFailed:
    case CheckpointFailureReason::kExpired:
    case CheckpointFailureReason::kFinalizeFailed:
      return true;
  }
  return true;
}

/// A short name for logs and tests, e.g. "task finished".
constexpr std::string_view checkpointFailureName(CheckpointFailureReason reason) {
  switch (reason) {
    case CheckpointFailureReason::kTaskFinished: return "task finished";
    case CheckpointFailureReason::kAttemptEnded: return "attempt ended";
    case CheckpointFailureReason::kSnapshotFailed: return "snapshot failed";
    case CheckpointFailureReason::kExpired: return "expired";
    case CheckpointFailureReason::kFinalizeFailed: return "metadata not published";
    case CheckpointFailureReason::kStoreUnavailable: return "store unavailable";
  }
  return "unknown";
}

}  // namespace jobhost::host
