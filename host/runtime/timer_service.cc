// Timers of a keyed operator. See the header.
#include "runtime/timer_service.h"

#include "jobhost/errors.h"
#include "jobhost/time.h"

namespace jobhost::host {

int64_t wallClockMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TaskTimerService::TaskTimerService(state::KeyedStateBackend& backend, int eventState, int processingState,
                                   TaskRecordContext& record,
                                   const std::vector<state::KeyedStateBackend*>& taskBackends,
                                   const int64_t& watermark)
    : backend_(backend), record_(record), taskBackends_(taskBackends), watermark_(watermark) {
  event_.state = eventState;
  processing_.state = processingState;
}

int64_t TaskTimerService::currentProcessingTime() const { return wallClockMillis(); }

void TaskTimerService::requireKey(const char* what) const {
  if (record_.keyGroup < 0)
    throw StateError(std::string(what) +
                     " outside a keyed context: a timer belongs to the key of the record or timer being processed; "
                     "register and delete timers in processElement or onTimer, not in open() or close()");
}

void TaskTimerService::registerEventTimeTimer(std::string_view ns, int64_t time) {
  requireKey("a timer registered");
  event_.timers.add({time, record_.keyGroup, record_.key, ns});
}
void TaskTimerService::deleteEventTimeTimer(std::string_view ns, int64_t time) {
  requireKey("a timer deleted");
  event_.timers.remove({time, record_.keyGroup, record_.key, ns});
}
void TaskTimerService::registerProcessingTimeTimer(std::string_view ns, int64_t time) {
  requireKey("a timer registered");
  processing_.timers.add({time, record_.keyGroup, record_.key, ns});
}
void TaskTimerService::deleteProcessingTimeTimer(std::string_view ns, int64_t time) {
  requireKey("a timer deleted");
  processing_.timers.remove({time, record_.keyGroup, record_.key, ns});
}

void TaskTimerService::load() {
  for (Queue* q : {&event_, &processing_}) {
    q->timers.clear();
    backend_.forEachEntry(q->state, [&](int kg, std::string_view key, std::string_view userKey, std::string_view) {
      int64_t time = 0;
      std::string_view ns;
      if (!detail::decodeTimer(userKey, &time, &ns))
        throw StateError("a timer of key group " + std::to_string(kg) + " in the restored state is malformed (" +
                         std::to_string(userKey.size()) + " bytes)");
      q->timers.addPersisted({time, kg, key, ns});
    });
  }
}

void TaskTimerService::persist() {
  if (event_.timers.changedSincePersist() + processing_.timers.changedSincePersist() == 0) return;
  for (Queue* q : {&event_, &processing_}) {
    q->timers.persist([&](bool put, const TimerQueue::Timer& t) {
      backend_.setCurrentKey(t.keyGroup, t.key);
      detail::encodeTimer(scratch_, t.time, t.ns);
      if (put) backend_.mapPutAbsent(q->state, scratch_, {});  // persist() writes a timer once
      else backend_.mapRemove(q->state, scratch_);
    });
  }
  if (record_.keyGroup >= 0) backend_.setCurrentKey(record_.keyGroup, record_.key);
}

std::optional<TimerQueue::Timer> TaskTimerService::pop(Queue& q, int64_t bound) {
  std::optional<TimerQueue::Timer> t = q.timers.pop(bound);
  if (!t) return t;
  record_.keyGroup = t->keyGroup;
  record_.key.assign(t->key);
  for (auto* b : taskBackends_) b->setCurrentKey(t->keyGroup, t->key);
  return t;
}

void TaskTimerService::advanceWatermark(int64_t watermark, Operator& op) {
  int sinceHook = 0;
  while (auto t = pop(event_, watermark)) {
    record_.timestamp = t->time;
    op.onEventTime(t->time, t->ns);
    if (betweenTimers_ && ++sinceHook == kTimersBetweenHooks) {
      sinceHook = 0;
      betweenTimers_();
    }
  }
}

void TaskTimerService::fireProcessingTimers(int64_t nowMs, Operator& op) {
  // Only the timers registered before this call: one registered while firing (a timer
  // that re-arms itself for "now") waits for the next call.
  for (size_t budget = processing_.timers.size(); budget > 0; --budget) {
    auto t = pop(processing_, nowMs);
    if (!t) break;
    record_.timestamp = kNoTimestamp;
    op.onProcessingTime(t->time, t->ns);
  }
}

int64_t TaskTimerService::nextProcessingTime() const {
  return processing_.timers.size() == 0 ? kMaxWatermark : processing_.timers.nextTime();
}

}  // namespace jobhost::host
