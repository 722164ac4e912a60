// host/runtime/exchange_writer_impl.h — the sending side of an exchange: one producing
// subtask's records, with their key groups and timestamps, batched into buffers per
// receiving channel, and the barriers, watermarks and status in between (channel.h).
//
// Thread-safety: used by its task's thread only.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "jobhost/operator.h"
#include "jobhost/serializer.h"
#include "runtime/channel.h"
#include "runtime/key_group_assignment.h"
#include "runtime/task_metrics.h"
#include "runtime/timer_service.h"

namespace jobhost::host {

/// The key group field of a record sent through an unkeyed exchange.
constexpr uint16_t kNoKeyGroup = 0xffff;

/// Sends the records of one producing subtask into one input of the next stage, with
/// their key groups and timestamps, and the barriers, watermarks and status in between.
class ExchangeWriterImpl : public ExchangeWriter {
 public:
  /// `recordsActivate`: a record sent while idle makes the output active again (a source
  /// task: its watermark assigner went idle and now sees records). In an input task the
  /// input's idle status is the output's (onInputTime): a record a timer emits there
  /// leaves the output idle, as in Flink.
  /// `broadcast`: emitAny() sends each record to every receiver (PlanNode::broadcastExchange).
  ExchangeWriterImpl(std::vector<InputGate*> gates, int channel, int subtask, int producerParallelism,
                     int maxParallelism, const TaskRecordContext* record, TaskMetrics* metrics,
                     bool recordsActivate, bool broadcast = false)
      : gates_(std::move(gates)), channel_(channel), subtask_(static_cast<size_t>(subtask)),
        forward_(static_cast<size_t>(producerParallelism) == gates_.size()), broadcast_(broadcast),
        maxParallelism_(maxParallelism), buffers_(gates_.size()), used_(gates_.size(), 0), limits_(gates_.size()),
        record_(record), metrics_(metrics), recordsActivate_(recordsActivate) {
    for (size_t i = 0; i < gates_.size(); ++i) limits_[i] = gates_[i]->bufferBytes();
    // The receiver of each key group, looked up per record rather than divided out.
    receiverOfGroup_.resize(static_cast<size_t>(std::max(maxParallelism_, 1)));
    for (size_t kg = 0; kg < receiverOfGroup_.size(); ++kg)
      receiverOfGroup_[kg] = static_cast<uint32_t>(kg * gates_.size() / receiverOfGroup_.size());
  }
  void emit(std::string_view key, std::string_view record) override {
    metrics_->recordsOut.add(1);
    int kg = keyGroupFor(key, maxParallelism_);
    append(receiverOfGroup_[static_cast<size_t>(kg)], static_cast<uint16_t>(kg), key, record);
  }
  void emitAny(std::string_view record) override {
    metrics_->recordsOut.add(1);  // once, also when every receiver gets a copy
    if (broadcast_) {
      for (size_t i = 0; i < gates_.size(); ++i) append(i, kNoKeyGroup, {}, record);
      return;
    }
    append(forward_ ? subtask_ : next_++ % gates_.size(), kNoKeyGroup, {}, record);
  }
  /// `noWait`: into full channels too (the data an unaligned barrier follows at once).
  void flush(bool noWait = false) {
    for (size_t i = 0; i < buffers_.size(); ++i)
      if (used_[i] != 0) send(i, noWait);
  }
  /// Barriers and end markers. An unaligned barrier (channel.h) does not wait for room
  /// behind a full channel: it overtakes what is queued there.
  /// `convertible`, `started`: an aligned barrier that may turn unaligned (channel.h).
  void broadcast(ChannelEvent::Kind kind, uint64_t id, bool unaligned = false, bool convertible = false,
                 std::chrono::steady_clock::time_point started = {}) {
    flush(unaligned);
    for (auto* g : gates_) {
      ChannelEvent e = control(kind, id, 0);
      e.unaligned = unaligned;
      e.convertible = convertible;
      e.started = started;
      g->push(channel_, std::move(e));
    }
  }
  void broadcastWatermark(int64_t watermark) {
    activate();
    flush();
    for (auto* g : gates_) g->push(channel_, control(ChannelEvent::kWatermark, 0, watermark));
  }
  /// Tells the receivers not to wait for this producer's watermark until it emits again.
  void markIdle() {
    if (idle_) return;
    flush();
    idle_ = true;
    for (auto* g : gates_) g->push(channel_, control(ChannelEvent::kStatus, 0, 1));
  }
  /// The receivers wait for this producer's watermark again (also done by any record or
  /// watermark it sends).
  void activate() {
    if (!idle_) return;
    idle_ = false;
    for (auto* g : gates_) g->push(channel_, control(ChannelEvent::kStatus, 0, 0));
  }

 private:
  static ChannelEvent control(ChannelEvent::Kind kind, uint64_t id, int64_t value) {
    ChannelEvent e;
    e.kind = kind;
    e.checkpointId = id;
    e.value = value;
    return e;
  }
  /// One record in ByteWriter's encoding (channel.h): the key group (fixed u16), the
  /// timestamp (fixed i64), the key and the record (varint length, bytes). The buffer grows
  /// once per record and the fields are stored in place: a ByteWriter call per field (an
  /// out-of-line append and a memcpy call each) was about a tenth of NexmarkQ7's source
  /// thread.
  void append(size_t target, uint16_t kg, std::string_view key, std::string_view record) {
    if (recordsActivate_) activate();
    std::string& b = buffers_[target];
    size_t& used = used_[target];
    const size_t need =
        sizeof kg + sizeof(int64_t) + varintBytes(key.size()) + key.size() + varintBytes(record.size()) + record.size();
    // The buffer's size is its room (a recycled one keeps its old size): it grows only when
    // a record does not fit, not once per record (each resize() zero-filled the record's bytes).
    if (b.size() - used < need) b.resize(std::max(used + need, limits_[target] + 1024));
    char* p = b.data() + used;
    used += need;
    std::memcpy(p, &kg, sizeof kg);
    p += sizeof kg;
    const int64_t timestamp = record_->timestamp;
    std::memcpy(p, &timestamp, sizeof timestamp);
    p += sizeof timestamp;
    p = putBytes(p, key);
    putBytes(p, record);
    if (used >= limits_[target]) send(target);
  }
  static size_t varintBytes(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
      v >>= 7;
      ++n;
    }
    return n;
  }
  /// ByteWriter::writeBytes() into memory already sized for it; returns the end.
  static char* putBytes(char* p, std::string_view bytes) {
    uint64_t v = bytes.size();
    while (v >= 0x80) {
      *p++ = static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    *p++ = static_cast<char>(v);
    if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
    return p + bytes.size();
  }
  void send(size_t target, bool noWait = false) {
    ChannelEvent e;
    e.kind = ChannelEvent::kData;
    buffers_[target].resize(used_[target]);  // the records, not the room after them
    used_[target] = 0;
    e.data.swap(buffers_[target]);
    // The receiver's buffer size, read once per buffer: it changes with debloating.
    limits_[target] = gates_[target]->bufferBytes();
    gates_[target]->push(channel_, std::move(e), &metrics_->backPressuredNanos, noWait, &buffers_[target]);
    buffers_[target].reserve(limits_[target] + 1024);  // a recycled buffer has room already
  }
  std::vector<InputGate*> gates_;
  int channel_;
  size_t subtask_;
  bool forward_;  // as many receivers as producers: subtask i sends to subtask i
  bool broadcast_;  // every record to every receiver
  size_t next_ = 0;
  int maxParallelism_;
  std::vector<std::string> buffers_;  // per receiver: records in [0, used_), room after them
  std::vector<size_t> used_;
  std::vector<uint32_t> receiverOfGroup_;  // per key group: the receiver it goes to
  std::vector<size_t> limits_;  // per receiver: bytes a buffer collects before it is sent
  const TaskRecordContext* record_;
  TaskMetrics* metrics_;
  bool recordsActivate_;
  bool idle_ = false;
};

}  // namespace jobhost::host
