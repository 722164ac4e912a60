// host/runtime/channel.h — bounded in-memory channels between the subtasks of two stages.
//
// An InputGate belongs to one consuming subtask and has one channel per producing
// subtask of each of its inputs. Producers push whole buffers (many serialized records,
// each with its key group, event timestamp and key), checkpoint barriers, watermarks,
// idle/active status changes and end-of-partition markers, in order; a full channel
// blocks a producer of data (back-pressure), the small control events never wait.
// A channel is full when it holds its capacity in bytes: fixed, or with buffer
// debloating (buffer_debloat.h) sized to what the consumer takes in the debloat target;
// producers then also cut their buffers smaller (bufferBytes()).
// The consumer takes events from channels that are not blocked by barrier alignment
// (see barrier_aligner.h), oldest first: of the heads of those channels, the event pushed
// earliest (an unaligned barrier before all of them; tryNextBarrier() takes barriers between
// a task's timers out of turn). Within a channel the order is the
// producer's; across channels it is the order of arrival, so the barriers one producer
// sends to several channels of a gate one after the other are taken one after the other
// too, and aligning them waits only for what it sent in between (with a round robin over
// the channels it waited until the channel holding the most before its barrier drained:
// the G1 benchmark's tail). Another thread can wake a consumer waiting in next() with
// wakeUp(), e.g. to hand its task a checkpoint notification (the task's mailbox).
//
// Unaligned checkpoints (FLIP-76): a barrier pushed with `unaligned` set does not queue
// behind the data in its channel: it overtakes the data, watermarks and status events
// queued there (not an earlier barrier or end marker) and carries a copy of the data it
// overtook (`overtaken`), which stays queued and is processed after it. The consumer
// stores those copies in the checkpoint (stream_task.cc): they were sent before the
// barrier but are processed after the snapshot.
//
// Aligned checkpoint timeout (Flink's execution.checkpointing.aligned-checkpoint-timeout,
// setAlignedCheckpointTimeout): a checkpoint's barriers start aligned (`convertible`) and
// turn unaligned where they are late: once a convertible barrier is older than the
// timeout (from its checkpoint's trigger, `started`) and some live channel of the gate
// has not delivered it to the consumer, the gate makes every barrier of that checkpoint
// still queued here unaligned (it overtakes its channel's data, as if pushed so), and one
// pushed later too. The consumer sees an unaligned barrier of the checkpoint it may be
// aligning and switches (barrier_aligner.h); if it had taken the barrier of some channel
// already, the next event it gets is an unaligned copy of that one, so it switches at
// once even while it waits for channels whose barrier has not reached the gate. Savepoints' and the final checkpoint's
// barriers are never convertible.
//
// Thread-safety: all methods are thread-safe; one mutex per gate.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/buffer_debloat.h"
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
  /// kBarrier: an unaligned checkpoint's barrier (see the file comment).
  bool unaligned = false;
  /// kBarrier with `unaligned`: the data buffers it overtook in its channel, oldest first.
  std::vector<std::string> overtaken;
  /// kBarrier, aligned: it turns unaligned once its checkpoint is older than the gate's
  /// aligned checkpoint timeout (file comment).
  bool convertible = false;
  /// kBarrier: when its checkpoint was triggered (a convertible barrier's timeout runs
  /// from then); unset: when it reached the gate.
  std::chrono::steady_clock::time_point started{};
  /// kBarrier: when it was pushed into the gate (set by the gate).
  std::chrono::steady_clock::time_point arrived{};
  /// The order of arrival at the gate (set by the gate): the consumer takes the oldest
  /// head first, an unaligned barrier before any other.
  uint64_t seq = 0;
};

class InputGate {
 public:
  /// `capacityBytes`: the most a channel holds before its producer waits (debloating
  /// only lowers it). A data event is accepted while its channel holds less, so one
  /// buffer may go over.
  explicit InputGate(int channels, size_t capacityBytes = kMaxChannelBytes, BufferDebloatOptions debloat = {});
  /// Blocks while the channel is full (unless `noWait`: the data an unaligned barrier
  /// follows at once); the time it waited is added to `backPressured` (if given: the
  /// producer's counter, measured only when it has to wait). An unaligned barrier
  /// overtakes what is queued (file comment). Returns false if the gate was cancelled.
  /// `spare` (optional): receives a buffer the consumer handed back (recycle()), if there
  /// is one, for the producer to write over from the start (its old bytes are still in it);
  /// else it is left as it is.
  bool push(int channel, ChannelEvent event, TaskCounter* backPressured = nullptr, bool noWait = false,
            std::string* spare = nullptr);
  /// The consumer hands back the buffer of a data event it has processed: a producer's
  /// push() reuses it (its capacity), so that sending a buffer allocates nothing and
  /// touches no fresh page. Without recycling every 32 KiB buffer was a malloc on the
  /// producer's thread, a free on the consumer's, and page faults each time the
  /// allocator had returned the memory to the kernel in between (perf, NexmarkQ7's source
  /// thread: a tenth of its samples in page faults; recycled, the half that sending
  /// caused is gone, and the process's system time fell by a third). Keeps at most a few
  /// (kMaxSpares); the rest are freed.
  void recycle(std::string&& buffer);
  /// An event from a channel not in `blocked`, without waiting; nullopt if none.
  std::optional<ChannelEvent> tryNext(const std::vector<bool>& blocked);
  /// A checkpoint barrier at the head of a channel not in `blocked` for which
  /// `accept(checkpointId)` is true, without waiting; nullopt if there is none. Other
  /// events stay where they are. `accept` runs with the gate's mutex held.
  std::optional<ChannelEvent> tryNextBarrier(const std::vector<bool>& blocked,
                                             const std::function<bool(uint64_t)>& accept);
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
  /// Turns late convertible barriers unaligned after `timeout` (file comment); 0: never.
  void setAlignedCheckpointTimeout(std::chrono::milliseconds timeout);
  int channels() const { return static_cast<int>(queues_.size()); }
  /// Bytes a producer's buffer for this gate collects before it is sent (changes with
  /// debloating; any thread).
  size_t bufferBytes() const { return bufferBytes_.load(std::memory_order_relaxed); }
  /// Bytes a channel holds before its producer waits, now.
  size_t capacityBytes() const;

 private:
  std::optional<ChannelEvent> takeLocked(const std::vector<bool>& blocked);
  /// Whether the consumer takes head `a` before head `b` (of another channel): unaligned
  /// barriers first, then by seq.
  static bool takenBefore(const ChannelEvent& a, const ChannelEvent& b);
  /// Aligned checkpoint timeout: makes the pending checkpoint's queued barriers unaligned
  /// once it is late, if some live channel has not delivered its barrier.
  void convertLateBarriersLocked(std::chrono::steady_clock::time_point now);
  /// Whether pendingId_'s aligned barrier is still queued in channel `c`.
  bool pendingQueuedLocked(size_t c) const;
  /// Whether every live channel has handed out pendingId_'s barrier (or its end marker).
  bool pendingDeliveredLocked() const;
  /// A barrier was handed out: settles the pending checkpoint once all were, in time.
  void onBarrierTakenLocked(const ChannelEvent& e);
  /// When convertLateBarriersLocked has something to do next (max: nothing pending).
  std::chrono::steady_clock::time_point conversionDueLocked() const;
  /// Moves the barrier at `at` of queue `q` in front of the data queued before it (back
  /// to the last barrier or end marker) and makes it unaligned, with copies of that data.
  static void overtake(std::deque<ChannelEvent>& q, std::deque<ChannelEvent>::iterator at);
  /// Ends a debloat period once it is over (called with mu_ held, on taking data).
  void debloatLocked(std::chrono::steady_clock::time_point now);
  static constexpr size_t kMaxSpares = 8;
  mutable std::mutex mu_;
  std::vector<std::string> spares_;  // guarded by mu_: buffers handed back, see recycle()
  std::condition_variable dataReady_;
  std::condition_variable spaceReady_;
  std::vector<std::deque<ChannelEvent>> queues_;  // guarded by mu_
  std::vector<size_t> queuedBytes_;               // per channel, guarded by mu_
  const size_t maxCapacity_;
  size_t capacity_;                                // guarded by mu_
  std::atomic<size_t> bufferBytes_;
  BufferDebloater debloater_;                      // guarded by mu_
  // The debloat period in progress: when it began, bytes taken and time spent waiting
  // for input in it. Guarded by mu_.
  std::chrono::steady_clock::time_point periodStart_;
  uint64_t periodBytes_ = 0;
  std::chrono::nanoseconds periodIdle_{0};
  bool firstPeriod_ = true;
  uint64_t pushed_ = 0;     // events pushed so far (their seq), guarded by mu_
  bool cancelled_ = false;  // guarded by mu_
  bool woken_ = false;      // guarded by mu_; set by wakeUp(), consumed by next()
  // Aligned checkpoint timeout (file comment); guarded by mu_.
  std::chrono::milliseconds alignedTimeout_{0};
  uint64_t pendingId_ = 0;    // the newest checkpoint with a convertible barrier pushed
  std::chrono::steady_clock::time_point pendingSince_{};
  bool pendingSettled_ = true;  // pendingId_ turned unaligned, or every live channel delivered it
  uint64_t convertedId_ = 0;  // its barriers turn unaligned, also those pushed later
  std::vector<bool> pushedPending_;  // per channel: pendingId_'s barrier (or the end) was pushed
  std::vector<bool> endPushed_;      // per channel: its end marker was pushed
  std::vector<bool> endTaken_;       // per channel: its end marker was handed out
  std::optional<ChannelEvent> switch_;  // an unaligned copy of a barrier already taken, to hand out first
};

}  // namespace jobhost::host
