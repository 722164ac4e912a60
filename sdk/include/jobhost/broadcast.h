// jobhost/broadcast.h — the broadcast state pattern (Flink's): a low-volume stream of
// rules or configuration reaches every subtask of an operator, which keeps it in
// broadcast state (maps of the same content in every subtask) and applies it to the
// records of its other, high-volume input.
//
//   BroadcastStateDescriptor<std::string, int64_t> thresholds{"thresholds"};
//   auto rules = env.readTextFile(...).map(...).broadcast(thresholds);
//   words.keyBy(...).connect(rules).process<ApplyThresholds>();
//
// with ApplyThresholds a KeyedBroadcastProcessFunction<K, Word, Rule, Out> (or, after an
// unkeyed stream, a BroadcastProcessFunction<Word, Rule, Out>):
//   - processBroadcastElement() sees each rule in every subtask and may change the
//     broadcast state (ctx.getBroadcastState(thresholds).put(...));
//   - processElement() sees each record of the other input with read-only access to it
//     (and, keyed, the key's keyed state and timers); onTimer() too.
// The broadcast state must end up the same in every subtask: change it only from
// processBroadcastElement(), from the broadcast element alone (not from a subtask's own
// keyed state, time or random numbers). It is part of every checkpoint and savepoint,
// and restores at any parallelism: every subtask gets the same copy (as Flink's).
// The order in which the two inputs arrive is not defined; a result that must not
// depend on it waits for the rules (keyed state and a timer, as the example plugin's
// WordThresholds and the SDK guide's SensorLimits do). Read rules with one source subtask
// (a source's default): after a change of parallelism every subtask merges every former
// copy and the last one wins, which only equal copies make harmless. The broadcast input
// takes part in the operator's watermark like any input: an unbounded rules source with
// no watermarks holds back event time; give it a watermark strategy (with idleness).
//
// Thread-safety: as every function object, used by its subtask's thread only.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobhost/detail/named_op.h"
#include "jobhost/detail/time_operators.h"
#include "jobhost/errors.h"
#include "jobhost/functions.h"
#include "jobhost/operator.h"
#include "jobhost/serializer.h"
#include "jobhost/state.h"

namespace jobhost {

/// Names one broadcast state, a map from K to V (Flink's MapStateDescriptor as given to
/// broadcast()). K and V need Serializers; the name is unique per operator.
template <class K, class V>
class BroadcastStateDescriptor {
 public:
  explicit BroadcastStateDescriptor(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

namespace detail {

template <class T>
std::string serialized(const T& v) {
  std::string out;
  serializeInto(out, v);
  return out;
}

/// "string v1": a serializer's id and version, as a broadcast state records them.
template <class T>
std::string serializerName() {
  return Serializer<T>::id() + " v" + std::to_string(Serializer<T>::version());
}

/// One broadcast state as bytes: serialized key -> serialized value, ordered by the
/// key's bytes, with the serializers that wrote them (serializerName).
struct BroadcastMap {
  std::string keySerializer, valueSerializer;
  std::map<std::string, std::string, std::less<>> entries;
};

/// The broadcast states of one operator instance, and their snapshot format.
class BroadcastStates {
 public:
  /// At plan time (broadcast()): the states the operator may use.
  void declare(const std::string& name, const std::string& keySerializer, const std::string& valueSerializer) {
    auto [it, fresh] = maps_.try_emplace(name);
    if (!fresh && (it->second.keySerializer != keySerializer || it->second.valueSerializer != valueSerializer))
      throw JobArgumentError("broadcast state '" + name + "' is declared twice with different types");
    it->second.keySerializer = keySerializer;
    it->second.valueSerializer = valueSerializer;
    declared_.push_back(name);
  }
  /// The state `name` of K -> V; throws StateError if it was not declared with these types.
  template <class K, class V>
  BroadcastMap& get(const BroadcastStateDescriptor<K, V>& d) {
    auto it = maps_.find(d.name());
    if (it == maps_.end() || std::find(declared_.begin(), declared_.end(), d.name()) == declared_.end())
      throw StateError("broadcast state '" + d.name() + "' is not declared: pass its descriptor to broadcast(...)");
    if (it->second.keySerializer != serializerName<K>() || it->second.valueSerializer != serializerName<V>())
      throw StateError("broadcast state '" + d.name() + "' holds " + it->second.keySerializer + " -> " +
                       it->second.valueSerializer + ", not " + serializerName<K>() + " -> " + serializerName<V>());
    return it->second;
  }

  /// The declared states, for the plan (PlanNode::broadcastStates).
  std::vector<BroadcastStateInfo> infos() const {
    std::vector<BroadcastStateInfo> out;
    for (const auto& name : declared_) {
      const auto& m = maps_.at(name);
      out.push_back({name, m.keySerializer, m.valueSerializer});
    }
    return out;
  }
  /// "jhbcast", u8 format 1, varint count, then per state: name, key serializer, value
  /// serializer ("string v1", serializerName; bytes each), varint entries, then key and
  /// value bytes per entry. The
  /// magic lets a reader of snapshots tell broadcast state from other operator state.
  static constexpr std::string_view kMagic = "jhbcast";
  static bool is(std::string_view bytes) { return bytes.substr(0, kMagic.size()) == kMagic; }
  std::string snapshot() const {
    std::string out;
    ByteWriter w(out);
    w.writeRaw(kMagic.data(), kMagic.size());
    w.writeU8(kFormat);
    w.writeVarint(maps_.size());
    for (const auto& [name, m] : maps_) {
      w.writeBytes(name);
      w.writeBytes(m.keySerializer);
      w.writeBytes(m.valueSerializer);
      w.writeVarint(m.entries.size());
      for (const auto& [k, v] : m.entries) {
        w.writeBytes(k);
        w.writeBytes(v);
      }
    }
    return out;
  }
  /// Every state held, by name (declared or restored).
  const std::map<std::string, BroadcastMap>& maps() const { return maps_; }
  /// Adds a snapshot's entries. After a change of parallelism it is called once per
  /// former subtask (all hold the same maps), so a key seen twice keeps one entry. A state
  /// the operator no longer declares is kept and snapshotted again, as keyed state is.
  void restore(std::string_view bytes) {
    if (!is(bytes))
      throw SerializationError("the operator state is not broadcast state (it was written by another kind of "
                               "operator); give this operator a new uid and restore with --allow-non-restored-state "
                               "(-n), or restore into the class that wrote it");
    ByteReader r(bytes.substr(kMagic.size()));
    if (uint8_t f = r.readU8(); f != kFormat)
      throw SerializationError("the broadcast state has format " + std::to_string(f) + ", this SDK reads format " +
                               std::to_string(kFormat));
    for (uint64_t n = r.readVarint(); n > 0; --n) {
      std::string name(r.readBytes()), key(r.readBytes()), value(r.readBytes());
      auto [it, fresh] = maps_.try_emplace(name);
      if (fresh) {
        it->second.keySerializer = key;
        it->second.valueSerializer = value;
      } else if (it->second.keySerializer != key || it->second.valueSerializer != value) {
        throw SerializationError("broadcast state '" + name + "' was written as " + key + " -> " + value +
                                 ", this job declares it as " + it->second.keySerializer + " -> " +
                                 it->second.valueSerializer +
                                 "; keep its types, or give the operator a new uid and restore with "
                                 "--allow-non-restored-state (-n)");
      }
      for (uint64_t e = r.readVarint(); e > 0; --e) {
        std::string k(r.readBytes());
        it->second.entries.insert_or_assign(std::move(k), std::string(r.readBytes()));
      }
    }
  }

 private:
  static constexpr uint8_t kFormat = 1;
  std::map<std::string, BroadcastMap> maps_;
  std::vector<std::string> declared_;
};

}  // namespace detail

/// Read access to one broadcast state (processElement, onTimer).
template <class K, class V>
class ReadOnlyBroadcastState {
 public:
  explicit ReadOnlyBroadcastState(detail::BroadcastMap& m) : map_(&m) {}
  std::optional<V> get(const K& key) const {
    auto it = map_->entries.find(detail::serialized(key));
    if (it == map_->entries.end()) return std::nullopt;
    return deserialize<V>(it->second);
  }
  bool contains(const K& key) const { return map_->entries.count(detail::serialized(key)) > 0; }
  size_t size() const { return map_->entries.size(); }
  bool empty() const { return map_->entries.empty(); }
  /// Calls f(const K&, const V&) for every entry, in the order of the keys' bytes, as
  /// they were when forEach began: f may put, remove or clear (Flink allows removing
  /// while iterating), which never disturbs the visit.
  template <class F>
  void forEach(F f) const {
    std::vector<std::pair<K, V>> entries;
    entries.reserve(map_->entries.size());
    for (const auto& [k, v] : map_->entries) entries.emplace_back(deserialize<K>(k), deserialize<V>(v));
    for (const auto& [k, v] : entries) f(k, v);
  }

 protected:
  detail::BroadcastMap* map_;
};

/// Read and write access to one broadcast state (processBroadcastElement).
template <class K, class V>
class BroadcastState : public ReadOnlyBroadcastState<K, V> {
 public:
  using ReadOnlyBroadcastState<K, V>::ReadOnlyBroadcastState;
  void put(const K& key, const V& value) { this->map_->entries.insert_or_assign(detail::serialized(key), detail::serialized(value)); }
  void remove(const K& key) { this->map_->entries.erase(detail::serialized(key)); }
  void clear() { this->map_->entries.clear(); }
};

namespace detail {
/// What every context of a broadcast function shares: the operator's broadcast states.
class BroadcastAccess {
 public:
  explicit BroadcastAccess(BroadcastStates& s) : states_(&s) {}

 protected:
  BroadcastStates* states_;
};
}  // namespace detail

/// The contexts of a BroadcastProcessFunction and a KeyedBroadcastProcessFunction.
/// processBroadcastElement() may change the broadcast state:
class BroadcastContext : public ProcessContext, detail::BroadcastAccess {
 public:
  BroadcastContext(OperatorContext& ctx, detail::BroadcastStates& s) : ProcessContext(ctx), BroadcastAccess(s) {}
  template <class K, class V>
  BroadcastState<K, V> getBroadcastState(const BroadcastStateDescriptor<K, V>& d) {
    return BroadcastState<K, V>(states_->get(d));
  }
};
/// processElement() of the unkeyed function reads it:
class ReadOnlyBroadcastContext : public ProcessContext, detail::BroadcastAccess {
 public:
  ReadOnlyBroadcastContext(OperatorContext& ctx, detail::BroadcastStates& s) : ProcessContext(ctx), BroadcastAccess(s) {}
  template <class K, class V>
  ReadOnlyBroadcastState<K, V> getBroadcastState(const BroadcastStateDescriptor<K, V>& d) {
    return ReadOnlyBroadcastState<K, V>(states_->get(d));
  }
};
/// processElement() and onTimer() of the keyed function: the key, its keyed state and
/// timers (KeyedContext), and the broadcast state, read-only.
template <class K, class Base>
class ReadOnlyKeyedBroadcastContext : public Base, detail::BroadcastAccess {
 public:
  ReadOnlyKeyedBroadcastContext(OperatorContext& ctx, detail::BroadcastStates& s) : Base(ctx), BroadcastAccess(s) {}
  template <class BK, class BV>
  ReadOnlyBroadcastState<BK, BV> getBroadcastState(const BroadcastStateDescriptor<BK, BV>& d) {
    return ReadOnlyBroadcastState<BK, BV>(states_->get(d));
  }
};

/// Connects an unkeyed stream with a broadcast stream (DataStream::connect(BroadcastStream)).
template <class In1, class In2, class Out>
class BroadcastProcessFunction {
 public:
  using Input1Type = In1;
  using Input2Type = In2;
  using OutputType = Out;
  using Context = BroadcastContext;
  using ReadOnlyContext = ReadOnlyBroadcastContext;
  virtual ~BroadcastProcessFunction() = default;
  virtual void open(OperatorContext& ctx) {}
  virtual void processElement(const In1& value, ReadOnlyContext& ctx, Collector<Out>& out) = 0;
  virtual void processBroadcastElement(const In2& value, Context& ctx, Collector<Out>& out) = 0;
  virtual void close() {}
};

/// Connects a keyed stream with a broadcast stream (KeyedStream::connect(BroadcastStream)):
/// processElement() has the record's key with its keyed state and timers, and reads the
/// broadcast state; processBroadcastElement() runs outside any key (no keyed state) and
/// may change the broadcast state.
template <class K, class In1, class In2, class Out>
class KeyedBroadcastProcessFunction : public StateOwner {
 public:
  using KeyType = K;
  using Input1Type = In1;
  using Input2Type = In2;
  using OutputType = Out;
  using Context = BroadcastContext;
  using ReadOnlyContext = ReadOnlyKeyedBroadcastContext<K, KeyedContext<K>>;
  using OnTimerContext = ReadOnlyKeyedBroadcastContext<K, jobhost::OnTimerContext<K>>;
  virtual void open(OperatorContext& ctx) {}
  virtual void processElement(const In1& value, ReadOnlyContext& ctx, Collector<Out>& out) = 0;
  virtual void processBroadcastElement(const In2& value, Context& ctx, Collector<Out>& out) = 0;
  virtual void onTimer(int64_t timestamp, OnTimerContext& ctx, Collector<Out>& out) {}
  virtual void close() {}
};

namespace detail {

/// The keyed state a KeyedBroadcastProcessFunction's members use, refused while
/// processBroadcastElement() runs: a broadcast element has no key, so the state would be
/// that of whatever key came last (Flink throws there too).
class NoKeyGuard : public KeyedStateAccess {
 public:
  explicit NoKeyGuard(KeyedStateAccess& inner) : inner_(&inner) {}
  bool outsideKey = false;
  int registerState(const StateDescriptorInfo& d) override { return inner_->registerState(d); }
  bool get(int s, std::string_view* out) override { return check().get(s, out); }
  void put(int s, std::string_view v) override { check().put(s, v); }
  void append(int s, std::string_view e) override { check().append(s, e); }
  void clear(int s) override { check().clear(s); }
  bool mapGet(int s, std::string_view k, std::string_view* out) override { return check().mapGet(s, k, out); }
  void mapPut(int s, std::string_view k, std::string_view v) override { check().mapPut(s, k, v); }
  void mapRemove(int s, std::string_view k) override { check().mapRemove(s, k); }
  void mapForEach(int s, const std::function<bool(std::string_view, std::string_view)>& fn) override {
    check().mapForEach(s, fn);
  }
  void mapAppend(int s, std::string_view k, std::string_view e) override { check().mapAppend(s, k, e); }

 private:
  KeyedStateAccess& check() {
    if (outsideKey)
      throw StateError("keyed state is used in processBroadcastElement(), which runs for no key: use keyed state in "
                       "processElement() or onTimer(), and keep what every key needs in the broadcast state");
    return *inner_;
  }
  KeyedStateAccess* inner_;
};

/// connect(BroadcastStream) after an unkeyed stream.
template <class Fn>
class BroadcastProcessOp : public NamedOp {
 public:
  using A = typename Fn::Input1Type;
  using B = typename Fn::Input2Type;
  using Out = typename Fn::OutputType;
  BroadcastProcessOp(std::unique_ptr<Fn> fn, BroadcastStates states, void* down)
      : fn_(std::move(fn)), states_(std::move(states)), down_(static_cast<Collector<Out>*>(down)) {}
  void* input() override { return inputs_.first(); }
  void* input2() override { return inputs_.second(); }
  void open(OperatorContext& ctx) override {
    NamedOp::open(ctx);
    readOnly_.emplace(ctx, states_);
    writable_.emplace(ctx, states_);
    invoke([&] { fn_->open(ctx); });
  }
  void processFirst(const A& v) { invoke([&] { fn_->processElement(v, *readOnly_, *down_); }); }
  void processSecond(const B& v) { invoke([&] { fn_->processBroadcastElement(v, *writable_, *down_); }); }
  void close() override { invoke([&] { fn_->close(); }); }
  std::string snapshotState() override { return states_.snapshot(); }
  void restoreState(std::string_view s) override { states_.restore(s); }

 private:
  std::unique_ptr<Fn> fn_;
  BroadcastStates states_;
  Collector<Out>* down_;
  std::optional<ReadOnlyBroadcastContext> readOnly_;
  std::optional<BroadcastContext> writable_;
  TwoInputs<BroadcastProcessOp, A, B> inputs_{this};
};

/// connect(BroadcastStream) after a keyBy: keyed state and timers for the first input,
/// the broadcast state for both.
template <class Fn>
class KeyedBroadcastProcessOp : public NamedOp {
 public:
  using K = typename Fn::KeyType;
  using A = typename Fn::Input1Type;
  using B = typename Fn::Input2Type;
  using Out = typename Fn::OutputType;
  KeyedBroadcastProcessOp(std::unique_ptr<Fn> fn, BroadcastStates states, void* down)
      : fn_(std::move(fn)), states_(std::move(states)), down_(static_cast<Collector<Out>*>(down)) {}
  void* input() override { return inputs_.first(); }
  void* input2() override { return inputs_.second(); }
  void open(OperatorContext& ctx) override {
    NamedOp::open(ctx);
    guard_.emplace(ctx.keyedState());
    for (StateBase* s : fn_->declaredStates()) s->bind(*guard_, Serializer<K>::id(), Serializer<K>::version());
    keyed_.emplace(ctx, states_);
    timerCtx_.emplace(ctx, states_);
    writable_.emplace(ctx, states_);
    invoke([&] { fn_->open(ctx); });
  }
  void processFirst(const A& v) { invoke([&] { fn_->processElement(v, *keyed_, *down_); }); }
  void processSecond(const B& v) {
    guard_->outsideKey = true;
    try {
      invoke([&] { fn_->processBroadcastElement(v, *writable_, *down_); });
    } catch (...) {
      guard_->outsideKey = false;
      throw;
    }
    guard_->outsideKey = false;
  }
  void onEventTime(int64_t time, std::string_view) override { fire(time, TimeDomain::kEventTime); }
  void onProcessingTime(int64_t time, std::string_view) override { fire(time, TimeDomain::kProcessingTime); }
  void close() override { invoke([&] { fn_->close(); }); }
  std::string snapshotState() override { return states_.snapshot(); }
  void restoreState(std::string_view s) override { states_.restore(s); }

 private:
  void fire(int64_t time, TimeDomain d) {
    timerCtx_->setTimer(d, time);
    invoke([&] { fn_->onTimer(time, *timerCtx_, *down_); });
  }
  std::unique_ptr<Fn> fn_;
  BroadcastStates states_;
  Collector<Out>* down_;
  std::optional<NoKeyGuard> guard_;
  std::optional<typename Fn::ReadOnlyContext> keyed_;
  std::optional<typename Fn::OnTimerContext> timerCtx_;
  std::optional<BroadcastContext> writable_;
  TwoInputs<KeyedBroadcastProcessOp, A, B> inputs_{this};
};

}  // namespace detail

}  // namespace jobhost
