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

void TaskTimerService::add(Queue& q, std::string_view ns, int64_t time) {
  requireKey("a timer registered");
  TimerRef ref{time, record_.keyGroup, record_.key, ns};
  auto it = q.timers.lower_bound(ref);
  if (it != q.timers.end() && !Order()(ref, *it)) return;  // registered already
  q.timers.emplace_hint(it, Timer{time, record_.keyGroup, record_.key, std::string(ns)});
  detail::encodeTimer(scratch_, time, ns);
  backend_.mapPut(q.state, scratch_, {});
}

void TaskTimerService::remove(Queue& q, std::string_view ns, int64_t time) {
  requireKey("a timer deleted");
  auto it = q.timers.find(TimerRef{time, record_.keyGroup, record_.key, ns});
  if (it == q.timers.end()) return;
  q.timers.erase(it);
  detail::encodeTimer(scratch_, time, ns);
  backend_.mapRemove(q.state, scratch_);
}

void TaskTimerService::registerEventTimeTimer(std::string_view ns, int64_t time) { add(event_, ns, time); }
void TaskTimerService::deleteEventTimeTimer(std::string_view ns, int64_t time) { remove(event_, ns, time); }
void TaskTimerService::registerProcessingTimeTimer(std::string_view ns, int64_t time) { add(processing_, ns, time); }
void TaskTimerService::deleteProcessingTimeTimer(std::string_view ns, int64_t time) { remove(processing_, ns, time); }

void TaskTimerService::load() {
  for (Queue* q : {&event_, &processing_}) {
    q->timers.clear();
    backend_.forEachEntry(q->state, [&](int kg, std::string_view key, std::string_view userKey, std::string_view) {
      int64_t time = 0;
      std::string_view ns;
      if (!detail::decodeTimer(userKey, &time, &ns))
        throw StateError("a timer of key group " + std::to_string(kg) + " in the restored state is malformed (" +
                         std::to_string(userKey.size()) + " bytes)");
      q->timers.insert(Timer{time, kg, std::string(key), std::string(ns)});
    });
  }
}

TaskTimerService::Timer TaskTimerService::pop(Queue& q) {
  Timer t = std::move(q.timers.extract(q.timers.begin()).value());
  record_.keyGroup = t.keyGroup;
  record_.key = t.key;
  for (auto* b : taskBackends_) b->setCurrentKey(t.keyGroup, t.key);
  detail::encodeTimer(scratch_, t.time, t.ns);
  backend_.mapRemove(q.state, scratch_);
  return t;
}

void TaskTimerService::advanceWatermark(int64_t watermark, Operator& op) {
  while (!event_.timers.empty() && event_.timers.begin()->time <= watermark) {
    Timer t = pop(event_);
    record_.timestamp = t.time;
    op.onEventTime(t.time, t.ns);
  }
}

void TaskTimerService::fireProcessingTimers(int64_t nowMs, Operator& op) {
  for (size_t budget = processing_.timers.size();
       budget > 0 && !processing_.timers.empty() && processing_.timers.begin()->time <= nowMs; --budget) {
    Timer t = pop(processing_);
    record_.timestamp = kNoTimestamp;
    op.onProcessingTime(t.time, t.ns);
  }
}

int64_t TaskTimerService::nextProcessingTime() const {
  return processing_.timers.empty() ? kMaxWatermark : processing_.timers.begin()->time;
}

}  // namespace jobhost::host
