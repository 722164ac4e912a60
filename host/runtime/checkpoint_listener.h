// host/runtime/checkpoint_listener.h — the tasks' side of a checkpoint as the rest of the
// job sees it: where a triggered checkpoint's files go (CheckpointTarget), what each task
// reports when its part is done (TaskSnapshot), and who hears those reports
// (CheckpointListener: the job's CheckpointCoordinator, checkpoint/checkpoint_coordinator.h).
// The tasks' part itself is subtask_checkpoint_coordinator.h.
//
// Thread-safety: plain values; CheckpointListener states its own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jobhost/operator.h"
#include "jobhost/state/checkpoint_metadata.h"
#include "jobhost/state/keyed_backend.h"
#include "runtime/checkpoint_failure.h"

namespace jobhost::host {

/// One task's part of a checkpoint.
struct TaskSnapshot {
  int taskIndex = 0;
  std::vector<std::pair<std::string, state::SubtaskSnapshot>> operators;  // uid -> snapshot
  /// operator uid -> the backend's registered states (KeyedStateBackend::states()),
  /// collected in the synchronous part; one entry per keyed operator of the task. It may
  /// hold states the plan no longer declares (restored and still snapshotted).
  std::map<std::string, std::vector<StateDescriptorInfo>> states;
  uint64_t syncMicros = 0;
  /// Barrier alignment: from the first barrier of this checkpoint on any input channel
  /// to the last (0 for a source or a task with one input channel, or unaligned).
  uint64_t alignmentMicros = 0;
  /// Unaligned checkpoints: the exchanges in `operators` that are there only for their
  /// in-flight records (no stateful operator has their uid): uid -> name, parallelism.
  std::map<std::string, std::pair<std::string, int>> channelStateOwners;
};

/// Receives the tasks' checkpoint reports. Called on the execution's uploader thread,
/// one call at a time, never with a JobExecution lock held (the listener may call back
/// into the JobExecution, e.g. notifyCheckpointAborted from decline()).
///
/// Contract, per task and checkpoint id triggered by triggerCheckpoint():
///  - A task reports at most once: acknowledge() with its snapshot, or decline().
///  - Unless the checkpoint is aborted (notifyCheckpointAborted) or the execution ends
///    first, every task reports.
///  - After an abort: a task whose asynchronous part had already started reports exactly
///    once, when that part has stopped writing (it sees the abort and stops early with
///    decline(), or had finished and acknowledges). A task that had not started it
///    writes nothing for that checkpoint and need not report. So once every task that
///    started has reported, no file of the aborted checkpoint is being written.
///  - A source whose input ends while a trigger waits for it still emits that barrier
///    after its last record; one triggered after it finished declines with kTaskFinished.
class CheckpointListener {
 public:
  virtual ~CheckpointListener() = default;
  virtual void acknowledge(uint64_t checkpointId, TaskSnapshot snapshot) = 0;
  /// The task does not take part in the checkpoint: `reason` says why (and whether that
  /// counts as a failure, checkpoint_failure.h), `detail` what happened.
  virtual void decline(uint64_t checkpointId, CheckpointFailureReason reason, const state::Status& detail) = 0;
  /// Every source's input ended and the job waits for its final checkpoint (a
  /// transactional sink): trigger one soon rather than at the next interval. May be
  /// called from a task thread; must not block on the execution.
  virtual void finalCheckpointWanted() {}
};

/// Where a checkpoint's files go.
struct CheckpointTarget {
  uint64_t checkpointId = 0;
  state::SnapshotFormat format = state::SnapshotFormat::kNative;
  /// Shared: tasks keep it alive until their asynchronous parts are done, even if the
  /// checkpoint is aborted (and its requester gone) meanwhile.
  std::shared_ptr<state::CheckpointStorage> storage;
  std::string exclusiveDir;
  std::string sharedDir;
  /// Atomic stop (stop-with-savepoint): a source task that emits this barrier then emits
  /// nothing more and stays suspended until the checkpoint is aborted (the sources then
  /// resume) or the execution is cancelled. Cancel once the checkpoint is complete, and
  /// no record after it is ever emitted.
  bool stopSources = false;
  /// stop --drain: each source task first delivers kMaxWatermark to its operators and
  /// outputs (every event-time timer and window fires), then the barrier.
  bool drain = false;
  /// A savepoint: its barrier is taken only after every event-time timer of a watermark
  /// has fired (a checkpoint's may be taken between them: stream_task.cc).
  bool savepoint = false;
  /// The newest checkpoint the coordinator had completed when it triggered this one (0:
  /// none). Incremental backends base this snapshot on it even if its completion has not
  /// reached them yet (subtask_checkpoint.cc): the coordinator may already have deleted
  /// the files of the one before it.
  uint64_t lastCompleted = 0;
};

}  // namespace jobhost::host
