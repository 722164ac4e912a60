// jobhost/functions.h — the user functions of event-time and two-input operators:
// ProcessFunction (unkeyed, side outputs), CoProcessFunction and KeyedCoProcessFunction
// (connect), ProcessJoinFunction (intervalJoin), AggregateFunction and
// ProcessWindowFunction (windows). KeyedProcessFunction is in state.h.
//
// As in Flink, a function object is created once per subtask (by the factory given to
// the operator, or by copying the object given to it) and used by that subtask's thread
// only. Keyed functions declare keyed state as members (state.h); only declared state
// survives a restore.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <cstdint>
#include <optional>
#include <vector>

#include "jobhost/operator.h"
#include "jobhost/state.h"
#include "jobhost/time.h"

namespace jobhost {

/// Per-record context of an unkeyed function: the record's timestamp, the watermark,
/// side outputs.
class ProcessContext {
 public:
  explicit ProcessContext(OperatorContext& ctx) : ctx_(ctx), side_(ctx) {}
  std::optional<int64_t> timestamp() const {
    int64_t t = ctx_.currentTimestamp();
    return t == kNoTimestamp ? std::nullopt : std::optional<int64_t>(t);
  }
  int64_t currentWatermark() const { return ctx_.currentWatermark(); }
  int subtaskIndex() const { return ctx_.subtaskIndex(); }
  template <class T>
  void output(const OutputTag<T>& tag, const T& value) {
    side_.output(tag, value);
  }

 private:
  OperatorContext& ctx_;
  detail::SideOutputs side_;
};

/// A function over an unkeyed stream: any number of outputs per record, side outputs.
template <class In, class Out>
class ProcessFunction {
 public:
  using InputType = In;
  using OutputType = Out;
  using Context = ProcessContext;
  virtual ~ProcessFunction() = default;
  virtual void open(OperatorContext& ctx) {}
  virtual void processElement(const In& value, Context& ctx, Collector<Out>& out) = 0;
  virtual void close() {}
};

/// Two unkeyed inputs of different types (DataStream::connect): records of the first
/// reach processElement1, of the second processElement2, in arrival order.
template <class In1, class In2, class Out>
class CoProcessFunction {
 public:
  using Input1Type = In1;
  using Input2Type = In2;
  using OutputType = Out;
  using Context = ProcessContext;
  virtual ~CoProcessFunction() = default;
  virtual void open(OperatorContext& ctx) {}
  virtual void processElement1(const In1& value, Context& ctx, Collector<Out>& out) = 0;
  virtual void processElement2(const In2& value, Context& ctx, Collector<Out>& out) = 0;
  virtual void close() {}
};

/// Two inputs keyed by the same key type (KeyedStream::connect): both see the same keyed
/// state and timers of the current key.
template <class K, class In1, class In2, class Out>
class KeyedCoProcessFunction : public StateOwner {
 public:
  using KeyType = K;
  using Input1Type = In1;
  using Input2Type = In2;
  using OutputType = Out;
  using Context = KeyedContext<K>;
  using OnTimerContext = jobhost::OnTimerContext<K>;
  virtual void open(OperatorContext& ctx) {}
  virtual void processElement1(const In1& value, Context& ctx, Collector<Out>& out) = 0;
  virtual void processElement2(const In2& value, Context& ctx, Collector<Out>& out) = 0;
  virtual void onTimer(int64_t timestamp, OnTimerContext& ctx, Collector<Out>& out) {}
  virtual void close() {}
};

/// One joined pair of an interval join (KeyedStream::intervalJoin).
template <class In1, class In2, class Out>
class ProcessJoinFunction {
 public:
  using Input1Type = In1;
  using Input2Type = In2;
  using OutputType = Out;
  class Context {
   public:
    Context(detail::SideOutputs& side, int64_t left, int64_t right) : side_(side), left_(left), right_(right) {}
    int64_t leftTimestamp() const { return left_; }
    int64_t rightTimestamp() const { return right_; }
    /// The timestamp of the joined record: the later of the two.
    int64_t timestamp() const { return left_ > right_ ? left_ : right_; }
    template <class T>
    void output(const OutputTag<T>& tag, const T& value) {
      side_.output(tag, value);
    }

   private:
    detail::SideOutputs& side_;  // the operator's: looked up once
    int64_t left_, right_;
  };
  virtual ~ProcessJoinFunction() = default;
  virtual void processElement(const In1& left, const In2& right, Context& ctx, Collector<Out>& out) = 0;
};

/// An incremental window aggregate with an accumulator of type Acc (kept in state; it
/// needs a Serializer). merge() combines two accumulators when session windows merge, and
/// with pipeline.window.mini-batch.size > 0 a pre-aggregated part with the stored one for
/// any window: it must give what adding the records one by one gives.
template <class In, class Acc, class Out>
class AggregateFunction {
 public:
  using InputType = In;
  using AccumulatorType = Acc;
  using OutputType = Out;
  virtual ~AggregateFunction() = default;
  virtual Acc createAccumulator() const = 0;
  virtual Acc add(const In& value, Acc accumulator) const = 0;
  virtual Out getResult(const Acc& accumulator) const = 0;
  virtual Acc merge(Acc a, const Acc& b) const = 0;
};

/// Sees a fired window and all its elements (or, after reduce/aggregate, the one result).
template <class In, class Out, class K>
class ProcessWindowFunction {
 public:
  using InputType = In;
  using OutputType = Out;
  using KeyType = K;
  class Context {
   public:
    Context(OperatorContext& ctx, detail::SideOutputs& side, const TimeWindow& w) : ctx_(ctx), side_(side), window_(w) {}
    const TimeWindow& window() const { return window_; }
    int64_t currentWatermark() const { return ctx_.currentWatermark(); }
    int64_t currentProcessingTime() const { return ctx_.timerService().currentProcessingTime(); }
    template <class T>
    void output(const OutputTag<T>& tag, const T& value) {
      side_.output(tag, value);
    }

   private:
    OperatorContext& ctx_;
    detail::SideOutputs& side_;  // the operator's: looked up once
    TimeWindow window_;
  };
  virtual ~ProcessWindowFunction() = default;
  virtual void process(const K& key, Context& ctx, const std::vector<In>& elements, Collector<Out>& out) = 0;
};

}  // namespace jobhost
