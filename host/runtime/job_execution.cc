// One execution attempt: stages, tasks, channels, backends, barriers. See the header.
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

#include "checkpoint/state_assignment.h"
#include "jobhost/serializer.h"
#include "runtime/barrier_aligner.h"
#include "runtime/channel.h"
#include "runtime/line_sinks.h"

namespace jobhost::host {

namespace fs = std::filesystem;
using state::Status;

int keyGroupFor(std::string_view key, int maxParallelism) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a, then a murmur3 finaliser
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return static_cast<int>(h % static_cast<uint64_t>(maxParallelism));
}

namespace {

constexpr size_t kBufferBytes = 32 * 1024;
constexpr size_t kChannelCapacity = 16;
constexpr auto kFlushInterval = std::chrono::milliseconds(20);

struct Stage {
  std::vector<int> nodes;  // chain order; first: source or exchange node (receiver side)
  int parallelism = 1;
  int outputExchange = -1;  // exchange node whose sender ends this chain
  int nextStage = -1;
};

/// `text` with bytes that are not printable ASCII shown as \xNN (for messages).
std::string printable(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

/// Throws JobArgumentError naming the operator if its uid is not valid.
void checkUid(const PlanNode& n) {
  std::string why = validateOperatorUid(n.uid);
  if (why.empty()) return;
  std::string what = n.uidExplicit ? "uid '" + printable(n.uid) + "' of operator '" + printable(n.name) + "'"
                                   : "the default uid '" + printable(n.uid) + "' of operator '" + printable(n.name) +
                                         "' (made from its name)";
  throw JobArgumentError(what + " is not valid: " + why +
                         ". A uid names files and directories of the job's state: use 1 to 128 letters, digits, '.', "
                         "'_' or '-', not starting with '.' (e.g. .uid(\"counts\"))" +
                         (n.uidExplicit ? "" : "; give the operator one with .uid(...)"));
}

std::vector<Stage> buildStages(const Plan& plan, int parallelism) {
  for (const auto& n : plan.nodes) checkUid(n);
  std::vector<int> consumer(plan.nodes.size(), -1);
  for (const auto& n : plan.nodes)
    if (n.input >= 0) consumer[static_cast<size_t>(n.input)] = n.id;
  std::vector<Stage> stages;
  std::map<int, int> stageOfExchange;
  for (const auto& n : plan.nodes) {
    if (n.kind != NodeKind::kSource) continue;
    int stageStart = n.id;
    int stageParallelism = 1;
    int prevStage = -1;
    while (stageStart >= 0) {
      Stage s;
      s.parallelism = stageParallelism;
      int cur = stageStart;
      s.nodes.push_back(cur);
      int next = consumer[static_cast<size_t>(cur)];
      while (next >= 0 && plan.nodes[static_cast<size_t>(next)].kind != NodeKind::kExchange) {
        s.nodes.push_back(next);
        cur = next;
        next = consumer[static_cast<size_t>(cur)];
      }
      if (plan.nodes[static_cast<size_t>(cur)].kind != NodeKind::kSink && next < 0)
        throw JobArgumentError("the stream produced by '" + plan.nodes[static_cast<size_t>(cur)].name +
                               "' is never consumed: end it with print(), writeAsText() or addSink()");
      s.outputExchange = next;
      int idx = static_cast<int>(stages.size());
      if (prevStage >= 0) stages[static_cast<size_t>(prevStage)].nextStage = idx;
      stages.push_back(std::move(s));
      prevStage = idx;
      stageStart = next;
      stageParallelism = parallelism;
    }
  }
  if (stages.empty()) throw JobArgumentError("the job defines no source: build() must create at least one stream");
  return stages;
}

/// Sends records of one producing subtask to the gates of the next stage.
class ExchangeWriterImpl : public ExchangeWriter {
 public:
  ExchangeWriterImpl(std::vector<InputGate*> gates, int channel, int maxParallelism, std::atomic<uint64_t>* out)
      : gates_(std::move(gates)), channel_(channel), maxParallelism_(maxParallelism), buffers_(gates_.size()),
        recordsOut_(out) {}
  void emit(std::string_view key, std::string_view record) override {
    int kg = keyGroupFor(key, maxParallelism_);
    size_t target = static_cast<size_t>(kg) * gates_.size() / static_cast<size_t>(maxParallelism_);
    std::string& b = buffers_[target];
    ByteWriter w(b);
    w.writeFixed<uint16_t>(static_cast<uint16_t>(kg));
    w.writeBytes(key);
    w.writeBytes(record);
    recordsOut_->fetch_add(1, std::memory_order_relaxed);
    if (b.size() >= kBufferBytes) send(target);
  }
  void flush() {
    for (size_t i = 0; i < buffers_.size(); ++i)
      if (!buffers_[i].empty()) send(i);
  }
  void broadcast(ChannelEvent::Kind kind, uint64_t id) {
    flush();
    for (auto* g : gates_) g->push(channel_, ChannelEvent{kind, id, {}, 0});
  }

 private:
  void send(size_t target) {
    ChannelEvent e;
    e.kind = ChannelEvent::kData;
    e.data.swap(buffers_[target]);
    buffers_[target].reserve(kBufferBytes + 1024);
    gates_[target]->push(channel_, std::move(e));
  }
  std::vector<InputGate*> gates_;
  int channel_;
  int maxParallelism_;
  std::vector<std::string> buffers_;
  std::atomic<uint64_t>* recordsOut_;
};

struct ThreadCrashInfo {
  std::atomic<const char*>* slot = nullptr;
  const char* subtask = nullptr;
};
thread_local ThreadCrashInfo tCrashInfo;

struct TaskKeyContext {
  std::string key;
  int keyGroup = -1;
};

class OperatorContextImpl : public OperatorContext {
 public:
  int subtask = 0, par = 1, maxPar = 128;
  std::string name, uidStr;
  state::KeyedStateBackend* backend = nullptr;
  std::vector<state::KeyedStateBackend*>* taskBackends = nullptr;
  TaskKeyContext* keyCtx = nullptr;
  ExchangeWriterImpl* writer = nullptr;
  const std::atomic<bool>* cancelFlag = nullptr;
  std::atomic<const char*>* activeSlot = nullptr;

  int subtaskIndex() const override { return subtask; }
  int parallelism() const override { return par; }
  int maxParallelism() const override { return maxPar; }
  const std::string& operatorName() const override { return name; }
  const std::string& uid() const override { return uidStr; }
  KeyedStateAccess& keyedState() override {
    if (!backend) throw StateError("operator '" + name + "' is not keyed: keyed state needs a keyBy() before it");
    return *backend;
  }
  std::string_view currentKey() const override { return keyCtx->key; }
  void setCurrentKey(std::string_view keyBytes) override {
    keyCtx->key.assign(keyBytes);
    for (auto* b : *taskBackends) b->setCurrentKey(keyCtx->keyGroup, keyBytes);
  }
  ExchangeWriter& exchange() override {
    if (!writer) throw StateError("operator '" + name + "' has no exchange output");
    return *writer;
  }
  LineSink& stdoutSink() override { return remember(LineSinks::instance().stdoutSink()); }
  LineSink& fileSink(const std::string& path) override { return remember(LineSinks::instance().fileSink(path)); }
  bool cancelled() const override { return cancelFlag->load(std::memory_order_relaxed); }
  std::atomic<const char*>* activeOperatorSlot() override { return activeSlot; }

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
  /// A triggered checkpoint that is not withdrawn. `aborted` is shared with the
  /// asynchronous parts (SnapshotRequest::aborted) and set when it is withdrawn.
  struct ActiveCheckpoint {
    CheckpointTarget target;
    std::shared_ptr<std::atomic<bool>> aborted;
  };

  struct Task {
    int index = 0;
    int stage = 0;
    int subtask = 0;
    std::vector<std::unique_ptr<Operator>> ops;  // chain order
    std::vector<const PlanNode*> nodes;
    std::vector<std::unique_ptr<OperatorContextImpl>> contexts;
    std::vector<std::unique_ptr<state::KeyedStateBackend>> backendsOwned;
    std::vector<state::KeyedStateBackend*> backends;
    std::vector<int> backendOp;  // op index per backend
    TaskKeyContext keyCtx;
    std::atomic<const char*> activeOperator{nullptr};  // see OperatorContext::activeOperatorSlot
    std::string label;                                  // "(1/2)"
    std::unique_ptr<InputGate> gate;  // null for sources
    std::unique_ptr<ExchangeWriterImpl> writer;
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
  };

  Plan plan;
  ExecutionConfig config;
  CheckpointListener* listener;
  std::vector<Stage> stages;
  std::vector<OperatorInfo> operatorInfos;
  std::vector<std::unique_ptr<Task>> tasks;
  std::atomic<bool> cancelled{false};
  std::atomic<bool> started{false};
  std::atomic<int> liveTasks{0};
  std::atomic<uint64_t> recordsIn{0}, recordsOut{0};
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

  Impl(Plan p, ExecutionConfig c, CheckpointListener* l) : plan(std::move(p)), config(std::move(c)), listener(l) {}

  bool hasFailed() {
    std::lock_guard lock(resultMu);
    return failed;
  }

  void fail(const std::string& message, const std::string& op, const std::string& subtask, bool restore = false) {
    {
      std::lock_guard lock(resultMu);
      if (failed || cancelled.load()) return;
      failed = true;
      result.kind = ExecutionResult::kFailed;
      result.message = message;
      result.operatorName = op;
      result.subtask = subtask;
      result.restoreFailure = restore;
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

  /// On the uploader (so after every asynchronous part queued before), hands each task
  /// with backends `fn(backend)` for each of its backends, to run on the task's thread.
  void notifyBackends(std::function<void(state::KeyedStateBackend&)> fn) {
    enqueueUpload([this, fn = std::move(fn)] {
      for (auto& tp : tasks) {
        if (tp->backends.empty()) continue;
        Task* t = tp.get();
        post(*t, [t, fn] {
          for (auto* b : t->backends) fn(*b);
        });
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
    for (uint64_t id : triggered) performCheckpoint(t, id);
  }

  /// A suspended source: waits for mail, a trigger or cancellation.
  void waitForMail(Task& t) {
    std::unique_lock lock(t.mailMu);
    t.mailCv.wait(lock, [&] { return cancelled.load() || t.hasMail.load(std::memory_order_relaxed); });
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
    for (auto& ctx : t.contexts)
      for (auto* sink : ctx->openedSinks) sink->flush();
  }

  /// Checkpoint `id` at this point of the task's input (a source: between two polls; an
  /// input task: its barrier is aligned). The synchronous part runs here, the
  /// asynchronous part on the uploader. The barrier is forwarded in every case, also
  /// when the checkpoint was withdrawn: downstream tasks align on it.
  void performCheckpoint(Task& t, uint64_t id) {
    // Lines of records before the barrier reach the OS before anyone learns of it.
    flushLineSinks(t);
    std::optional<ActiveCheckpoint> active = activeCheckpoint(id);
    if (!active) {
      if (t.writer) t.writer->broadcast(ChannelEvent::kBarrier, id);
      return;
    }
    const CheckpointTarget& target = active->target;
    auto syncStart = std::chrono::steady_clock::now();
    auto snap = std::make_shared<TaskSnapshot>();
    snap->taskIndex = t.index;
    std::vector<std::pair<size_t, std::unique_ptr<state::AsyncSnapshot>>> asyncParts;
    Status failure;
    for (size_t i = 0; i < t.ops.size(); ++i) {
      const PlanNode* n = t.nodes[i];
      if (n->kind != NodeKind::kSource && !n->keyed) continue;
      state::SubtaskSnapshot ss;
      ss.index = t.subtask;
      ss.operatorState = t.ops[i]->snapshotState();
      snap->operators.emplace_back(n->uid, std::move(ss));
    }
    for (size_t b = 0; b < t.backends.size(); ++b) {
      const PlanNode* n = t.nodes[static_cast<size_t>(t.backendOp[b])];
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
      // Find the slot of this operator in snap->operators.
      for (size_t k = 0; k < snap->operators.size(); ++k)
        if (snap->operators[k].first == n->uid) asyncParts.emplace_back(k, std::move(*a));
    }
    snap->syncMicros = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - syncStart).count());
    if (t.writer) t.writer->broadcast(ChannelEvent::kBarrier, id);
    // Atomic stop: nothing after this barrier. An abort posted from now on finds
    // suspendedBy set and resumes the source (mail runs on this thread, after this).
    if (!t.gate && target.stopSources) t.suspendedBy = id;
    if (!failure.ok()) {
      enqueueUpload([this, id, failure] { listener->decline(id, failure); });
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
          listener->decline(id, h.status());
          return;
        }
        snap->operators[slot].second.keyed = std::move(*h);
      }
      listener->acknowledge(id, std::move(*snap));
    });
  }

  void flushOutputs(Task& t) {
    if (t.writer) t.writer->flush();
    flushLineSinks(t);
  }

  void finishTask(Task& t) {
    finishedTasks.fetch_add(1);
    for (auto& op : t.ops) op->endInput();
    for (auto& op : t.ops) op->close();
    if (t.writer) t.writer->broadcast(ChannelEvent::kEnd, 0);
    flushLineSinks(t);
  }

  void runSource(Task& t) {
    auto* src = static_cast<SourceOperator*>(t.ops.front().get());
    auto lastFlush = std::chrono::steady_clock::now();
    while (!cancelled.load(std::memory_order_relaxed)) {
      if (t.hasMail.load(std::memory_order_acquire)) drainMail(t);
      if (t.suspendedBy != 0) {
        // Stopped by a stop checkpoint: no poll until it is aborted or we are cancelled.
        // Later triggers are still served (barriers only).
        waitForMail(t);
        continue;
      }
      PollStatus st = src->poll();
      if (st == PollStatus::kEnd) break;
      auto now = std::chrono::steady_clock::now();
      if (st == PollStatus::kIdle || now - lastFlush > kFlushInterval) {
        flushOutputs(t);
        lastFlush = now;
      }
    }
    if (!cancelled.load()) finishTask(t);
    // Triggers that arrived after the last poll can no longer be served.
    std::deque<uint64_t> left;
    {
      std::lock_guard lock(t.mailMu);
      left.swap(t.triggers);
    }
    for (uint64_t id : left)
      enqueueUpload([this, id] { listener->decline(id, Status::IOError("a source finished before its barrier")); });
  }

  void processData(Task& t, const std::string& data) {
    auto* receiver = static_cast<ExchangeReceiver*>(t.ops.front().get());
    auto* ctx = t.contexts.front().get();
    ByteReader r(data);
    while (!r.atEnd()) {
      t.keyCtx.keyGroup = r.readFixed<uint16_t>();
      std::string_view key = r.readBytes();
      std::string_view rec = r.readBytes();
      ctx->setCurrentKey(key);
      recordsIn.fetch_add(1, std::memory_order_relaxed);
      receiver->receive(rec);
    }
  }

  void runInput(Task& t) {
    BarrierAligner aligner(t.gate->channels());
    while (!cancelled.load(std::memory_order_relaxed)) {
      auto ev = t.gate->tryNext(aligner.blocked());
      if (!ev) {
        flushOutputs(t);
        ev = t.gate->next(aligner.blocked());  // nullopt: cancelled, or woken for mail
      }
      // Mail posted before `ev` was sent runs before `ev` is handled: a notification the
      // uploader delivered before a barrier was sent reaches the backends before it.
      if (t.hasMail.load(std::memory_order_acquire)) drainMail(t);
      if (!ev) continue;
      std::optional<uint64_t> aligned;
      switch (ev->kind) {
        case ChannelEvent::kData:
          processData(t, ev->data);
          break;
        case ChannelEvent::kBarrier:
          aligned = aligner.onBarrier(ev->channel, ev->checkpointId);
          break;
        case ChannelEvent::kEnd:
          aligned = aligner.onEndOfChannel(ev->channel);
          break;
      }
      if (aligned) performCheckpoint(t, *aligned);
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
        for (auto& op : t.ops) op->close();
        flushLineSinks(t);
      }
    } catch (const UserCodeError& e) {
      fail(e.what(), e.operatorName(), subtaskLabel(t));
    } catch (...) {
      // A std::exception, or anything else user code threw outside the SDK's callUser()
      // (a plugin built against an older SDK): a task failure, never std::terminate.
      std::string op = t.nodes.empty() ? "" : t.nodes.back()->name;
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

std::string validateOperatorUid(std::string_view uid) {
  constexpr size_t kMaxUidLength = 128;
  if (uid.empty()) return "it is empty";
  if (uid.size() > kMaxUidLength)
    return "it has " + std::to_string(uid.size()) + " characters, more than " + std::to_string(kMaxUidLength);
  if (uid.front() == '.') return "it starts with '.'";
  for (size_t i = 0; i < uid.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(uid[i]);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')
      continue;
    std::string shown = c == '\'' ? "a quote" : "'" + printable(uid.substr(i, 1)) + "'";
    return "it contains " + shown + " at position " + std::to_string(i + 1);
  }
  return {};
}

std::vector<OperatorInfo> describeOperators(const Plan& plan, int parallelism) {
  std::vector<OperatorInfo> out;
  auto stages = buildStages(plan, parallelism);
  for (const auto& s : stages)
    for (int id : s.nodes) {
      const PlanNode& n = plan.nodes[static_cast<size_t>(id)];
      if (n.kind != NodeKind::kSource && !n.keyed) continue;
      out.push_back({n.uid, n.name, n.keyed, n.kind == NodeKind::kSource, s.parallelism, n.states});
    }
  return out;
}

JobExecution::JobExecution(Plan plan, ExecutionConfig config, CheckpointListener* listener)
    : impl_(std::make_unique<Impl>(std::move(plan), std::move(config), listener)) {
  impl_->stages = buildStages(impl_->plan, impl_->config.parallelism);
  impl_->operatorInfos = describeOperators(impl_->plan, impl_->config.parallelism);
}

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

Status JobExecution::prepare(const RestoreSource* source) {
  Impl& x = *impl_;
  const Plan& plan = x.plan;
  // Tasks and gates.
  std::vector<std::vector<Impl::Task*>> byStage(x.stages.size());
  for (size_t s = 0; s < x.stages.size(); ++s) {
    for (int i = 0; i < x.stages[s].parallelism; ++i) {
      auto t = std::make_unique<Impl::Task>();
      t->index = static_cast<int>(x.tasks.size());
      t->stage = static_cast<int>(s);
      t->subtask = i;
      byStage[s].push_back(t.get());
      x.tasks.push_back(std::move(t));
    }
  }
  for (size_t s = 0; s < x.stages.size(); ++s) {
    int next = x.stages[s].nextStage;
    if (next < 0) continue;
    for (auto* consumer : byStage[static_cast<size_t>(next)])
      consumer->gate = std::make_unique<InputGate>(x.stages[s].parallelism, kChannelCapacity);
  }
  // What is restored where: exactly what the restore preflight reported (one owner).
  std::map<std::string, const state::OperatorSnapshot*> restoredKeyed, restoredPositions;
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
        restoredPositions[op.snapshot->uid] = op.snapshot;
    }
  }
  for (auto& tp : x.tasks) {
    Impl::Task& t = *tp;
    const Stage& st = x.stages[static_cast<size_t>(t.stage)];
    if (st.outputExchange >= 0) {
      std::vector<InputGate*> gates;
      for (auto* c : byStage[static_cast<size_t>(st.nextStage)]) gates.push_back(c->gate.get());
      t.writer = std::make_unique<ExchangeWriterImpl>(std::move(gates), t.subtask, x.config.maxParallelism, &x.recordsOut);
    }
    // Create operators downstream-first.
    std::vector<std::unique_ptr<Operator>> ops(st.nodes.size() + (st.outputExchange >= 0 ? 1 : 0));
    void* down = nullptr;
    try {
      if (st.outputExchange >= 0) {
        ops.back() = plan.nodes[static_cast<size_t>(st.outputExchange)].createSender();
        down = ops.back()->input();
      }
      for (size_t i = st.nodes.size(); i-- > 0;) {
        const PlanNode& n = plan.nodes[static_cast<size_t>(st.nodes[i])];
        ops[i] = n.create(down);
        down = ops[i]->input();
      }
    } catch (...) {
      return Status::IOError("creating the operators of " + plan.nodes[static_cast<size_t>(st.nodes.front())].name +
                             " failed: " + describeCurrentException());
    }
    t.ops = std::move(ops);
    t.label = x.subtaskLabel(t);
    for (int id : st.nodes) t.nodes.push_back(&plan.nodes[static_cast<size_t>(id)]);
    if (st.outputExchange >= 0) t.nodes.push_back(&plan.nodes[static_cast<size_t>(st.outputExchange)]);
    state::KeyGroupRange range = state::keyGroupRangeFor(x.config.maxParallelism, st.parallelism, t.subtask);
    for (size_t i = 0; i < t.ops.size(); ++i) {
      const PlanNode& n = *t.nodes[i];
      auto ctx = std::make_unique<OperatorContextImpl>();
      ctx->subtask = t.subtask;
      ctx->par = st.parallelism;
      ctx->maxPar = x.config.maxParallelism;
      ctx->name = n.name;
      ctx->uidStr = n.uid;
      ctx->taskBackends = &t.backends;
      ctx->keyCtx = &t.keyCtx;
      ctx->writer = t.writer.get();
      ctx->cancelFlag = &x.cancelled;
      ctx->activeSlot = &t.activeOperator;
      if (n.keyed) {
        state::BackendOptions bo;
        bo.operatorUid = n.uid;
        bo.subtaskIndex = t.subtask;
        bo.maxParallelism = x.config.maxParallelism;
        bo.range = range;
        bo.incremental = x.config.incremental;
        bo.localDir = (fs::path(x.config.localStateDir) / (n.uid + "-" + std::to_string(t.subtask))).string();
        auto b = x.config.backend == state::BackendType::kRocksDb ? state::createRocksDbBackend(bo)
                                                                  : state::createHeapBackend(bo);
        if (!b.ok()) return b.status();
        auto it = restoredKeyed.find(n.uid);
        if (it != restoredKeyed.end()) {
          state::RestoreInput in;
          in.storage = source->storage;
          in.states = it->second->states;
          for (const auto& sub : it->second->subtasks) {
            state::KeyGroupRange hr;
            if (auto* kg = std::get_if<state::KeyGroupsStateHandle>(&sub.keyed)) hr = kg->range;
            else if (auto* inc = std::get_if<state::IncrementalStateHandle>(&sub.keyed)) hr = inc->range;
            else continue;
            if (!hr.intersect(range).empty()) in.handles.push_back(sub.keyed);
          }
          Status s;
          try {
            s = (*b)->restore(in);
          } catch (const std::exception& e) {  // a backend rejecting the recorded descriptors
            s = Status::Corruption(e.what());
          }
          if (!s.ok()) {
            std::string what = "cannot restore state of operator '" + n.uid + "' (" + std::to_string(t.subtask + 1) +
                               "/" + std::to_string(st.parallelism) + "): " + s.message();
            // Final only when no retry can help: the snapshot does not fit (Incompatible) or
            // is damaged (Corruption; a file it references is missing, a path in it is
            // invalid). Local trouble (a full or failing disk, a permission, the working
            // directory gone) keeps its code: a task failure for the restart strategy.
            switch (s.code()) {
              case Status::Code::kIncompatible: return Status::Incompatible(what);
              case Status::Code::kCorruption:
              case Status::Code::kInvalidArgument: return Status::Corruption(what);
              case Status::Code::kNoSpace: return Status::NoSpace(what);
              case Status::Code::kPermissionDenied: return Status::PermissionDenied(what);
              default: return Status::IOError(what);
            }
          }
        }
        ctx->backend = b->get();
        t.backends.push_back(b->get());
        t.backendOp.push_back(static_cast<int>(i));
        t.backendsOwned.push_back(std::move(*b));
      }
      if (n.kind == NodeKind::kSource) {
        auto it = restoredPositions.find(n.uid);
        if (it != restoredPositions.end())
          for (const auto& sub : it->second->subtasks)
            if (sub.index == t.subtask) {
              try {
                t.ops[i]->restoreState(sub.operatorState);
              } catch (...) {
                return Status::Incompatible("cannot restore the position of source '" + n.uid + "' (" + n.name +
                                            ") from the snapshot: " + describeCurrentException() +
                                            " (was the snapshot written by a job reading another kind of source?)");
              }
            }
      }
      t.contexts.push_back(std::move(ctx));
    }
    // Not a restore failure: opening (e.g. connecting a socket) may succeed on a retry.
    for (size_t i = 0; i < t.ops.size(); ++i) {
      try {
        t.ops[i]->open(*t.contexts[i]);
      } catch (...) {
        return Status::IOError("operator '" + t.nodes[i]->name + "' " + t.label + " failed to open: " +
                               describeCurrentException());
      }
    }
  }
  return Status::OK();
}

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
  impl_->notifyBackends([id](state::KeyedStateBackend& b) { b.notifyCheckpointComplete(id); });
}

void JobExecution::notifyCheckpointAborted(uint64_t id) {
  Impl& x = *impl_;
  {
    // Withdraw the target at once: tasks that have not snapshotted only forward its
    // barrier, queued asynchronous parts do not run, running ones stop early.
    std::lock_guard lock(x.targetsMu);
    auto it = x.targets.find(id);
    if (it != x.targets.end()) {
      it->second.aborted->store(true, std::memory_order_release);
      x.targets.erase(it);
    }
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
  x.notifyBackends([id](state::KeyedStateBackend& b) { b.notifyCheckpointAborted(id); });
}

int JobExecution::taskCount() const { return static_cast<int>(impl_->tasks.size()); }
const std::vector<OperatorInfo>& JobExecution::operators() const { return impl_->operatorInfos; }
bool JobExecution::running() const {
  return impl_->started.load() && !impl_->cancelled.load() && impl_->liveTasks.load() > 0;
}
uint64_t JobExecution::recordsIn() const { return impl_->recordsIn.load(); }
uint64_t JobExecution::recordsOut() const { return impl_->recordsOut.load(); }

}  // namespace jobhost::host
