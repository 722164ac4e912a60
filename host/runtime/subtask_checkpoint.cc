// The tasks' part of a checkpoint (Flink's SubtaskCheckpointCoordinator): a trigger
// reaches the sources, each task snapshots its operators and backends when the barrier
// is aligned (the synchronous part), the uploader runs the asynchronous parts and reports
// to the CheckpointListener, and completions and aborts go back to the tasks. See
// job_execution_impl.h.
#include <spdlog/spdlog.h>

#include "runtime/job_execution_impl.h"

namespace jobhost::host {

using state::Status;

void JobExecution::Impl::enqueueUpload(std::function<void()> fn) {
  std::lock_guard lock(upMu);
  upQueue.push_back(std::move(fn));
  upCv.notify_one();
}

void JobExecution::Impl::uploaderLoop() {
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

/// On the uploader (so after every asynchronous part queued before), tells each task
/// with backends or transactional sinks that checkpoint `id` completed (or was aborted),
/// on the task's thread. A completed checkpoint that was triggered after every source
/// had ended then releases the waiting sources (the final checkpoint): their end markers
/// follow this mail into every task.
void JobExecution::Impl::notifyTasks(uint64_t id, bool complete) {
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

/// The checkpoint if the tasks should still take part in it; nullopt once withdrawn.
std::optional<JobExecution::Impl::ActiveCheckpoint> JobExecution::Impl::activeCheckpoint(uint64_t id) {
  std::lock_guard lock(targetsMu);
  auto it = targets.find(id);
  if (it == targets.end()) return std::nullopt;
  return it->second;
}

// --- Checkpoints -------------------------------------------------------------------

/// Checkpoint `id` at this point of the task's input (a source: between two polls; an
/// input task: its barrier is aligned). The synchronous part runs here, the
/// asynchronous part on the uploader. The barrier is forwarded in every case, also
/// when the checkpoint was withdrawn: downstream tasks align on it.
void JobExecution::Impl::performCheckpoint(Task& t, uint64_t id, uint64_t alignmentMicros, bool unaligned) {
  std::optional<ActiveCheckpoint> active = activeCheckpoint(id);
  // stop --drain: the end of time before the barrier, so every window fires first.
  if (active && active->target.drain && !t.gate)
    for (int h : t.heads) advance(t, h, kMaxWatermark);
  // Lines of records before the barrier reach the OS before anyone learns of it.
  flushLineSinks(t);
  // An aligned barrier the trigger made convertible stays so until it turns (channel.h).
  const bool convertible = active && !unaligned && active->convertible;
  const auto started = active ? active->triggered : std::chrono::steady_clock::time_point{};
  auto broadcastBarrier = [&] {
    for (auto& w : t.writers) w->broadcast(ChannelEvent::kBarrier, id, unaligned, convertible, started);
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
  // What operators hold in memory goes into keyed state first (a window's mini-batch).
  for (auto& s : t.slots) s.op->prepareSnapshotPreBarrier(id);
  // The barrier goes on before the synchronous part, as Flink's does: every record this
  // task emits before the snapshot has been emitted now (what the part below writes is
  // state, not output), so downstream tasks need not wait for it (RocksDB's can take
  // 100 ms).
  broadcastBarrier();
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
    // The base of an incremental snapshot is the newest completed checkpoint, which the
    // coordinator names in the target: its notification (notifyTasks) may still be on its
    // way, and a base older than it may reference files the coordinator deleted when it
    // subsumed that older checkpoint. Applying it here first is what the notification
    // would do; the notification then finds nothing left to do.
    if (target.lastCompleted != 0) t.backends[b]->notifyCheckpointComplete(target.lastCompleted);
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
  // Atomic stop: nothing after this barrier. An abort posted from now on finds
  // suspendedBy set and resumes the source (mail runs on this thread, after this).
  if (!t.gate && target.stopSources) t.suspendedBy = id;
  if (!failure.ok()) {
    enqueueUpload(
        [this, id, failure] { listener->decline(id, CheckpointFailureReason::kSnapshotFailed, failure); });
    return;
  }
  auto parts = std::make_shared<decltype(asyncParts)>(std::move(asyncParts));
  auto upload = [this, id, snap, parts, aborted = active->aborted, keepAlive = target.storage] {
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
  };
  if (unaligned && t.gate) {
    // Acknowledged once the channel state is complete (finishChannelState).
    t.pendingChannelState.emplace();
    t.pendingChannelState->id = id;
    t.pendingChannelState->inputWatermark = t.slots[static_cast<size_t>(t.heads.front())].watermark;
    t.pendingChannelState->channels.resize(static_cast<size_t>(t.gate->channels()));
    t.pendingChannelState->snap = snap;
    t.pendingChannelState->upload = std::move(upload);
    return;
  }
  enqueueUpload(std::move(upload));
}

void JobExecution::Impl::finishChannelState(Task& t, uint64_t id) {
  if (!t.pendingChannelState || t.pendingChannelState->id != id) return;  // withdrawn, or failed: nothing waits
  PendingChannelState p = std::move(*t.pendingChannelState);
  t.pendingChannelState.reset();
  const Stage& st = stages[static_cast<size_t>(t.stage)];
  // One entry per exchange (by uid) holding this subtask's buffers of all its inputs.
  std::map<std::string, state::SubtaskSnapshot> byExchange;
  for (const auto& g : st.channels) {
    const PlanNode& n = plan.nodes[static_cast<size_t>(g.exchange)];
    for (int c = 0; c < g.count; ++c) {
      auto& buffers = p.channels[static_cast<size_t>(g.firstChannel + c)];
      if (buffers.empty()) continue;
      state::SubtaskSnapshot& sub = byExchange[n.uid];
      sub.index = t.subtask;
      sub.inputWatermark = p.inputWatermark;
      for (auto& data : buffers) sub.inputChannels.push_back({static_cast<int>(g.position), c, std::move(data)});
      p.snap->channelStateOwners[n.uid] = {n.name, st.parallelism};
    }
  }
  for (auto& [uid, sub] : byExchange) p.snap->operators.emplace_back(uid, std::move(sub));
  // As for an aligned checkpoint, from the first barrier to the last; nothing was blocked.
  if (t.aligner) p.snap->alignmentMicros = t.aligner->lastAlignmentMicros();
  spdlog::debug("checkpoint {}: task {} {} had every barrier {} us after the first (unaligned)", id, t.name, t.label,
                p.snap->alignmentMicros);
  enqueueUpload(std::move(p.upload));
}

bool JobExecution::triggerCheckpoint(const CheckpointTarget& target) {
  Impl& x = *impl_;
  // Once a task has finished it cannot take part in a checkpoint any more (Flink before
  // FLIP-147 behaves the same): no new checkpoints, the job is draining.
  if (!running() || x.finishedTasks.load() > 0) return false;
  bool unaligned = false;
  {
    std::lock_guard lock(x.targetsMu);
    Impl::ActiveCheckpoint a{target, std::make_shared<std::atomic<bool>>(false)};
    a.final = x.finalCheckpoint && x.endedSources.load() == x.sourceTasks;
    a.triggered = std::chrono::steady_clock::now();
    // Savepoints stay aligned, as in Flink; so does the final checkpoint: it must hold
    // every record (the job finishes after it and its sinks commit what follows it), not
    // leave some in flight to be replayed by a restore from it. With an aligned checkpoint
    // timeout the others start aligned and turn unaligned where late (channel.h).
    const bool mayTurn = x.config.unalignedCheckpoints && !target.savepoint && !a.final;
    a.unaligned = mayTurn && x.config.alignedCheckpointTimeout.count() == 0;
    a.convertible = mayTurn && x.config.alignedCheckpointTimeout.count() > 0;
    unaligned = a.unaligned;
    if (a.final) x.afterAllEnded.insert(target.checkpointId);
    x.targets[target.checkpointId] = std::move(a);
    while (x.targets.size() > 8) x.targets.erase(x.targets.begin());
  }
  for (auto& t : x.tasks) {
    if (t->gate) continue;
    {
      std::lock_guard lock(t->mailMu);
      t->triggers.push_back({target.checkpointId, unaligned});
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
      std::erase_if(t->triggers, [id](const Impl::Task::Trigger& tr) { return tr.id == id; });
    }
    // A source suspended by this (stop) checkpoint polls again.
    x.post(*t, [t, id] {
      if (t->suspendedBy == id) t->suspendedBy = 0;
    });
  }
  x.notifyTasks(id, /*complete=*/false);
}

}  // namespace jobhost::host
