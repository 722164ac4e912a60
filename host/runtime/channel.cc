#include "runtime/channel.h"

#include <algorithm>
#include <iterator>

namespace jobhost::host {

InputGate::InputGate(int channels, size_t capacityBytes, BufferDebloatOptions debloat)
    : queues_(static_cast<size_t>(channels)),
      queuedBytes_(static_cast<size_t>(channels), 0),
      // With debloating a task that keeps up may hold more (buffer_debloat.h).
      maxCapacity_(debloat.target.count() > 0 ? std::max(capacityBytes, BufferDebloater::mostChannelBytes(channels))
                                              : capacityBytes),
      capacity_(capacityBytes),
      bufferBytes_(std::min(kMaxBufferBytes, std::max(capacityBytes / 4, BufferDebloater::kMinBufferBytes))),
      debloater_(debloat, channels),
      periodStart_(std::chrono::steady_clock::now()) {
  if (debloater_.enabled()) capacity_ = std::min(maxCapacity_, debloater_.channelBytes());
  pushedPending_.assign(static_cast<size_t>(channels), false);
  endPushed_.assign(static_cast<size_t>(channels), false);
  endTaken_.assign(static_cast<size_t>(channels), false);
}

void InputGate::setAlignedCheckpointTimeout(std::chrono::milliseconds timeout) {
  std::lock_guard lock(mu_);
  alignedTimeout_ = timeout;
}

void InputGate::overtake(std::deque<ChannelEvent>& q, std::deque<ChannelEvent>::iterator at) {
  // The events before the barrier back to the last barrier or end marker: [from, to).
  const auto to = static_cast<size_t>(at - q.begin());
  size_t from = to;
  while (from > 0 && q[from - 1].kind != ChannelEvent::kBarrier && q[from - 1].kind != ChannelEvent::kEnd) --from;
  ChannelEvent barrier = std::move(q[to]);
  barrier.unaligned = true;  // a priority event: taken before any channel's data (takeLocked)
  barrier.convertible = false;
  barrier.overtaken.clear();
  for (size_t i = from; i < to; ++i)
    if (q[i].kind == ChannelEvent::kData) barrier.overtaken.push_back(q[i].data);
  q.erase(q.begin() + static_cast<std::ptrdiff_t>(to));
  q.insert(q.begin() + static_cast<std::ptrdiff_t>(from), std::move(barrier));
}

std::chrono::steady_clock::time_point InputGate::conversionDueLocked() const {
  if (alignedTimeout_.count() == 0 || pendingSettled_) return std::chrono::steady_clock::time_point::max();
  return pendingSince_ + alignedTimeout_;
}

bool InputGate::pendingQueuedLocked(size_t c) const {
  for (const auto& e : queues_[c])
    if (e.kind == ChannelEvent::kBarrier && e.checkpointId == pendingId_ && !e.unaligned) return true;
  return false;
}

bool InputGate::pendingDeliveredLocked() const {
  for (size_t c = 0; c < queues_.size(); ++c) {
    if (endTaken_[c]) continue;  // an ended channel counts as aligned once its end is read
    if ((!pushedPending_[c] && !endPushed_[c]) || pendingQueuedLocked(c)) return false;
  }
  return true;
}

void InputGate::onBarrierTakenLocked(const ChannelEvent& e) {
  // Every live channel delivered the pending barrier in time: nothing will be late.
  if (!pendingSettled_ && e.checkpointId == pendingId_ && pendingDeliveredLocked()) pendingSettled_ = true;
}

void InputGate::convertLateBarriersLocked(std::chrono::steady_clock::time_point now) {
  if (alignedTimeout_.count() == 0 || pendingSettled_ || now < pendingSince_ + alignedTimeout_) return;
  pendingSettled_ = true;
  // Late only where a live channel has not delivered the barrier to the consumer: its
  // barrier is still queued, or not pushed yet.
  if (pendingDeliveredLocked()) return;
  convertedId_ = pendingId_;
  std::optional<size_t> delivered;  // a live channel whose barrier the consumer has taken
  for (size_t c = 0; c < queues_.size(); ++c) {
    auto& q = queues_[c];
    bool queued = false;
    for (auto it = q.begin(); it != q.end(); ++it)
      if (it->kind == ChannelEvent::kBarrier && it->checkpointId == convertedId_ && !it->unaligned) {
        overtake(q, it);
        queued = true;
        break;
      }
    if (!queued && pushedPending_[c] && !endTaken_[c] && !delivered) delivered = c;
  }
  // The consumer may be aligning it, with that channel blocked, waiting for channels whose
  // barrier is not even here: it learns of the switch at once from an unaligned copy of
  // the barrier it took (before any other event, blocked channel or not).
  if (delivered) {
    ChannelEvent e;
    e.kind = ChannelEvent::kBarrier;
    e.checkpointId = convertedId_;
    e.unaligned = true;
    e.channel = static_cast<int>(*delivered);
    e.arrived = now;
    switch_ = std::move(e);
  }
  dataReady_.notify_one();
}

size_t InputGate::capacityBytes() const {
  std::lock_guard lock(mu_);
  return capacity_;
}

void InputGate::recycle(std::string&& buffer) {
  // One grown by a record larger than a buffer is freed: kept, it would go round for ever.
  if (buffer.capacity() == 0 || buffer.capacity() > 2 * kMaxBufferBytes + 1024) return;
  // Not cleared: the producer writes over it from the start (ExchangeWriterImpl keeps its
  // own write position), and a buffer that keeps its size need not be zero-filled again.
  std::lock_guard lock(mu_);
  if (spares_.size() < kMaxSpares) spares_.push_back(std::move(buffer));
}

bool InputGate::push(int channel, ChannelEvent event, TaskCounter* backPressured, bool noWait, std::string* spare) {
  std::unique_lock lock(mu_);
  if (spare != nullptr && !spares_.empty()) {
    spare->swap(spares_.back());
    spares_.pop_back();
  }
  const auto c = static_cast<size_t>(channel);
  // Barriers, watermarks, status and end markers never wait: they are tiny and must not
  // deadlock alignment.
  if (event.kind == ChannelEvent::kData && !noWait && !cancelled_ && queuedBytes_[c] >= capacity_) {
    const auto waitStart = std::chrono::steady_clock::now();
    spaceReady_.wait(lock, [&] { return cancelled_ || queuedBytes_[c] < capacity_; });
    if (backPressured)
      backPressured->add(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - waitStart).count()));
  }
  if (cancelled_) return false;
  event.channel = channel;
  event.seq = ++pushed_;
  queuedBytes_[c] += event.data.size();
  auto& q = queues_[c];
  if (event.kind == ChannelEvent::kBarrier) event.arrived = std::chrono::steady_clock::now();
  if (event.kind == ChannelEvent::kEnd) endPushed_[c] = true;
  if (event.kind == ChannelEvent::kBarrier && event.convertible && !event.unaligned && alignedTimeout_.count() > 0) {
    if (event.checkpointId == convertedId_) {
      event.unaligned = true;  // its checkpoint turned unaligned here: it overtakes at once
    } else if (event.checkpointId > pendingId_) {
      pendingId_ = event.checkpointId;
      pendingSince_ = event.started == std::chrono::steady_clock::time_point{} ? event.arrived : event.started;
      pendingSettled_ = false;
      pushedPending_.assign(queues_.size(), false);
    }
    if (event.checkpointId == pendingId_) pushedPending_[c] = true;
  }
  const bool overtakes = event.kind == ChannelEvent::kBarrier && event.unaligned;
  q.push_back(std::move(event));
  // An unaligned barrier overtakes everything back to the last barrier or end marker.
  if (overtakes) overtake(q, std::prev(q.end()));
  dataReady_.notify_one();
  return true;
}

bool InputGate::takenBefore(const ChannelEvent& a, const ChannelEvent& b) {
  const bool pa = a.kind == ChannelEvent::kBarrier && a.unaligned, pb = b.kind == ChannelEvent::kBarrier && b.unaligned;
  if (pa != pb) return pa;  // an unaligned barrier first
  return a.seq < b.seq;     // else (and among them) the order of arrival
}

std::optional<ChannelEvent> InputGate::takeLocked(const std::vector<bool>& blocked) {
  if (!pendingSettled_) convertLateBarriersLocked(std::chrono::steady_clock::now());
  if (switch_) {
    ChannelEvent e = std::move(*switch_);
    switch_.reset();
    return e;
  }
  // The oldest head of a channel the consumer takes from (file comment of channel.h).
  const size_t n = queues_.size();
  size_t c = n;
  for (size_t i = 0; i < n; ++i) {
    if (queues_[i].empty()) continue;
    // A blocked channel still hands out a barrier the timeout turned unaligned (it heads
    // its channel): the consumer aligning an older, aborted checkpoint there abandons it
    // for this one instead of waiting until its other channels drain.
    const ChannelEvent& head = queues_[i].front();
    if (blocked[i] && !(convertedId_ != 0 && head.kind == ChannelEvent::kBarrier && head.unaligned &&
                        head.checkpointId == convertedId_))
      continue;
    if (c == n || takenBefore(head, queues_[c].front())) c = i;
  }
  if (c < n) {
    ChannelEvent e = std::move(queues_[c].front());
    queues_[c].pop_front();
    queuedBytes_[c] -= e.data.size();
    if (e.kind == ChannelEvent::kEnd) endTaken_[c] = true;
    if (e.kind == ChannelEvent::kBarrier) onBarrierTakenLocked(e);
    if (debloater_.enabled() && e.kind == ChannelEvent::kData) {
      periodBytes_ += e.data.size();
      debloatLocked(std::chrono::steady_clock::now());
    }
    spaceReady_.notify_all();
    return e;
  }
  return std::nullopt;
}

void InputGate::debloatLocked(std::chrono::steady_clock::time_point now) {
  const auto elapsed = now - periodStart_;
  // The first estimate comes after a tenth of the period: until then every channel holds
  // the most, and a checkpoint in the first period would wait behind all of it.
  if (elapsed < (firstPeriod_ ? debloater_.options().period / 10 : debloater_.options().period)) return;
  firstPeriod_ = false;
  const auto busy = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed) - periodIdle_;
  if (debloater_.onPeriod(periodBytes_, busy, periodIdle_)) {
    capacity_ = std::min(maxCapacity_, debloater_.channelBytes());
    bufferBytes_.store(debloater_.bufferBytes(), std::memory_order_relaxed);
    // takeLocked() wakes the producers after this, so a grown capacity is seen.
  }
  periodStart_ = now;
  periodBytes_ = 0;
  periodIdle_ = std::chrono::nanoseconds(0);
}

std::optional<ChannelEvent> InputGate::tryNext(const std::vector<bool>& blocked) {
  std::lock_guard lock(mu_);
  if (cancelled_) return std::nullopt;
  return takeLocked(blocked);
}

std::optional<ChannelEvent> InputGate::tryNextBarrier(const std::vector<bool>& blocked,
                                                      const std::function<bool(uint64_t)>& accept) {
  std::lock_guard lock(mu_);
  if (cancelled_) return std::nullopt;
  if (!pendingSettled_) convertLateBarriersLocked(std::chrono::steady_clock::now());
  if (switch_ && accept(switch_->checkpointId)) {
    ChannelEvent e = std::move(*switch_);
    switch_.reset();
    return e;
  }
  for (size_t c = 0; c < queues_.size(); ++c) {
    auto& q = queues_[c];
    if (blocked[c] || q.empty() || q.front().kind != ChannelEvent::kBarrier || !accept(q.front().checkpointId))
      continue;
    ChannelEvent e = std::move(q.front());
    q.pop_front();
    onBarrierTakenLocked(e);
    return e;
  }
  return std::nullopt;
}

std::optional<ChannelEvent> InputGate::next(const std::vector<bool>& blocked,
                                            std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (cancelled_) return std::nullopt;
    if (auto e = takeLocked(blocked)) return e;
    if (woken_) {
      woken_ = false;
      return std::nullopt;
    }
    // Waiting for input is not consuming: the debloat rate is measured over busy time.
    const auto waitStart = std::chrono::steady_clock::now();
    bool timedOut = false;
    // A late barrier to turn unaligned (aligned checkpoint timeout) wakes the wait too.
    const auto until = std::min(deadline, conversionDueLocked());
    if (until == std::chrono::steady_clock::time_point::max()) {
      dataReady_.wait(lock);
    } else {
      timedOut = dataReady_.wait_until(lock, until) == std::cv_status::timeout && until == deadline;
    }
    periodIdle_ += std::chrono::steady_clock::now() - waitStart;
    if (timedOut) {
      if (auto e = takeLocked(blocked)) return e;
      return std::nullopt;
    }
  }
}

void InputGate::wakeUp() {
  std::lock_guard lock(mu_);
  woken_ = true;
  dataReady_.notify_all();
}

void InputGate::cancel() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
  dataReady_.notify_all();
  spaceReady_.notify_all();
}

}  // namespace jobhost::host
