// host/runtime/buffer_debloat.h — how much data an input channel may hold, sized to how
// fast its task consumes (Flink's buffer debloating, FLIP-183).
//
// A full channel is what a checkpoint barrier waits behind: an aligned barrier reaches
// its task only once the data ahead of it is processed, and every other channel of the
// task stays blocked meanwhile. With a fixed capacity that wait is capacity / rate, which
// for a slow task (a RocksDB join, a sink at a thousand records a second) is hundreds of
// milliseconds or more. The debloater measures the task's consumption rate over busy time
// (time not spent waiting for input) in periods, smooths it, and sizes each channel to
// hold `target` worth of it; the producers cut their buffers to a quarter of that, so a
// channel still holds several buffers and the pipeline keeps moving.
//
// A task that keeps up (it waited for input for a tenth of its recent periods or more)
// may hold more: up to kMaxGateBytes over its channels. Such a task pauses now and then
// (a watermark fires its windows' timers, a mini-batch is flushed) and is otherwise faster
// than its producers; a channel of 512 KiB filled in a few milliseconds of such a pause
// and stopped the producer for the rest of it, so neither thread ran at full speed
// (NexmarkQ7 on the heap: source and window task each ~60 % busy; with the larger channels
// the run took a quarter less time, docs/benchmarks.md). Under back-pressure (a task busy
// all the time) the channels stay at most kMaxChannelBytes: there more data in flight only
// delays barriers.
//
// Thread-safety: none; the InputGate calls it under its mutex.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace jobhost::host {

/// Bytes a producer's buffer of one channel collects before it is sent, at most.
constexpr size_t kMaxBufferBytes = 32 * 1024;
/// What a channel holds without debloating, and at most under back-pressure: 16 full
/// buffers.
constexpr size_t kMaxChannelBytes = 16 * kMaxBufferBytes;
/// What one gate's channels may hold together, with debloating, while its task keeps up.
constexpr size_t kMaxGateBytes = 8 * 1024 * 1024;

struct BufferDebloatOptions {
  /// taskmanager.network.memory.buffer-debloat.target: the time a channel's data should
  /// take to consume at the measured rate. Zero turns debloating off (every channel holds
  /// kMaxChannelBytes).
  std::chrono::nanoseconds target{0};
  /// taskmanager.network.memory.buffer-debloat.period: how often the rate is measured.
  std::chrono::nanoseconds period = std::chrono::milliseconds(200);
};

class BufferDebloater {
 public:
  /// The smallest channel capacity: two minimum buffers.
  static constexpr size_t kMinChannelBytes = 4 * 1024;
  /// The smallest buffer a producer is asked for.
  static constexpr size_t kMinBufferBytes = 1024;

  /// The share of its time a task waited for input, on average, from which on it counts
  /// as keeping up.
  static constexpr double kKeepsUpIdleShare = 0.1;

  /// `channels`: how many channels of the gate share kMaxGateBytes.
  explicit BufferDebloater(BufferDebloatOptions options, int channels = 1)
      : options_(options), mostChannelBytes_(mostChannelBytes(channels)) {}

  /// The most a channel of a gate with `channels` may hold (its task keeping up): its share
  /// of kMaxGateBytes, at least kMaxChannelBytes.
  static size_t mostChannelBytes(int channels) {
    return std::max(kMaxChannelBytes, kMaxGateBytes / static_cast<size_t>(std::max(1, channels)));
  }

  bool enabled() const { return options_.target.count() > 0; }
  const BufferDebloatOptions& options() const { return options_; }

  /// One measured period: `bytes` consumed in `busy` (the period less the time the task
  /// waited for input, `idle`). A period with less than a millisecond of busy time says
  /// nothing about the rate and is ignored. Returns true when the capacity changed.
  bool onPeriod(uint64_t bytes, std::chrono::nanoseconds busy, std::chrono::nanoseconds idle = {});

  /// Bytes a channel may hold before its producer waits (a data event is accepted while
  /// the channel holds less, so it may go over by one buffer).
  size_t channelBytes() const { return channelBytes_; }
  /// Bytes a producer's buffer collects before it is sent: a quarter of the capacity,
  /// within [kMinBufferBytes, kMaxBufferBytes].
  size_t bufferBytes() const;
  /// The smoothed consumption rate, bytes per second (0 before the first period).
  double rate() const { return rate_; }
  /// The smoothed share of its time the task waited for input (0 before the first period).
  double idleShare() const { return idleShare_; }

 private:
  BufferDebloatOptions options_;
  size_t mostChannelBytes_;
  double rate_ = 0;
  double idleShare_ = 0;
  size_t channelBytes_ = kMaxChannelBytes;
};

}  // namespace jobhost::host
