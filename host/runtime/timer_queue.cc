// The index of one domain's timers. See the header.
#include "runtime/timer_queue.h"

#include <algorithm>
#include <limits>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

namespace jobhost::host {

uint64_t TimerQueue::hashOf(const Timer& t) {
  uint64_t h = XXH3_64bits_withSeed(t.key.data(), t.key.size(), static_cast<uint64_t>(t.time) * 0x9E3779B97F4A7C15ULL +
                                                                    static_cast<uint64_t>(t.keyGroup));
  return XXH3_64bits_withSeed(t.ns.data(), t.ns.size(), h);
}

TimerQueue::~TimerQueue() = default;

TimerQueue::Entry* TimerQueue::find(const Timer& t, uint64_t hash) const {
  if (slots_.empty()) return nullptr;
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& slot = slots_[i];
    if (slot.entry == nullptr) return nullptr;
    if (slot.hash == hash && same(*slot.entry, t)) return slot.entry;
  }
}

void TimerQueue::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.entry == nullptr) continue;
    size_t i = slot.hash & mask;
    while (slots_[i].entry != nullptr) i = (i + 1) & mask;
    slots_[i] = slot;
  }
}

const TimerQueue::Entry& TimerQueue::findOrInsert(const Timer& t) {
  const uint64_t hash = hashOf(t);
  if (Entry* found = find(t, hash)) return *found;
  if ((used_ + 1) * 4 > slots_.size() * 3) grow();
  Entry* e;
  if (!spare_.empty()) {
    e = spare_.back();
    spare_.pop_back();
  } else {
    e = &pool_.emplace_back();
  }
  e->time = t.time;
  e->keyGroup = t.keyGroup;
  e->keyLength = static_cast<uint32_t>(t.key.size());
  e->bytes.assign(t.key).append(t.ns);  // reuses a spare entry's buffer
  e->live = e->persisted = e->queued = e->dirty = false;
  e->hash = hash;
  const size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  while (slots_[i].entry != nullptr) i = (i + 1) & mask;
  slots_[i] = Slot{hash, e};
  ++used_;
  return *e;
}

void TimerQueue::erase(const Entry& e) {
  const size_t mask = slots_.size() - 1;
  size_t i = e.hash & mask;
  while (slots_[i].entry != &e) i = (i + 1) & mask;  // it is in the index
  // Backward shift: move each later entry of the run whose home is not between the hole
  // and itself (cyclically) into the hole.
  for (size_t j = (i + 1) & mask; slots_[j].entry != nullptr; j = (j + 1) & mask) {
    const size_t home = slots_[j].hash & mask;
    const bool homeInHoleToJ = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (homeInHoleToJ) continue;
    slots_[i] = slots_[j];
    i = j;
  }
  slots_[i] = Slot{};
  --used_;
  spare_.push_back(const_cast<Entry*>(&e));
}

void TimerQueue::enqueue(const Entry& e) {
  if (e.queued) {  // deleted, then registered again before its bucket dropped it
    --buckets_[e.time].deleted;
    return;
  }
  Bucket& b = buckets_[e.time];
  b.entries.push_back(&e);
  b.sorted = false;
  e.queued = true;
}

void TimerQueue::markDirty(const Entry& e) {
  if (e.dirty) return;
  dirty_.push_back(&e);
  e.dirty = true;
}

void TimerQueue::maybeErase(const Entry& e) {
  if (e.live || e.persisted || e.queued || e.dirty || &e == fired_) return;
  erase(e);
}

void TimerQueue::releaseFired() {
  const Entry* f = fired_;
  fired_ = nullptr;
  if (f != nullptr) maybeErase(*f);
}

void TimerQueue::setLive(const Entry& e, bool live) {
  if (e.live == live) return;
  unsynced_ += e.live != e.persisted ? -1 : 1;  // a change flips whether the backend agrees
  e.live = live;
  if (live) ++live_;
  else --live_;
  markDirty(e);
}

bool TimerQueue::add(const Timer& t) {
  const Entry& e = findOrInsert(t);
  if (e.live) return false;
  setLive(e, true);
  enqueue(e);
  return true;
}

void TimerQueue::addPersisted(const Timer& t) {
  const Entry& e = findOrInsert(t);
  if (!e.live) ++live_;
  if (e.live != e.persisted) --unsynced_;
  e.live = true;
  e.persisted = true;
  enqueue(e);
}

bool TimerQueue::remove(const Timer& t) {
  const Entry* found = find(t, hashOf(t));
  if (found == nullptr || !found->live) return false;
  const Entry& e = *found;
  setLive(e, false);
  auto b = buckets_.find(e.time);
  if (b != buckets_.end() && e.queued) {
    Bucket& bucket = b->second;
    if (++bucket.deleted * 2 >= bucket.entries.size() - bucket.next) compact(b);
  }
  maybeErase(e);  // kept while its bucket lists it
  return true;
}

void TimerQueue::compact(std::map<int64_t, Bucket>::iterator it) {
  Bucket& b = it->second;
  size_t out = b.next;
  for (size_t i = b.next; i < b.entries.size(); ++i) {
    const Entry* e = b.entries[i];
    if (e->live) {
      b.entries[out++] = e;
      continue;
    }
    e->queued = false;
    maybeErase(*e);
  }
  b.entries.resize(out);
  b.deleted = 0;
  if (b.next == b.entries.size()) buckets_.erase(it);
}

std::optional<TimerQueue::Timer> TimerQueue::pop(int64_t bound) {
  releaseFired();
  while (!buckets_.empty() && buckets_.begin()->first <= bound) {
    Bucket& b = buckets_.begin()->second;
    if (!b.sorted) {
      std::sort(b.entries.begin() + static_cast<std::ptrdiff_t>(b.next), b.entries.end(),
                [](const Entry* x, const Entry* y) {
                  if (x->keyGroup != y->keyGroup) return x->keyGroup < y->keyGroup;
                  if (int c = x->key().compare(y->key()); c != 0) return c < 0;
                  return x->ns() < y->ns();
                });
      b.sorted = true;
    }
    if (b.next == b.entries.size()) {
      buckets_.erase(buckets_.begin());
      continue;
    }
    const Entry& e = *b.entries[b.next++];
    e.queued = false;
    if (!e.live) {
      if (b.deleted > 0) --b.deleted;
      maybeErase(e);
      continue;
    }
    setLive(e, false);
    fired_ = &e;
    return Timer{e.time, e.keyGroup, e.key(), e.ns()};
  }
  return std::nullopt;
}

int64_t TimerQueue::nextTime() const {
  return buckets_.empty() ? std::numeric_limits<int64_t>::max() : buckets_.begin()->first;
}

void TimerQueue::clear() {
  fired_ = nullptr;
  dirty_.clear();
  buckets_.clear();
  slots_.clear();
  used_ = 0;
  pool_.clear();
  spare_.clear();
  live_ = 0;
  unsynced_ = 0;
}

}  // namespace jobhost::host
