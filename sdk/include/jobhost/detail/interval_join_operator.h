// jobhost/detail/interval_join_operator.h — the keyed interval join (internal), after
// Flink's IntervalJoinOperator.
//
// A left record at time t joins every right record of its key at a time in
// [t + lower, t + upper]. Both sides are buffered in keyed state by timestamp —
// "LEFT_BUFFER" and "RIGHT_BUFFER", MapStates from a timestamp to the list of records
// at it — and each bucket is removed by an event-time timer once the watermark shows
// that no record of the other side can join it any more. A record behind the watermark
// is late and dropped, as in Flink.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jobhost/detail/named_op.h"
#include "jobhost/detail/time_operators.h"
#include "jobhost/functions.h"
#include "jobhost/serializer.h"
#include "jobhost/serializer_text.h"
#include "jobhost/time.h"

namespace jobhost::detail {

inline constexpr char kLeftBufferState[] = "LEFT_BUFFER";
inline constexpr char kRightBufferState[] = "RIGHT_BUFFER";
inline constexpr char kCleanupLeft[] = "CLEANUP_LEFT";
inline constexpr char kCleanupRight[] = "CLEANUP_RIGHT";
inline constexpr char kJoinSideId[] = "IntervalJoinSide";  // the timers' namespace: which buffer

template <class K, class Fn>
class IntervalJoinOp : public NamedOp {
 public:
  using A = typename Fn::Input1Type;
  using B = typename Fn::Input2Type;
  using Out = typename Fn::OutputType;

  IntervalJoinOp(int64_t lower, int64_t upper, std::unique_ptr<Fn> fn, void* down)
      : lower_(lower), upper_(upper), fn_(std::move(fn)), down_(static_cast<Collector<Out>*>(down)) {}

  static std::vector<StateDescriptorInfo> states() {
    std::vector<StateDescriptorInfo> out;
    out.push_back({kLeftBufferState, StateKind::kMap, Serializer<K>::id(), Serializer<K>::version(), kTimestampKeyId, 1,
                   elementListId<A>(), Serializer<A>::version()});
    out.push_back({kRightBufferState, StateKind::kMap, Serializer<K>::id(), Serializer<K>::version(), kTimestampKeyId, 1,
                   elementListId<B>(), Serializer<B>::version()});
    for (auto& t : timerStates<K>(kJoinSideId)) out.push_back(t);
    return out;
  }
  static std::vector<SerializerTextForm> textForms() {
    std::vector<SerializerTextForm> out;
    textFormsOf<K>(out);
    textFormsOf<A>(out);
    textFormsOf<B>(out);
    elementListTextForm<A>(out);
    elementListTextForm<B>(out);
    timestampKeyTextForm(out);
    timerTextForms(out, kJoinSideId, [](ByteReader& r, std::string& s) { s += r.readRaw(r.remaining()); });
    return out;
  }

  void* input() override { return inputs_.first(); }
  void* input2() override { return inputs_.second(); }
  void open(OperatorContext& ctx) override {
    NamedOp::open(ctx);
    ctx_ = &ctx;
    state_ = &ctx.keyedState();
    timers_ = &ctx.timerService();
    side_.emplace(ctx);
    auto d = states();
    left_ = state_->registerState(d[0]);
    right_ = state_->registerState(d[1]);
  }

  void processFirst(const A& v) { process<true>(v); }
  void processSecond(const B& v) { process<false>(v); }

  void onEventTime(int64_t time, std::string_view ns) override {
    if (ns == kCleanupLeft) {
      encodeTs(upper_ <= 0 ? time : time - upper_);
      state_->mapRemove(left_, tsKey_);
    } else if (ns == kCleanupRight) {
      encodeTs(lower_ <= 0 ? time + lower_ : time);
      state_->mapRemove(right_, tsKey_);
    }
  }

 private:
  void encodeTs(int64_t ts) { encodeTimestampKey(tsKey_, ts); }
  static int64_t decodeTs(std::string_view k) { return decodeTimestampKey(k); }

  template <bool kLeft, class T>
  void process(const T& v) {
    const int64_t ts = ctx_->currentTimestamp();
    if (ts == kNoTimestamp)
      throw UserCodeError(name_, "a record without an event timestamp reached an interval join: assign timestamps "
                                 "to both inputs with assignTimestampsAndWatermarks(...)");
    const int64_t wm = timers_->currentWatermark();
    if (wm != kMinWatermark && ts < wm) return;  // late
    // Buffer it.
    encodeTs(ts);
    serializeInto(scratch_, v);
    element_.clear();
    ByteWriter(element_).writeBytes(scratch_);
    state_->mapAppend(kLeft ? left_ : right_, tsKey_, element_);
    // Join it with the other side's buffered records in range (collected first: the join
    // function's output runs downstream operators while the buffer would be iterated).
    const int64_t relLower = kLeft ? lower_ : -upper_;
    const int64_t relUpper = kLeft ? upper_ : -lower_;
    const int64_t from = saturatingAdd(ts, relLower), to = saturatingAdd(ts, relUpper);
    std::vector<std::pair<int64_t, std::string>> matches;
    state_->mapForEach(kLeft ? right_ : left_, [&](std::string_view k, std::string_view list) {
      int64_t other = decodeTs(k);
      if (other >= from && other <= to) matches.emplace_back(other, std::string(list));
      return true;
    });
    for (const auto& [otherTs, list] : matches) {
      ByteReader r(list);
      while (!r.atEnd()) {
        std::string_view bytes = r.readBytes();
        if constexpr (kLeft) emit(v, deserialize<B>(bytes), ts, otherTs);
        else emit(deserialize<A>(bytes), v, otherTs, ts);
      }
    }
    // Clean the bucket up once no record of the other side can reach it.
    const int64_t cleanup = relUpper > 0 ? saturatingAdd(ts, relUpper) : ts;
    timers_->registerEventTimeTimer(kLeft ? kCleanupLeft : kCleanupRight, cleanup);
  }

  void emit(const A& a, const B& b, int64_t leftTs, int64_t rightTs) {
    typename Fn::Context c(*side_, leftTs, rightTs);
    const int64_t before = ctx_->currentTimestamp();
    ctx_->setCurrentTimestamp(c.timestamp());
    invoke([&] { fn_->processElement(a, b, c, *down_); });
    ctx_->setCurrentTimestamp(before);
  }

  int64_t lower_, upper_;
  std::unique_ptr<Fn> fn_;
  Collector<Out>* down_;
  OperatorContext* ctx_ = nullptr;
  KeyedStateAccess* state_ = nullptr;
  InternalTimerService* timers_ = nullptr;
  std::optional<SideOutputs> side_;
  int left_ = -1, right_ = -1;
  std::string tsKey_, scratch_, element_;
  TwoInputs<IntervalJoinOp, A, B> inputs_{this};
};

}  // namespace jobhost::detail
