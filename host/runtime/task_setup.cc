// Each task of one execution attempt set up (prepare): its input gate, the operator
// chain of its stage with contexts, timers, side outputs and exchange senders, its keyed
// state backends restored from the snapshot (state_assignment.h says which state goes
// where), and its operators opened. See job_execution_impl.h.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "jobhost/serializer.h"
#include "jobhost/time.h"
#include "runtime/job_execution_impl.h"
#include "runtime/state_assignment.h"

namespace jobhost::host {

namespace fs = std::filesystem;
using state::Status;

namespace {

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
/// The in-flight records (unaligned checkpoint) of input `input` of exchange snapshot
/// `op` that subtask `subtask` of `parallelism` processes on restore, as buffers in the
/// exchange's wire format, one group per former subtask with its input watermark. At the
/// parallelism that wrote them each subtask takes its own. Rescaled, a keyed record goes
/// to the subtask owning its key group, as a new record would; an unkeyed one to the old
/// subtask's index modulo the new parallelism; a broadcast exchange's buffers (each old
/// subtask held its own copy) from old subtask 0 to every subtask, like broadcast state
/// (state_assignment.h refuses to rescale those when they differ). Throws
/// SerializationError for a buffer that does not parse, or unkeyed records for a keyed
/// exchange (`keyed`: the job's exchange with that uid is a keyBy; it changed).
std::vector<InFlightGroup> inFlightRecordsFor(const state::OperatorSnapshot& op, int input, bool broadcast,
                                                          bool keyed, int parallelism, int subtask,
                                                          int maxParallelism, int channel) {
  std::vector<InFlightGroup> out;
  const bool same = op.parallelism == parallelism;
  for (const auto& sub : op.subtasks) {
    InFlightGroup g;
    g.watermark = sub.inputWatermark;
    for (const auto& b : sub.inputChannels) {
      if (b.input != input) continue;
      if ((same || broadcast) && sub.index != (same ? subtask : 0)) continue;
      std::string kept;
      ByteWriter w(kept);
      ByteReader r(b.data);
      while (!r.atEnd()) {
        const uint16_t kg = r.readFixed<uint16_t>();
        const int64_t ts = r.readI64();
        std::string_view key = r.readBytes();
        std::string_view rec = r.readBytes();
        if (kg != kNoKeyGroup && kg >= maxParallelism)
          throw SerializationError("key group " + std::to_string(kg) + " beyond max parallelism " +
                                   std::to_string(maxParallelism));
        if (keyed && kg == kNoKeyGroup)
          throw std::invalid_argument(
              "they were sent through an exchange that was not a keyBy, and the job's exchange with that uid is "
              "one: the job changed since the checkpoint. Restore with the job that wrote it, take an aligned "
              "savepoint (jobhost savepoint) and restore the changed job from that");
        const int owner = same || broadcast ? subtask
                          : kg != kNoKeyGroup ? state::subtaskForKeyGroup(maxParallelism, parallelism, kg)
                                              : sub.index % parallelism;
        if (owner != subtask) continue;
        w.writeFixed<uint16_t>(kg);
        w.writeI64(ts);
        w.writeBytes(key);
        w.writeBytes(rec);
      }
      if (kept.empty()) continue;
      ChannelEvent ev;
      ev.kind = ChannelEvent::kData;
      ev.channel = channel;  // any channel of the input: they feed the same receiver
      ev.data = std::move(kept);
      g.events.push_back(std::move(ev));
    }
    if (!g.events.empty()) out.push_back(std::move(g));
  }
  return out;
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
        t->gate = std::make_unique<InputGate>(x.stages[s].channelCount(), kMaxChannelBytes, x.config.bufferDebloat);
        if (x.config.unalignedCheckpoints) t->gate->setAlignedCheckpointTimeout(x.config.alignedCheckpointTimeout);
        t->valve = std::make_unique<WatermarkValve>(x.stages[s].channelCount());
      }
      if (!t->gate) ++x.sourceTasks;
      byStage[s].push_back(t.get());
      x.tasks.push_back(std::move(t));
    }
  }
  // What is restored where: exactly what the restore preflight reported (one owner).
  std::map<std::string, const state::OperatorSnapshot*> restoredKeyed, restoredOperatorState, restoredChannels;
  if (source) {
    StateAssignment assignment =
        assignState(*source->metadata, x.graph.restoreTargets(), source->allowNonRestoredState);
    if (!assignment.ok()) {
      std::string all;
      for (const auto& e : assignment.errors()) all += (all.empty() ? "" : "; ") + e;
      return Status::Incompatible("cannot restore this snapshot into the job: " + all);
    }
    for (const auto& op : assignment.operators) {
      if (op.action == StateAssignment::Action::kRestoreKeyedState) restoredKeyed[op.snapshot->uid] = op.snapshot;
      if (op.action == StateAssignment::Action::kRestoreSourcePosition || op.withOperatorState)
        restoredOperatorState[op.snapshot->uid] = op.snapshot;
      if (op.action == StateAssignment::Action::kRestoreChannelState) restoredChannels[op.snapshot->uid] = op.snapshot;
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
                                                               /*recordsActivate=*/!t.gate, s.node->broadcastExchange));
      s.writer = t.writers.back().get();
      t.slots.push_back(std::move(s));
    }
    for (int h : st.heads) t.heads.push_back(slotOfNode.at(h));
    for (const auto& g : st.channels) {
      const PlanNode& ex = plan.nodes[static_cast<size_t>(g.exchange)];
      auto it = restoredChannels.find(ex.uid);
      if (it == restoredChannels.end()) continue;
      try {
        for (auto& group : inFlightRecordsFor(*it->second, static_cast<int>(g.position), ex.broadcastExchange,
                                              !ex.keySerializer.empty(), st.parallelism, t.subtask,
                                              x.config.maxParallelism, g.firstChannel))
          t.restoredInFlight.push_back(std::move(group));
      } catch (const std::invalid_argument& e) {
        return Status::Incompatible("cannot restore the in-flight records of exchange '" + ex.uid + "' (" + ex.name +
                                    ") " + t.label + ": " + e.what());
      } catch (const std::exception& e) {
        return Status::Corruption("cannot restore the in-flight records of exchange '" + ex.uid + "' (" + ex.name +
                                  ") " + t.label + ": " + e.what() +
                                  "; the checkpoint is damaged: restore from another checkpoint or savepoint");
      }
    }
    // Lowest watermark first: each group is processed at its former subtask's watermark.
    std::stable_sort(t.restoredInFlight.begin(), t.restoredInFlight.end(),
                     [](const InFlightGroup& a, const InFlightGroup& b) { return a.watermark < b.watermark; });
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
      ctx->miniBatchSize = x.config.windowMiniBatchSize;
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
            if (t.gate) s.timers->setBetweenTimersHook([&x, task = &t] { x.takeBarriersBetweenTimers(*task); });
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
          // (the operator merges, Operator::restoreState) — but a broadcast state only from
          // old subtask 0: after an unaligned checkpoint the copies may differ (each
          // subtask snapshotted at another point of the broadcast stream, the rest being in
          // flight), and the broadcast exchange's in-flight records restored everywhere are
          // subtask 0's (inFlightRecordsFor). After an aligned one all copies are equal.
          const bool same = it->second->parallelism == st.parallelism;
          const bool oneCopy = !n.broadcastStates.empty();
          for (const auto& sub : it->second->subtasks) {
            if (same ? sub.index != t.subtask : (sub.operatorState.empty() || (oneCopy && sub.index != 0))) continue;
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
        bool unavailable = false, usage = false;
        try {
          throw;
        } catch (const JobArgumentError&) {
          usage = true;
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
        if (usage) {
          x.prepareFailedOnUsage = true;
          return Status::InvalidArgument(msg);
        }
        return Status::IOError(msg);
      }
    }
  }
  return Status::OK();
}

}  // namespace jobhost::host
