// host/runtime/job_execution.h — one execution attempt of a job's plan.
//
// Cuts the plan into stages at every exchange (keyBy, union, the inputs of connect),
// creates one task thread per (stage, subtask), wires stages with bounded channels,
// creates and restores the keyed state backends and timers, and runs until the input
// ends, a task fails, or cancel() is called. A restart is a new JobExecution built from a
// fresh plan.
//
// Inside a stage the operators form a tree of direct calls: a source or the receivers of
// the stage's input exchanges at the root, each operator feeding its main-output consumer
// and its side outputs' consumers, exchange senders at the leaves. A two-input operator
// (connect, intervalJoin) starts a stage whose gate holds the channels of both inputs.
//
// Event time: every record carries its timestamp across exchanges; watermarks travel
// in-band. A task's input watermark is the minimum over its channels that are neither
// idle nor ended (an ended channel counts as kMaxWatermark); it is delivered down the
// tree — each keyed operator first fires its event-time timers up to it — and forwarded
// on every output, except past a watermark assigner, which emits its own. Processing-time
// timers fire on the task thread when the wall clock reaches them; watermark assigners
// are called every `autoWatermarkIntervalMs`. A source that ends sends kMaxWatermark
// before its end marker, so every window fires.
//
// Transactional sinks (PlanNode::twoPhaseCommit) pre-commit in the synchronous part of
// each checkpoint (Operator::beforeSnapshot) and commit when it is complete (the
// notifications reach them on their task threads, as the backends'). A bounded job with
// one ends with a final checkpoint, as Flink's (FLIP-147): a source whose input ended
// sends kMaxWatermark, then keeps serving checkpoint triggers without emitting records,
// and sends its end marker only once a checkpoint triggered after every source had ended
// is complete — whose notification every task has received before it sees the end
// markers. So everything a sink wrote is committed, exactly once, before the job ends.
//
// Checkpoints: triggerCheckpoint() asks the source tasks to emit a barrier; each task
// snapshots when the barrier has arrived on all its inputs (alignment, see
// barrier_aligner.h), flushes the line sinks it writes to, forwards the barrier, and
// finishes its snapshot asynchronously on the uploader thread (one thread, FIFO), then
// reports to the CheckpointListener. A stop target (CheckpointTarget::stopSources)
// also suspends the sources right after its barrier, as Flink's stop-with-savepoint.
//
// Each task has a mailbox drained on its own thread between records and polls (a task
// waiting for input is woken for it): checkpoint notifications reach the backends
// through it, after passing the uploader queue, so a backend sees them on its task
// thread and after its asynchronous part of that checkpoint has returned or was dropped
// unstarted (the ordering contract of keyed_backend.h).
//
// Thread-safety: public methods are thread-safe. notifyCheckpointComplete/Aborted,
// triggerCheckpoint, cancel and failExternally never block on the tasks or the
// uploader, so a CheckpointListener may call them from its callbacks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "jobhost/operator.h"
#include "jobhost/state/checkpoint_metadata.h"
#include "jobhost/state/keyed_backend.h"
#include "runtime/checkpoint_failure.h"
#include "runtime/task_metrics.h"

namespace jobhost::host {

struct ExecutionConfig {
  int parallelism = 1;
  int maxParallelism = 128;
  state::BackendType backend = state::BackendType::kHashMap;
  bool incremental = false;
  state::RocksDbOptions rocksdb;  // state.backend.rocksdb.* (rocksdb only)
  std::string localStateDir;  // rocksdb working directories go below it
  /// pipeline.auto-watermark-interval: how often watermark assigners emit. 0: never
  /// periodically (only the end of input's kMaxWatermark).
  int64_t autoWatermarkIntervalMs = 200;
  /// Checkpoints are taken (a coordinator triggers them). With a transactional sink in the
  /// plan, sources that end then wait for a final checkpoint (see the file comment).
  bool checkpointing = false;
  /// execution.checkpointing.interval (OperatorContext::checkpointIntervalMs); 0: none.
  int64_t checkpointIntervalMs = 0;
};

/// A stateful or source operator of the plan, as recorded in metadata.
struct OperatorInfo {
  std::string uid;
  std::string name;
  bool keyed = false;
  bool source = false;
  int parallelism = 1;
  std::vector<StateDescriptorInfo> states;
  /// Non-keyed operator state besides a source position (a watermark assigner's).
  bool operatorState = false;
  /// A source's subscription (PlanNode::subscription), for the restore check.
  std::string subscription;
};

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
  /// to the last (0 for a source or a task with one input channel).
  uint64_t alignmentMicros = 0;
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
};

/// What to restore from: metadata with paths relative to `storage`.
struct RestoreSource {
  const state::CheckpointMetadata* metadata = nullptr;
  state::CheckpointStorage* storage = nullptr;
  bool allowNonRestoredState = false;
};

struct ExecutionResult {
  enum Kind { kFinished, kFailed, kCancelled } kind = kFinished;
  std::string message;        // root cause
  std::string operatorName;   // where it happened, if known
  std::string subtask;        // "(1/2)"
  bool restoreFailure = false;  // failed while restoring state: not worth retrying
  /// User code threw DependencyUnavailable (jobhost/errors.h): a database or broker did
  /// not answer; waited out and restarted without counting.
  bool dependencyUnavailable = false;
};

/// Splits a plan into stages; throws JobArgumentError for shapes it cannot run and for
/// an operator uid that is not valid (see validateOperatorUid).
std::vector<OperatorInfo> describeOperators(const Plan& plan, int parallelism);

/// Empty if `uid` may name an operator, else why not. A uid names files and directories
/// (the rocksdb working directory, snapshot file names), so it must be one plain path
/// component: 1 to 128 characters out of letters, digits, '.', '_', '-', not starting
/// with '.'.
std::string validateOperatorUid(std::string_view uid);

class JobExecution {
 public:
  JobExecution(Plan plan, ExecutionConfig config, CheckpointListener* listener);
  ~JobExecution();
  JobExecution(const JobExecution&) = delete;
  JobExecution& operator=(const JobExecution&) = delete;

  /// Creates operators and backends and restores state (if `source` is given) as
  /// assignState() (runtime/state_assignment.h) maps it. Errors: Incompatible (the
  /// snapshot does not fit the plan) and Corruption (it is damaged: a referenced file is
  /// missing, a file is garbled) are final, no restart can fix them; NoSpace,
  /// PermissionDenied, IOError (local or storage I/O, the message names the file and the
  /// OS reason) and a failure to open an operator are task failures worth a retry.
  state::Status prepare(const RestoreSource* source);
  /// After a failed prepare(): an operator's open() threw DependencyUnavailable (a
  /// database or broker did not answer); the status is Unavailable then.
  bool prepareFailedOnDependency() const;
  /// Starts the task threads.
  void start();
  /// Blocks until every task has ended.
  ExecutionResult wait();
  void cancel();
  /// Fails the attempt from outside the tasks (e.g. too many failed checkpoints).
  void failExternally(const std::string& reason);
  /// Asks the sources to inject a barrier. False if the job is not running (or a task
  /// has finished: a draining job takes no checkpoints).
  bool triggerCheckpoint(const CheckpointTarget& target);
  /// The checkpoint is complete: each task's backends are told on the task's thread.
  void notifyCheckpointComplete(uint64_t checkpointId);
  /// The checkpoint is withdrawn: tasks that have not snapshotted only forward its
  /// barrier, asynchronous parts not yet started never run, running ones stop early
  /// (see CheckpointListener), sources suspended by it resume, and each task's backends
  /// are told on the task's thread.
  void notifyCheckpointAborted(uint64_t checkpointId);
  int taskCount() const;
  const std::vector<OperatorInfo>& operators() const;
  bool running() const;
  /// Records received / sent across exchanges by all tasks (sums of taskMetrics()).
  uint64_t recordsIn() const;
  uint64_t recordsOut() const;
  /// Every task's counters now (after prepare(); any thread).
  std::vector<TaskMetricsSample> taskMetrics() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// For a fatal-signal handler on a task thread: the operator whose user code was running
/// and the subtask label, or false. Async-signal-safe (reads thread-local pointers).
bool activeOperatorOfThisThread(const char** operatorName, const char** subtask);

/// Stable key-group assignment of serialized key bytes.
int keyGroupFor(std::string_view keyBytes, int maxParallelism);

}  // namespace jobhost::host
