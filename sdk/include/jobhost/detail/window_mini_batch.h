// jobhost/detail/window_mini_batch.h — a window operator's records folded in memory
// before they reach keyed state (internal), as Flink SQL's mini-batch window aggregation
// (flink-table-runtime's RecordsWindowBuffer and its combiners).
//
// An event-time aggregate or reduce window over tumbling or sliding windows folds each
// record into one accumulator per (key, pane) held here as a live object: no state
// access, no serialisation and no timer per record. The operator takes the accumulators
// out (take()) and adds each to the stored accumulator of every window of its pane before
// a checkpoint barrier, before a watermark that could fire one of those windows
// (earliestFiring()) and when `capacity` are held (full()). A hot key then costs one
// state read and write per window and flush instead of per record, and its windows'
// timers are registered once per flush.
//
// The state keeps one accumulator per window, as without the mini-batch: snapshots are
// the same either way, and pipeline.window.mini-batch.size can change across a restore.
//
// Thread-safety: used by one task thread.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobhost/time.h"

namespace jobhost::detail {

template <class Acc>
class WindowMiniBatch {
 public:
  struct Entry {
    std::string key;  // the key's serialized bytes
    int keyGroup;
    TimeWindow pane;
    Acc acc;
  };

  explicit WindowMiniBatch(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}

  bool empty() const { return entries_.empty(); }
  /// No room for another accumulator: take() before insert().
  bool full() const { return entries_.size() >= capacity_; }

  /// The accumulator of (key, pane), or nullptr.
  Acc* find(std::string_view key, int64_t paneStart) {
    if (last_ < entries_.size() && entries_[last_].pane.start == paneStart && entries_[last_].key == key)
      return &entries_[last_].acc;  // the same key and pane as the record before
    if (entries_.empty()) return nullptr;
    const size_t mask = slots_.size() - 1;
    for (size_t i = hashOf(key, paneStart) & mask;; i = (i + 1) & mask) {
      const uint32_t s = slots_[i];
      if (s == 0) return nullptr;
      Entry& e = entries_[s - 1];
      if (e.pane.start == paneStart && e.key == key) {
        last_ = s - 1;
        return &e.acc;
      }
    }
  }

  /// A new accumulator for (key, pane), which has none; not full(). `firing` is the
  /// maximum timestamp of the pane's first window: the watermark that fires it.
  void insert(std::string_view key, int keyGroup, const TimeWindow& pane, int64_t firing, Acc acc) {
    if (2 * (entries_.size() + 1) > slots_.size()) grow();
    entries_.push_back(Entry{std::string(key), keyGroup, pane, std::move(acc)});
    place(entries_.size() - 1);
    last_ = entries_.size() - 1;
    earliestFiring_ = std::min(earliestFiring_, firing);
  }

  /// The smallest watermark that fires a window of an accumulator held here.
  int64_t earliestFiring() const { return earliestFiring_; }

  /// Every accumulator, sorted by key group, key and pane (the state's order: neighbours
  /// in RocksDB, one key's panes together, older panes first); empty afterwards. The
  /// entries stay valid until the next take(). The two vectors trade places, so a flush
  /// allocates no new array of `capacity` entries (a 1–2 MB malloc per flush made glibc
  /// consolidate its free lists: 4 % of NexmarkQ7's window thread).
  std::vector<Entry>& take() {
    taken_.clear();
    taken_.swap(entries_);
    std::sort(taken_.begin(), taken_.end(), [](const Entry& a, const Entry& b) {
      if (a.keyGroup != b.keyGroup) return a.keyGroup < b.keyGroup;
      if (int c = a.key.compare(b.key); c != 0) return c < 0;
      return a.pane.start < b.pane.start;
    });
    std::fill(slots_.begin(), slots_.end(), 0);
    last_ = std::numeric_limits<size_t>::max();
    earliestFiring_ = std::numeric_limits<int64_t>::max();
    return taken_;
  }

 private:
  /// At least twice as many slots as entries (a power of two): probes stay short.
  void grow() {
    slots_.assign(std::max<size_t>(64, 2 * slots_.size()), 0);
    for (size_t i = 0; i < entries_.size(); ++i) place(i);
  }
  void place(size_t index) {
    const size_t mask = slots_.size() - 1;
    size_t i = hashOf(entries_[index].key, entries_[index].pane.start) & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = static_cast<uint32_t>(index + 1);
  }
  /// The key's std::hash combined with the pane's start.
  static size_t hashOf(std::string_view key, int64_t paneStart) {
    uint64_t h = std::hash<std::string_view>{}(key) ^ (static_cast<uint64_t>(paneStart) * 0x9E3779B97F4A7C15ULL);
    h ^= h >> 29;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return static_cast<size_t>(h ^ (h >> 32));
  }

  size_t capacity_;
  std::vector<Entry> entries_;
  std::vector<Entry> taken_;  // what the last take() returned
  std::vector<uint32_t> slots_;  // 1 + index into entries_, 0: empty
  size_t last_ = std::numeric_limits<size_t>::max();
  int64_t earliestFiring_ = std::numeric_limits<int64_t>::max();
};

}  // namespace jobhost::detail
