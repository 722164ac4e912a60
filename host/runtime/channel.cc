#include "runtime/channel.h"

#include <algorithm>
#include <iterator>

namespace jobhost::host {

InputGate::InputGate(int channels, size_t capacityBytes, BufferDebloatOptions debloat)
    : queues_(static_cast<size_t>(channels)),
      queuedBytes_(static_cast<size_t>(channels), 0),
      maxCapacity_(capacityBytes),
      capacity_(capacityBytes),
      bufferBytes_(std::min(kMaxBufferBytes, std::max(capacityBytes / 4, BufferDebloater::kMinBufferBytes))),
      debloater_(debloat),
      periodStart_(std::chrono::steady_clock::now()) {
  if (debloater_.enabled()) capacity_ = std::min(maxCapacity_, debloater_.channelBytes());
}

size_t InputGate::capacityBytes() const {
  std::lock_guard lock(mu_);
  return capacity_;
}

bool InputGate::push(int channel, ChannelEvent event, TaskCounter* backPressured, bool noWait) {
  std::unique_lock lock(mu_);
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
  queuedBytes_[c] += event.data.size();
  auto& q = queues_[c];
  if (event.kind == ChannelEvent::kBarrier) event.arrived = std::chrono::steady_clock::now();
  if (event.kind == ChannelEvent::kBarrier && event.unaligned) {
    // Overtake everything back to the last barrier or end marker, copying the data.
    auto at = q.end();
    while (at != q.begin()) {
      auto prev = std::prev(at);
      if (prev->kind == ChannelEvent::kBarrier || prev->kind == ChannelEvent::kEnd) break;
      at = prev;
    }
    for (auto it = at; it != q.end(); ++it)
      if (it->kind == ChannelEvent::kData) event.overtaken.push_back(it->data);
    q.insert(at, std::move(event));
  } else {
    q.push_back(std::move(event));
  }
  dataReady_.notify_one();
  return true;
}

std::optional<ChannelEvent> InputGate::takeLocked(const std::vector<bool>& blocked) {
  size_t n = queues_.size();
  for (size_t i = 0; i < n; ++i) {
    size_t c = (rr_ + i) % n;
    if (blocked[c] || queues_[c].empty()) continue;
    ChannelEvent e = std::move(queues_[c].front());
    queues_[c].pop_front();
    queuedBytes_[c] -= e.data.size();
    rr_ = c + 1;
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
  if (debloater_.onPeriod(periodBytes_, busy)) {
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
  for (size_t c = 0; c < queues_.size(); ++c) {
    auto& q = queues_[c];
    if (blocked[c] || q.empty() || q.front().kind != ChannelEvent::kBarrier || !accept(q.front().checkpointId))
      continue;
    ChannelEvent e = std::move(q.front());
    q.pop_front();
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
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      dataReady_.wait(lock);
    } else {
      timedOut = dataReady_.wait_until(lock, deadline) == std::cv_status::timeout;
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
