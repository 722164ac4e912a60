// jobhost/detail/window_operator.h — the keyed window operator (internal), after Flink's
// WindowOperator with its default triggers (EventTimeTrigger, ProcessingTimeTrigger).
//
// State, per key: "window-contents", a MapState from the window to its contents — an
// accumulator (reduce, aggregate) or the list of elements (process; appended without
// reading) — and the timers "_timer_state/…" with the window as namespace: one at the
// window's end (fire; overlapping windows written from the mini-batch without allowed
// lateness register it when the window before it fires, and at the latest before a
// snapshot: chainsFiringTimers()) and, with allowed lateness, one at end + lateness
// (clean up).
// Session windows need no other state: a key's open windows are the keys of its
// window-contents, and a new element's window merges with every one it overlaps.
//
// Event-time aggregate and reduce windows over tumbling and sliding windows fold records
// into a mini-batch in memory first (window_mini_batch.h: one accumulator per key and
// pane), written to window-contents and the timers before a checkpoint barrier, before
// a watermark that fires one of its windows, and when it is full. A record whose first
// window has already fired (late, within the allowed lateness) goes to state at once.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "jobhost/detail/named_op.h"
#include "jobhost/detail/window_mini_batch.h"
#include "jobhost/detail/window_panes.h"
#include "jobhost/functions.h"
#include "jobhost/serializer.h"
#include "jobhost/serializer_text.h"
#include "jobhost/time.h"
#include "jobhost/windows.h"

namespace jobhost::detail {

inline constexpr char kWindowContentsState[] = "window-contents";
/// Merging (session) windows: the key's open windows, so a new element finds the ones it
/// merges with without reading their contents (Flink's MergingWindowSet state).
inline constexpr char kMergingWindowsState[] = "merging-window-set";

/// Serializer id of a window as the namespace of state and timers: the assigner is part
/// of it, "TimeWindow<TumblingEventTimeWindows(size=10000ms offset=0ms)>".
inline std::string windowNamespaceId(const WindowAssigner& a) { return "TimeWindow<" + a.stateId() + ">"; }

/// `Stored` is what window-contents holds per window: Acc, or (kList) the elements.
template <class K, class T, class Acc, class Out, bool kList>
class WindowOp : public NamedOp, public Collector<T> {
 public:
  /// The contents as the window function sees them: the accumulator or the elements.
  using Contents = std::conditional_t<kList, std::vector<T>, Acc>;
  struct Functions {
    /// Not kList: the accumulator after `v` (acc: none for the window's first element).
    std::function<Acc(std::optional<Acc>&& acc, const T& v)> fold;
    /// Not kList: two windows' accumulators into one (session windows).
    std::function<Acc(Acc a, const Acc& b)> merge;
    /// Emits the result of a fired window.
    std::function<void(const K& key, const TimeWindow& w, Contents&& c, OperatorContext& ctx, SideOutputs& side,
                       Collector<Out>& out)>
        fire;
  };
  struct Options {
    WindowAssigner assigner;
    int64_t allowedLatenessMs = 0;
    std::string lateTagKey;  // OutputTag<T>::key(), empty: late records are dropped
  };

  WindowOp(Options o, Functions f, void* down)
      : o_(std::move(o)), f_(std::move(f)), down_(static_cast<Collector<Out>*>(down)), grid_(o_.assigner) {}

  /// The states the plan declares for this operator.
  static std::vector<StateDescriptorInfo> states(const WindowAssigner& a) {
    std::vector<StateDescriptorInfo> out;
    StateDescriptorInfo d{kWindowContentsState, StateKind::kMap, Serializer<K>::id(), Serializer<K>::version(),
                          windowNamespaceId(a), Serializer<TimeWindow>::version(), "", 0};
    if constexpr (kList) {
      d.valueSerializer = elementListId<T>();
      d.valueSerializerVersion = Serializer<T>::version();
    } else {
      d.valueSerializer = Serializer<Acc>::id();
      d.valueSerializerVersion = Serializer<Acc>::version();
    }
    out.push_back(d);
    if (a.isMerging())
      out.push_back({kMergingWindowsState, StateKind::kValue, Serializer<K>::id(), Serializer<K>::version(), "", 0,
                     "vector<" + windowNamespaceId(a) + ">", Serializer<TimeWindow>::version()});
    for (auto& t : timerStates<K>(windowNamespaceId(a))) out.push_back(t);
    return out;
  }
  /// Their text forms (for `jobhost state dump`).
  static std::vector<SerializerTextForm> textForms(const WindowAssigner& a) {
    std::vector<SerializerTextForm> out;
    textFormsOf<K>(out);
    auto windowText = [](ByteReader& r, std::string& s) { appendText(s, Serializer<TimeWindow>::read(r)); };
    out.push_back({windowNamespaceId(a), Serializer<TimeWindow>::version(), windowText});
    timerTextForms(out, windowNamespaceId(a), windowText);
    if constexpr (kList) {
      textFormsOf<T>(out);
      elementListTextForm<T>(out);
    } else {
      textFormsOf<Acc>(out);
    }
    return out;
  }

  void* input() override { return static_cast<Collector<T>*>(this); }
  void open(OperatorContext& ctx) override {
    NamedOp::open(ctx);
    ctx_ = &ctx;
    state_ = &ctx.keyedState();
    timers_ = &ctx.timerService();
    side_.emplace(ctx);
    for (const auto& d : states(o_.assigner)) {
      if (d.name == kWindowContentsState) contents_ = state_->registerState(d);
      if (d.name == kMergingWindowsState) sessions_ = state_->registerState(d);
    }
    if constexpr (!kList) {
      if (o_.assigner.isEventTime() && !o_.assigner.isMerging() && ctx.windowMiniBatchSize() > 0)
        batch_.emplace(ctx.windowMiniBatchSize());
    }
  }

  void prepareWatermark(int64_t watermark) override {
    // Every timer up to the watermark so far has fired (a snapshot between the timers of
    // one watermark sees the new one before they all have).
    firedThrough_ = timers_->currentWatermark();
    if (batch_ && !batch_->empty() && batch_->earliestFiring() <= watermark) flushBatch();
  }
  void prepareSnapshotPreBarrier(uint64_t) override {
    if (batch_ && !batch_->empty()) flushBatch();
    registerChainedFirings();
  }

  void collect(const T& v) override {
    const bool eventTime = o_.assigner.isEventTime();
    int64_t ts;
    if (eventTime) {
      ts = ctx_->currentTimestamp();
      if (ts == kNoTimestamp)
        throw UserCodeError(name_, "a record without an event timestamp reached an event-time window: assign "
                                   "timestamps upstream with assignTimestampsAndWatermarks(...), or use a "
                                   "processing-time window");
    } else {
      ts = timers_->currentProcessingTime();
    }
    if (batch_ && addToBatch(v, ts)) return;
    bool skipped = true;
    if (o_.assigner.isMerging()) {
      skipped = !addToSession(TimeWindow{ts, saturatingAdd(ts, o_.assigner.gapMs())}, v);
    } else {
      for (const TimeWindow& w : o_.assigner.assignWindows(ts)) {
        if (isWindowLate(w)) continue;
        skipped = false;
        encodeWindow(w);
        add(v);
        onElementTrigger(w);
      }
    }
    if (skipped && eventTime && saturatingAdd(ts, o_.allowedLatenessMs) <= timers_->currentWatermark()) {
      if (!o_.lateTagKey.empty()) {
        if (void* c = lateOutput()) static_cast<Collector<T>*>(c)->collect(v);
      }
    }
  }

  void onEventTime(int64_t time, std::string_view ns) override {
    if (o_.assigner.isEventTime()) onTimer(time, ns);
  }
  void onProcessingTime(int64_t time, std::string_view ns) override {
    if (!o_.assigner.isEventTime()) onTimer(time, ns);
  }

 private:
  int64_t cleanupTime(const TimeWindow& w) const {
    return o_.assigner.isEventTime() ? saturatingAdd(w.maxTimestamp(), o_.allowedLatenessMs) : w.maxTimestamp();
  }
  bool isWindowLate(const TimeWindow& w) const {
    return o_.assigner.isEventTime() && cleanupTime(w) <= timers_->currentWatermark();
  }
  void encodeWindow(const TimeWindow& w) { serializeInto(windowKey_, w); }
  void registerTimer(const TimeWindow& w, int64_t time) {
    encodeWindow(w);
    if (o_.assigner.isEventTime()) timers_->registerEventTimeTimer(windowKey_, time);
    else timers_->registerProcessingTimeTimer(windowKey_, time);
  }
  void deleteTimer(const TimeWindow& w, int64_t time) {
    encodeWindow(w);
    if (o_.assigner.isEventTime()) timers_->deleteEventTimeTimer(windowKey_, time);
    else timers_->deleteProcessingTimeTimer(windowKey_, time);
  }

  /// Adds `v` to the window in windowKey_.
  void add(const T& v) {
    if constexpr (kList) {
      serializeInto(scratch_, v);
      element_.clear();
      ByteWriter(element_).writeBytes(scratch_);
      state_->mapAppend(contents_, windowKey_, element_);
    } else {
      std::optional<Acc> acc;
      if (std::string_view got; state_->mapGet(contents_, windowKey_, &got)) acc = deserialize<Acc>(got);
      Acc next = invoke([&] { return f_.fold(std::move(acc), v); });
      serializeInto(scratch_, next);
      state_->mapPut(contents_, windowKey_, scratch_);
    }
  }

  /// The default trigger for a window `v` was just added to: fire now if the watermark
  /// is already past it (a late record within the allowed lateness), else at its end;
  /// and clean it up once it can get no more records.
  void onElementTrigger(const TimeWindow& w) {
    if (o_.assigner.isEventTime() && w.maxTimestamp() <= timers_->currentWatermark()) {
      encodeWindow(w);
      emitWindow(w);
    } else {
      registerTimer(w, w.maxTimestamp());
    }
    if (cleanupTime(w) != kMaxWatermark && cleanupTime(w) != w.maxTimestamp()) registerTimer(w, cleanupTime(w));
  }

  /// Folds `v` at `ts` into the mini-batch, unless a window of its pane may have fired
  /// (the watermark has passed the first one's end) or no window holds it: false.
  bool addToBatch(const T& v, int64_t ts) {
    if constexpr (kList) {
      return false;
    } else {
      const TimeWindow pane = grid_.paneOf(ts);
      int64_t first = 0, last = 0;
      if (!grid_.windowsOf(pane, &first, &last)) return false;
      const int64_t firing = grid_.window(first).maxTimestamp();
      if (firing <= timers_->currentWatermark()) return false;
      if (Acc* acc = batch_->find(ctx_->currentKey(), pane.start)) {
        *acc = invoke([&] { return f_.fold(std::optional<Acc>(std::move(*acc)), v); });
        return true;
      }
      if (batch_->full()) flushBatch();
      Acc acc = invoke([&] { return f_.fold(std::nullopt, v); });
      batch_->insert(ctx_->currentKey(), ctx_->currentKeyGroup(), pane, firing, std::move(acc));
      return true;
    }
  }

  /// Adds every accumulator of the mini-batch to each window of its pane in state
  /// (after the window's stored one) and registers those windows' timers. The current
  /// key and timestamp are the same afterwards.
  void flushBatch() {
    if constexpr (!kList) {
      flushKey_.assign(ctx_->currentKey());
      const int flushGroup = ctx_->currentKeyGroup();
      const int64_t flushTimestamp = ctx_->currentTimestamp();
      auto& entries = batch_->take();  // valid until the next take(): nothing here adds to the batch
      const typename WindowMiniBatch<Acc>::Entry* previous = nullptr;
      const bool chain = chainsFiringTimers();
      if (chain) forgetFiredChains();
      for (auto& e : entries) {
        if (previous == nullptr || previous->keyGroup != e.keyGroup || previous->key != e.key)
          ctx_->setCurrentKeyAndGroup(e.keyGroup, e.key);
        previous = &e;
        int64_t first = 0, last = 0;
        grid_.windowsOf(e.pane, &first, &last);
        if (chain && last > first) chained_.push_back({e.keyGroup, e.key, first + grid_.slide(), last});
        for (int64_t start = first; start <= last; start += grid_.slide()) {
          const TimeWindow w = grid_.window(start);
          encodeWindow(w);
          if (std::string_view got; state_->mapGet(contents_, windowKey_, &got)) {
            Acc stored = deserialize<Acc>(got);
            serializeInto(scratch_, invoke([&] { return f_.merge(std::move(stored), e.acc); }));
          } else {
            serializeInto(scratch_, e.acc);
          }
          state_->mapPut(contents_, windowKey_, scratch_);
          // The watermark is before w's end: registers its timers. Also when its state
          // existed: it may have fired before a restore (the watermark starts over), or
          // have been restored with another allowed lateness (another clean-up time).
          // Overlapping windows without allowed lateness: only the pane's first window
          // gets its firing timer now, each later one when the window before it fires.
          if (start == first || !chain) onElementTrigger(w);
        }
      }
      if (flushGroup >= 0) ctx_->setCurrentKeyAndGroup(flushGroup, flushKey_);
      ctx_->setCurrentTimestamp(flushTimestamp);
    }
  }

  /// Session windows: merges `w` with every open window of the key it overlaps (the
  /// merged window may overlap more), moves their contents and timers to the result, and
  /// adds `v`. False if the resulting window is late (then nothing changes).
  bool addToSession(TimeWindow w, const T& v) {
    std::vector<TimeWindow> open = openSessions();
    const std::vector<TimeWindow> before = open;
    TimeWindow merged = w;
    std::vector<TimeWindow> absorbed;
    for (bool grew = true; grew;) {
      grew = false;
      for (auto it = open.begin(); it != open.end();) {
        if (it->intersects(merged)) {
          merged = merged.cover(*it);
          absorbed.push_back(*it);
          it = open.erase(it);
          grew = true;
        } else {
          ++it;
        }
      }
    }
    if (isWindowLate(merged)) return false;
    if (!(absorbed.size() == 1 && absorbed.front() == merged)) {
      // Move every absorbed window's contents into the merged one, and drop its timers.
      std::optional<std::string> combined;
      for (const TimeWindow& a : absorbed) {
        encodeWindow(a);
        if (!state_->mapGet(contents_, windowKey_, scratch_)) continue;
        state_->mapRemove(contents_, windowKey_);
        deleteTimer(a, a.maxTimestamp());
        if (cleanupTime(a) != a.maxTimestamp()) deleteTimer(a, cleanupTime(a));
        if (!combined) {
          combined = scratch_;
        } else if constexpr (kList) {
          combined->append(scratch_);
        } else {
          Acc m = invoke([&] { return f_.merge(deserialize<Acc>(*combined), deserialize<Acc>(scratch_)); });
          serializeInto(*combined, m);
        }
      }
      encodeWindow(merged);
      if (combined) state_->mapPut(contents_, windowKey_, *combined);
    }
    // `open` holds the windows not absorbed; the merged one joins them.
    if (open.size() + 1 != before.size() || std::find(before.begin(), before.end(), merged) == before.end()) {
      open.push_back(merged);
      std::sort(open.begin(), open.end());
      serializeInto(scratch_, open);
      state_->put(sessions_, scratch_);
    }
    encodeWindow(merged);
    add(v);
    onElementTrigger(merged);
    return true;
  }

  std::vector<TimeWindow> openSessions() {
    if (!state_->get(sessions_, scratch_)) return {};
    return deserialize<std::vector<TimeWindow>>(scratch_);
  }

  void onTimer(int64_t time, std::string_view ns) {
    TimeWindow w = deserialize<TimeWindow>(ns);
    windowKey_.assign(ns.data(), ns.size());
    if (time == w.maxTimestamp()) {
      emitWindow(w);
      if (chainsFiringTimers()) registerNextFiring(w);
    }
    if (time == cleanupTime(w)) {
      encodeWindow(w);
      state_->mapRemove(contents_, windowKey_);
      if (o_.assigner.isMerging()) {
        std::vector<TimeWindow> open = openSessions();
        std::erase(open, w);
        if (open.empty()) {
          state_->clear(sessions_);
        } else {
          serializeInto(scratch_, open);
          state_->put(sessions_, scratch_);
        }
      }
    }
  }

  /// Overlapping event-time windows (sliding, slide < size) without allowed lateness
  /// register a window's firing timer lazily, as Flink's SlicingWindowOperator does
  /// (nextTriggerWindow): a mini-batch flush registers the one of each pane's first
  /// window, and a window that fires registers the one of the next window (a slide
  /// later) if that has contents. Every window with contents is reached: the windows of a
  /// pane are consecutive and all hold it. A key then has about one firing timer pending
  /// instead of size/slide, each for one slide instead of the window's size, so far fewer
  /// reach the backend (a third of NexmarkQ5's window thread, docs/benchmarks.md).
  ///  - Without allowed lateness a window's contents go when it fires, so "has contents"
  ///    means "has still to fire". With it, a fired window keeps them until its clean-up,
  ///    and the chain would fire it again for being next to one (after a restore, whose
  ///    watermark starts over): every window's timer is registered at once, as before.
  ///  - Before every snapshot, registerChainedFirings() registers the timers the chain has
  ///    not reached yet, so a snapshot holds exactly the timers registering them all at
  ///    once would have: it restores with allowed lateness added, and into older releases.
  ///  - Only with the mini-batch (aggregate and reduce), the one writer that skips
  ///    timers: as snapshots hold every timer, nothing restored relies on the chain.
  ///    Registering a timer that exists changes nothing. A window whose contents a
  ///    snapshot taken with allowed lateness kept after it fired, restored without it,
  ///    may fire once more if it is next to a window that fires (then goes); before, its
  ///    contents stayed for ever.
  ///  - chained_ holds about kMaxChained panes at most (checked at each flush, so one
  ///    batch more): past that (a watermark that does not move, a record far ahead of the
  ///    others), their timers are registered at once.
  bool chainsFiringTimers() const {
    return batch_ && o_.assigner.slideMs() < o_.assigner.sizeMs() && o_.allowedLatenessMs == 0;
  }
  /// `w` fired: registers the firing timer of the window a slide later, if it has
  /// contents. Leaves windowKey_ encoding that window.
  void registerNextFiring(const TimeWindow& w) {
    const int64_t slide = o_.assigner.slideMs();
    if (w.start > std::numeric_limits<int64_t>::max() - slide) return;
    const TimeWindow next = grid_.window(w.start + slide);
    encodeWindow(next);
    if (std::string_view got; !state_->mapGet(contents_, windowKey_, &got)) return;
    registerTimer(next, next.maxTimestamp());
  }
  /// The later windows of a flushed pane, whose firing timers the chain registers.
  struct ChainedWindows {
    int keyGroup;
    std::string key;
    int64_t firstStart, lastStart;  // a slide apart
  };
  static constexpr size_t kMaxChained = size_t{1} << 18;
  /// Drops the oldest flushed panes whose windows have all fired (every timer up to the
  /// last one's end has), so chained_ holds about the panes of one window size.
  void forgetFiredChains() {
    while (!chained_.empty() && grid_.window(chained_.front().lastStart).maxTimestamp() <= firedThrough_)
      chained_.pop_front();
    if (chained_.size() > kMaxChained) registerChainedFirings();
  }
  /// Registers the firing timer of every window of a pane flushed since the last
  /// snapshot that has still to fire: past the watermark, or (a snapshot between the
  /// timers of one watermark) still holding contents. The current key is the same
  /// afterwards.
  void registerChainedFirings() {
    if (chained_.empty()) return;
    const std::string key(ctx_->currentKey());
    const int group = ctx_->currentKeyGroup();
    const int64_t watermark = timers_->currentWatermark();
    for (const ChainedWindows& c : chained_) {
      ctx_->setCurrentKeyAndGroup(c.keyGroup, c.key);
      for (int64_t start = c.firstStart; start <= c.lastStart; start += grid_.slide()) {
        const TimeWindow w = grid_.window(start);
        if (w.maxTimestamp() <= watermark) {
          encodeWindow(w);
          if (std::string_view got; !state_->mapGet(contents_, windowKey_, &got)) continue;
        }
        registerTimer(w, w.maxTimestamp());
      }
    }
    chained_.clear();
    if (group >= 0) ctx_->setCurrentKeyAndGroup(group, key);
  }

  /// Emits the result of the window in windowKey_, if it has contents.
  void emitWindow(const TimeWindow& w) {
    if (!state_->mapGet(contents_, windowKey_, scratch_)) return;
    Contents c;
    if constexpr (kList) {
      ByteReader r(scratch_);
      while (!r.atEnd()) c.push_back(deserialize<T>(r.readBytes()));
    } else {
      c = deserialize<Acc>(scratch_);
    }
    K key = deserialize<K>(ctx_->currentKey());
    const int64_t before = ctx_->currentTimestamp();
    ctx_->setCurrentTimestamp(w.maxTimestamp());
    invoke([&] { f_.fire(key, w, std::move(c), *ctx_, *side_, *down_); });
    ctx_->setCurrentTimestamp(before);
  }

  void* lateOutput() {
    if (!lateLooked_) {
      late_ = ctx_->sideOutput(o_.lateTagKey);
      lateLooked_ = true;
    }
    return late_;
  }

  Options o_;
  Functions f_;
  Collector<Out>* down_;
  OperatorContext* ctx_ = nullptr;
  KeyedStateAccess* state_ = nullptr;
  InternalTimerService* timers_ = nullptr;
  std::optional<SideOutputs> side_;
  int contents_ = -1;
  int sessions_ = -1;  // merging assigners only
  std::string windowKey_, scratch_, element_;
  PaneGrid grid_;  // tumbling and sliding assigners
  /// Event-time aggregate and reduce over tumbling and sliding windows, when
  /// pipeline.window.mini-batch.size > 0.
  std::optional<WindowMiniBatch<Acc>> batch_;
  /// chainsFiringTimers(): the panes flushed since the last snapshot, in flush order (a
  /// flush's by key group, key and pane).
  std::deque<ChainedWindows> chained_;
  int64_t firedThrough_ = kMinWatermark;  // every timer up to it has fired
  std::string flushKey_;
  void* late_ = nullptr;
  bool lateLooked_ = false;
};

}  // namespace jobhost::detail
