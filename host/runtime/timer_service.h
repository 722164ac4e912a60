// host/runtime/timer_service.h — the timers of one keyed operator in one subtask.
//
// Timers are keyed state, so that everything the product does for state holds for them:
// each lives as an entry of one of the operator's two MapStates "_timer_state/event_user-
// timers" and "_timer_state/processing_user-timers" (user key: time and namespace,
// detail::encodeTimer), in its state backend, per key group — in every snapshot format of
// both backends (a savepoint in the canonical format included), restored into either
// backend and redistributed by key group on rescaling, listed by `inspect` and `state`.
// The in-memory queues (timer_queue.h) are the truth while the task runs and the backend
// is their durable copy, brought up to date lazily: at every checkpoint before the
// backends snapshot (persist()), and between input buffers once many changes wait
// (persistIfLarge()); after a restore the queues are rebuilt from it (load()). This is
// Flink's HEAP timer service with its timers written into the keyed state instead of a
// separate snapshot section: no second snapshot format, the queue (one entry per timer)
// in memory for either backend, and a timer that fires before the next checkpoint costs
// no backend write at all.
//
// Thread-safety: used on the owning task's thread only (timers fire between records).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/operator.h"
#include "jobhost/state/keyed_backend.h"
#include "runtime/timer_queue.h"

namespace jobhost::host {

/// The task's current record: its key (and key group) and event timestamp. Set before a
/// record or a timer reaches an operator.
struct TaskRecordContext {
  std::string key;
  int keyGroup = -1;
  int64_t timestamp = kNoTimestamp;
};

class TaskTimerService : public InternalTimerService {
 public:
  /// `backend` holds the two timer states (handles `eventState`, `processingState`);
  /// firing a timer sets its key on every backend of the task (`taskBackends`) and in
  /// `record`. `watermark` is the operator's current input watermark.
  TaskTimerService(state::KeyedStateBackend& backend, int eventState, int processingState,
                   TaskRecordContext& record, const std::vector<state::KeyedStateBackend*>& taskBackends,
                   const int64_t& watermark);

  int64_t currentWatermark() const override { return watermark_; }
  int64_t currentProcessingTime() const override;
  void registerEventTimeTimer(std::string_view ns, int64_t time) override;
  void deleteEventTimeTimer(std::string_view ns, int64_t time) override;
  void registerProcessingTimeTimer(std::string_view ns, int64_t time) override;
  void deleteProcessingTimeTimer(std::string_view ns, int64_t time) override;

  /// Rebuilds the queues from the backend's timer states (after a restore). Throws
  /// StateError on a malformed timer entry.
  void load();
  /// Fires every event-time timer at or before `watermark` on `op`, in time order
  /// (including timers the firing ones register within that bound). Calls the
  /// between-timers hook every kTimersBetweenHooks timers, when one is set.
  void advanceWatermark(int64_t watermark, Operator& op);
  /// What the task may do between two event-time timers of one watermark: take a
  /// checkpoint barrier that waits at the head of a channel (stream_task.cc), so that a
  /// watermark firing many timers does not hold up a checkpoint. The hook runs on this
  /// thread, between two timers (no operator call in progress); it may persist() and
  /// register timers.
  void setBetweenTimersHook(std::function<void()> hook) { betweenTimers_ = std::move(hook); }
  static constexpr int kTimersBetweenHooks = 64;
  /// Fires the processing-time timers due at `nowMs` that were registered before this
  /// call (one registered while firing waits for the next call, so a timer that re-arms
  /// itself for "now" cannot starve the task).
  void fireProcessingTimers(int64_t nowMs, Operator& op);
  /// The earliest processing-time timer, or kMaxWatermark when there is none.
  int64_t nextProcessingTime() const;
  size_t eventTimers() const { return event_.timers.size(); }
  size_t processingTimers() const { return processing_.timers.size(); }

  /// Writes every change of the timers since the last persist() to the backend (Put of a
  /// new timer, Delete of a fired or deleted one), so that a snapshot of the backend holds
  /// exactly the timers registered now. The task calls it before its backends snapshot.
  /// Sets the backend's current key to each timer's and back to the task's afterwards.
  void persist();
  /// persist() if more than TimerQueue::kPersistThreshold changes wait for the backend
  /// or kTidyThreshold timers changed since the last one; the task calls it between input
  /// buffers, where no operator holds a view into the backend.
  void persistIfLarge() {
    if (event_.timers.pendingChanges() + processing_.timers.pendingChanges() > TimerQueue::kPersistThreshold ||
        event_.timers.changedSincePersist() + processing_.timers.changedSincePersist() > TimerQueue::kTidyThreshold)
      persist();
  }

 private:
  struct Queue {
    int state;
    TimerQueue timers;
  };
  /// Pops the first timer of `q` due at `bound`, if any, and makes its key current.
  std::optional<TimerQueue::Timer> pop(Queue& q, int64_t bound);
  void requireKey(const char* what) const;

  state::KeyedStateBackend& backend_;
  TaskRecordContext& record_;
  const std::vector<state::KeyedStateBackend*>& taskBackends_;
  const int64_t& watermark_;
  Queue event_, processing_;
  std::string scratch_;
  std::function<void()> betweenTimers_;
};

/// Milliseconds since the epoch on the wall clock.
int64_t wallClockMillis();

}  // namespace jobhost::host
