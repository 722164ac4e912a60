// host/runtime/job_execution_impl.h — the inside of one execution attempt (JobExecution),
// shared by the files that each do one part of it:
//   job_execution.cc       the attempt's life: start, wait, cancel, failure, metrics;
//   task_setup.cc          each task's operator chain built and its state restored (prepare);
//   stream_task.cc         the task loop (Flink's StreamTask): input, mailbox, time, end;
//   subtask_checkpoint.cc  the tasks' part of a checkpoint (Flink's
//                          SubtaskCheckpointCoordinator): snapshot, upload, acknowledge,
//                          notifications.
// Nothing outside host/runtime/ includes it.
//
// Thread-safety: as each member says (guarded by, task thread only, set in prepare()).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/barrier_aligner.h"
#include "runtime/channel.h"
#include "runtime/exchange_writer_impl.h"
#include "runtime/job_execution.h"
#include "runtime/operator_context_impl.h"
#include "runtime/task_metrics.h"
#include "runtime/timer_service.h"
#include "runtime/watermark_valve.h"

namespace jobhost::host {

/// Restored in-flight records of one former subtask (unaligned checkpoint), processed
/// at its input watermark when it snapshotted (kMinWatermark: none recorded).
struct InFlightGroup {
  int64_t watermark = kMinWatermark;
  std::vector<ChannelEvent> events;  // kData, `channel` one of the input's channels
};

/// Input task, unaligned checkpoints: the checkpoint whose snapshot is taken while its
/// channel state is still being collected (barrier_aligner.h). `channels`: per gate
/// channel the data buffers that belong to it, in order; `upload` runs the
/// asynchronous part and acknowledges, queued once the channel state is complete.
struct PendingChannelState {
  uint64_t id = 0;
  int64_t inputWatermark = kMinWatermark;  // the task's, when it snapshotted
  std::vector<std::vector<std::string>> channels;
  std::shared_ptr<TaskSnapshot> snap;
  std::function<void()> upload;
};
// (At namespace scope, not nested in Task: clang does not see a nested struct with
// default member initializers as default-constructible inside its enclosing class.)

struct JobExecution::Impl {
  bool prepareFailedOnDependency = false;  // prepare(): an operator's open() threw DependencyUnavailable
  bool prepareFailedOnUsage = false;       // prepare(): an operator's open() threw JobArgumentError
  /// A triggered checkpoint that is not withdrawn. `aborted` is shared with the
  /// asynchronous parts (SnapshotRequest::aborted) and set when it is withdrawn.
  struct ActiveCheckpoint {
    CheckpointTarget target;
    std::shared_ptr<std::atomic<bool>> aborted;
    /// The final checkpoint (triggered once every source ended, see afterAllEnded): the
    /// job finishes after it and its sinks commit what follows it at the end, so it
    /// must hold every record and every timer's firing — aligned, and its barrier never
    /// taken between the timers of a watermark.
    bool final = false;
    /// When it was triggered: an aligned checkpoint timeout runs from then (channel.h).
    std::chrono::steady_clock::time_point triggered{};
    /// The kind of its barriers, decided once in triggerCheckpoint(): unaligned from the
    /// sources on, or aligned and `convertible` (may turn unaligned downstream once older
    /// than the aligned checkpoint timeout, channel.h). Neither for a savepoint or the
    /// final checkpoint.
    bool unaligned = false;
    bool convertible = false;
  };

  /// One operator of a task (or the sending side of an exchange, `sender`).
  struct Slot {
    const PlanNode* node = nullptr;
    bool sender = false;
    std::unique_ptr<Operator> op;
    std::unique_ptr<OperatorContextImpl> ctx;
    std::vector<int> children;  // slots fed by this one (main output, side outputs, senders)
    std::vector<int> parents;   // slots feeding this one in the task (none for the heads)
    int64_t watermark = kMinWatermark;  // its input watermark
    int64_t emitted = kMinWatermark;    // a watermark assigner's output watermark
    std::unique_ptr<TaskTimerService> timers;
    std::vector<std::unique_ptr<Operator>> fanOuts;  // outputs several slots read (PlanNode::fanOut)
    ExchangeWriterImpl* writer = nullptr;  // senders
    /// The watermark its children see from it.
    int64_t output() const { return node->watermarkAssigner && !sender ? emitted : watermark; }
  };

  struct Task {
    int index = 0;
    int stage = 0;
    int subtask = 0;
    std::vector<Slot> slots;        // the stage's nodes in plan order, then the senders
    std::vector<int> heads;         // slot of each stage head (Stage::heads order)
    std::vector<int> channelHead;   // gate channel -> slot of the receiver it feeds
    std::vector<int> assigners;     // slots of watermark assigners
    std::vector<int> timerSlots;    // slots with timers
    std::vector<int> committers;    // slots told of checkpoints (PlanNode::twoPhaseCommit, checkpointListener)
    std::vector<std::unique_ptr<ExchangeWriterImpl>> writers;
    std::vector<std::unique_ptr<state::KeyedStateBackend>> backendsOwned;
    std::vector<state::KeyedStateBackend*> backends;
    std::vector<int> backendSlot;  // slot per backend
    TaskRecordContext record;
    std::atomic<const char*> activeOperator{nullptr};  // see OperatorContext::activeOperatorSlot
    std::string label;                                  // "(1/2)"
    std::string name;                                   // the chain: "Source: Lines -> Flat Map"
    TaskMetrics metrics;
    std::unique_ptr<InputGate> gate;  // null for sources
    std::unique_ptr<WatermarkValve> valve;
    std::thread thread;
    // Mailbox: what other threads hand to this task, taken on its thread between records
    // and polls (drainMail). A task waiting in its gate is woken with InputGate::wakeUp,
    // a suspended source waits on mailCv.
    std::mutex mailMu;
    std::condition_variable mailCv;
    std::deque<std::function<void()>> mail;  // guarded by mailMu; run on the task thread
    /// A barrier a source is to emit, and its kind, decided once per checkpoint in
    /// triggerCheckpoint(): every source emits the same kind, so no task ever sees one
    /// checkpoint's barriers both aligned and unaligned.
    struct Trigger {
      uint64_t id = 0;
      bool unaligned = false;
    };
    std::deque<Trigger> triggers;            // guarded by mailMu; sources: barriers to emit
    std::atomic<bool> hasMail{false};        // mail or triggers may be waiting
    // Task thread only.
    uint64_t suspendedBy = 0;  // source: the stop checkpoint whose barrier it emitted (0: polling)
    bool inputIdle = false;    // the valve was idle when last looked at (onInputTime)
    bool finalCheckpointDone = false;  // source: a checkpoint after every source ended is complete
    BarrierAligner* aligner = nullptr;  // input task: runInput's, while it runs
    // Input task: an input watermark or status change is firing event-time timers, so a
    // checkpoint barrier may be taken between two of them (takeBarriersBetweenTimers).
    bool barriersBetweenTimers = false;
    std::chrono::steady_clock::time_point nextPeriodicEmit{};
    std::optional<PendingChannelState> pendingChannelState;
    /// Restored in-flight records of an unaligned checkpoint, processed before any input,
    /// lowest watermark first. Cleared once processed.
    std::vector<InFlightGroup> restoredInFlight;
  };

  Plan plan;
  ExecutionConfig config;
  CheckpointListener* listener;
  StageGraph graph;
  const std::vector<Stage>& stages;
  std::vector<OperatorInfo> operatorInfos;
  std::vector<std::unique_ptr<Task>> tasks;
  std::atomic<bool> cancelled{false};
  std::atomic<bool> started{false};
  std::atomic<int> liveTasks{0};
  std::mutex resultMu;
  ExecutionResult result;  // guarded by resultMu
  bool failed = false;     // guarded by resultMu
  // Uploader: runs asynchronous snapshot parts, the reports that must follow them and
  // the hand-over of notifications to the tasks, in FIFO order.
  std::mutex upMu;
  std::condition_variable upCv;
  std::deque<std::function<void()>> upQueue;  // guarded by upMu
  bool upStop = false;                        // guarded by upMu
  std::thread uploader;
  std::mutex targetsMu;
  std::map<uint64_t, ActiveCheckpoint> targets;  // guarded by targetsMu
  std::atomic<int> finishedTasks{0};
  // The final checkpoint (see the header): sources wait for one after their input ended.
  bool finalCheckpoint = false;       // set in prepare(): checkpointing and a transactional sink
  int sourceTasks = 0;                // set in prepare()
  std::atomic<int> endedSources{0};   // sources whose input ended (waiting for the final checkpoint)
  std::set<uint64_t> afterAllEnded;   // guarded by targetsMu: checkpoints triggered once every source ended

  Impl(Plan p, ExecutionConfig c, CheckpointListener* l)
      : plan(std::move(p)), config(std::move(c)), listener(l), graph(plan, config.parallelism),
        stages(graph.stages()), operatorInfos(graph.operators()) {}

  bool hasFailed() {
    std::lock_guard lock(resultMu);
    return failed;
  }

  void fail(const std::string& message, const std::string& op, const std::string& subtask, bool restore = false,
            bool dependencyUnavailable = false, bool usage = false) {
    {
      std::lock_guard lock(resultMu);
      if (failed || cancelled.load()) return;
      failed = true;
      result.kind = ExecutionResult::kFailed;
      result.message = message;
      result.operatorName = op;
      result.subtask = subtask;
      result.restoreFailure = restore;
      result.dependencyUnavailable = dependencyUnavailable;
      result.usageError = usage;
    }
    cancelAll();
  }

  void cancelAll() {
    cancelled.store(true);
    for (auto& t : tasks) {
      if (t->gate) t->gate->cancel();
      { std::lock_guard lock(t->mailMu); }  // a source checking its wait condition sees `cancelled`
      t->mailCv.notify_all();
    }
  }

  // --- The tasks' part of checkpoints (subtask_checkpoint.cc) ------------------------
  void enqueueUpload(std::function<void()> fn);
  void uploaderLoop();
  void notifyTasks(uint64_t id, bool complete);
  std::optional<ActiveCheckpoint> activeCheckpoint(uint64_t id);
  /// `unaligned`: an input task snapshots at an unaligned checkpoint's first barrier (its
  /// acknowledgement waits for the channel state, finishChannelState), and forwards an
  /// unaligned barrier. A source passes its trigger's kind (Task::Trigger).
  void performCheckpoint(Task& t, uint64_t id, uint64_t alignmentMicros, bool unaligned = false);
  /// The channel state of unaligned checkpoint `id` is complete: stored in its snapshot,
  /// whose upload is queued.
  void finishChannelState(Task& t, uint64_t id);

  // --- The task loop (stream_task.cc) ------------------------------------------------
  void post(Task& t, std::function<void()> fn);
  void drainMail(Task& t);
  void serveMailAtEndOfInput(Task& t);
  void waitForMail(Task& t);
  static uint64_t nanosSince(std::chrono::steady_clock::time_point start);
  std::string subtaskLabel(const Task& t) const;
  static void flushLineSinks(Task& t);
  static int64_t inputWatermarkOf(const Task& t, int i);
  void advance(Task& t, int i, int64_t w);
  void forwardToChildren(Task& t, int i);
  void serviceTime(Task& t);
  std::chrono::steady_clock::time_point nextTimeDeadline(const Task& t) const;
  void onInputTime(Task& t, std::optional<int64_t> w);
  void onInputTimeTakingBarriers(Task& t, std::optional<int64_t> w);
  void takeBarriersBetweenTimers(Task& t);
  void flushOutputs(Task& t);
  void finishTask(Task& t);
  void runSource(Task& t);
  void processData(Task& t, const ChannelEvent& ev);
  /// A barrier taken from the gate: aligned (BarrierAligner::onBarrier) or unaligned.
  void onBarrierEvent(Task& t, ChannelEvent& ev);
  void runInput(Task& t);
  void runTask(Task& t);
};

}  // namespace jobhost::host
