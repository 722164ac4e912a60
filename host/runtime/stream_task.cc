// The task loop of one execution attempt (Flink's StreamTask): a source task polls its
// source, an input task reads its input gate (aligning barriers), both run their mail
// between records, fire timers, move watermarks through the operator chain and end their
// input. See job_execution_impl.h.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "jobhost/serializer.h"
#include "jobhost/time.h"
#include "runtime/barrier_aligner.h"
#include "runtime/job_execution_impl.h"

namespace jobhost::host {

using state::Status;

namespace {

/// How long a source's output may wait in its buffers while the source keeps producing.
constexpr auto kFlushInterval = std::chrono::milliseconds(20);

struct ThreadCrashInfo {
  std::atomic<const char*>* slot = nullptr;
  const char* subtask = nullptr;
};
thread_local ThreadCrashInfo tCrashInfo;

}  // namespace

/// Hands `fn` to `t`'s thread (see Task's mailbox). Never blocks on the task.
void JobExecution::Impl::post(Task& t, std::function<void()> fn) {
  {
    std::lock_guard lock(t.mailMu);
    t.mail.push_back(std::move(fn));
    t.hasMail.store(true, std::memory_order_release);
  }
  t.mailCv.notify_all();
  if (t.gate) t.gate->wakeUp();
}

/// Runs the task's mail and, for a source, emits the barriers of its triggers.
void JobExecution::Impl::drainMail(Task& t) {
  std::deque<std::function<void()>> work;
  std::deque<Task::Trigger> triggered;
  {
    std::lock_guard lock(t.mailMu);
    work.swap(t.mail);
    triggered.swap(t.triggers);
    t.hasMail.store(false, std::memory_order_relaxed);
  }
  for (auto& fn : work) fn();
  for (const auto& tr : triggered) performCheckpoint(t, tr.id, 0, tr.unaligned);
}

/// A source whose input just ended: serves the mail and triggers that came meanwhile.
/// If one of them was a stop checkpoint, nothing may follow its barrier: waits (as the
/// poll loop does) until it is aborted, which resumes the source, or the job is cancelled.
void JobExecution::Impl::serveMailAtEndOfInput(Task& t) {
  drainMail(t);
  while (t.suspendedBy != 0 && !cancelled.load()) {
    waitForMail(t);
    drainMail(t);
  }
}

/// A suspended source: waits for mail, a trigger or cancellation.
void JobExecution::Impl::waitForMail(Task& t) {
  const auto idleStart = std::chrono::steady_clock::now();
  std::unique_lock lock(t.mailMu);
  t.mailCv.wait(lock, [&] { return cancelled.load() || t.hasMail.load(std::memory_order_relaxed); });
  t.metrics.idleNanos.add(nanosSince(idleStart));
}
uint64_t JobExecution::Impl::nanosSince(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

std::string JobExecution::Impl::subtaskLabel(const Task& t) const {
  return "(" + std::to_string(t.subtask + 1) + "/" + std::to_string(stages[static_cast<size_t>(t.stage)].parallelism) +
         ")";
}

/// Writes out every line the task's operators have produced so far.
void JobExecution::Impl::flushLineSinks(Task& t) {
  for (auto& s : t.slots)
    for (auto* sink : s.ctx->openedSinks) sink->flush();
}

// --- Time --------------------------------------------------------------------------

/// The watermark slot `i` gets from its parents (the smaller one for a two-input operator).
int64_t JobExecution::Impl::inputWatermarkOf(const Task& t, int i) {
  int64_t w = kMaxWatermark;
  for (int p : t.slots[static_cast<size_t>(i)].parents) w = std::min(w, t.slots[static_cast<size_t>(p)].output());
  return w;
}

/// Delivers watermark `w` to slot `i`: its event-time timers up to `w` fire, the
/// operator hears of it, an exchange sender forwards it, and its children get theirs.
void JobExecution::Impl::advance(Task& t, int i, int64_t w) {
  Slot& s = t.slots[static_cast<size_t>(i)];
  if (w <= s.watermark) return;
  s.op->prepareWatermark(w);  // before s.watermark moves: what it writes is not late
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
void JobExecution::Impl::forwardToChildren(Task& t, int i) {
  for (int c : t.slots[static_cast<size_t>(i)].children) advance(t, c, inputWatermarkOf(t, c));
}

/// Processing-time timers that are due, and the periodic call of watermark assigners.
void JobExecution::Impl::serviceTime(Task& t) {
  if (!t.timerSlots.empty()) {
    const int64_t now = wallClockMillis();
    for (int i : t.timerSlots) {
      Slot& s = t.slots[static_cast<size_t>(i)];
      if (s.timers->nextProcessingTime() <= now) {
        s.timers->fireProcessingTimers(now, *s.op);
        s.timers->persistIfLarge();  // a task whose input is idle gets here only
      }
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
std::chrono::steady_clock::time_point JobExecution::Impl::nextTimeDeadline(const Task& t) const {
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
void JobExecution::Impl::onInputTime(Task& t, std::optional<int64_t> w) {
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

/// An input watermark or status change from a channel event, whose timers may take long:
/// checkpoint barriers are taken between them (takeBarriersBetweenTimers).
void JobExecution::Impl::onInputTimeTakingBarriers(Task& t, std::optional<int64_t> w) {
  t.barriersBetweenTimers = true;
  try {
    onInputTime(t, w);
  } catch (...) {
    t.barriersBetweenTimers = false;
    throw;
  }
  t.barriersBetweenTimers = false;
}

/// Between two event-time timers of an input watermark (TaskTimerService's hook): takes
/// the checkpoint barriers that wait at the head of a channel and checkpoints once they
/// are aligned, instead of leaving them behind the rest of the timers. A watermark that
/// closes many windows (NexmarkQ8's join on RocksDB: ~80 ms) otherwise holds up the
/// alignment of every barrier that arrives meanwhile. As Flink's interruptible timers
/// (FLINK-20217), only checkpoints are taken early: a savepoint's barrier, and the final
/// checkpoint's (ActiveCheckpoint::final), wait until every timer of the watermark has
/// fired.
///
/// Consistent because nothing is half done: every record taken from a channel before its
/// barrier was processed (a watermark event is handled between buffers), every timer
/// fired so far is gone from the timer state and its output precedes the barrier, and
/// the timers not fired yet are in the snapshot; after a restore the watermark starts
/// over and fires them when it passes them again, as it does for any timer restored.
void JobExecution::Impl::takeBarriersBetweenTimers(Task& t) {
  if (!t.barriersBetweenTimers || !t.aligner) return;
  t.barriersBetweenTimers = false;  // no nesting: a checkpoint fires no event-time timer
  // Not a savepoint's, nor the final checkpoint's: the timers that fire after the barrier
  // would be in the snapshot and their output committed at the end of the job, so a
  // restore from it would fire them again.
  auto early = [this](uint64_t id) {
    auto active = activeCheckpoint(id);
    return !active || (!active->target.savepoint && !active->final);
  };
  while (auto ev = t.gate->tryNextBarrier(t.aligner->blocked(), early)) onBarrierEvent(t, *ev);
  t.barriersBetweenTimers = true;
}

/// Aligned: checkpoints once every channel delivered the barrier. Unaligned: snapshots
/// at the first, forwards the barrier at once, and collects the channel state — the data
/// each barrier overtook, and what the task takes from a channel before its barrier
/// (runInput) — until every channel delivered it (barrier_aligner.h).
void JobExecution::Impl::onBarrierEvent(Task& t, ChannelEvent& ev) {
  BarrierAligner& a = *t.aligner;
  // A newer checkpoint's barrier (of either kind) abandons an unaligned one still
  // collecting its channel state: it was aborted upstream. What it holds (its snapshot's
  // asynchronous part too) is dropped unreported, as an abandoned alignment snapshots nothing.
  if (t.pendingChannelState && t.pendingChannelState->id < ev.checkpointId) {
    spdlog::debug("checkpoint {}: task {} {} abandons its channel state for checkpoint {}", ev.checkpointId, t.name,
                  t.label, t.pendingChannelState->id);
    t.pendingChannelState.reset();
  }
  if (!ev.unaligned) {
    if (auto aligned = a.onBarrier(ev.channel, ev.checkpointId)) {
      if (a.lastCompletedUnaligned()) finishChannelState(t, *aligned);  // it had turned unaligned
      else performCheckpoint(t, *aligned, a.lastAlignmentMicros());
    }
    return;
  }
  auto step = a.onUnalignedBarrier(ev.channel, ev.checkpointId, ev.arrived);
  std::vector<ChannelEvent> same;  // this checkpoint's barriers already at the head of other channels
  if (step.snapshot) {
    // They overtook their channels' records, so they usually wait at the heads already:
    // taken before the snapshot, they do not wait behind its synchronous part (which can
    // take long on RocksDB), and no record of those channels has to be recorded.
    const uint64_t id = step.snapshot;
    while (!step.complete) {
      auto more = t.gate->tryNextBarrier(a.blocked(), [id](uint64_t other) { return other == id; });
      if (!more) break;
      if (a.onUnalignedBarrier(more->channel, id, more->arrived).complete) step.complete = id;
      same.push_back(std::move(*more));
    }
    performCheckpoint(t, id, 0, /*unaligned=*/true);
  }
  if (step.accepted && t.pendingChannelState && t.pendingChannelState->id == step.accepted) {
    auto record = [&](ChannelEvent& b) {
      auto& recorded = t.pendingChannelState->channels[static_cast<size_t>(b.channel)];
      for (auto& d : b.overtaken) recorded.push_back(std::move(d));
    };
    record(ev);
    for (auto& b : same) record(b);
  }
  if (step.complete) finishChannelState(t, step.complete);
}

void JobExecution::Impl::flushOutputs(Task& t) {
  for (auto& w : t.writers) w->flush();
  flushLineSinks(t);
}

void JobExecution::Impl::finishTask(Task& t) {
  finishedTasks.fetch_add(1);
  for (auto& s : t.slots) s.op->endInput();
  for (auto& s : t.slots) s.op->close();
  for (auto& w : t.writers) w->broadcast(ChannelEvent::kEnd, 0);
  flushLineSinks(t);
}

// --- Task loops --------------------------------------------------------------------

void JobExecution::Impl::runSource(Task& t) {
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
  std::deque<Task::Trigger> left;
  {
    std::lock_guard lock(t.mailMu);
    left.swap(t.triggers);
  }
  for (const auto& tr : left)
    enqueueUpload([this, id = tr.id] {
      listener->decline(id, CheckpointFailureReason::kTaskFinished,
                        Status::IOError("a source had finished before the checkpoint reached it"));
    });
}

void JobExecution::Impl::processData(Task& t, const ChannelEvent& ev) {
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

void JobExecution::Impl::runInput(Task& t) {
  BarrierAligner aligner(t.gate->channels());
  t.aligner = &aligner;
  struct Detach {
    Task& t;
    ~Detach() { t.aligner = nullptr; }
  } detach{t};
  // An unaligned checkpoint's in-flight records come before any new input, each former
  // subtask's at the watermark it had then: a record that was late then is late again
  // (it may belong to a window that fired and was committed before the checkpoint).
  for (const auto& group : t.restoredInFlight) {
    if (group.watermark > kMinWatermark)
      for (int h : t.heads) advance(t, h, group.watermark);
    for (const auto& ev : group.events) {
      if (cancelled.load(std::memory_order_relaxed)) return;
      processData(t, ev);
    }
  }
  t.restoredInFlight.clear();
  t.restoredInFlight.shrink_to_fit();
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
        // Sent before the barrier of the unaligned checkpoint whose snapshot is taken.
        if (t.pendingChannelState && t.pendingChannelState->id == aligner.aligning() &&
            aligner.recording(ev->channel))
          t.pendingChannelState->channels[static_cast<size_t>(ev->channel)].push_back(ev->data);
        processData(t, *ev);
        t.gate->recycle(std::move(ev->data));
        break;
      case ChannelEvent::kBarrier:
        onBarrierEvent(t, *ev);
        break;
      case ChannelEvent::kEnd:
        onInputTime(t, t.valve->onEnd(ev->channel));
        aligned = aligner.onEndOfChannel(ev->channel);
        break;
      case ChannelEvent::kWatermark:
        onInputTimeTakingBarriers(t, t.valve->onWatermark(ev->channel, ev->value));
        break;
      case ChannelEvent::kStatus:
        onInputTimeTakingBarriers(t, t.valve->onStatus(ev->channel, ev->value != 0));
        break;
    }
    if (aligned) {
      if (aligner.lastCompletedUnaligned()) finishChannelState(t, *aligned);
      else performCheckpoint(t, *aligned, aligner.lastAlignmentMicros());
    }
    if (aligner.allEnded()) {
      finishTask(t);
      return;
    }
  }
}

void JobExecution::Impl::runTask(Task& t) {
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
  } catch (const OperatorArgumentError& e) {  // callUser names the operator: final, exit 2
    fail(e.what(), e.operatorName(), subtaskLabel(t), false, false, true);
  } catch (const JobArgumentError& e) {  // thrown outside callUser (a sink's commit): final, exit 2
    fail(e.what(), t.slots.empty() ? "" : t.slots.back().node->name, subtaskLabel(t), false, false, true);
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

bool activeOperatorOfThisThread(const char** operatorName, const char** subtask) {
  if (!tCrashInfo.slot) return false;
  *operatorName = tCrashInfo.slot->load(std::memory_order_relaxed);
  *subtask = tCrashInfo.subtask;
  return *operatorName != nullptr;
}

}  // namespace jobhost::host
