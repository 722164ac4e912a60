// host/runtime/timer_queue.h — the in-memory index of the timers of one time domain of
// one keyed operator in one subtask, and which of its changes the state backend lacks.
//
// TaskTimerService (timer_service.h) keeps timers as keyed state; this is their index, in
// firing order. No cost grows with the number of timers (of a key or in total) beyond the
// logarithm of the number of distinct times:
//  - a timer is found by a hash of (time, key group, key, namespace): registering one that
//    exists (a window's timer, registered again for every record or mini-batch flush) is
//    one lookup, in an open-addressed table of (hash, entry) slots (one cache line for the
//    slot, one for the entry; std::unordered_set's chained nodes cost a miss more per
//    lookup and a malloc per timer: ~10 % of NexmarkQ5 under perf). Entries live in a pool
//    with stable addresses (buckets and the dirty list point to them) and are reused, key
//    buffer included, after a timer is forgotten; the pool and the table keep the size of
//    their peak (the most timers known at once) until clear();
//  - timers are grouped by time, one bucket per distinct time in an ordered map; a bucket
//    is sorted by (key group, key, namespace) when its time comes (again, for the part not
//    yet fired, if timers join it while it fires), so timers fire in Flink's order: time,
//    then key group, key, namespace — the same in every run;
//  - a deleted timer is marked and dropped from its bucket once its bucket holds as many
//    deleted timers as others (amortised constant time; a timeout timer per record, deleted
//    when the next record comes, leaves nothing behind).
// Persistence is lazy: the index is the truth, and the backend's copy of the timers is
// brought up to date by persist(), which the task calls at every checkpoint before its
// backends snapshot, and whenever more than kPersistThreshold changes have accumulated
// (so a checkpoint's synchronous part never writes more than that many timers; a window's
// mini-batch, flushed just before, may add up to its size times windows per pane). A
// timer that is registered and fires between two such points never reaches the backend
// and does not count as a change: a window's timer on RocksDB costs no write at all when
// the window fires before the next checkpoint.
//
// Thread-safety: used on the owning task's thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace jobhost::host {

class TimerQueue {
 public:
  /// More changes than this waiting for the backend: the task persists them at its next
  /// safe point (between two input buffers), not only at the next checkpoint.
  static constexpr size_t kPersistThreshold = 16384;
  /// More timers changed than this since the last persist() (most registered and fired
  /// in between, which costs the backend nothing): persist() then frees their bookkeeping.
  static constexpr size_t kTidyThreshold = 1 << 18;

  /// A timer as the queue hands it out; the views stay valid until the next call that
  /// changes the queue (add, remove, pop, persist, clear).
  struct Timer {
    int64_t time;
    int keyGroup;
    std::string_view key;
    std::string_view ns;
  };

  TimerQueue() = default;
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;
  ~TimerQueue();

  /// Registers the timer; false (and nothing changes) if it exists.
  bool add(const Timer& t);
  /// A timer the backend holds already (a restore): registered without a pending write.
  void addPersisted(const Timer& t);
  /// Deletes the timer; false if there is none.
  bool remove(const Timer& t);
  /// The first timer in firing order whose time is <= bound, removed from the queue (its
  /// deletion from the backend is a pending change if the backend has it); nullopt if
  /// there is none. The returned views stay valid until the next pop() or persist(): a
  /// timer registered again while it fires is a new timer.
  std::optional<Timer> pop(int64_t bound);
  /// The earliest time of a timer, or INT64_MAX when there is none. May be the time of a
  /// timer deleted since (a pop() up to it then returns nothing and forgets it).
  int64_t nextTime() const;
  /// Timers registered and neither deleted nor fired.
  size_t size() const { return live_; }

  /// Changes the backend lacks (timers to write, timers to delete): what persist() would
  /// write now. A timer registered and fired or deleted since the last persist() is none.
  size_t pendingChanges() const { return unsynced_; }
  /// Timers changed since the last persist(), whether the backend needs to hear of it or
  /// not; each keeps its bookkeeping in memory until persist().
  size_t changedSincePersist() const { return dirty_.size(); }
  /// Hands every pending change to `write(put, timer)` (put: write the timer; else delete
  /// it), in no particular order, and forgets them. If `write` throws, the change it threw
  /// on and the ones after it stay pending.
  template <class Write>
  void persist(Write&& write);
  /// Forgets every timer (load() of a restore).
  void clear();

 private:
  struct Entry {
    int64_t time;
    int32_t keyGroup;
    uint32_t keyLength;
    std::string bytes;  // key, then namespace
    // Bookkeeping (not part of the identity), changed while the entry is in the set.
    mutable bool live = false;       // registered, not deleted nor fired
    mutable bool persisted = false;  // the backend holds it
    mutable bool queued = false;     // its time's bucket still lists it
    mutable bool dirty = false;      // listed in dirty_
    uint64_t hash = 0;               // hashOf() of the identity
    std::string_view key() const { return std::string_view(bytes).substr(0, keyLength); }
    std::string_view ns() const { return std::string_view(bytes).substr(keyLength); }
  };
  static uint64_t hashOf(const Timer& t);
  static bool same(const Entry& e, const Timer& t) {
    return e.time == t.time && e.keyGroup == t.keyGroup && e.key() == t.key && e.ns() == t.ns;
  }
  /// A slot of the index: empty when entry is null. Linear probing from hash & mask;
  /// erasing shifts the following run back (no tombstones).
  struct Slot {
    uint64_t hash = 0;
    Entry* entry = nullptr;
  };
  struct Bucket {
    std::vector<const Entry*> entries;
    size_t next = 0;      // entries before it have been popped
    size_t deleted = 0;   // entries[next, end) deleted since the bucket was last compacted
    bool sorted = false;  // entries[next, end) are in firing order
  };

  /// The entry of `t`, or null.
  Entry* find(const Timer& t, uint64_t hash) const;
  /// The entry of `t`, inserted (not live, not queued) if absent.
  const Entry& findOrInsert(const Timer& t);
  /// Removes `e` from the index and returns it to the pool.
  void erase(const Entry& e);
  void grow();
  void enqueue(const Entry& e);
  void markDirty(const Entry& e);
  /// Registers (true) or deletes or fires (false) `e`, keeping the counts.
  void setLive(const Entry& e, bool live);
  /// Erases `e` if nothing refers to it any more and the backend does not hold it.
  void maybeErase(const Entry& e);
  void releaseFired();
  /// Drops the deleted entries of the bucket of `time` not popped yet; erases it if empty.
  void compact(std::map<int64_t, Bucket>::iterator it);

  std::vector<Slot> slots_;      // a power of two long (or empty), at most 3/4 full
  size_t used_ = 0;              // slots holding an entry
  std::deque<Entry> pool_;       // every entry ever made; addresses stay put
  std::vector<Entry*> spare_;    // entries of pool_ not in the index, for reuse
  std::map<int64_t, Bucket> buckets_;
  std::vector<const Entry*> dirty_;
  const Entry* fired_ = nullptr;  // the timer pop() returned last (its views are in use)
  size_t live_ = 0;
  size_t unsynced_ = 0;  // entries whose live != persisted (all of them in dirty_)
};

template <class Write>
void TimerQueue::persist(Write&& write) {
  releaseFired();
  while (!dirty_.empty()) {
    const Entry* e = dirty_.back();
    if (e->live != e->persisted) {
      write(e->live, Timer{e->time, e->keyGroup, e->key(), e->ns()});
      e->persisted = e->live;
      --unsynced_;
    }
    dirty_.pop_back();
    e->dirty = false;
    maybeErase(*e);
  }
}

}  // namespace jobhost::host
