// The index of one domain's timers. See the header.
#include "runtime/timer_queue.h"

#include <algorithm>
#include <limits>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

namespace jobhost::host {

size_t TimerQueue::Hash::hash(int64_t time, int keyGroup, std::string_view key, std::string_view ns) {
  uint64_t h = XXH3_64bits_withSeed(key.data(), key.size(), static_cast<uint64_t>(time) * 0x9E3779B97F4A7C15ULL +
                                                              static_cast<uint64_t>(keyGroup));
  return static_cast<size_t>(XXH3_64bits_withSeed(ns.data(), ns.size(), h));
}

TimerQueue::~TimerQueue() = default;

const TimerQueue::Entry& TimerQueue::findOrInsert(const Timer& t) {
  auto it = entries_.find(t);
  if (it != entries_.end()) return *it;
  Entry e;
  e.time = t.time;
  e.keyGroup = t.keyGroup;
  e.keyLength = static_cast<uint32_t>(t.key.size());
  e.bytes.reserve(t.key.size() + t.ns.size());
  e.bytes.append(t.key).append(t.ns);
  return *entries_.insert(std::move(e)).first;
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
  entries_.erase(entries_.find(Timer{e.time, e.keyGroup, e.key(), e.ns()}));
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
  auto it = entries_.find(t);
  if (it == entries_.end() || !it->live) return false;
  const Entry& e = *it;
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
  entries_.clear();
  live_ = 0;
  unsynced_ = 0;
}

}  // namespace jobhost::host
