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
#include "runtime/checkpoint_listener.h"
#include "runtime/execution_config.h"
#include "runtime/stage_graph.h"
#include "runtime/task_metrics.h"

namespace jobhost::host {

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
  /// User code threw JobArgumentError (jobhost/errors.h): the job cannot run as configured
  /// (exit 2), no restart can fix it.
  bool usageError = false;
};

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
  /// After a failed prepare(): an operator's open() threw JobArgumentError (the job cannot
  /// run as configured, e.g. its output directory is another job's); final, exit 2.
  bool prepareFailedOnUsage() const;
  /// Starts the task threads.
  void start();
  /// Blocks until every task has ended.
  ExecutionResult wait();
  /// After start(): ends every task.
  void cancel();
  /// While prepare() runs (from another thread): operators' open() that look at
  /// OperatorContext::cancelled() see it (a source waiting for its brokers gives up), and
  /// nothing else changes. Call cancel() if start() follows.
  void cancelOpening();
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

}  // namespace jobhost::host
