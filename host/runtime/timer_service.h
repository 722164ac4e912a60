// host/runtime/timer_service.h — the timers of one keyed operator in one subtask.
//
// Timers are keyed state, so that everything the product does for state holds for them:
// each lives as an entry of one of the operator's two MapStates "_timer_state/event_user-
// timers" and "_timer_state/processing_user-timers" (user key: time and namespace,
// detail::encodeTimer), in its state backend, per key group — in every snapshot format of
// both backends (a savepoint in the canonical format included), restored into either
// backend and redistributed by key group on rescaling, listed by `inspect` and `state`.
// The backend is the durable copy; the ordered in-memory queues here are an index of it,
// rebuilt from the backend after a restore (load()). This is Flink's HEAP timer service
// with its timers written into the keyed state instead of a separate snapshot section:
// one write per register/delete/fire (a RocksDB write on that backend), no second snapshot
// format, and the queue (one entry per timer) in memory for either backend.
//
// Thread-safety: used on the owning task's thread only (timers fire between records).
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/operator.h"
#include "jobhost/state/keyed_backend.h"

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
  /// (including timers the firing ones register within that bound).
  void advanceWatermark(int64_t watermark, Operator& op);
  /// Fires the processing-time timers due at `nowMs` that were registered before this
  /// call (one registered while firing waits for the next call, so a timer that re-arms
  /// itself for "now" cannot starve the task).
  void fireProcessingTimers(int64_t nowMs, Operator& op);
  /// The earliest processing-time timer, or kMaxWatermark when there is none.
  int64_t nextProcessingTime() const;
  size_t eventTimers() const { return event_.timers.size(); }
  size_t processingTimers() const { return processing_.timers.size(); }

 private:
  struct Timer {
    int64_t time;
    int keyGroup;
    std::string key;
    std::string ns;
  };
  /// A timer to look up without copying its key and namespace.
  struct TimerRef {
    int64_t time;
    int keyGroup;
    std::string_view key;
    std::string_view ns;
  };
  /// Time order, then key group, key, namespace (as Flink's); transparent, so a window
  /// re-registering its timer for every element costs one lookup and no allocation.
  struct Order {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      if (a.time != b.time) return a.time < b.time;
      if (a.keyGroup != b.keyGroup) return a.keyGroup < b.keyGroup;
      if (int c = std::string_view(a.key).compare(b.key); c != 0) return c < 0;
      return std::string_view(a.ns) < std::string_view(b.ns);
    }
  };
  struct Queue {
    int state;
    std::set<Timer, Order> timers;
  };
  void add(Queue& q, std::string_view ns, int64_t time);
  void remove(Queue& q, std::string_view ns, int64_t time);
  /// Pops the first timer of `q`, makes its key current and removes it from the backend.
  Timer pop(Queue& q);
  void requireKey(const char* what) const;

  state::KeyedStateBackend& backend_;
  TaskRecordContext& record_;
  const std::vector<state::KeyedStateBackend*>& taskBackends_;
  const int64_t& watermark_;
  Queue event_, processing_;
  std::string scratch_;
};

/// Milliseconds since the epoch on the wall clock.
int64_t wallClockMillis();

}  // namespace jobhost::host
