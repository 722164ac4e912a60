// jobhost/state.h — keyed state declared by descriptor: ValueState, ListState, MapState.
//
// Keyed state belongs to the current key of a keyed operator and is what checkpoints
// save and restores bring back. Declare it as members of a KeyedProcessFunction:
//
//   class Dedup : public jobhost::KeyedProcessFunction<std::string, std::string, std::string> {
//     jobhost::ValueState<bool> seen_{*this, "seen"};
//    public:
//     void processElement(const std::string& v, Context& ctx,
//                         jobhost::Collector<std::string>& out) override {
//       if (!seen_.value().value_or(false)) { seen_.update(true); out.collect(v); }
//     }
//   };
//
// The name identifies the state inside the operator (keep it stable: restore maps state
// by operator uid + name), the type picks the serializer. Only declared state survives a
// restore: a plain member variable starts from its initial value after every restore or
// restart, because it is not part of any snapshot.
//
// Thread-safety: a state handle belongs to one subtask's function instance.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jobhost/operator.h"
#include "jobhost/serializer.h"
#include "jobhost/serializer_text.h"
#include "jobhost/time.h"

namespace jobhost {

class StateBase;

/// Collects the states a function declares; the SDK reads them at plan time (for
/// checkpoint metadata and the restore preflight) and binds them at open().
class StateOwner {
 public:
  StateOwner() = default;
  StateOwner(const StateOwner&) = delete;
  StateOwner& operator=(const StateOwner&) = delete;
  virtual ~StateOwner() = default;
  void declareState(StateBase* s) { declared_.push_back(s); }
  const std::vector<StateBase*>& declaredStates() const { return declared_; }

 private:
  std::vector<StateBase*> declared_;
};

class StateBase {
 public:
  StateBase(const StateBase&) = delete;
  StateBase& operator=(const StateBase&) = delete;
  virtual ~StateBase() = default;
  /// Descriptor with the key serializer of the owning operator filled in.
  StateDescriptorInfo descriptor(const std::string& keyId, uint32_t keyVersion) const {
    StateDescriptorInfo d = descriptor_;
    d.keySerializer = keyId;
    d.keySerializerVersion = keyVersion;
    return d;
  }
  const std::string& name() const { return descriptor_.name; }
  /// Appends the text forms of the user types this state holds (serializer_text.h).
  virtual void collectTextForms(std::vector<SerializerTextForm>& out) const {}
  /// Called by the SDK when the operator opens.
  void bind(KeyedStateAccess& access, const std::string& keyId, uint32_t keyVersion) {
    access_ = &access;
    handle_ = access.registerState(descriptor(keyId, keyVersion));
  }

 protected:
  StateBase(StateOwner& owner, StateDescriptorInfo d) : descriptor_(std::move(d)) {
    owner.declareState(this);
  }
  KeyedStateAccess& access() const {
    if (!access_) throw StateError("state '" + descriptor_.name + "' used before open()");
    return *access_;
  }
  StateDescriptorInfo descriptor_;
  KeyedStateAccess* access_ = nullptr;
  int handle_ = -1;
  mutable std::string scratch_;  // reused buffer: no allocation per access
  mutable std::string scratch2_;
};

/// One value per key.
template <class T>
class ValueState : public StateBase {
 public:
  ValueState(StateOwner& owner, std::string name)
      : StateBase(owner, {std::move(name), StateKind::kValue, "", 0, "", 0, Serializer<T>::id(),
                          Serializer<T>::version()}) {}
  void collectTextForms(std::vector<SerializerTextForm>& out) const override { textFormsOf<T>(out); }
  /// The current key's value, or nullopt if none was set.
  std::optional<T> value() const {
    std::string_view bytes;
    if (!access().get(handle_, &bytes)) return std::nullopt;
    return deserialize<T>(bytes);
  }
  void update(const T& v) {
    serializeInto(scratch_, v);
    access().put(handle_, scratch_);
  }
  void clear() { access().clear(handle_); }
};

/// A list of values per key; add() does not read the existing list.
template <class T>
class ListState : public StateBase {
 public:
  ListState(StateOwner& owner, std::string name)
      : StateBase(owner, {std::move(name), StateKind::kList, "", 0, "", 0, Serializer<T>::id(),
                          Serializer<T>::version()}) {}
  void collectTextForms(std::vector<SerializerTextForm>& out) const override { textFormsOf<T>(out); }
  void add(const T& v) {
    serializeInto(scratch2_, v);
    scratch_.clear();
    ByteWriter w(scratch_);
    w.writeBytes(scratch2_);
    access().append(handle_, scratch_);
  }
  std::vector<T> get() const {
    std::vector<T> out;
    std::string_view bytes;
    if (!access().get(handle_, &bytes)) return out;
    ByteReader r(bytes);
    while (!r.atEnd()) out.push_back(deserialize<T>(r.readBytes()));
    return out;
  }
  void update(const std::vector<T>& values) {
    std::string all;
    ByteWriter w(all);
    for (const auto& v : values) {
      serializeInto(scratch2_, v);
      w.writeBytes(scratch2_);
    }
    if (values.empty()) access().clear(handle_);
    else access().put(handle_, all);
  }
  void clear() { access().clear(handle_); }
};

/// A map per key.
template <class K, class V>
class MapState : public StateBase {
 public:
  MapState(StateOwner& owner, std::string name)
      : StateBase(owner, {std::move(name), StateKind::kMap, "", 0, Serializer<K>::id(),
                          Serializer<K>::version(), Serializer<V>::id(), Serializer<V>::version()}) {}
  void collectTextForms(std::vector<SerializerTextForm>& out) const override {
    textFormsOf<K>(out);
    textFormsOf<V>(out);
  }
  std::optional<V> get(const K& k) const {
    serializeInto(scratch2_, k);
    std::string_view bytes;
    if (!access().mapGet(handle_, scratch2_, &bytes)) return std::nullopt;
    return deserialize<V>(bytes);
  }
  void put(const K& k, const V& v) {
    serializeInto(scratch2_, k);
    serializeInto(scratch_, v);
    access().mapPut(handle_, scratch2_, scratch_);
  }
  bool contains(const K& k) const {
    serializeInto(scratch2_, k);
    std::string_view bytes;
    return access().mapGet(handle_, scratch2_, &bytes);
  }
  void remove(const K& k) {
    serializeInto(scratch2_, k);
    access().mapRemove(handle_, scratch2_);
  }
  /// All entries of the current key (order unspecified).
  std::vector<std::pair<K, V>> entries() const {
    std::vector<std::pair<K, V>> out;
    access().mapForEach(handle_, [&](std::string_view k, std::string_view v) {
      out.emplace_back(deserialize<K>(k), deserialize<V>(v));
      return true;
    });
    return out;
  }
  void clear() { access().clear(handle_); }
};

namespace detail {
/// Side outputs of one operator: the consumer of each tag in this task, looked up once.
class SideOutputs {
 public:
  explicit SideOutputs(OperatorContext& ctx) : ctx_(&ctx) {}
  template <class T>
  void output(const OutputTag<T>& tag, const T& value) {
    if (void* c = find(tag.key())) static_cast<Collector<T>*>(c)->collect(value);
  }

 private:
  void* find(const std::string& key) {
    for (const auto& [k, c] : cache_)
      if (k == key) return c;
    void* c = ctx_->sideOutput(key);
    cache_.emplace_back(key, c);
    return c;
  }
  OperatorContext* ctx_;
  std::vector<std::pair<std::string, void*>> cache_;
};
}  // namespace detail

/// Per-record context of a keyed process function.
template <class K>
class KeyedContext {
 public:
  explicit KeyedContext(OperatorContext& ctx) : ctx_(ctx), side_(ctx) {}
  /// The key of the record being processed.
  K currentKey() const { return deserialize<K>(ctx_.currentKey()); }
  int subtaskIndex() const { return ctx_.subtaskIndex(); }
  /// The record's event timestamp (of the timer, in onTimer for event time); nullopt
  /// if it has none.
  std::optional<int64_t> timestamp() const {
    int64_t t = ctx_.currentTimestamp();
    return t == kNoTimestamp ? std::nullopt : std::optional<int64_t>(t);
  }
  /// Timers of the current key, and the current watermark and processing time.
  TimerService timerService() const { return TimerService(ctx_.timerService()); }
  /// Emits `value` to the side output `tag` (discarded if nothing consumes it).
  template <class T>
  void output(const OutputTag<T>& tag, const T& value) {
    side_.output(tag, value);
  }

 private:
  OperatorContext& ctx_;
  detail::SideOutputs side_;
};

/// The context of onTimer(): which kind of timer fired, besides KeyedContext's.
template <class K>
class OnTimerContext : public KeyedContext<K> {
 public:
  using KeyedContext<K>::KeyedContext;
  TimeDomain timeDomain() const { return domain_; }
  /// The time of the timer that fired, in either domain (as Flink's). Records emitted
  /// from a processing-time timer still carry no event timestamp.
  std::optional<int64_t> timestamp() const { return time_; }
  void setTimer(TimeDomain d, int64_t time) {  // the SDK, before each onTimer
    domain_ = d;
    time_ = time;
  }

 private:
  TimeDomain domain_ = TimeDomain::kEventTime;
  int64_t time_ = 0;
};

/// A function over a keyed stream with keyed state and timers. Subclasses declare their
/// states as members (see the file comment) and must be default-constructible or created
/// by the factory given to KeyedStream::process().
template <class K, class In, class Out>
class KeyedProcessFunction : public StateOwner {
 public:
  using KeyType = K;
  using InputType = In;
  using OutputType = Out;
  using Context = KeyedContext<K>;
  using OnTimerContext = jobhost::OnTimerContext<K>;
  /// Called once per subtask after state is bound and restored.
  virtual void open(OperatorContext& ctx) {}
  virtual void processElement(const In& value, Context& ctx, Collector<Out>& out) = 0;
  /// A timer registered through ctx.timerService() fired; the current key is its key.
  /// Records emitted here carry the timer's time as their timestamp (event time) or none
  /// (processing time).
  virtual void onTimer(int64_t timestamp, OnTimerContext& ctx, Collector<Out>& out) {}
  virtual void close() {}
};

}  // namespace jobhost
