// jobhost/detail/time_operators.h — operators of the event-time and two-input API
// (internal): the watermark assigner, unkeyed process functions, connect.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "jobhost/detail/named_op.h"
#include "jobhost/functions.h"
#include "jobhost/serializer.h"
#include "jobhost/state.h"
#include "jobhost/time.h"

namespace jobhost::detail {

/// Sets each record's timestamp from the strategy and emits watermarks periodically
/// (onPeriodicEmit, every pipeline.auto-watermark-interval): the highest timestamp seen
/// minus the out-of-orderness minus 1. Its state — that highest timestamp and the last
/// watermark it derived — is in every checkpoint; a restored assigner emits that
/// watermark before the first record it passes on, so downstream operators judge
/// replayed records as before the failure. After rescaling it starts from the smallest
/// of the restored states (a watermark never runs ahead of any input it merged). The
/// maximum watermark it passes on from upstream (the end of the input, or stop --drain)
/// is not its own and is not in its state: a job restored from a drained savepoint goes
/// on from the watermark before the drain.
template <class T>
class TimestampsAndWatermarksOp : public NamedOp, public Collector<T> {
 public:
  TimestampsAndWatermarksOp(WatermarkStrategy<T> strategy, void* down)
      : strategy_(std::move(strategy)), down_(static_cast<Collector<T>*>(down)) {}
  void* input() override { return static_cast<Collector<T>*>(this); }
  void open(OperatorContext& ctx) override {
    NamedOp::open(ctx);
    ctx_ = &ctx;
    lastActivity_ = std::chrono::steady_clock::now();
  }
  void collect(const T& v) override {
    emitRestoredWatermark();
    const int64_t before = ctx_->currentTimestamp();
    const int64_t ts = invoke([&] { return strategy_.timestampOf(v, before); });
    if (ts > maxTimestamp_) maxTimestamp_ = ts;
    ++records_;
    idle_ = false;
    ctx_->setCurrentTimestamp(ts);
    down_->collect(v);
    ctx_->setCurrentTimestamp(before);  // a flatMap upstream emits its next record with its own
  }
  void onPeriodicEmit() override {
    emitRestoredWatermark();
    auto now = std::chrono::steady_clock::now();
    if (records_ != recordsAtLastEmit_) {
      recordsAtLastEmit_ = records_;
      lastActivity_ = now;
    } else if (strategy_.idlenessMs() > 0 && !idle_ &&
               now - lastActivity_ >= std::chrono::milliseconds(strategy_.idlenessMs())) {
      idle_ = true;
      ctx_->markIdle();
      return;
    }
    if (idle_ || maxTimestamp_ == kNoTimestamp) return;
    emit(saturatingAdd(maxTimestamp_, -strategy_.outOfOrdernessMs() - 1));
  }
  void onWatermark(int64_t watermark) override {
    if (watermark != kMaxWatermark || emitted_ == kMaxWatermark) return;
    emitted_ = kMaxWatermark;  // the end of the input (or a drain) passes through, not into own_
    ctx_->emitWatermark(kMaxWatermark);
  }
  std::string snapshotState() override {
    std::string out;
    ByteWriter w(out);
    w.writeU8(kStateFormat);
    w.writeI64(maxTimestamp_);
    w.writeI64(own_);
    return out;
  }
  void restoreState(std::string_view s) override {
    ByteReader r(s);
    if (uint8_t f = r.readU8(); f != kStateFormat)
      throw SerializationError("the watermark generator's state has format " + std::to_string(f) +
                               ", this SDK reads format " + std::to_string(kStateFormat) +
                               "; to start it afresh, give assignTimestampsAndWatermarks a new uid and restore with "
                               "--allow-non-restored-state (-n)");
    int64_t maxTs = r.readI64(), own = r.readI64();
    // Several states after rescaling: the smallest, so no restored input is overtaken.
    maxTimestamp_ = restored_ ? std::min(maxTimestamp_, maxTs) : maxTs;
    own_ = restored_ ? std::min(own_, own) : own;
    emitted_ = own_;
    restored_ = true;
    restoredPending_ = own_ != kMinWatermark;
  }

 private:
  static constexpr uint8_t kStateFormat = 1;
  void emit(int64_t wm) {
    if (wm <= emitted_) return;
    emitted_ = own_ = wm;
    ctx_->emitWatermark(wm);
  }
  void emitRestoredWatermark() {
    if (!restoredPending_) return;
    restoredPending_ = false;
    ctx_->emitWatermark(own_);
  }

  WatermarkStrategy<T> strategy_;
  Collector<T>* down_;
  OperatorContext* ctx_ = nullptr;
  int64_t maxTimestamp_ = kNoTimestamp;
  int64_t emitted_ = kMinWatermark;  // the last watermark sent downstream
  int64_t own_ = kMinWatermark;      // the last one it derived itself (its state)
  uint64_t records_ = 0, recordsAtLastEmit_ = 0;
  std::chrono::steady_clock::time_point lastActivity_{};
  bool idle_ = false;
  bool restored_ = false, restoredPending_ = false;
};

/// An unkeyed ProcessFunction.
template <class Fn>
class ProcessFunctionOp : public NamedOp, public Collector<typename Fn::InputType> {
 public:
  using In = typename Fn::InputType;
  using Out = typename Fn::OutputType;
  ProcessFunctionOp(std::unique_ptr<Fn> fn, void* down) : fn_(std::move(fn)), down_(static_cast<Collector<Out>*>(down)) {}
  void* input() override { return static_cast<Collector<In>*>(this); }
  void open(OperatorContext& ctx) override {
    NamedOp::open(ctx);
    pctx_.emplace(ctx);
    invoke([&] { fn_->open(ctx); });
  }
  void collect(const In& v) override { invoke([&] { fn_->processElement(v, *pctx_, *down_); }); }
  void close() override { invoke([&] { fn_->close(); }); }

 private:
  std::unique_ptr<Fn> fn_;
  Collector<Out>* down_;
  std::optional<ProcessContext> pctx_;
};

/// The two inputs of a two-input operator as separate collectors (the types may be equal).
template <class Op, class A, class B>
class TwoInputs {
 public:
  explicit TwoInputs(Op* op) : first_(op), second_(op) {}
  void* first() { return static_cast<Collector<A>*>(&first_); }
  void* second() { return static_cast<Collector<B>*>(&second_); }

 private:
  struct First : Collector<A> {
    explicit First(Op* o) : op(o) {}
    void collect(const A& v) override { op->processFirst(v); }
    Op* op;
  };
  struct Second : Collector<B> {
    explicit Second(Op* o) : op(o) {}
    void collect(const B& v) override { op->processSecond(v); }
    Op* op;
  };
  First first_;
  Second second_;
};

/// connect() of two unkeyed streams.
template <class Fn>
class CoProcessOp : public NamedOp {
 public:
  using A = typename Fn::Input1Type;
  using B = typename Fn::Input2Type;
  using Out = typename Fn::OutputType;
  CoProcessOp(std::unique_ptr<Fn> fn, void* down) : fn_(std::move(fn)), down_(static_cast<Collector<Out>*>(down)) {}
  void* input() override { return inputs_.first(); }
  void* input2() override { return inputs_.second(); }
  void open(OperatorContext& ctx) override {
    NamedOp::open(ctx);
    pctx_.emplace(ctx);
    invoke([&] { fn_->open(ctx); });
  }
  void processFirst(const A& v) { invoke([&] { fn_->processElement1(v, *pctx_, *down_); }); }
  void processSecond(const B& v) { invoke([&] { fn_->processElement2(v, *pctx_, *down_); }); }
  void close() override { invoke([&] { fn_->close(); }); }

 private:
  std::unique_ptr<Fn> fn_;
  Collector<Out>* down_;
  std::optional<ProcessContext> pctx_;
  TwoInputs<CoProcessOp, A, B> inputs_{this};
};

/// connect() of two streams keyed by the same key type: one keyed state and one set of
/// timers for both inputs.
template <class Fn>
class KeyedCoProcessOp : public NamedOp {
 public:
  using K = typename Fn::KeyType;
  using A = typename Fn::Input1Type;
  using B = typename Fn::Input2Type;
  using Out = typename Fn::OutputType;
  KeyedCoProcessOp(std::unique_ptr<Fn> fn, void* down) : fn_(std::move(fn)), down_(static_cast<Collector<Out>*>(down)) {}
  void* input() override { return inputs_.first(); }
  void* input2() override { return inputs_.second(); }
  void open(OperatorContext& ctx) override {
    NamedOp::open(ctx);
    for (StateBase* s : fn_->declaredStates()) s->bind(ctx.keyedState(), Serializer<K>::id(), Serializer<K>::version());
    keyed_.emplace(ctx);
    timerCtx_.emplace(ctx);
    invoke([&] { fn_->open(ctx); });
  }
  void processFirst(const A& v) { invoke([&] { fn_->processElement1(v, *keyed_, *down_); }); }
  void processSecond(const B& v) { invoke([&] { fn_->processElement2(v, *keyed_, *down_); }); }
  void onEventTime(int64_t time, std::string_view) override { fire(time, TimeDomain::kEventTime); }
  void onProcessingTime(int64_t time, std::string_view) override { fire(time, TimeDomain::kProcessingTime); }
  void close() override { invoke([&] { fn_->close(); }); }

 private:
  void fire(int64_t time, TimeDomain d) {
    timerCtx_->setTimer(d, time);
    invoke([&] { fn_->onTimer(time, *timerCtx_, *down_); });
  }
  std::unique_ptr<Fn> fn_;
  Collector<Out>* down_;
  std::optional<KeyedContext<K>> keyed_;
  std::optional<OnTimerContext<K>> timerCtx_;
  TwoInputs<KeyedCoProcessOp, A, B> inputs_{this};
};

/// The sending side of an unkeyed exchange (union, connect): sends each record to any
/// subtask of the next stage (ExchangeWriter::emitAny).
template <class T>
class RebalanceSenderOp : public Operator, public Collector<T> {
 public:
  void* input() override { return static_cast<Collector<T>*>(this); }
  void open(OperatorContext& ctx) override { writer_ = &ctx.exchange(); }
  void collect(const T& v) override {
    serializeInto(record_, v);
    writer_->emitAny(record_);
  }

 private:
  ExchangeWriter* writer_ = nullptr;
  std::string record_;
};

}  // namespace jobhost::detail
