// host/runtime/channel.h — bounded in-memory channels between the subtasks of two stages.
//
// An InputGate belongs to one consuming subtask and has one channel per producing
// subtask of each of its inputs. Producers push whole buffers (many serialized records,
// each with its key group, event timestamp and key), checkpoint barriers, watermarks,
// idle/active status changes and end-of-partition markers, in order; a full channel
// blocks a producer of data (back-pressure), the small control events never wait.
// The consumer takes events from channels that are not blocked by barrier alignment
// (see barrier_aligner.h). Another thread can wake a consumer waiting in next() with
// wakeUp(), e.g. to hand its task a checkpoint notification (the task's mailbox).
//
// Thread-safety: all methods are thread-safe; one mutex per gate.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/task_metrics.h"

namespace jobhost::host {

struct ChannelEvent {
  /// kWatermark: `value` is the watermark. kStatus: `value` 1 = the producer is idle
  /// (do not wait for its watermark), 0 = active again.
  enum Kind { kData, kBarrier, kEnd, kWatermark, kStatus } kind = kData;
  uint64_t checkpointId = 0;
  std::string data;
  int channel = 0;  // set by the gate on delivery
  int64_t value = 0;
};

class InputGate {
 public:
  InputGate(int channels, size_t capacityPerChannel);
  /// Blocks while the channel is full; the time it waited is added to `backPressured`
  /// (if given: the producer's counter, measured only when it has to wait). Returns false
  /// if the gate was cancelled.
  bool push(int channel, ChannelEvent event, TaskCounter* backPressured = nullptr);
  /// An event from a channel not in `blocked`, without waiting; nullopt if none.
  std::optional<ChannelEvent> tryNext(const std::vector<bool>& blocked);
  /// Waits for an event from a channel not in `blocked`, until `deadline` at the latest.
  /// nullopt once cancelled, at the deadline, or when woken by wakeUp() (then the caller
  /// checks why and calls next() again).
  std::optional<ChannelEvent> next(const std::vector<bool>& blocked,
                                   std::chrono::steady_clock::time_point deadline =
                                       std::chrono::steady_clock::time_point::max());
  /// Makes next() return nullopt instead of waiting, once: the call waiting now, else
  /// the next call that finds no event. Wake-ups do not accumulate.
  void wakeUp();
  /// Wakes every waiter; later push/next return false/nullopt.
  void cancel();
  int channels() const { return static_cast<int>(queues_.size()); }

 private:
  std::optional<ChannelEvent> takeLocked(const std::vector<bool>& blocked);
  std::mutex mu_;
  std::condition_variable dataReady_;
  std::condition_variable spaceReady_;
  std::vector<std::deque<ChannelEvent>> queues_;  // guarded by mu_
  size_t capacity_;
  size_t rr_ = 0;           // round-robin start, guarded by mu_
  bool cancelled_ = false;  // guarded by mu_
  bool woken_ = false;      // guarded by mu_; set by wakeUp(), consumed by next()
};

}  // namespace jobhost::host
