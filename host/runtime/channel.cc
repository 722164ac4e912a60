#include "runtime/channel.h"

namespace jobhost::host {

InputGate::InputGate(int channels, size_t capacityPerChannel)
    : queues_(static_cast<size_t>(channels)), capacity_(capacityPerChannel) {}

bool InputGate::push(int channel, ChannelEvent event, TaskCounter* backPressured) {
  std::unique_lock lock(mu_);
  auto& q = queues_[static_cast<size_t>(channel)];
  // Barriers, watermarks, status and end markers never wait: they are tiny and must not
  // deadlock alignment.
  if (event.kind == ChannelEvent::kData && !cancelled_ && q.size() >= capacity_) {
    const auto waitStart = std::chrono::steady_clock::now();
    spaceReady_.wait(lock, [&] { return cancelled_ || q.size() < capacity_; });
    if (backPressured)
      backPressured->add(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - waitStart).count()));
  }
  if (cancelled_) return false;
  event.channel = channel;
  q.push_back(std::move(event));
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
    rr_ = c + 1;
    spaceReady_.notify_all();
    return e;
  }
  return std::nullopt;
}

std::optional<ChannelEvent> InputGate::tryNext(const std::vector<bool>& blocked) {
  std::lock_guard lock(mu_);
  if (cancelled_) return std::nullopt;
  return takeLocked(blocked);
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
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      dataReady_.wait(lock);
    } else if (dataReady_.wait_until(lock, deadline) == std::cv_status::timeout) {
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
