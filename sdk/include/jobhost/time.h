// jobhost/time.h — event time: timestamps, watermarks, timers, windows' time spans, side
// output tags.
//
//   env.readTextFile(path)
//       .assignTimestampsAndWatermarks(
//           jobhost::WatermarkStrategy<std::string>::forBoundedOutOfOrderness(2s)
//               .withTimestampAssigner([](const std::string& line) { return std::stoll(line); })
//               .withIdleness(30s))
//
// Every record may carry an event timestamp (milliseconds since the epoch). A watermark
// W says "no record with a timestamp <= W follows"; event-time windows and timers fire
// when it passes them. Watermarks are generated right after the source by the strategy
// above, every pipeline.auto-watermark-interval (default 200 ms), travel in-band with the
// records through every exchange, and a task's watermark is the minimum over its input
// channels, leaving out channels whose generator is idle (withIdleness). A bounded input
// ends with kMaxWatermark, so every window fires. The generator's progress is in every
// checkpoint: a restored job resumes from the watermark it had, so records it replays
// are judged late or not as they were before the failure.
//
// Thread-safety: values and per-subtask objects, used by one task thread.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "jobhost/errors.h"
#include "jobhost/format.h"
#include "jobhost/operator.h"
#include "jobhost/serializer.h"
#include "jobhost/serializer_text.h"

namespace jobhost {

/// A half-open span of event or processing time [start, end), in milliseconds: the key
/// of a window's contents, and its timers' namespace. As Flink's TimeWindow.
struct TimeWindow {
  int64_t start = 0;
  int64_t end = 0;
  /// The last timestamp that belongs to the window; its result is emitted with it.
  int64_t maxTimestamp() const { return end - 1; }
  bool intersects(const TimeWindow& o) const { return start <= o.end && end >= o.start; }
  TimeWindow cover(const TimeWindow& o) const { return {std::min(start, o.start), std::max(end, o.end)}; }
  bool operator==(const TimeWindow&) const = default;
  auto operator<=>(const TimeWindow&) const = default;
};

template <>
struct Serializer<TimeWindow> {
  static std::string id() { return "TimeWindow"; }
  static uint32_t version() { return 1; }
  static void write(ByteWriter& w, const TimeWindow& v) {
    w.writeI64(v.start);
    w.writeI64(v.end);
  }
  static TimeWindow read(ByteReader& r) {
    TimeWindow t;
    t.start = r.readI64();
    t.end = r.readI64();
    return t;
  }
};

template <>
struct Formatter<TimeWindow> {
  static void append(std::string& out, const TimeWindow& w) {
    out += "TimeWindow{start=" + std::to_string(w.start) + ", end=" + std::to_string(w.end) + "}";
  }
};

/// Names a side output of type T: `ctx.output(tag, value)` in a process function,
/// `stream.getSideOutput(tag)` to consume it. Two tags are the same output when their
/// ids and types are the same.
template <class T>
class OutputTag {
 public:
  using Type = T;
  explicit OutputTag(std::string id) : id_(std::move(id)), key_(id_ + "#" + typeid(T).name()) {
    if (id_.empty()) throw JobArgumentError("an OutputTag needs a non-empty id");
  }
  const std::string& id() const { return id_; }
  /// What the host matches producers and consumers by: the id and the C++ type.
  const std::string& key() const { return key_; }

 private:
  std::string id_;
  std::string key_;
};

/// Timers of the current key (KeyedProcessFunction, KeyedCoProcessFunction). One timer
/// per (key, time) in each domain; registering it again does nothing. Timers are keyed
/// state: they are in every checkpoint and savepoint and move with their key group.
class TimerService {
 public:
  explicit TimerService(InternalTimerService& s) : s_(&s) {}
  int64_t currentWatermark() const { return s_->currentWatermark(); }
  int64_t currentProcessingTime() const { return s_->currentProcessingTime(); }
  void registerEventTimeTimer(int64_t time) { s_->registerEventTimeTimer({}, time); }
  void deleteEventTimeTimer(int64_t time) { s_->deleteEventTimeTimer({}, time); }
  void registerProcessingTimeTimer(int64_t time) { s_->registerProcessingTimeTimer({}, time); }
  void deleteProcessingTimeTimer(int64_t time) { s_->deleteProcessingTimeTimer({}, time); }

 private:
  InternalTimerService* s_;
};

enum class TimeDomain { kEventTime, kProcessingTime };

/// How a stream gets event timestamps and watermarks (Flink's WatermarkStrategy).
/// Without withTimestampAssigner the record's existing timestamp is used.
template <class T>
class WatermarkStrategy {
 public:
  using Assigner = std::function<int64_t(const T&, int64_t recordTimestamp)>;

  /// Watermark = highest timestamp seen - maxOutOfOrderness - 1 ms: a record may arrive
  /// up to maxOutOfOrderness after a later one without being late.
  static WatermarkStrategy forBoundedOutOfOrderness(std::chrono::milliseconds maxOutOfOrderness) {
    if (maxOutOfOrderness.count() < 0)
      throw JobArgumentError("forBoundedOutOfOrderness: the out-of-orderness must not be negative, got " +
                             std::to_string(maxOutOfOrderness.count()) + " ms");
    WatermarkStrategy s;
    s.outOfOrdernessMs_ = maxOutOfOrderness.count();
    return s;
  }
  /// Timestamps never decrease: forBoundedOutOfOrderness(0).
  static WatermarkStrategy forMonotonousTimestamps() { return forBoundedOutOfOrderness(std::chrono::milliseconds(0)); }

  /// f(const T&) -> int64_t millis, or f(const T&, int64_t recordTimestamp).
  template <class F>
  WatermarkStrategy withTimestampAssigner(F f) const {
    WatermarkStrategy s = *this;
    if constexpr (std::is_invocable_v<F, const T&, int64_t>) {
      s.assigner_ = [f](const T& v, int64_t ts) { return static_cast<int64_t>(f(v, ts)); };
    } else {
      static_assert(std::is_invocable_v<F, const T&>,
                    "a timestamp assigner is f(const T&) or f(const T&, int64_t recordTimestamp) returning millis");
      s.assigner_ = [f](const T& v, int64_t) { return static_cast<int64_t>(f(v)); };
    }
    return s;
  }
  /// A generator that sees no record for `idleTimeout` is idle: downstream tasks stop
  /// waiting for its watermark until it emits again.
  WatermarkStrategy withIdleness(std::chrono::milliseconds idleTimeout) const {
    if (idleTimeout.count() <= 0)
      throw JobArgumentError("withIdleness: the idle timeout must be positive, got " +
                             std::to_string(idleTimeout.count()) + " ms");
    WatermarkStrategy s = *this;
    s.idlenessMs_ = idleTimeout.count();
    return s;
  }

  int64_t outOfOrdernessMs() const { return outOfOrdernessMs_; }
  int64_t idlenessMs() const { return idlenessMs_; }
  /// The timestamp of `v`, whose incoming timestamp is `recordTimestamp`.
  int64_t timestampOf(const T& v, int64_t recordTimestamp) const {
    return assigner_ ? assigner_(v, recordTimestamp) : recordTimestamp;
  }

 private:
  WatermarkStrategy() = default;
  int64_t outOfOrdernessMs_ = 0;
  int64_t idlenessMs_ = 0;  // 0: never idle
  Assigner assigner_;
};

namespace detail {

/// `a + b` without overflow (times near kMaxWatermark).
inline int64_t saturatingAdd(int64_t a, int64_t b) {
  if (b > 0 && a > std::numeric_limits<int64_t>::max() - b) return std::numeric_limits<int64_t>::max();
  if (b < 0 && a < std::numeric_limits<int64_t>::min() - b) return std::numeric_limits<int64_t>::min();
  return a + b;
}

/// Names of the timer states, as Flink names them.
inline constexpr char kEventTimersState[] = "_timer_state/event_user-timers";
inline constexpr char kProcessingTimersState[] = "_timer_state/processing_user-timers";

/// Serializer id of a timer (its time and namespace): "Timer", or "Timer<nsId>" for
/// timers with a namespace written by serializer `nsId`.
inline std::string timerSerializerId(const std::string& nsId) { return nsId.empty() ? "Timer" : "Timer<" + nsId + ">"; }
inline constexpr char kTimerValueSerializer[] = "Void";

/// The descriptors of the two timer states of an operator keyed by K whose timers'
/// namespaces are written by serializer `nsId` ("" for timers without one). The host
/// registers them (PlanNode::timers); the SDK only declares them.
template <class K>
std::vector<StateDescriptorInfo> timerStates(const std::string& nsId) {
  std::vector<StateDescriptorInfo> out;
  for (const char* name : {kEventTimersState, kProcessingTimersState})
    out.push_back({name, StateKind::kMap, Serializer<K>::id(), Serializer<K>::version(), timerSerializerId(nsId), 1,
                   kTimerValueSerializer, 1});
  return out;
}

/// A timer's user key in its state: the time (big-endian, sign bit flipped, so byte order
/// is time order) followed by the namespace bytes.
inline void encodeTimer(std::string& out, int64_t time, std::string_view ns) {
  out.clear();
  uint64_t u = static_cast<uint64_t>(time) ^ (uint64_t{1} << 63);
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  out.append(ns.data(), ns.size());
}
inline bool decodeTimer(std::string_view in, int64_t* time, std::string_view* ns) {
  if (in.size() < 8) return false;
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u = (u << 8) | static_cast<uint8_t>(in[static_cast<size_t>(i)]);
  *time = static_cast<int64_t>(u ^ (uint64_t{1} << 63));
  *ns = in.substr(8);
  return true;
}

/// The text forms of a timer key ("@<time>" or "@<time> <namespace>") and its empty value,
/// for `jobhost state dump`. `nsText` prints a namespace's bytes (null: none).
inline void timerTextForms(std::vector<SerializerTextForm>& out, const std::string& nsId,
                           std::function<void(ByteReader&, std::string&)> nsText) {
  out.push_back({timerSerializerId(nsId), 1, [nsText](ByteReader& r, std::string& s) {
                   std::string_view all = r.readRaw(r.remaining());
                   int64_t time = 0;
                   std::string_view ns;
                   if (!decodeTimer(all, &time, &ns)) throw SerializationError("a timer key is at least 8 bytes");
                   s += "@" + std::to_string(time);
                   if (nsText && !ns.empty()) {
                     s += " ";
                     ByteReader nr(ns);
                     nsText(nr, s);
                   }
                 }});
  out.push_back({kTimerValueSerializer, 1, [](ByteReader& r, std::string& s) {
                   r.readRaw(r.remaining());
                   s += "-";
                 }});
}

/// A map state's user key that is a timestamp: 8 bytes big-endian with the sign bit
/// flipped, so byte order is time order (RocksDB keeps the buckets sorted).
inline constexpr char kTimestampKeyId[] = "Timestamp";
inline void encodeTimestampKey(std::string& out, int64_t ts) {
  out.clear();
  uint64_t u = static_cast<uint64_t>(ts) ^ (uint64_t{1} << 63);
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}
inline int64_t decodeTimestampKey(std::string_view k) {
  if (k.size() != 8)
    throw SerializationError("a timestamp key in state (an interval join's buffer) is 8 bytes, this one " +
                             std::to_string(k.size()) + ": the state is damaged or was written by other code");
  uint64_t u = 0;
  for (size_t i = 0; i < 8; ++i) u = (u << 8) | static_cast<uint8_t>(k[i]);
  return static_cast<int64_t>(u ^ (uint64_t{1} << 63));
}
inline void timestampKeyTextForm(std::vector<SerializerTextForm>& out) {
  out.push_back({kTimestampKeyId, 1, [](ByteReader& r, std::string& s) {
                   s += std::to_string(decodeTimestampKey(r.readRaw(r.remaining())));
                 }});
}

/// Serializer id of a list of T kept as one map value: the elements length-prefixed one
/// after another (appended without reading, KeyedStateAccess::mapAppend).
template <class T>
std::string elementListId() {
  return "Elements<" + Serializer<T>::id() + ">";
}
template <class T>
void elementListTextForm(std::vector<SerializerTextForm>& out) {
  if constexpr (HasTextForm<T>) {
    out.push_back({elementListId<T>(), Serializer<T>::version(), [](ByteReader& r, std::string& s) {
                     s += "[";
                     for (bool first = true; !r.atEnd(); first = false) {
                       if (!first) s += ", ";
                       appendText(s, deserialize<T>(r.readBytes()));
                     }
                     s += "]";
                   }});
  }
}

}  // namespace detail

}  // namespace jobhost
