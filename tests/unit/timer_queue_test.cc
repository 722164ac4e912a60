// The timer index of a keyed operator (host/runtime/timer_queue.h) and the timer service
// on a real heap backend (timer_service.h): firing order, deduplication, deletion, and
// the lazy persistence that leaves the backend with exactly the registered timers.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "jobhost/state/keyed_backend.h"
#include "jobhost/time.h"
#include "runtime/timer_queue.h"
#include "runtime/timer_service.h"

namespace jobhost::host {
namespace {

using Id = std::tuple<int64_t, int, std::string, std::string>;  // time, key group, key, namespace

TimerQueue::Timer timer(const Id& id) { return {std::get<0>(id), std::get<1>(id), std::get<2>(id), std::get<3>(id)}; }
Id idOf(const TimerQueue::Timer& t) { return {t.time, t.keyGroup, std::string(t.key), std::string(t.ns)}; }

std::vector<Id> popAll(TimerQueue& q, int64_t bound) {
  std::vector<Id> out;
  while (auto t = q.pop(bound)) out.push_back(idOf(*t));
  return out;
}

TEST(TimerQueueTest, TimersFireInTimeThenKeyGroupKeyAndNamespaceOrderOnceEach) {
  std::mt19937 rng(7);
  std::set<Id> model;
  TimerQueue q;
  for (int i = 0; i < 5000; ++i) {
    // Few distinct times (window ends), many timers each, registered in random order, many twice.
    Id id{static_cast<int64_t>(rng() % 13) * 1000, static_cast<int>(rng() % 4), "k" + std::to_string(rng() % 300),
          rng() % 3 == 0 ? std::string() : "ns" + std::to_string(rng() % 5)};
    EXPECT_EQ(q.add(timer(id)), model.insert(id).second);
  }
  EXPECT_EQ(q.size(), model.size());
  // Delete a third of them (some twice), and some that never existed.
  std::vector<Id> all(model.begin(), model.end());
  for (size_t i = 0; i < all.size(); i += 3) {
    EXPECT_TRUE(q.remove(timer(all[i])));
    EXPECT_FALSE(q.remove(timer(all[i])));
    model.erase(all[i]);
  }
  EXPECT_FALSE(q.remove({42, 0, "nobody", ""}));
  EXPECT_EQ(q.size(), model.size());
  // Up to time 6000 first, then the rest: exactly the live timers, in std::set's order.
  std::vector<Id> fired = popAll(q, 6000);
  std::vector<Id> rest = popAll(q, INT64_MAX);
  fired.insert(fired.end(), rest.begin(), rest.end());
  EXPECT_EQ(fired, std::vector<Id>(model.begin(), model.end()));
  EXPECT_EQ(q.size(), 0u);
  EXPECT_FALSE(q.pop(INT64_MAX));
}

// The index is an open-addressed table whose erase shifts the following entries back, and
// whose forgotten entries are reused: many rounds of registering, deleting, firing and
// persisting over a small key space (long probe runs, wrap-arounds, growth, reuse) must
// agree with a std::set at every step, including what persist() hands out.
TEST(TimerQueueTest, AgreesWithASetOverManyRoundsOfAddRemoveFireAndPersist) {
  struct Shape {
    int rounds, ops, times, keys, namespaces;
  };
  // Large: growth and long runs. Small: a few dozen timers in a 64-slot table, so runs
  // wrap around its end and erasing shifts entries across it.
  for (const Shape& shape : {Shape{60, 2000, 40, 90, 40}, Shape{400, 40, 6, 4, 3}}) {
  SCOPED_TRACE(shape.ops);
  std::mt19937 rng(11);
  std::set<Id> model, persisted;
  TimerQueue q;
  int64_t watermark = 0;
  for (int round = 0; round < shape.rounds; ++round) {
    for (int i = 0; i < shape.ops; ++i) {
      Id id{watermark + static_cast<int64_t>(rng() % shape.times), static_cast<int>(rng() % 3),
            "k" + std::to_string(rng() % shape.keys),
            rng() % 2 ? std::string() : std::string(rng() % shape.namespaces, 'n')};  // short and heap-sized
      if (rng() % 3 == 0) {
        ASSERT_EQ(q.remove(timer(id)), model.erase(id) == 1) << "round " << round;
      } else {
        ASSERT_EQ(q.add(timer(id)), model.insert(id).second) << "round " << round;
      }
    }
    ASSERT_EQ(q.size(), model.size());
    watermark += 1 + static_cast<int64_t>(rng() % (shape.times / 3 + 1));
    std::vector<Id> expected;
    for (auto it = model.begin(); it != model.end() && std::get<0>(*it) <= watermark;) {
      expected.push_back(*it);
      it = model.erase(it);
    }
    ASSERT_EQ(popAll(q, watermark), expected) << "round " << round;
    if (round % 4 == 3) {
      q.persist([&](bool put, const TimerQueue::Timer& t) {
        if (put) EXPECT_TRUE(persisted.insert(idOf(t)).second);
        else EXPECT_EQ(persisted.erase(idOf(t)), 1u);
      });
      ASSERT_EQ(persisted, model) << "round " << round;
    }
  }
  ASSERT_EQ(popAll(q, INT64_MAX), std::vector<Id>(model.begin(), model.end()));
  }
}

TEST(TimerQueueTest, ATimerRegisteredWhileItsTimeFiresFiresInThePassInItsPlace) {
  TimerQueue q;
  q.add({10, 0, "b", ""});
  q.add({10, 0, "d", ""});
  auto first = q.pop(10);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->key, "b");
  q.add({10, 0, "c", ""});  // after b, before d
  q.add({5, 0, "a", ""});   // earlier than the bucket being fired: next
  q.add({10, 0, "b", ""});  // the firing timer again: a new timer, fires again
  std::vector<std::string> keys;
  while (auto t = q.pop(10)) keys.push_back(std::string(t->key));
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "c", "d"}));
}

TEST(TimerQueueTest, DeletedTimersDoNotAccumulateInTheirBuckets) {
  // A timeout timer per record, deleted by the next record: nothing is left behind, and
  // the next time is that of a live timer.
  TimerQueue q;
  for (int i = 0; i < 100000; ++i) {
    q.add({1'000'000 + i, 0, "key", ""});
    if (i > 0) q.remove({1'000'000 + i - 1, 0, "key", ""});
  }
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.nextTime(), 1'000'000 + 99999);
  // Many timers of one time, most deleted: the bucket is compacted as it goes.
  for (int i = 0; i < 1000; ++i) q.add({5, 0, "k" + std::to_string(i), ""});
  for (int i = 0; i < 1000; ++i)
    if (i % 100 != 0) q.remove({5, 0, "k" + std::to_string(i), ""});
  auto fired = popAll(q, 5);
  EXPECT_EQ(fired.size(), 10u);
  EXPECT_EQ(q.nextTime(), 1'000'000 + 99999);
}

TEST(TimerQueueTest, PersistHandsOutOnlyWhatTheBackendLacks) {
  TimerQueue q;
  q.addPersisted({1, 0, "restored", ""});
  q.addPersisted({2, 0, "restored-deleted", ""});
  EXPECT_EQ(q.pendingChanges(), 0u);
  q.add({3, 0, "new", ""});
  q.add({4, 0, "new-then-fired", ""});
  q.add({5, 0, "new-then-deleted", ""});
  q.remove({5, 0, "new-then-deleted", ""});
  q.remove({2, 0, "restored-deleted", ""});
  ASSERT_TRUE(q.pop(1));  // "restored" fires: the backend must forget it
  auto t = q.pop(4);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->key, "new");
  t = q.pop(4);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->key, "new-then-fired");
  // Counted as what persist() writes: a timer registered and gone since costs nothing.
  EXPECT_EQ(q.pendingChanges(), 2u);
  EXPECT_EQ(q.changedSincePersist(), 5u);
  std::map<std::string, bool> writes;
  q.persist([&](bool put, const TimerQueue::Timer& t) { writes[std::string(t.key)] = put; });
  EXPECT_EQ(writes, (std::map<std::string, bool>{{"restored", false}, {"restored-deleted", false}}));
  EXPECT_EQ(q.changedSincePersist(), 0u);
  EXPECT_EQ(q.pendingChanges(), 0u);
  q.add({9, 0, "later", ""});
  writes.clear();
  q.persist([&](bool put, const TimerQueue::Timer& t) { writes[std::string(t.key)] = put; });
  EXPECT_EQ(writes, (std::map<std::string, bool>{{"later", true}}));
  // Deleted and registered again before a persist: the backend already has it.
  q.remove({9, 0, "later", ""});
  q.add({9, 0, "later", ""});
  EXPECT_EQ(q.pendingChanges(), 0u);
  writes.clear();
  q.persist([&](bool put, const TimerQueue::Timer& t) { writes[std::string(t.key)] = put; });
  EXPECT_TRUE(writes.empty());
  EXPECT_EQ(popAll(q, 100).size(), 1u);
}

/// The timers of a heap backend's timer state: (key, time, namespace).
std::set<std::tuple<std::string, int64_t, std::string>> backendTimers(state::KeyedStateBackend& b, int state) {
  std::set<std::tuple<std::string, int64_t, std::string>> out;
  b.forEachEntry(state, [&](int, std::string_view key, std::string_view userKey, std::string_view) {
    int64_t time = 0;
    std::string_view ns;
    EXPECT_TRUE(detail::decodeTimer(userKey, &time, &ns));
    out.emplace(std::string(key), time, std::string(ns));
  });
  return out;
}

struct Recorder : Operator {
  std::vector<std::pair<int64_t, std::string>> fired;  // time, namespace
  std::vector<std::string> keys;
  TaskRecordContext* record = nullptr;
  void onEventTime(int64_t time, std::string_view ns) override {
    fired.emplace_back(time, std::string(ns));
    keys.push_back(record->key);
  }
};

TEST(TaskTimerServiceTest, TheBackendHoldsExactlyTheRegisteredTimersAfterPersistAndALoadRestoresThem) {
  state::BackendOptions o;
  o.operatorUid = "op";
  o.range = {0, 127};
  auto backend = state::createHeapBackend(o);
  ASSERT_TRUE(backend.ok());
  auto& b = **backend;
  std::vector<StateDescriptorInfo> d = detail::timerStates<std::string>("");
  const int event = b.registerState(d[0]), processing = b.registerState(d[1]);
  TaskRecordContext record;
  std::vector<state::KeyedStateBackend*> all{&b};
  int64_t watermark = kMinWatermark;
  TaskTimerService timers(b, event, processing, record, all, watermark);
  auto on = [&](const std::string& key) {
    record.keyGroup = 3;
    record.key = key;
    b.setCurrentKey(3, key);
  };
  on("a");
  timers.registerEventTimeTimer("w1", 100);
  timers.registerEventTimeTimer("w2", 200);
  on("b");
  timers.registerEventTimeTimer("w1", 100);
  timers.registerEventTimeTimer("w3", 300);
  timers.deleteEventTimeTimer("w3", 300);
  EXPECT_TRUE(backendTimers(b, event).empty()) << "nothing is written before a persist";
  timers.persist();
  using T = std::tuple<std::string, int64_t, std::string>;
  EXPECT_EQ(backendTimers(b, event), (std::set<T>{{"a", 100, "w1"}, {"a", 200, "w2"}, {"b", 100, "w1"}}));
  EXPECT_EQ(record.key, "b") << "persist leaves the task's key current";
  Recorder op;
  op.record = &record;
  watermark = 150;
  timers.advanceWatermark(150, op);
  EXPECT_EQ(op.fired, (std::vector<std::pair<int64_t, std::string>>{{100, "w1"}, {100, "w1"}}));
  EXPECT_EQ(op.keys, (std::vector<std::string>{"a", "b"}));
  timers.persist();
  EXPECT_EQ(backendTimers(b, event), (std::set<T>{{"a", 200, "w2"}}));
  // A restore rebuilds the queue from the backend: the pending timer fires once.
  TaskTimerService restored(b, event, processing, record, all, watermark);
  restored.load();
  EXPECT_EQ(restored.eventTimers(), 1u);
  Recorder op2;
  op2.record = &record;
  restored.advanceWatermark(kMaxWatermark, op2);
  EXPECT_EQ(op2.fired, (std::vector<std::pair<int64_t, std::string>>{{200, "w2"}}));
  restored.persist();
  EXPECT_TRUE(backendTimers(b, event).empty());
}

}  // namespace
}  // namespace jobhost::host
