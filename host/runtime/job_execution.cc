// One execution attempt: stages, tasks, channels, backends, barriers. See the header.
#include "runtime/job_execution.h"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "checkpoint/state_assignment.h"
#include "jobhost/serializer.h"
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

std::vector<Stage> buildStages(const Plan& plan, int parallelism) {
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
  LineSink& stdoutSink() override { return LineSinks::instance().stdoutSink(); }
  LineSink& fileSink(const std::string& path) override { return LineSinks::instance().fileSink(path); }
  bool cancelled() const override { return cancelFlag->load(std::memory_order_relaxed); }
  std::atomic<const char*>* activeOperatorSlot() override { return activeSlot; }
};

}  // namespace

struct JobExecution::Impl {
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
    std::mutex triggerMu;
    std::deque<CheckpointTarget> triggers;  // guarded by triggerMu (sources)
    // Alignment state (task thread only).
    uint64_t aligning = 0;
    std::vector<bool> blocked, ended;
    int barriersSeen = 0;
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
  // Uploader: runs asynchronous snapshot parts in FIFO order.
  std::mutex upMu;
  std::condition_variable upCv;
  std::deque<std::function<void()>> upQueue;  // guarded by upMu
  bool upStop = false;                        // guarded by upMu
  std::thread uploader;

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
    for (auto& t : tasks)
      if (t->gate) t->gate->cancel();
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

  std::string subtaskLabel(const Task& t) const {
    return "(" + std::to_string(t.subtask + 1) + "/" + std::to_string(stages[static_cast<size_t>(t.stage)].parallelism) +
           ")";
  }

  bool isAborted(uint64_t id) {
    std::lock_guard lock(targetsMu);
    return aborted.count(id) > 0;
  }

  /// Snapshot of one task: sync part here, async part on the uploader.
  void performCheckpoint(Task& t, const CheckpointTarget& target) {
    if (isAborted(target.checkpointId)) {
      if (t.writer) t.writer->broadcast(ChannelEvent::kBarrier, target.checkpointId);
      return;
    }
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
      state::SnapshotRequest req;
      req.checkpointId = target.checkpointId;
      req.format = target.format;
      req.storage = target.storage.get();
      req.exclusiveDir = target.exclusiveDir;
      req.sharedDir = target.sharedDir;
      const PlanNode* n = t.nodes[static_cast<size_t>(t.backendOp[b])];
      req.filePrefix = n->uid + "-" + std::to_string(t.subtask);
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
    if (t.writer) t.writer->broadcast(ChannelEvent::kBarrier, target.checkpointId);
    uint64_t id = target.checkpointId;
    if (!failure.ok()) {
      enqueueUpload([this, id, failure] { listener->decline(id, failure); });
      return;
    }
    auto parts = std::make_shared<decltype(asyncParts)>(std::move(asyncParts));
    enqueueUpload([this, id, snap, parts, keepAlive = target.storage] {
      if (isAborted(id)) return;  // its files would only be cleaned up again
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
    LineSinks::instance().flush();
  }

  void finishTask(Task& t) {
    finishedTasks.fetch_add(1);
    for (auto& op : t.ops) op->endInput();
    for (auto& op : t.ops) op->close();
    if (t.writer) t.writer->broadcast(ChannelEvent::kEnd, 0);
    LineSinks::instance().flush();
  }

  void runSource(Task& t) {
    auto* src = static_cast<SourceOperator*>(t.ops.front().get());
    auto lastFlush = std::chrono::steady_clock::now();
    while (!cancelled.load(std::memory_order_relaxed)) {
      std::optional<CheckpointTarget> trig;
      {
        std::lock_guard lock(t.triggerMu);
        if (!t.triggers.empty()) {
          trig = t.triggers.front();
          t.triggers.pop_front();
        }
      }
      if (trig) performCheckpoint(t, *trig);
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
    std::deque<CheckpointTarget> left;
    {
      std::lock_guard lock(t.triggerMu);
      left.swap(t.triggers);
    }
    for (const auto& trig : left) {
      uint64_t id = trig.checkpointId;
      enqueueUpload([this, id] { listener->decline(id, Status::IOError("a source finished before its barrier")); });
    }
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
    int n = t.gate->channels();
    t.blocked.assign(static_cast<size_t>(n), false);
    t.ended.assign(static_cast<size_t>(n), false);
    int endedCount = 0;
    std::optional<CheckpointTarget> pendingTarget;
    while (!cancelled.load(std::memory_order_relaxed)) {
      auto ev = t.gate->tryNext(t.blocked);
      if (!ev) {
        flushOutputs(t);
        ev = t.gate->next(t.blocked);
        if (!ev) return;  // cancelled
      }
      switch (ev->kind) {
        case ChannelEvent::kData:
          processData(t, ev->data);
          break;
        case ChannelEvent::kBarrier: {
          if (ev->checkpointId > t.aligning) {
            // A newer barrier: any unfinished alignment is abandoned (its checkpoint was aborted).
            t.aligning = ev->checkpointId;
            t.barriersSeen = 0;
            std::fill(t.blocked.begin(), t.blocked.end(), false);
          } else if (ev->checkpointId < t.aligning) {
            break;  // stale barrier of an abandoned checkpoint
          }
          t.blocked[static_cast<size_t>(ev->channel)] = true;
          ++t.barriersSeen;
          maybeCompleteAlignment(t, endedCount);
          break;
        }
        case ChannelEvent::kEnd:
          t.ended[static_cast<size_t>(ev->channel)] = true;
          t.blocked[static_cast<size_t>(ev->channel)] = true;
          ++endedCount;
          if (endedCount == n) {
            finishTask(t);
            return;
          }
          maybeCompleteAlignment(t, endedCount);
          break;
      }
    }
  }

  void maybeCompleteAlignment(Task& t, int endedCount) {
    if (t.aligning == 0 || t.barriersSeen == 0) return;
    int needed = t.gate->channels() - endedCount;
    int seenLive = 0;
    for (int c = 0; c < t.gate->channels(); ++c)
      if (t.blocked[static_cast<size_t>(c)] && !t.ended[static_cast<size_t>(c)]) ++seenLive;
    if (seenLive < needed) return;
    CheckpointTarget target;
    {
      std::lock_guard lock(targetsMu);
      auto it = targets.find(t.aligning);
      if (it == targets.end()) {
        t.barriersSeen = 0;
        for (int c = 0; c < t.gate->channels(); ++c) t.blocked[static_cast<size_t>(c)] = t.ended[static_cast<size_t>(c)];
        return;
      }
      target = it->second;
    }
    performCheckpoint(t, target);
    t.barriersSeen = 0;
    for (int c = 0; c < t.gate->channels(); ++c) t.blocked[static_cast<size_t>(c)] = t.ended[static_cast<size_t>(c)];
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
        LineSinks::instance().flush();
      }
    } catch (const UserCodeError& e) {
      fail(e.what(), e.operatorName(), subtaskLabel(t));
    } catch (const std::exception& e) {
      std::string op = t.nodes.empty() ? "" : t.nodes.back()->name;
      fail(e.what(), op, subtaskLabel(t));
    }
    if (liveTasks.fetch_sub(1) == 1) {
      std::lock_guard lock(upMu);
      upStop = true;
      upCv.notify_all();
    }
  }

  std::mutex targetsMu;
  std::map<uint64_t, CheckpointTarget> targets;  // guarded by targetsMu
  std::set<uint64_t> aborted;                    // guarded by targetsMu
  std::atomic<int> finishedTasks{0};
};

bool activeOperatorOfThisThread(const char** operatorName, const char** subtask) {
  if (!tCrashInfo.slot) return false;
  *operatorName = tCrashInfo.slot->load(std::memory_order_relaxed);
  *subtask = tCrashInfo.subtask;
  return *operatorName != nullptr;
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
    } catch (const std::exception& e) {
      return Status::IOError("creating the operators of " + plan.nodes[static_cast<size_t>(st.nodes.front())].name +
                             " failed: " + e.what());
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
              } catch (const std::exception& e) {
                return Status::Incompatible("cannot restore the position of source '" + n.uid + "' (" + n.name +
                                            ") from the snapshot: " + e.what() +
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
      } catch (const std::exception& e) {
        return Status::IOError("operator '" + t.nodes[i]->name + "' " + t.label + " failed to open: " + e.what());
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
    x.targets[target.checkpointId] = target;
    while (x.targets.size() > 8) x.targets.erase(x.targets.begin());
  }
  for (auto& t : x.tasks) {
    if (t->gate) continue;
    std::lock_guard lock(t->triggerMu);
    t->triggers.push_back(target);
  }
  return true;
}

void JobExecution::notifyCheckpointComplete(uint64_t id) {
  // Runs on the uploader so it is ordered with the asynchronous snapshot parts.
  Impl& x = *impl_;
  x.enqueueUpload([&x, id] {
    for (auto& t : x.tasks)
      for (auto* b : t->backends) b->notifyCheckpointComplete(id);
  });
}

void JobExecution::notifyCheckpointAborted(uint64_t id) {
  Impl& x = *impl_;
  {
    // Withdraw the target at once: tasks that have not snapshotted yet skip it, queued
    // asynchronous parts do not run.
    std::lock_guard lock(x.targetsMu);
    x.targets.erase(id);
    x.aborted.insert(id);
    while (x.aborted.size() > 64) x.aborted.erase(x.aborted.begin());
  }
  for (auto& t : x.tasks) {
    if (t->gate) continue;
    std::lock_guard lock(t->triggerMu);
    std::erase_if(t->triggers, [id](const CheckpointTarget& c) { return c.checkpointId == id; });
  }
  x.enqueueUpload([&x, id] {
    for (auto& t : x.tasks)
      for (auto* b : t->backends) b->notifyCheckpointAborted(id);
  });
}

int JobExecution::taskCount() const { return static_cast<int>(impl_->tasks.size()); }
const std::vector<OperatorInfo>& JobExecution::operators() const { return impl_->operatorInfos; }
bool JobExecution::running() const {
  return impl_->started.load() && !impl_->cancelled.load() && impl_->liveTasks.load() > 0;
}
uint64_t JobExecution::recordsIn() const { return impl_->recordsIn.load(); }
uint64_t JobExecution::recordsOut() const { return impl_->recordsOut.load(); }

}  // namespace jobhost::host
