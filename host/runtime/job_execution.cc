// One execution attempt: stages, tasks, channels, backends, barriers, watermarks and
// timers. See the header.
#include "runtime/job_execution.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "runtime/state_assignment.h"
#include "jobhost/serializer.h"
#include "jobhost/time.h"
#include "runtime/barrier_aligner.h"
#include "runtime/key_group_assignment.h"
#include "runtime/channel.h"
#include "runtime/line_sinks.h"
#include "runtime/timer_service.h"
#include "runtime/watermark_valve.h"

namespace jobhost::host {

namespace fs = std::filesystem;
using state::Status;

namespace {

constexpr size_t kBufferBytes = 32 * 1024;
constexpr size_t kChannelCapacity = 16;
constexpr auto kFlushInterval = std::chrono::milliseconds(20);
/// The key group field of a record sent through an unkeyed exchange.
constexpr uint16_t kNoKeyGroup = 0xffff;

/// Sends the records of one producing subtask into one input of the next stage, with
/// their key groups and timestamps, and the barriers, watermarks and status in between.
class ExchangeWriterImpl : public ExchangeWriter {
 public:
  /// `recordsActivate`: a record sent while idle makes the output active again (a source
  /// task: its watermark assigner went idle and now sees records). In an input task the
  /// input's idle status is the output's (onInputTime): a record a timer emits there
  /// leaves the output idle, as in Flink.
  ExchangeWriterImpl(std::vector<InputGate*> gates, int channel, int subtask, int producerParallelism,
                     int maxParallelism, const TaskRecordContext* record, TaskMetrics* metrics,
                     bool recordsActivate)
      : gates_(std::move(gates)), channel_(channel), subtask_(static_cast<size_t>(subtask)),
        forward_(static_cast<size_t>(producerParallelism) == gates_.size()), maxParallelism_(maxParallelism),
        buffers_(gates_.size()), record_(record), metrics_(metrics), recordsActivate_(recordsActivate) {}
  void emit(std::string_view key, std::string_view record) override {
    int kg = keyGroupFor(key, maxParallelism_);
    append(static_cast<size_t>(kg) * gates_.size() / static_cast<size_t>(maxParallelism_), static_cast<uint16_t>(kg),
           key, record);
  }
  void emitAny(std::string_view record) override {
    append(forward_ ? subtask_ : next_++ % gates_.size(), kNoKeyGroup, {}, record);
  }
  void flush() {
    for (size_t i = 0; i < buffers_.size(); ++i)
      if (!buffers_[i].empty()) send(i);
  }
  /// Barriers and end markers.
  void broadcast(ChannelEvent::Kind kind, uint64_t id) {
    flush();
    for (auto* g : gates_) g->push(channel_, ChannelEvent{kind, id, {}, 0, 0});
  }
  void broadcastWatermark(int64_t watermark) {
    activate();
    flush();
    for (auto* g : gates_) g->push(channel_, ChannelEvent{ChannelEvent::kWatermark, 0, {}, 0, watermark});
  }
  /// Tells the receivers not to wait for this producer's watermark until it emits again.
  void markIdle() {
    if (idle_) return;
    flush();
    idle_ = true;
    for (auto* g : gates_) g->push(channel_, ChannelEvent{ChannelEvent::kStatus, 0, {}, 0, 1});
  }
  /// The receivers wait for this producer's watermark again (also done by any record or
  /// watermark it sends).
  void activate() {
    if (!idle_) return;
    idle_ = false;
    for (auto* g : gates_) g->push(channel_, ChannelEvent{ChannelEvent::kStatus, 0, {}, 0, 0});
  }

 private:
  void append(size_t target, uint16_t kg, std::string_view key, std::string_view record) {
    if (recordsActivate_) activate();
    std::string& b = buffers_[target];
    ByteWriter w(b);
    w.writeFixed<uint16_t>(kg);
    w.writeI64(record_->timestamp);
    w.writeBytes(key);
    w.writeBytes(record);
    metrics_->recordsOut.add(1);
    if (b.size() >= kBufferBytes) send(target);
  }
  void send(size_t target) {
    ChannelEvent e;
    e.kind = ChannelEvent::kData;
    e.data.swap(buffers_[target]);
    buffers_[target].reserve(kBufferBytes + 1024);
    gates_[target]->push(channel_, std::move(e), &metrics_->backPressuredNanos);
  }
  std::vector<InputGate*> gates_;
  int channel_;
  size_t subtask_;
  bool forward_;  // as many receivers as producers: subtask i sends to subtask i
  size_t next_ = 0;
  int maxParallelism_;
  std::vector<std::string> buffers_;
  const TaskRecordContext* record_;
  TaskMetrics* metrics_;
  bool recordsActivate_;
  bool idle_ = false;
};

/// A task's name as Flink names a chain: its operators' names joined by " -> ", the
/// source's with "Source: " before it (the exchanges between stages are not operators).
std::string taskName(const Plan& plan, const Stage& stage) {
  std::string name;
  for (int id : stage.nodes) {
    const PlanNode& n = plan.nodes[static_cast<size_t>(id)];
    if (n.kind == NodeKind::kExchange) continue;
    if (!name.empty()) name += " -> ";
    if (n.kind == NodeKind::kSource) name += "Source: ";
    name += n.name;
  }
  return name;
}

struct ThreadCrashInfo {
  std::atomic<const char*>* slot = nullptr;
  const char* subtask = nullptr;
};
thread_local ThreadCrashInfo tCrashInfo;

class OperatorContextImpl : public OperatorContext {
 public:
  int subtask = 0, par = 1, maxPar = 128;
  std::string name, uidStr;
  state::KeyedStateBackend* backend = nullptr;
  std::vector<state::KeyedStateBackend*>* taskBackends = nullptr;
  TaskRecordContext* record = nullptr;
  ExchangeWriterImpl* writer = nullptr;
  const std::atomic<bool>* cancelFlag = nullptr;
  std::atomic<const char*>* activeSlot = nullptr;
  int64_t checkpointInterval = 0;  // ExecutionConfig::checkpointIntervalMs
  const int64_t* watermark = nullptr;  // the operator's input watermark
  InternalTimerService* timers = nullptr;
  std::function<void(int64_t)> emitWatermarkFn;  // watermark assigners
  std::function<void()> markIdleFn;
  std::map<std::string, void*> sideOutputs;  // tag key -> the consumer's input

  int subtaskIndex() const override { return subtask; }
  int parallelism() const override { return par; }
  int maxParallelism() const override { return maxPar; }
  const std::string& operatorName() const override { return name; }
  const std::string& uid() const override { return uidStr; }
  KeyedStateAccess& keyedState() override {
    if (!backend) throw StateError("operator '" + name + "' is not keyed: keyed state needs a keyBy() before it");
    return *backend;
  }
  std::string_view currentKey() const override { return record->key; }
  void setCurrentKey(std::string_view keyBytes) override {
    record->key.assign(keyBytes);
    for (auto* b : *taskBackends) b->setCurrentKey(record->keyGroup, keyBytes);
  }
  ExchangeWriter& exchange() override {
    if (!writer) throw StateError("operator '" + name + "' has no exchange output");
    return *writer;
  }
  LineSink& stdoutSink() override { return remember(LineSinks::instance().stdoutSink()); }
  LineSink& fileSink(const std::string& path) override { return remember(LineSinks::instance().fileSink(path)); }
  bool cancelled() const override { return cancelFlag->load(std::memory_order_relaxed); }
  std::atomic<const char*>* activeOperatorSlot() override { return activeSlot; }
  int64_t currentTimestamp() const override { return record->timestamp; }
  void setCurrentTimestamp(int64_t timestamp) override { record->timestamp = timestamp; }
  int64_t currentWatermark() const override { return *watermark; }
  InternalTimerService& timerService() override {
    if (!timers)
      throw StateError("operator '" + name + "' has no timers: timers belong to keyed process functions, windows "
                                             "and joins (after a keyBy)");
    return *timers;
  }
  void emitWatermark(int64_t watermark) override {
    if (!emitWatermarkFn) throw StateError("operator '" + name + "' is not a watermark assigner");
    emitWatermarkFn(watermark);
  }
  void markIdle() override {
    if (!markIdleFn) throw StateError("operator '" + name + "' is not a watermark assigner");
    markIdleFn();
  }
  void* sideOutput(const std::string& tagId) override {
    auto it = sideOutputs.find(tagId);
    return it == sideOutputs.end() ? nullptr : it->second;
  }
  int64_t checkpointIntervalMs() const override { return checkpointInterval; }

  /// The line sinks this operator opened: its task flushes them (see flushLineSinks).
  /// Changed in open() before the task thread starts, then on the task thread only.
  std::vector<BufferedLineSink*> openedSinks;

 private:
  BufferedLineSink& remember(BufferedLineSink& sink) {
    if (std::find(openedSinks.begin(), openedSinks.end(), &sink) == openedSinks.end()) openedSinks.push_back(&sink);
    return sink;
  }
};

}  // namespace

struct JobExecution::Impl {
  bool prepareFailedOnDependency = false;  // prepare(): an operator's open() threw DependencyUnavailable
  /// A triggered checkpoint that is not withdrawn. `aborted` is shared with the
  /// asynchronous parts (SnapshotRequest::aborted) and set when it is withdrawn.
  struct ActiveCheckpoint {
    CheckpointTarget target;
    std::shared_ptr<std::atomic<bool>> aborted;
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
    std::deque<uint64_t> triggers;           // guarded by mailMu; sources: barriers to emit
    std::atomic<bool> hasMail{false};        // mail or triggers may be waiting
    // Task thread only.
    uint64_t suspendedBy = 0;  // source: the stop checkpoint whose barrier it emitted (0: polling)
    bool inputIdle = false;    // the valve was idle when last looked at (onInputTime)
    bool finalCheckpointDone = false;  // source: a checkpoint after every source ended is complete
    std::chrono::steady_clock::time_point nextPeriodicEmit{};
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
            bool dependencyUnavailable = false) {
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

  void enqueueUpload(std::function<void()> fn) {
    std::lock_guard lock(upMu);
    upQueue.push_back(std::move(fn));
    upCv.notify_one();
  }

  void uploaderLoop() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lock(upMu);
        upCv.wait(lock, [&] { return upStop || !upQueue.empty(); });
        if (upQueue.empty()) return;
        fn = std::move(upQueue.front());
        upQueue.pop_front();
      }
      fn();
    }
  }

  /// Hands `fn` to `t`'s thread (see Task's mailbox). Never blocks on the task.
  void post(Task& t, std::function<void()> fn) {
    {
      std::lock_guard lock(t.mailMu);
      t.mail.push_back(std::move(fn));
      t.hasMail.store(true, std::memory_order_release);
    }
    t.mailCv.notify_all();
    if (t.gate) t.gate->wakeUp();
  }

  /// On the uploader (so after every asynchronous part queued before), tells each task
  /// with backends or transactional sinks that checkpoint `id` completed (or was aborted),
  /// on the task's thread. A completed checkpoint that was triggered after every source
  /// had ended then releases the waiting sources (the final checkpoint): their end markers
  /// follow this mail into every task.
  void notifyTasks(uint64_t id, bool complete) {
    enqueueUpload([this, id, complete] {
      for (auto& tp : tasks) {
        if (tp->backends.empty() && tp->committers.empty()) continue;
        Task* t = tp.get();
        post(*t, [t, id, complete] {
          for (auto* b : t->backends) {
            if (complete) b->notifyCheckpointComplete(id);
            else b->notifyCheckpointAborted(id);
          }
          for (int i : t->committers) {
            Operator& op = *t->slots[static_cast<size_t>(i)].op;
            if (complete) op.notifyCheckpointComplete(id);
            else op.notifyCheckpointAborted(id);
          }
        });
      }
      if (!complete || !finalCheckpoint) return;
      {
        std::lock_guard lock(targetsMu);
        if (!afterAllEnded.count(id)) return;
      }
      for (auto& tp : tasks) {
        if (tp->gate) continue;
        Task* t = tp.get();
        post(*t, [t] { t->finalCheckpointDone = true; });
      }
    });
  }

  /// Runs the task's mail and, for a source, emits the barriers of its triggers.
  void drainMail(Task& t) {
    std::deque<std::function<void()>> work;
    std::deque<uint64_t> triggered;
    {
      std::lock_guard lock(t.mailMu);
      work.swap(t.mail);
      triggered.swap(t.triggers);
      t.hasMail.store(false, std::memory_order_relaxed);
    }
    for (auto& fn : work) fn();
    for (uint64_t id : triggered) performCheckpoint(t, id, 0);
  }

  /// A source whose input just ended: serves the mail and triggers that came meanwhile.
  /// If one of them was a stop checkpoint, nothing may follow its barrier: waits (as the
  /// poll loop does) until it is aborted, which resumes the source, or the job is cancelled.
  void serveMailAtEndOfInput(Task& t) {
    drainMail(t);
    while (t.suspendedBy != 0 && !cancelled.load()) {
      waitForMail(t);
      drainMail(t);
    }
  }

  /// A suspended source: waits for mail, a trigger or cancellation.
  void waitForMail(Task& t) {
    const auto idleStart = std::chrono::steady_clock::now();
    std::unique_lock lock(t.mailMu);
    t.mailCv.wait(lock, [&] { return cancelled.load() || t.hasMail.load(std::memory_order_relaxed); });
    t.metrics.idleNanos.add(nanosSince(idleStart));
  }
  static uint64_t nanosSince(std::chrono::steady_clock::time_point start) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  }

  std::string subtaskLabel(const Task& t) const {
    return "(" + std::to_string(t.subtask + 1) + "/" + std::to_string(stages[static_cast<size_t>(t.stage)].parallelism) +
           ")";
  }

  /// The checkpoint if the tasks should still take part in it; nullopt once withdrawn.
  std::optional<ActiveCheckpoint> activeCheckpoint(uint64_t id) {
    std::lock_guard lock(targetsMu);
    auto it = targets.find(id);
    if (it == targets.end()) return std::nullopt;
    return it->second;
  }

  /// Writes out every line the task's operators have produced so far.
  static void flushLineSinks(Task& t) {
    for (auto& s : t.slots)
      for (auto* sink : s.ctx->openedSinks) sink->flush();
  }

  // --- Time --------------------------------------------------------------------------

  /// The watermark slot `i` gets from its parents (the smaller one for a two-input operator).
  static int64_t inputWatermarkOf(const Task& t, int i) {
    int64_t w = kMaxWatermark;
    for (int p : t.slots[static_cast<size_t>(i)].parents) w = std::min(w, t.slots[static_cast<size_t>(p)].output());
    return w;
  }

  /// Delivers watermark `w` to slot `i`: its event-time timers up to `w` fire, the
  /// operator hears of it, an exchange sender forwards it, and its children get theirs.
  void advance(Task& t, int i, int64_t w) {
    Slot& s = t.slots[static_cast<size_t>(i)];
    if (w <= s.watermark) return;
    s.watermark = w;
    if (s.timers) {
      s.timers->advanceWatermark(w, *s.op);
      s.timers->persistIfLarge();
    }
    s.op->onWatermark(w);
    if (s.writer) s.writer->broadcastWatermark(w);
    if (s.node->watermarkAssigner && !s.sender) return;  // it emits its own (emitWatermarkFn)
    forwardToChildren(t, i);
  }
  void forwardToChildren(Task& t, int i) {
    for (int c : t.slots[static_cast<size_t>(i)].children) advance(t, c, inputWatermarkOf(t, c));
  }

  /// Processing-time timers that are due, and the periodic call of watermark assigners.
  void serviceTime(Task& t) {
    if (!t.timerSlots.empty()) {
      const int64_t now = wallClockMillis();
      for (int i : t.timerSlots) {
        Slot& s = t.slots[static_cast<size_t>(i)];
        if (s.timers->nextProcessingTime() <= now) s.timers->fireProcessingTimers(now, *s.op);
      }
    }
    if (!t.assigners.empty() && config.autoWatermarkIntervalMs > 0) {
      auto now = std::chrono::steady_clock::now();
      if (now >= t.nextPeriodicEmit) {
        t.nextPeriodicEmit = now + std::chrono::milliseconds(config.autoWatermarkIntervalMs);
        for (int i : t.assigners) t.slots[static_cast<size_t>(i)].op->onPeriodicEmit();
      }
    }
  }

  /// When the task must wake up for serviceTime() at the latest.
  std::chrono::steady_clock::time_point nextTimeDeadline(const Task& t) const {
    auto deadline = std::chrono::steady_clock::time_point::max();
    if (!t.assigners.empty() && config.autoWatermarkIntervalMs > 0) deadline = t.nextPeriodicEmit;
    if (!t.timerSlots.empty()) {
      int64_t next = kMaxWatermark;
      for (int i : t.timerSlots) next = std::min(next, t.slots[static_cast<size_t>(i)].timers->nextProcessingTime());
      if (next != kMaxWatermark) {
        int64_t wait = std::max<int64_t>(0, next - wallClockMillis());
        deadline = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(wait));
      }
    }
    return deadline;
  }

  /// The input watermark changed (nullopt: it did not); the idle status may have. An idle
  /// input makes the task's outputs idle, and an input active again makes them active at
  /// once (not only at the next record): downstream tasks must wait for this task's
  /// watermark again before theirs passes it.
  void onInputTime(Task& t, std::optional<int64_t> w) {
    if (t.valve->idle() != t.inputIdle) {
      t.inputIdle = t.valve->idle();
      for (auto& wr : t.writers) {
        if (t.inputIdle) wr->markIdle();
        else wr->activate();
      }
    }
    if (!w) return;
    t.metrics.inputWatermark.store(*w, std::memory_order_relaxed);
    for (int h : t.heads) advance(t, h, *w);
  }

  // --- Checkpoints -------------------------------------------------------------------

  /// Checkpoint `id` at this point of the task's input (a source: between two polls; an
  /// input task: its barrier is aligned). The synchronous part runs here, the
  /// asynchronous part on the uploader. The barrier is forwarded in every case, also
  /// when the checkpoint was withdrawn: downstream tasks align on it.
  void performCheckpoint(Task& t, uint64_t id, uint64_t alignmentMicros) {
    std::optional<ActiveCheckpoint> active = activeCheckpoint(id);
    // stop --drain: the end of time before the barrier, so every window fires first.
    if (active && active->target.drain && !t.gate)
      for (int h : t.heads) advance(t, h, kMaxWatermark);
    // Lines of records before the barrier reach the OS before anyone learns of it.
    flushLineSinks(t);
    auto broadcastBarrier = [&] {
      for (auto& w : t.writers) w->broadcast(ChannelEvent::kBarrier, id);
    };
    if (!active) {
      broadcastBarrier();
      return;
    }
    const CheckpointTarget& target = active->target;
    auto syncStart = std::chrono::steady_clock::now();
    auto snap = std::make_shared<TaskSnapshot>();
    snap->taskIndex = t.index;
    snap->alignmentMicros = alignmentMicros;
    std::vector<std::pair<size_t, std::unique_ptr<state::AsyncSnapshot>>> asyncParts;
    Status failure;
    std::map<const Slot*, size_t> snapSlot;
    for (int i : t.committers) t.slots[static_cast<size_t>(i)].op->beforeSnapshot(id);
    for (auto& s : t.slots) {
      const PlanNode* n = s.node;
      if (s.sender || (n->kind != NodeKind::kSource && !n->keyed && !n->operatorState)) continue;
      state::SubtaskSnapshot ss;
      ss.index = t.subtask;
      ss.operatorState = s.op->snapshotState();
      snapSlot[&s] = snap->operators.size();
      snap->operators.emplace_back(n->uid, std::move(ss));
    }
    // The timers' backend copy holds exactly the timers registered now (timer_service.h).
    for (int i : t.timerSlots) {
      try {
        t.slots[static_cast<size_t>(i)].timers->persist();
      } catch (const std::exception& e) {
        failure = Status::IOError(std::string("cannot write the timers of ") + t.slots[static_cast<size_t>(i)].node->name +
                                  " " + t.label + " to its state backend: " + e.what());
      }
    }
    for (size_t b = 0; b < t.backends.size() && failure.ok(); ++b) {
      const Slot& s = t.slots[static_cast<size_t>(t.backendSlot[b])];
      const PlanNode* n = s.node;
      snap->states[n->uid] = t.backends[b]->states();
      state::SnapshotRequest req;
      req.checkpointId = id;
      req.format = target.format;
      req.storage = target.storage.get();
      req.exclusiveDir = target.exclusiveDir;
      req.sharedDir = target.sharedDir;
      req.filePrefix = n->uid + "-" + std::to_string(t.subtask);
      req.aborted = active->aborted;
      auto a = t.backends[b]->snapshotSync(req);
      if (!a.ok()) {
        failure = a.status();
        break;
      }
      t.metrics.backendEntries[b].store(t.backends[b]->approximateEntries(), std::memory_order_relaxed);
      asyncParts.emplace_back(snapSlot.at(&s), std::move(*a));
    }
    snap->syncMicros = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - syncStart).count());
    if (alignmentMicros > 0)
      spdlog::debug("checkpoint {}: task {} {} aligned its inputs in {} us", id, t.slots.front().node->name, t.label,
                    alignmentMicros);
    broadcastBarrier();
    // Atomic stop: nothing after this barrier. An abort posted from now on finds
    // suspendedBy set and resumes the source (mail runs on this thread, after this).
    if (!t.gate && target.stopSources) t.suspendedBy = id;
    if (!failure.ok()) {
      enqueueUpload(
          [this, id, failure] { listener->decline(id, CheckpointFailureReason::kSnapshotFailed, failure); });
      return;
    }
    auto parts = std::make_shared<decltype(asyncParts)>(std::move(asyncParts));
    enqueueUpload([this, id, snap, parts, aborted = active->aborted, keepAlive = target.storage] {
      // Not started yet: its files would only be cleaned up again. Nothing to report.
      if (aborted->load(std::memory_order_acquire)) return;
      // Started: report exactly once, when nothing is being written any more. Each
      // part checks `aborted` as it goes and stops early.
      for (auto& [slot, part] : *parts) {
        auto h = part->run();
        if (!h.ok()) {
          listener->decline(id, CheckpointFailureReason::kSnapshotFailed, h.status());
          return;
        }
        snap->operators[slot].second.keyed = std::move(*h);
      }
      listener->acknowledge(id, std::move(*snap));
    });
  }

  void flushOutputs(Task& t) {
    for (auto& w : t.writers) w->flush();
    flushLineSinks(t);
  }

  void finishTask(Task& t) {
    finishedTasks.fetch_add(1);
    for (auto& s : t.slots) s.op->endInput();
    for (auto& s : t.slots) s.op->close();
    for (auto& w : t.writers) w->broadcast(ChannelEvent::kEnd, 0);
    flushLineSinks(t);
  }

  // --- Task loops --------------------------------------------------------------------

  void runSource(Task& t) {
    const int head = t.heads.front();
    auto* src = static_cast<SourceOperator*>(t.slots[static_cast<size_t>(head)].op.get());
    auto lastFlush = std::chrono::steady_clock::now();
    while (!cancelled.load(std::memory_order_relaxed)) {
      if (t.hasMail.load(std::memory_order_acquire)) drainMail(t);
      if (t.suspendedBy != 0) {
        // Stopped by a stop checkpoint: no poll until it is aborted or we are cancelled.
        // Later triggers are still served (barriers only).
        waitForMail(t);
        continue;
      }
      t.record.timestamp = kNoTimestamp;
      PollStatus st = src->poll();
      if (st == PollStatus::kEnd) break;
      serviceTime(t);
      auto now = std::chrono::steady_clock::now();
      if (st == PollStatus::kIdle || now - lastFlush > kFlushInterval) {
        flushOutputs(t);
        lastFlush = now;
      }
    }
    if (!cancelled.load()) {
      // A checkpoint triggered while the last poll ran: its barrier still follows the last
      // record (the source's position is its end). Declining it instead failed checkpoints
      // of bounded jobs at random, depending on when the input ended (issue 35).
      serveMailAtEndOfInput(t);
    }
    if (!cancelled.load()) {
      advance(t, head, kMaxWatermark);  // the end of a bounded input: every event-time timer fires
      if (finalCheckpoint) {
        // Serve checkpoints until one triggered after every source ended is complete.
        flushOutputs(t);
        if (endedSources.fetch_add(1) + 1 == sourceTasks) listener->finalCheckpointWanted();
        while (!cancelled.load() && !t.finalCheckpointDone) {
          waitForMail(t);
          drainMail(t);
        }
      }
      if (!cancelled.load()) finishTask(t);
    }
    // Triggers that arrived after the last poll can no longer be served.
    std::deque<uint64_t> left;
    {
      std::lock_guard lock(t.mailMu);
      left.swap(t.triggers);
    }
    for (uint64_t id : left)
      enqueueUpload([this, id] {
        listener->decline(id, CheckpointFailureReason::kTaskFinished,
                          Status::IOError("a source had finished before the checkpoint reached it"));
      });
  }

  void processData(Task& t, const ChannelEvent& ev) {
    Slot& head = t.slots[static_cast<size_t>(t.channelHead[static_cast<size_t>(ev.channel)])];
    auto* receiver = static_cast<ExchangeReceiver*>(head.op.get());
    ByteReader r(ev.data);
    uint64_t received = 0;
    while (!r.atEnd()) {
      uint16_t kg = r.readFixed<uint16_t>();
      int64_t ts = r.readI64();
      std::string_view key = r.readBytes();
      std::string_view rec = r.readBytes();
      if (kg != kNoKeyGroup) {
        t.record.keyGroup = kg;
        head.ctx->setCurrentKey(key);
      }
      t.record.timestamp = ts;
      ++received;
      receiver->receive(rec);
    }
    t.metrics.recordsIn.add(received);
    for (int i : t.timerSlots) t.slots[static_cast<size_t>(i)].timers->persistIfLarge();
  }

  void runInput(Task& t) {
    BarrierAligner aligner(t.gate->channels());
    while (!cancelled.load(std::memory_order_relaxed)) {
      auto ev = t.gate->tryNext(aligner.blocked());
      if (!ev) {
        flushOutputs(t);
        // nullopt: cancelled, woken for mail, or time to fire timers / emit watermarks
        const auto idleStart = std::chrono::steady_clock::now();
        ev = t.gate->next(aligner.blocked(), nextTimeDeadline(t));
        t.metrics.idleNanos.add(nanosSince(idleStart));
      }
      // Mail posted before `ev` was sent runs before `ev` is handled: a notification the
      // uploader delivered before a barrier was sent reaches the backends before it.
      if (t.hasMail.load(std::memory_order_acquire)) drainMail(t);
      serviceTime(t);
      if (!ev) continue;
      std::optional<uint64_t> aligned;
      switch (ev->kind) {
        case ChannelEvent::kData:
          processData(t, *ev);
          break;
        case ChannelEvent::kBarrier:
          aligned = aligner.onBarrier(ev->channel, ev->checkpointId);
          break;
        case ChannelEvent::kEnd:
          onInputTime(t, t.valve->onEnd(ev->channel));
          aligned = aligner.onEndOfChannel(ev->channel);
          break;
        case ChannelEvent::kWatermark:
          onInputTime(t, t.valve->onWatermark(ev->channel, ev->value));
          break;
        case ChannelEvent::kStatus:
          onInputTime(t, t.valve->onStatus(ev->channel, ev->value != 0));
          break;
      }
      if (aligned) performCheckpoint(t, *aligned, aligner.lastAlignmentMicros());
      if (aligner.allEnded()) {
        finishTask(t);
        return;
      }
    }
  }

  void runTask(Task& t) {
    tCrashInfo.slot = &t.activeOperator;
    tCrashInfo.subtask = t.label.c_str();
    try {
      if (t.gate) runInput(t);
      else runSource(t);
      if (cancelled.load() && !hasFailed()) {
        // A cancelled task still closes its operators (user close() runs), without endInput().
        for (auto& s : t.slots) s.op->close();
        flushLineSinks(t);
      }
    } catch (const UserCodeError& e) {
      fail(e.what(), e.operatorName(), subtaskLabel(t), false, e.dependencyUnavailable());
    } catch (const DependencyUnavailable& e) {  // thrown outside callUser (a sink's commit)
      fail(e.what(), t.slots.empty() ? "" : t.slots.back().node->name, subtaskLabel(t), false, true);
    } catch (...) {
      // A std::exception, or anything else user code threw outside the SDK's callUser()
      // (a plugin built against an older SDK): a task failure, never std::terminate.
      std::string op = t.slots.empty() ? "" : t.slots.back().node->name;
      fail(describeCurrentException(), op, subtaskLabel(t));
    }
    if (liveTasks.fetch_sub(1) == 1) {
      std::lock_guard lock(upMu);
      upStop = true;
      upCv.notify_all();
    }
  }
};

bool activeOperatorOfThisThread(const char** operatorName, const char** subtask) {
  if (!tCrashInfo.slot) return false;
  *operatorName = tCrashInfo.slot->load(std::memory_order_relaxed);
  *subtask = tCrashInfo.subtask;
  return *operatorName != nullptr;
}

JobExecution::JobExecution(Plan plan, ExecutionConfig config, CheckpointListener* listener)
    : impl_(std::make_unique<Impl>(std::move(plan), std::move(config), listener)) {}

JobExecution::~JobExecution() {
  cancel();
  for (auto& t : impl_->tasks)
    if (t->thread.joinable()) t->thread.join();
  {
    std::lock_guard lock(impl_->upMu);
    impl_->upStop = true;
    impl_->upCv.notify_all();
  }
  if (impl_->uploader.joinable()) impl_->uploader.join();
}

namespace {
/// The restore error for operator `uid` keeping the failure's kind: final only when no
/// retry can help — the snapshot does not fit (Incompatible) or is damaged (Corruption;
/// a file it references is missing, a path in it is invalid). Local trouble (a full or
/// failing disk, a permission, the working directory gone) keeps its code: a task failure
/// for the restart strategy.
Status restoreError(const Status& s, const std::string& what) {
  switch (s.code()) {
    case Status::Code::kIncompatible: return Status::Incompatible(what);
    case Status::Code::kCorruption:
    case Status::Code::kInvalidArgument: return Status::Corruption(what);
    case Status::Code::kNoSpace: return Status::NoSpace(what);
    case Status::Code::kPermissionDenied: return Status::PermissionDenied(what);
    case Status::Code::kUnavailable: return Status::Unavailable(what);
    default: return Status::IOError(what);
  }
}
}  // namespace

Status JobExecution::prepare(const RestoreSource* source) {
  Impl& x = *impl_;
  const Plan& plan = x.plan;
  using Slot = Impl::Slot;
  x.finalCheckpoint = x.config.checkpointing &&
                      std::any_of(plan.nodes.begin(), plan.nodes.end(), [](const PlanNode& n) { return n.twoPhaseCommit; });
  // Tasks and gates.
  std::vector<std::vector<Impl::Task*>> byStage(x.stages.size());
  for (size_t s = 0; s < x.stages.size(); ++s) {
    for (int i = 0; i < x.stages[s].parallelism; ++i) {
      auto t = std::make_unique<Impl::Task>();
      t->index = static_cast<int>(x.tasks.size());
      t->stage = static_cast<int>(s);
      t->subtask = i;
      if (x.stages[s].channelCount() > 0) {
        t->gate = std::make_unique<InputGate>(x.stages[s].channelCount(), kChannelCapacity);
        t->valve = std::make_unique<WatermarkValve>(x.stages[s].channelCount());
      }
      if (!t->gate) ++x.sourceTasks;
      byStage[s].push_back(t.get());
      x.tasks.push_back(std::move(t));
    }
  }
  // What is restored where: exactly what the restore preflight reported (one owner).
  std::map<std::string, const state::OperatorSnapshot*> restoredKeyed, restoredOperatorState;
  if (source) {
    StateAssignment assignment = assignState(*source->metadata, x.operatorInfos, source->allowNonRestoredState);
    if (!assignment.ok()) {
      std::string all;
      for (const auto& e : assignment.errors()) all += (all.empty() ? "" : "; ") + e;
      return Status::Incompatible("cannot restore this snapshot into the job: " + all);
    }
    for (const auto& op : assignment.operators) {
      if (op.action == StateAssignment::Action::kRestoreKeyedState) restoredKeyed[op.snapshot->uid] = op.snapshot;
      if (op.action == StateAssignment::Action::kRestoreSourcePosition)
        restoredOperatorState[op.snapshot->uid] = op.snapshot;
    }
  }
  for (auto& tp : x.tasks) {
    Impl::Task& t = *tp;
    const Stage& st = x.stages[static_cast<size_t>(t.stage)];
    t.label = x.subtaskLabel(t);
    t.name = taskName(plan, st);
    // Slots: the stage's nodes, then one sender per output.
    std::map<int, int> slotOfNode;
    std::map<std::pair<int, size_t>, int> senderSlot;  // (exchange, input position) -> slot
    for (int id : st.nodes) {
      slotOfNode[id] = static_cast<int>(t.slots.size());
      t.slots.emplace_back();
      t.slots.back().node = &plan.nodes[static_cast<size_t>(id)];
    }
    for (const auto& out : st.outputs) {
      senderSlot[{out.exchange, out.position}] = static_cast<int>(t.slots.size());
      Slot s;
      s.node = &plan.nodes[static_cast<size_t>(out.exchange)];
      s.sender = true;
      // The receivers: the consuming stage's gates; this subtask's channel in them.
      const Stage& cs = x.stages[static_cast<size_t>(
          std::find_if(x.stages.begin(), x.stages.end(),
                       [&](const Stage& c) { return std::count(c.heads.begin(), c.heads.end(), out.exchange) > 0; }) -
          x.stages.begin())];
      size_t consumerStage = static_cast<size_t>(&cs - x.stages.data());
      int channel = -1;
      for (const auto& g : cs.channels)
        if (g.exchange == out.exchange && g.position == out.position) channel = g.firstChannel + t.subtask;
      std::vector<InputGate*> gates;
      for (auto* c : byStage[consumerStage]) gates.push_back(c->gate.get());
      t.writers.push_back(std::make_unique<ExchangeWriterImpl>(std::move(gates), channel, t.subtask, st.parallelism,
                                                               x.config.maxParallelism, &t.record, &t.metrics,
                                                               /*recordsActivate=*/!t.gate));
      s.writer = t.writers.back().get();
      t.slots.push_back(std::move(s));
    }
    for (int h : st.heads) t.heads.push_back(slotOfNode.at(h));
    t.channelHead.assign(static_cast<size_t>(st.channelCount()), -1);
    for (const auto& g : st.channels)
      for (int c = 0; c < g.count; ++c) t.channelHead[static_cast<size_t>(g.firstChannel + c)] = slotOfNode.at(g.exchange);
    // Edges inside the task: each node's outputs to the slots that read them.
    auto targetOf = [&](const Use& u) {
      const PlanNode& c = plan.nodes[static_cast<size_t>(u.consumer)];
      return c.kind == NodeKind::kExchange ? senderSlot.at({u.consumer, u.position}) : slotOfNode.at(u.consumer);
    };
    for (int id : st.nodes)
      for (const Use& u : x.graph.usesOf(id)) {
        int from = slotOfNode.at(id), to = targetOf(u);
        t.slots[static_cast<size_t>(from)].children.push_back(to);
        t.slots[static_cast<size_t>(to)].parents.push_back(from);
      }
    // Operators, downstream first: each factory gets its main consumer's input.
    auto inputOf = [&](const Use& u) -> void* {
      Operator* op = t.slots[static_cast<size_t>(targetOf(u))].op.get();
      return u.position == 1 && plan.nodes[static_cast<size_t>(u.consumer)].kind != NodeKind::kExchange ? op->input2()
                                                                                                        : op->input();
    };
    // What output `tag` of slot `s` writes to: its one reader's input, or a fan-out to
    // all of them; nullptr if nothing reads it.
    auto outputOf = [&](Slot& s, const std::string& tag) -> void* {
      std::vector<void*> readers;
      for (const Use& u : x.graph.usesOf(s.node->id))
        if (u.tag == tag) readers.push_back(inputOf(u));
      if (readers.size() <= 1) return readers.empty() ? nullptr : readers.front();
      auto f = s.node->fanOut.find(tag);
      if (f == s.node->fanOut.end())
        throw JobArgumentError("operator '" + s.node->name + "' feeds " + std::to_string(readers.size()) +
                               " operators, but its plan has no fan-out for that output: the plugin was built "
                               "against other SDK headers than this jobhost's; rebuild it");
      s.fanOuts.push_back(f->second(std::move(readers)));
      return s.fanOuts.back()->input();
    };
    std::vector<std::map<std::string, void*>> sideOutputsOf(t.slots.size());  // slot -> tag -> reader
    try {
      for (size_t i = t.slots.size(); i-- > 0;) {
        Slot& s = t.slots[i];
        if (s.sender) {
          s.op = s.node->createSender();
          continue;
        }
        s.op = s.node->create(outputOf(s, ""));
        for (const Use& u : x.graph.usesOf(s.node->id))
          if (!u.tag.empty() && !sideOutputsOf[i].count(u.tag)) sideOutputsOf[i][u.tag] = outputOf(s, u.tag);
      }
    } catch (...) {
      return Status::IOError("creating the operators of " + t.slots.front().node->name + " failed: " +
                             describeCurrentException());
    }
    state::KeyGroupRange range = state::keyGroupRangeFor(x.config.maxParallelism, st.parallelism, t.subtask);
    for (size_t i = 0; i < t.slots.size(); ++i) {
      Slot& s = t.slots[i];
      const PlanNode& n = *s.node;
      auto ctx = std::make_unique<OperatorContextImpl>();
      ctx->subtask = t.subtask;
      ctx->par = st.parallelism;
      ctx->maxPar = x.config.maxParallelism;
      ctx->name = n.name;
      ctx->uidStr = n.uid;
      ctx->taskBackends = &t.backends;
      ctx->record = &t.record;
      ctx->writer = s.writer;
      ctx->cancelFlag = &x.cancelled;
      ctx->activeSlot = &t.activeOperator;
      ctx->checkpointInterval = x.config.checkpointIntervalMs;
      ctx->watermark = &s.watermark;
      if (!s.sender) ctx->sideOutputs = std::move(sideOutputsOf[i]);
      if (n.watermarkAssigner && !s.sender) {
        Impl::Task* tp = &t;
        const int idx = static_cast<int>(i);
        ctx->emitWatermarkFn = [&x, tp, idx](int64_t w) {
          Slot& a = tp->slots[static_cast<size_t>(idx)];
          if (w <= a.emitted) return;
          a.emitted = w;
          x.forwardToChildren(*tp, idx);
        };
        // Idle: the outputs this assigner feeds (not a branch of the task it does not).
        std::vector<ExchangeWriterImpl*> fed;
        std::vector<int> todo{idx};
        std::set<int> seen;
        while (!todo.empty()) {
          int j = todo.back();
          todo.pop_back();
          if (!seen.insert(j).second) continue;
          if (t.slots[static_cast<size_t>(j)].writer) fed.push_back(t.slots[static_cast<size_t>(j)].writer);
          for (int c : t.slots[static_cast<size_t>(j)].children) todo.push_back(c);
        }
        ctx->markIdleFn = [fed] {
          for (auto* wr : fed) wr->markIdle();
        };
        t.assigners.push_back(idx);
      }
      if (n.keyed && !s.sender) {
        state::BackendOptions bo;
        bo.operatorUid = n.uid;
        bo.subtaskIndex = t.subtask;
        bo.maxParallelism = x.config.maxParallelism;
        bo.range = range;
        bo.incremental = x.config.incremental;
        bo.rocksdb = x.config.rocksdb;
        bo.localDir = (fs::path(x.config.localStateDir) / (n.uid + "-" + std::to_string(t.subtask))).string();
        auto b = x.config.backend == state::BackendType::kRocksDb ? state::createRocksDbBackend(bo)
                                                                  : state::createHeapBackend(bo);
        if (!b.ok()) return b.status();
        const std::string where =
            "operator '" + n.uid + "' (" + std::to_string(t.subtask + 1) + "/" + std::to_string(st.parallelism) + ")";
        auto it = restoredKeyed.find(n.uid);
        if (it != restoredKeyed.end()) {
          state::RestoreInput in;
          in.storage = source->storage;
          in.states = it->second->states;
          for (const auto& sub : it->second->subtasks) {
            state::KeyGroupRange hr = state::handleRange(sub.keyed);
            if (hr.empty()) continue;
            if (!hr.intersect(range).empty()) in.handles.push_back(sub.keyed);
          }
          Status rs;
          try {
            rs = (*b)->restore(in);
          } catch (const std::exception& e) {  // a backend rejecting the recorded descriptors
            rs = Status::Corruption(e.what());
          }
          if (!rs.ok()) return restoreError(rs, "cannot restore state of " + where + ": " + rs.message());
        }
        if (n.timers) {
          // The timer states the SDK declared for the node; their entries are the timers.
          int eventState = -1, processingState = -1;
          try {
            for (const auto& d : n.states) {
              if (d.name == detail::kEventTimersState) eventState = (*b)->registerState(d);
              if (d.name == detail::kProcessingTimersState) processingState = (*b)->registerState(d);
            }
            if (eventState < 0 || processingState < 0)
              return Status::InvalidArgument("operator '" + n.name +
                                             "' uses timers but its plan declares no timer states: the plugin was "
                                             "built against other SDK headers than this jobhost's; rebuild it");
            s.timers = std::make_unique<TaskTimerService>(**b, eventState, processingState, t.record, t.backends,
                                                          s.watermark);
            s.timers->load();
          } catch (const std::exception& e) {
            return Status::Corruption("cannot restore the timers of " + where + ": " + e.what());
          }
          ctx->timers = s.timers.get();
          t.timerSlots.push_back(static_cast<int>(i));
        }
        ctx->backend = b->get();
        t.backends.push_back(b->get());
        t.backendSlot.push_back(static_cast<int>(i));
        t.backendsOwned.push_back(std::move(*b));
      }
      if ((n.twoPhaseCommit || n.checkpointListener) && !s.sender) t.committers.push_back(static_cast<int>(i));
      if (n.keyed && !s.sender) t.metrics.backendEntries.emplace_back(t.backends.back()->approximateEntries());
      if ((n.kind == NodeKind::kSource || n.operatorState) && !s.sender) {
        auto it = restoredOperatorState.find(n.uid);
        if (it != restoredOperatorState.end()) {
          // Same parallelism: each subtask its own; rescaled: every subtask all of them
          // (the operator merges, Operator::restoreState).
          const bool same = it->second->parallelism == st.parallelism;
          for (const auto& sub : it->second->subtasks) {
            if (same ? sub.index != t.subtask : sub.operatorState.empty()) continue;
            try {
              s.op->restoreState(sub.operatorState);
            } catch (...) {
              return Status::Incompatible(
                  std::string("cannot restore the ") + (n.kind == NodeKind::kSource ? "position of source '" : "state of operator '") +
                  n.uid + "' (" + n.name + ") from the snapshot: " + describeCurrentException() +
                  (n.kind == NodeKind::kSource ? " (was the snapshot written by a job reading another kind of source?)"
                                                : ""));
            }
          }
        }
      }
      s.ctx = std::move(ctx);
    }
    // Not a restore failure: opening (e.g. connecting a socket) may succeed on a retry.
    for (auto& s : t.slots) {
      try {
        s.op->open(*s.ctx);
      } catch (...) {
        bool unavailable = false;
        try {
          throw;
        } catch (const DependencyUnavailable&) {
          unavailable = true;
        } catch (const UserCodeError& e) {
          unavailable = e.dependencyUnavailable();
        } catch (...) {
        }
        const std::string msg =
            "operator '" + s.node->name + "' " + t.label + " failed to open: " + describeCurrentException();
        if (unavailable) {
          x.prepareFailedOnDependency = true;
          return Status::Unavailable(msg);
        }
        return Status::IOError(msg);
      }
    }
  }
  return Status::OK();
}

bool JobExecution::prepareFailedOnDependency() const { return impl_->prepareFailedOnDependency; }

void JobExecution::start() {
  Impl& x = *impl_;
  x.liveTasks.store(static_cast<int>(x.tasks.size()));
  x.uploader = std::thread([&x] { x.uploaderLoop(); });
  for (auto& t : x.tasks) {
    Impl::Task* tp = t.get();
    tp->thread = std::thread([&x, tp] { x.runTask(*tp); });
  }
  x.started.store(true);
}

ExecutionResult JobExecution::wait() {
  for (auto& t : impl_->tasks)
    if (t->thread.joinable()) t->thread.join();
  {
    std::lock_guard lock(impl_->upMu);
    impl_->upStop = true;
    impl_->upCv.notify_all();
  }
  if (impl_->uploader.joinable()) impl_->uploader.join();
  LineSinks::instance().flush();
  std::lock_guard lock(impl_->resultMu);
  if (!impl_->failed && impl_->cancelled.load()) impl_->result.kind = ExecutionResult::kCancelled;
  return impl_->result;
}

void JobExecution::cancel() {
  impl_->cancelAll();
}

void JobExecution::failExternally(const std::string& reason) { impl_->fail(reason, "", ""); }

bool JobExecution::triggerCheckpoint(const CheckpointTarget& target) {
  Impl& x = *impl_;
  // Once a task has finished it cannot take part in a checkpoint any more (Flink before
  // FLIP-147 behaves the same): no new checkpoints, the job is draining.
  if (!running() || x.finishedTasks.load() > 0) return false;
  {
    std::lock_guard lock(x.targetsMu);
    x.targets[target.checkpointId] = {target, std::make_shared<std::atomic<bool>>(false)};
    while (x.targets.size() > 8) x.targets.erase(x.targets.begin());
    if (x.finalCheckpoint && x.endedSources.load() == x.sourceTasks) x.afterAllEnded.insert(target.checkpointId);
  }
  for (auto& t : x.tasks) {
    if (t->gate) continue;
    {
      std::lock_guard lock(t->mailMu);
      t->triggers.push_back(target.checkpointId);
      t->hasMail.store(true, std::memory_order_release);
    }
    t->mailCv.notify_all();
  }
  return true;
}

void JobExecution::notifyCheckpointComplete(uint64_t id) {
  // Through the uploader, so after every asynchronous part queued before (those of this
  // checkpoint have all reported, or it would not be complete), then on each task thread.
  impl_->notifyTasks(id, /*complete=*/true);
}

void JobExecution::notifyCheckpointAborted(uint64_t id) {
  Impl& x = *impl_;
  bool drained = false;
  {
    // Withdraw the target at once: tasks that have not snapshotted only forward its
    // barrier, queued asynchronous parts do not run, running ones stop early.
    std::lock_guard lock(x.targetsMu);
    auto it = x.targets.find(id);
    if (it != x.targets.end()) {
      it->second.aborted->store(true, std::memory_order_release);
      drained = it->second.target.drain;
      x.targets.erase(it);
    }
  }
  if (drained) {
    // The sources may have sent the maximum watermark already: every window fired and
    // every later record would be late. Resuming is wrong; restart from the latest
    // checkpoint instead (the restart strategy decides), as a Flink failover would.
    x.fail("the savepoint of `jobhost stop --drain` (" + std::to_string(id) +
               ") failed after the maximum watermark may have been sent, so the job cannot resume; it restarts from "
               "its latest checkpoint (as the restart strategy allows)",
           "", "");
    return;
  }
  for (auto& tp : x.tasks) {
    if (tp->gate) continue;
    Impl::Task* t = tp.get();
    {
      std::lock_guard lock(t->mailMu);
      std::erase(t->triggers, id);
    }
    // A source suspended by this (stop) checkpoint polls again.
    x.post(*t, [t, id] {
      if (t->suspendedBy == id) t->suspendedBy = 0;
    });
  }
  x.notifyTasks(id, /*complete=*/false);
}

int JobExecution::taskCount() const { return static_cast<int>(impl_->tasks.size()); }
const std::vector<OperatorInfo>& JobExecution::operators() const { return impl_->operatorInfos; }
bool JobExecution::running() const {
  return impl_->started.load() && !impl_->cancelled.load() && impl_->liveTasks.load() > 0;
}
uint64_t JobExecution::recordsIn() const {
  uint64_t n = 0;
  for (const auto& t : impl_->tasks) n += t->metrics.recordsIn.get();
  return n;
}
uint64_t JobExecution::recordsOut() const {
  uint64_t n = 0;
  for (const auto& t : impl_->tasks) n += t->metrics.recordsOut.get();
  return n;
}

std::vector<TaskMetricsSample> JobExecution::taskMetrics() const {
  std::vector<TaskMetricsSample> out;
  for (const auto& tp : impl_->tasks) {
    const Impl::Task& t = *tp;
    TaskMetricsSample s;
    s.name = t.name;
    s.subtask = t.subtask;
    s.parallelism = impl_->stages[static_cast<size_t>(t.stage)].parallelism;
    s.recordsIn = t.metrics.recordsIn.get();
    s.recordsOut = t.metrics.recordsOut.get();
    s.idleNanos = t.metrics.idleNanos.get();
    s.backPressuredNanos = t.metrics.backPressuredNanos.get();
    s.inputWatermark = t.metrics.inputWatermark.load(std::memory_order_relaxed);
    for (size_t b = 0; b < t.metrics.backendEntries.size() && b < t.backendSlot.size(); ++b)
      s.backends.push_back({t.slots[static_cast<size_t>(t.backendSlot[b])].node->uid,
                            state::backendTypeName(impl_->config.backend),
                            t.metrics.backendEntries[b].load(std::memory_order_relaxed)});
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace jobhost::host
