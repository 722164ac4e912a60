// Event time in whole executions (issue 14): windows, timers, side outputs, union,
// connect, interval join, idleness, drain — and their state through checkpoints, restores,
// rescaling and the canonical format. Each result is compared with a reference the test
// computes on its own from the same input. Sources that must wait for the test are
// scripted (they idle until a flag is set); a deadline only turns a hang into a failure.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "checkpoint/checkpoint_coordinator.h"
#include "jobhost/jobhost.h"
#include "jobhost/state/checkpoint_metadata.h"
#include "jobhost/state/checkpoint_storage.h"
#include "runtime/job_execution.h"
#include "runtime/watermark_valve.h"

namespace jobhost::host {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr auto kHang = 60s;

using Event = std::tuple<int64_t, std::string, int64_t>;  // (timestamp, key, value)

/// `n` events with timestamps i * step, shuffled by up to `jitter` ms, over `keys` keys.
std::vector<Event> shuffledEvents(int n, int keys, int64_t step, int64_t jitter, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Event> out;
  for (int i = 0; i < n; ++i) {
    int64_t ts = 1'000'000 + i * step + (jitter > 0 ? static_cast<int64_t>(rng() % (2 * jitter + 1)) - jitter : 0);
    out.emplace_back(ts, "k" + std::to_string(rng() % static_cast<uint32_t>(keys)), static_cast<int64_t>(i % 7) + 1);
  }
  return out;
}

/// What the sinks collected, from every subtask.
struct Collected {
  std::mutex mu;
  std::multiset<std::string> lines;
  void add(const std::string& s) {
    std::lock_guard lock(mu);
    lines.insert(s);
  }
  std::multiset<std::string> get() {
    std::lock_guard lock(mu);
    return lines;
  }
  size_t size() {
    std::lock_guard lock(mu);
    return lines.size();
  }
};

template <class T>
void collectInto(DataStream<T> s, std::shared_ptr<Collected> c) {
  s.addSink([c](const T& v) {
    std::string line;
    appendText(line, v);
    c->add(line);
  });
}

/// Flags a test sets for its sources, and what they emitted.
struct Flags {
  std::mutex mu;
  std::set<std::string> set;
  void raise(const std::string& f) {
    std::lock_guard lock(mu);
    set.insert(f);
  }
  bool up(const std::string& f) {
    std::lock_guard lock(mu);
    return set.count(f) > 0;
  }
};

/// Emits events[from, to) in order, then (if `waitFor` is not empty) idles until that flag
/// is up, then ends. Its position (the next index) is checkpointed.
class EventSource : public SourceFunction<Event> {
 public:
  /// `paced`: 8 records per poll and 1 ms between polls (a checkpoint lands mid-input).
  EventSource(std::shared_ptr<const std::vector<Event>> events, size_t to, std::shared_ptr<Flags> flags,
              std::string waitFor, std::string emittedFlag, bool paced = false)
      : events_(std::move(events)), to_(to), flags_(std::move(flags)), waitFor_(std::move(waitFor)),
        emittedFlag_(std::move(emittedFlag)), paced_(paced) {}
  PollStatus poll(SourceOutput<Event>& out) override {
    for (int n = 0; n < (paced_ ? 8 : 64) && next_ < to_; ++n) out.emit((*events_)[next_++]);
    if (next_ < to_) {
      if (paced_) std::this_thread::sleep_for(1ms);
      return PollStatus::kMore;
    }
    if (!emittedFlag_.empty()) flags_->raise(emittedFlag_);
    if (waitFor_.empty() || flags_->up(waitFor_)) return PollStatus::kEnd;
    std::this_thread::sleep_for(1ms);
    return PollStatus::kIdle;
  }
  std::string snapshotPosition() override { return std::to_string(next_); }
  void restorePosition(std::string_view p) override { next_ = std::stoull(std::string(p)); }

 private:
  std::shared_ptr<const std::vector<Event>> events_;
  size_t next_ = 0, to_;
  std::shared_ptr<Flags> flags_;
  std::string waitFor_, emittedFlag_;
  bool paced_;
};

DataStream<Event> eventSource(StreamEnvironment& env, std::shared_ptr<const std::vector<Event>> events, size_t to,
                              std::shared_ptr<Flags> flags = std::make_shared<Flags>(), std::string waitFor = {},
                              std::string emittedFlag = {}, const std::string& uid = "events",
                              int64_t outOfOrderness = 1000, int64_t idleness = 0, bool paced = false) {
  auto s = env.addSource<Event>(
      [=] { return std::make_unique<EventSource>(events, to, flags, waitFor, emittedFlag, paced); }, "Event Source");
  s.uid(uid);
  auto strategy = WatermarkStrategy<Event>::forBoundedOutOfOrderness(std::chrono::milliseconds(outOfOrderness))
                      .withTimestampAssigner([](const Event& e) { return std::get<0>(e); });
  if (idleness > 0) strategy = strategy.withIdleness(std::chrono::milliseconds(idleness));
  auto stamped = s.assignTimestampsAndWatermarks(strategy);
  stamped.uid(uid + "-timestamps");
  return stamped;
}

std::string keyOf(const Event& e) { return std::get<1>(e); }

/// Counts and sums a window's events.
struct CountAndSum : AggregateFunction<Event, std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>> {
  std::pair<int64_t, int64_t> createAccumulator() const override { return {0, 0}; }
  std::pair<int64_t, int64_t> add(const Event& e, std::pair<int64_t, int64_t> a) const override {
    return {a.first + 1, a.second + std::get<2>(e)};
  }
  std::pair<int64_t, int64_t> getResult(const std::pair<int64_t, int64_t>& a) const override { return a; }
  std::pair<int64_t, int64_t> merge(std::pair<int64_t, int64_t> a, const std::pair<int64_t, int64_t>& b) const override {
    return {a.first + b.first, a.second + b.second};
  }
};

using WindowResult = std::tuple<int64_t, int64_t, std::string, int64_t, int64_t>;  // (start, end, key, count, sum)

struct WithWindow : ProcessWindowFunction<std::pair<int64_t, int64_t>, WindowResult, std::string> {
  void process(const std::string& key, Context& ctx, const std::vector<std::pair<int64_t, int64_t>>& r,
               Collector<WindowResult>& out) override {
    out.collect({ctx.window().start, ctx.window().end, key, r.front().first, r.front().second});
  }
};

std::string text(const WindowResult& r) {
  std::string s;
  appendText(s, r);
  return s;
}

/// The reference: count and sum per (window, key) for windows of `size` sliding by `slide`.
std::multiset<std::string> referenceWindows(const std::vector<Event>& events, int64_t size, int64_t slide) {
  std::map<std::tuple<int64_t, std::string>, std::pair<int64_t, int64_t>> acc;
  for (const auto& [ts, key, v] : events) {
    int64_t last = ts - ((ts % slide) + slide) % slide;
    for (int64_t start = last; start > ts - size; start -= slide) {
      auto& a = acc[{start, key}];
      ++a.first;
      a.second += v;
    }
  }
  std::multiset<std::string> out;
  for (const auto& [k, a] : acc) out.insert(text({std::get<0>(k), std::get<0>(k) + size, std::get<1>(k), a.first, a.second}));
  return out;
}

/// Sessions per key with gap `gap`: (start, end = last + gap, key, count, sum).
std::multiset<std::string> referenceSessions(const std::vector<Event>& events, int64_t gap) {
  std::map<std::string, std::vector<Event>> byKey;
  for (const auto& e : events) byKey[std::get<1>(e)].push_back(e);
  std::multiset<std::string> out;
  for (auto& [key, es] : byKey) {
    std::sort(es.begin(), es.end());
    int64_t start = std::get<0>(es.front()), end = start + gap, count = 0, sum = 0;
    for (const auto& [ts, k, v] : es) {
      if (ts > end) {  // a gap of more than `gap`: [start, end) is over ([ts, ts+gap) does not touch it)
        out.insert(text({start, end, key, count, sum}));
        start = ts;
        count = sum = 0;
      }
      end = std::max(end, ts + gap);
      ++count;
      sum += v;
    }
    out.insert(text({start, end, key, count, sum}));
  }
  return out;
}

class RecordingListener : public CheckpointListener {
 public:
  void acknowledge(uint64_t id, TaskSnapshot snapshot) override {
    std::lock_guard lock(mu_);
    acks_[id].push_back(std::move(snapshot));
    cv_.notify_all();
  }
  void decline(uint64_t id, CheckpointFailureReason, const state::Status& reason) override {
    std::lock_guard lock(mu_);
    declines_[id].push_back(reason.toString());
    cv_.notify_all();
  }
  bool waitAcks(uint64_t id, size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kHang, [&] { return acks_[id].size() >= n || !declines_[id].empty(); }) &&
           acks_[id].size() >= n;
  }
  std::vector<TaskSnapshot> acks(uint64_t id) {
    std::lock_guard lock(mu_);
    return acks_[id];
  }
  std::string declines(uint64_t id) {
    std::lock_guard lock(mu_);
    std::string all;
    for (const auto& d : declines_[id]) all += d + "; ";
    return all;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, std::vector<TaskSnapshot>> acks_;
  std::map<uint64_t, std::vector<std::string>> declines_;
};

bool waitUntil(const std::function<bool()>& done) {
  auto deadline = std::chrono::steady_clock::now() + kHang;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

struct BackendCase {
  state::BackendType backend;
  int parallelism;
};

void PrintTo(const BackendCase& c, std::ostream* os) {
  *os << state::backendTypeName(c.backend) << " p=" << c.parallelism;
}

std::string caseName(const ::testing::TestParamInfo<BackendCase>& p) {
  return std::string(state::backendTypeName(p.param.backend)) + "_p" + std::to_string(p.param.parallelism);
}

class EventTimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> runs{0};
    root_ = fs::temp_directory_path() / ("jobhost-event-time-test-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(++runs));
    fs::remove_all(root_);
    fs::create_directories(root_);
    auto s = state::openStorage((root_ / "checkpoints").string());
    ASSERT_TRUE(s.ok()) << s.status();
    storage_ = std::move(*s);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  ExecutionConfig config(int parallelism, state::BackendType backend, int64_t watermarkIntervalMs = 10) {
    ExecutionConfig c;
    c.parallelism = parallelism;
    c.backend = backend;
    c.localStateDir = (root_ / ("local-" + std::to_string(++attempts_))).string();
    c.autoWatermarkIntervalMs = watermarkIntervalMs;
    c.windowMiniBatchSize = 16384;  // the aggregates here merge exactly; 0 in its own test
    return c;
  }
  /// Runs `plan` to its end; `allowNonRestored`: state of the snapshot with no place in
  /// the plan is dropped (-n).
  void runToEnd(Plan plan, ExecutionConfig c, const state::CheckpointMetadata* restore = nullptr,
                bool allowNonRestored = false) {
    JobExecution exec(std::move(plan), c, &listener_);
    RestoreSource rs{restore, storage_.get(), allowNonRestored};
    state::Status s = exec.prepare(restore ? &rs : nullptr);
    ASSERT_TRUE(s.ok()) << s;
    exec.start();
    ExecutionResult r = exec.wait();
    ASSERT_EQ(r.kind, ExecutionResult::kFinished) << r.message << " in " << r.operatorName;
  }
  CheckpointTarget target(uint64_t id, state::SnapshotFormat format = state::SnapshotFormat::kNative) {
    CheckpointTarget t;
    t.checkpointId = id;
    t.storage = storage_;
    t.format = format;
    t.exclusiveDir = "chk-" + std::to_string(id);
    t.sharedDir = format == state::SnapshotFormat::kCanonical ? "" : "shared";
    return t;
  }
  /// The checkpoint's metadata as the coordinator assembles it (assembleMetadata).
  state::CheckpointMetadata metadataOf(const JobExecution& exec, const std::vector<TaskSnapshot>& acks, uint64_t id,
                                       const ExecutionConfig& c) {
    state::CheckpointMetadata m;
    m.checkpointId = id;
    m.parallelism = c.parallelism;
    m.maxParallelism = c.maxParallelism;
    m.backend = state::backendTypeName(c.backend);
    return assembleMetadata(std::move(m), exec.operators(), acks);
  }
  /// Runs `plan` until `ready()`, takes checkpoint `id`, cancels; returns its metadata.
  state::CheckpointMetadata runAndCheckpoint(Plan plan, ExecutionConfig c, const std::function<bool()>& ready,
                                             uint64_t id, state::SnapshotFormat format = state::SnapshotFormat::kNative,
                                             const state::CheckpointMetadata* restore = nullptr) {
    JobExecution exec(std::move(plan), c, &listener_);
    RestoreSource rs{restore, storage_.get(), false};
    state::Status s = exec.prepare(restore ? &rs : nullptr);
    EXPECT_TRUE(s.ok()) << s;
    exec.start();
    EXPECT_TRUE(waitUntil(ready));
    EXPECT_TRUE(exec.triggerCheckpoint(target(id, format)));
    EXPECT_TRUE(listener_.waitAcks(id, static_cast<size_t>(exec.taskCount()))) << listener_.declines(id);
    auto m = metadataOf(exec, listener_.acks(id), id, c);
    exec.cancel();
    exec.wait();
    return m;
  }

  fs::path root_;
  std::shared_ptr<state::CheckpointStorage> storage_;
  RecordingListener listener_;
  int attempts_ = 0;
};

class WindowCases : public EventTimeTest, public ::testing::WithParamInterface<BackendCase> {};

// ---------------------------------------------------------------------------------------
// The input watermark of a task

TEST(WatermarkValveTest, TheInputWatermarkIsTheMinimumOverLiveChannelsAndNeverGoesBack) {
  WatermarkValve v(3);
  EXPECT_EQ(v.onWatermark(0, 100), std::nullopt);  // channels 1 and 2 know nothing yet
  EXPECT_EQ(v.onWatermark(1, 50), std::nullopt);
  EXPECT_EQ(v.onWatermark(2, 70), std::optional<int64_t>(50));
  EXPECT_EQ(v.onWatermark(1, 40), std::nullopt) << "a channel's watermark only advances";
  EXPECT_EQ(v.onWatermark(1, 90), std::optional<int64_t>(70));
  EXPECT_EQ(v.onEnd(2), std::optional<int64_t>(90)) << "an ended channel counts as the end of time";
  EXPECT_EQ(v.onEnd(0), std::nullopt);
  EXPECT_EQ(v.onEnd(1), std::optional<int64_t>(kMaxWatermark));
}

TEST(WatermarkValveTest, IdleChannelsAreLeftOutAndARejoiningChannelCountsOnceItCatchesUp) {
  WatermarkValve v(2);
  EXPECT_EQ(v.onWatermark(0, 10), std::nullopt) << "channel 1 knows nothing yet";
  EXPECT_EQ(v.onStatus(1, true), std::optional<int64_t>(10)) << "only channel 0 counts";
  EXPECT_FALSE(v.idle());
  EXPECT_EQ(v.onWatermark(0, 20), std::optional<int64_t>(20));
  EXPECT_EQ(v.onWatermark(1, 5), std::nullopt) << "a watermark on an idle channel is ignored";
  EXPECT_EQ(v.onStatus(1, false), std::nullopt);
  EXPECT_EQ(v.onWatermark(0, 30), std::optional<int64_t>(30)) << "channel 1 is behind: not aligned, not waited for";
  EXPECT_EQ(v.onWatermark(1, 25), std::nullopt);
  EXPECT_EQ(v.onWatermark(1, 35), std::nullopt) << "aligned again at 35; channel 0 is at 30";
  EXPECT_EQ(v.onWatermark(0, 40), std::optional<int64_t>(35)) << "now channel 1 holds it back";
}

TEST(WatermarkValveTest, WhenTheLastActiveChannelGoesIdleTheWatermarkJumpsToTheHighest) {
  WatermarkValve v(2);
  v.onWatermark(0, 100);
  EXPECT_EQ(v.onWatermark(1, 50), std::optional<int64_t>(50));
  EXPECT_EQ(v.onStatus(0, true), std::nullopt);
  EXPECT_EQ(v.onStatus(1, true), std::optional<int64_t>(100)) << "as Flink: the maximum over all channels";
  EXPECT_TRUE(v.idle());
  EXPECT_EQ(v.onStatus(1, false), std::nullopt);
  EXPECT_FALSE(v.idle());
}

TEST(WatermarkValveTest, EndedChannelsCountAsTheEndOfTimeButDoNotWakeAnIdleInput) {
  WatermarkValve v(2);
  v.onWatermark(0, 10);
  v.onWatermark(1, 20);
  EXPECT_EQ(v.onStatus(0, true), std::optional<int64_t>(20));
  EXPECT_EQ(v.onEnd(1), std::nullopt) << "channel 0 is idle: the input is idle at what it had";
  EXPECT_TRUE(v.idle());
  EXPECT_EQ(v.onEnd(0), std::optional<int64_t>(kMaxWatermark));
  EXPECT_FALSE(v.idle());
}

// ---------------------------------------------------------------------------------------
// Windows against references

TEST_P(WindowCases, TumblingWindowsOverShuffledInputEqualAReference) {
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(4000, 13, 7, 400, 1));
  auto out = std::make_shared<Collected>();
  StreamEnvironment env;
  auto w = eventSource(env, events, events->size())
               .keyBy(keyOf)
               .window(TumblingEventTimeWindows::of(1000ms))
               .aggregate(CountAndSum{}, WithWindow{});
  w.uid("windows");
  collectInto(w, out);
  runToEnd(env.takePlan(), config(GetParam().parallelism, GetParam().backend));
  EXPECT_EQ(out->get(), referenceWindows(*events, 1000, 1000));
}

TEST_P(WindowCases, SlidingWindowsEqualAReference) {
  // Seven keys with records in every pane; then 300 keys over 2000 records, so most keys
  // have records in a few panes with gaps between them (the windows whose firing timers
  // wait for the window before them form several runs: chainsFiringTimers()), six
  // windows per pane, at several mini-batch sizes; periodic watermarks fire windows while
  // records still come.
  struct Case {
    std::vector<Event> events;
    int64_t size, slide;
    size_t batch;
  };
  const std::vector<Event> sparse = shuffledEvents(2000, 300, 7, 400, 5);
  for (const Case& k : {Case{shuffledEvents(3000, 7, 5, 300, 2), 900, 300, 16384}, Case{sparse, 600, 100, 1},
                        Case{sparse, 600, 100, 5}, Case{sparse, 600, 100, 16384}}) {
    auto events = std::make_shared<const std::vector<Event>>(k.events);
    auto out = std::make_shared<Collected>();
    StreamEnvironment env;
    auto w = eventSource(env, events, events->size())
                 .keyBy(keyOf)
                 .window(SlidingEventTimeWindows::of(std::chrono::milliseconds(k.size), std::chrono::milliseconds(k.slide)))
                 .aggregate(CountAndSum{}, WithWindow{});
    w.uid("sliding");
    collectInto(w, out);
    ExecutionConfig c = config(GetParam().parallelism, GetParam().backend);
    c.windowMiniBatchSize = k.batch;
    runToEnd(env.takePlan(), c);
    EXPECT_EQ(out->get(), referenceWindows(*events, k.size, k.slide))
        << k.size << "/" << k.slide << " ms, mini-batch " << k.batch;
  }
}

TEST_P(WindowCases, ACheckpointOfSlidingWindowsHoldsTheFiringTimerOfEveryWindowStillToFire) {
  // Sliding windows of 600 ms every 200 ms: a pane of 200 ms is in three windows. In a
  // run, a window's firing timer is registered when the window before it fires (fewer
  // timers to write and delete again: NexmarkQ5); a snapshot still holds every window's,
  // as when all were registered at once, so a restore needs no memory of the chain and
  // older releases restore it. Here nothing has fired at the checkpoint: per key, each
  // pane with records gives the ends of its three windows.
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(3000, 17, 5, 300, 7));
  const size_t half = events->size() / 2;
  auto flags = std::make_shared<Flags>();
  auto out = std::make_shared<Collected>();
  StreamEnvironment env;
  auto w = eventSource(env, events, half, flags, "never", "half")
               .keyBy(keyOf)
               .window(SlidingEventTimeWindows::of(600ms, 200ms))
               .aggregate(CountAndSum{}, WithWindow{});
  w.uid("sliding");
  collectInto(w, out);
  auto m = runAndCheckpoint(env.takePlan(), config(GetParam().parallelism, GetParam().backend, 0),
                            [&] { return flags->up("half"); }, 1);
  EXPECT_EQ(out->size(), 0u) << "no watermark: nothing fired";
  const state::OperatorSnapshot* op = m.findOperator("sliding");
  ASSERT_NE(op, nullptr);
  state::BackendOptions o;
  o.operatorUid = "sliding";
  o.range = {0, m.maxParallelism - 1};
  auto backend = state::createHeapBackend(o);
  ASSERT_TRUE(backend.ok());
  state::RestoreInput in;
  in.storage = storage_.get();
  in.states = op->states;
  for (const auto& st : op->subtasks) in.handles.push_back(st.keyed);
  state::Status s = (*backend)->restore(in);
  ASSERT_TRUE(s.ok()) << s;
  int timers = -1;
  const auto restored = (*backend)->states();
  for (size_t i = 0; i < restored.size(); ++i)
    if (restored[i].name.rfind("_timer_state/event", 0) == 0) timers = static_cast<int>(i);
  ASSERT_GE(timers, 0);
  std::set<std::pair<std::string, int64_t>> got, want;
  (*backend)->forEachEntry(timers, [&](int, std::string_view key, std::string_view userKey, std::string_view) {
    int64_t time = 0;
    std::string_view ns;
    ASSERT_TRUE(detail::decodeTimer(userKey, &time, &ns));
    got.emplace(deserialize<std::string>(key), time);
  });
  for (size_t i = 0; i < half; ++i) {
    const int64_t paneEnd = std::get<0>((*events)[i]) / 200 * 200 + 200;  // timestamps are positive
    for (int64_t end : {paneEnd, paneEnd + 200, paneEnd + 400}) want.emplace(std::get<1>((*events)[i]), end - 1);
  }
  EXPECT_EQ(got.size(), want.size());
  EXPECT_EQ(got, want);
}

TEST_P(WindowCases, EveryMiniBatchSizeGivesTheWindowsOfFoldingRecordByRecord) {
  // pipeline.window.mini-batch.size: 0 folds every record into state, 1 writes the batch
  // at almost every record, 5 often, 16384 only before watermarks and at the end.
  // Tumbling, sliding with a pane smaller than the slide (1000/400: panes of 200 ms in
  // two or three windows each) and sliding with gaps between windows (300/500: a record
  // in a gap belongs to no window).
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(3000, 11, 5, 300, 3));
  struct Shape {
    int64_t size, slide;
  };
  for (const Shape shape : {Shape{1000, 1000}, Shape{1000, 400}, Shape{300, 500}}) {
    for (size_t batch : {size_t{0}, size_t{1}, size_t{5}, size_t{16384}}) {
      auto out = std::make_shared<Collected>();
      StreamEnvironment env;
      auto keyed = eventSource(env, events, events->size()).keyBy(keyOf);
      auto w = shape.size == shape.slide
                   ? keyed.window(TumblingEventTimeWindows::of(std::chrono::milliseconds(shape.size)))
                         .aggregate(CountAndSum{}, WithWindow{})
                   : keyed.window(SlidingEventTimeWindows::of(std::chrono::milliseconds(shape.size),
                                                               std::chrono::milliseconds(shape.slide)))
                         .aggregate(CountAndSum{}, WithWindow{});
      w.uid("windows");
      collectInto(w, out);
      ExecutionConfig c = config(GetParam().parallelism, GetParam().backend);
      c.windowMiniBatchSize = batch;
      runToEnd(env.takePlan(), c);
      EXPECT_EQ(out->get(), referenceWindows(*events, shape.size, shape.slide))
          << "size " << shape.size << " ms, slide " << shape.slide << " ms, mini-batch " << batch;
    }
  }
}

TEST_P(WindowCases, SessionWindowsMergeOutOfOrderRecordsIntoTheReferenceSessions) {
  // Bursts per key with pauses: records of one session arrive out of order, so windows
  // created apart merge later.
  std::vector<Event> es;
  std::mt19937 rng(3);
  for (int k = 0; k < 6; ++k) {
    int64_t t = 1'000'000 + k * 37;
    for (int burst = 0; burst < 8; ++burst) {
      for (int i = 0; i < 12; ++i) es.emplace_back(t + static_cast<int64_t>(rng() % 400), "s" + std::to_string(k), i + 1);
      t += 400 + 150 + static_cast<int64_t>(rng() % 900);  // sometimes closer than the gap, sometimes not
    }
  }
  std::sort(es.begin(), es.end());
  for (size_t i = 0; i + 1 < es.size(); i += 2)
    if (rng() % 3 == 0) std::swap(es[i], es[i + 1]);  // out of order by up to a few records
  auto events = std::make_shared<const std::vector<Event>>(es);
  auto out = std::make_shared<Collected>();
  StreamEnvironment env;
  auto w = eventSource(env, events, events->size(), std::make_shared<Flags>(), {}, {}, "events", 2000)
               .keyBy(keyOf)
               .window(EventTimeSessionWindows::withGap(300ms))
               .aggregate(CountAndSum{}, WithWindow{});
  w.uid("sessions");
  collectInto(w, out);
  runToEnd(env.takePlan(), config(GetParam().parallelism, GetParam().backend));
  EXPECT_EQ(out->get(), referenceSessions(*events, 300));
}

TEST_P(WindowCases, AProcessWindowFunctionSeesEveryElementOfItsWindow) {
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(2000, 5, 9, 200, 4));
  auto out = std::make_shared<Collected>();
  struct AllValues : ProcessWindowFunction<Event, std::string, std::string> {
    void process(const std::string& key, Context& ctx, const std::vector<Event>& es, Collector<std::string>& out) override {
      std::vector<int64_t> ts;
      for (const auto& e : es) ts.push_back(std::get<0>(e));
      std::sort(ts.begin(), ts.end());
      std::string s = key + "@" + std::to_string(ctx.window().start) + ":";
      for (int64_t t : ts) s += " " + std::to_string(t);
      out.collect(s);
    }
  };
  StreamEnvironment env;
  auto w = eventSource(env, events, events->size()).keyBy(keyOf).window(TumblingEventTimeWindows::of(500ms)).process(AllValues{});
  w.uid("all-values");
  collectInto(w, out);
  runToEnd(env.takePlan(), config(GetParam().parallelism, GetParam().backend));
  std::map<std::pair<std::string, int64_t>, std::vector<int64_t>> ref;
  for (const auto& [ts, key, v] : *events) ref[{key, ts - ts % 500}].push_back(ts);
  std::multiset<std::string> expected;
  for (auto& [k, ts] : ref) {
    std::sort(ts.begin(), ts.end());
    std::string s = k.first + "@" + std::to_string(k.second) + ":";
    for (int64_t t : ts) s += " " + std::to_string(t);
    expected.insert(s);
  }
  EXPECT_EQ(out->get(), expected);
}

INSTANTIATE_TEST_SUITE_P(Backends, WindowCases,
                         ::testing::Values(BackendCase{state::BackendType::kHashMap, 1},
                                           BackendCase{state::BackendType::kHashMap, 2},
                                           BackendCase{state::BackendType::kRocksDb, 1},
                                           BackendCase{state::BackendType::kRocksDb, 2}),
                         caseName);

// ---------------------------------------------------------------------------------------
// Late data

TEST_F(EventTimeTest, ARecordBehindTheWatermarkGoesToTheLateSideOutputNotIntoItsWindow) {
  // 10 records in [0, 1000), then one at 5000 (the watermark passes 1000 with no
  // out-of-orderness), then — once window [0, 1000) has fired — a record at 500.
  std::vector<Event> es;
  for (int i = 0; i < 10; ++i) es.emplace_back(1'000'000 + i * 10, "a", 1);
  es.emplace_back(1'005'000, "a", 1);
  es.emplace_back(1'000'500, "a", 100);  // late
  auto events = std::make_shared<const std::vector<Event>>(es);
  auto flags = std::make_shared<Flags>();
  auto out = std::make_shared<Collected>();
  auto late = std::make_shared<Collected>();
  const OutputTag<Event> lateTag("late");
  StreamEnvironment env;
  // Two sources in sequence would not be ordered; one source with a pause instead.
  class PausingSource : public SourceFunction<Event> {
   public:
    PausingSource(std::shared_ptr<const std::vector<Event>> e, std::shared_ptr<Flags> f) : e_(std::move(e)), f_(std::move(f)) {}
    PollStatus poll(SourceOutput<Event>& out) override {
      if (next_ < 11) {
        out.emit((*e_)[next_++]);
        return PollStatus::kMore;
      }
      if (next_ == 11) {
        if (!f_->up("fired")) {
          std::this_thread::sleep_for(1ms);
          return PollStatus::kIdle;
        }
        out.emit((*e_)[next_++]);
        return PollStatus::kMore;
      }
      return PollStatus::kEnd;
    }

   private:
    std::shared_ptr<const std::vector<Event>> e_;
    std::shared_ptr<Flags> f_;
    size_t next_ = 0;
  };
  auto src = env.addSource<Event>([=] { return std::make_unique<PausingSource>(events, flags); }, "Pausing");
  src.uid("src");
  auto windowed = src.assignTimestampsAndWatermarks(WatermarkStrategy<Event>::forMonotonousTimestamps().withTimestampAssigner(
                                                        [](const Event& e) { return std::get<0>(e); }))
                      .keyBy(keyOf)
                      .window(TumblingEventTimeWindows::of(1000ms))
                      .sideOutputLateData(lateTag)
                      .aggregate(CountAndSum{}, WithWindow{});
  windowed.uid("w");
  collectInto(windowed.getSideOutput(lateTag).map([](const Event& e) { return std::get<0>(e); }), late);
  windowed.addSink([out, flags](const WindowResult& r) {
    out->add(text(r));
    flags->raise("fired");
  });
  runToEnd(env.takePlan(), config(2, state::BackendType::kHashMap));
  EXPECT_EQ(out->get(), (std::multiset<std::string>{text({1'000'000, 1'001'000, "a", 10, 10}),
                                                     text({1'005'000, 1'006'000, "a", 1, 1})}));
  EXPECT_EQ(late->get(), (std::multiset<std::string>{"1000500"}));
}

TEST_F(EventTimeTest, WithAllowedLatenessALateRecordFiresItsWindowAgainWithTheUpdatedResult) {
  std::vector<Event> es;
  for (int i = 0; i < 3; ++i) es.emplace_back(1'000'000 + i, "a", 1);
  es.emplace_back(1'001'500, "a", 1);  // watermark 1001499: [1000000, 1001000) fires
  es.emplace_back(1'000'100, "a", 5);  // late, but within 1 s of lateness: fires again
  es.emplace_back(1'003'000, "a", 1);  // watermark passes end + lateness: cleaned up
  es.emplace_back(1'000'200, "a", 7);  // too late: side output
  auto events = std::make_shared<const std::vector<Event>>(es);
  auto out = std::make_shared<Collected>();
  auto late = std::make_shared<Collected>();
  const OutputTag<Event> lateTag("too-late");
  // One record per poll and a watermark after each: the test controls the order exactly
  // with a source that emits a record only once the previous one's watermark went out.
  // The task calls the assigners' periodic emit after every poll (stream_task.cc), due
  // `interval` after its last emit. So once an idle poll comes `interval` or more after
  // the first idle poll following a record (before which a periodic check ran), the check
  // after it emits a watermark that covers the record, however the thread was delayed; the
  // next poll may emit the next record. (A fixed pacing of 60 ms failed when the source's
  // thread stalled for longer.)
  class OnePerWatermark : public SourceFunction<Event> {
   public:
    explicit OnePerWatermark(std::shared_ptr<const std::vector<Event>> e) : e_(std::move(e)) {}
    PollStatus poll(SourceOutput<Event>& out) override {
      if (next_ >= e_->size()) return PollStatus::kEnd;
      const auto now = std::chrono::steady_clock::now();
      if (next_ > 0 && !covered_) {
        if (!firstIdle_) {
          firstIdle_ = now;
        } else if (now - *firstIdle_ >= 3 * interval_) {
          covered_ = true;  // the periodic check after this poll emits the watermark
        }
        std::this_thread::sleep_for(1ms);
        return PollStatus::kIdle;
      }
      out.emit((*e_)[next_++]);
      firstIdle_.reset();
      covered_ = false;
      return PollStatus::kMore;
    }

   private:
    const std::chrono::milliseconds interval_{10};  // config()'s watermark interval
    std::shared_ptr<const std::vector<Event>> e_;
    size_t next_ = 0;
    std::optional<std::chrono::steady_clock::time_point> firstIdle_;
    bool covered_ = false;
  };
  StreamEnvironment env;
  auto src = env.addSource<Event>([=] { return std::make_unique<OnePerWatermark>(events); }, "Paced");
  src.uid("src");
  auto w = src.assignTimestampsAndWatermarks(WatermarkStrategy<Event>::forMonotonousTimestamps().withTimestampAssigner(
                                                 [](const Event& e) { return std::get<0>(e); }))
               .keyBy(keyOf)
               .window(TumblingEventTimeWindows::of(1000ms))
               .allowedLateness(1000ms)
               .sideOutputLateData(lateTag)
               .aggregate(CountAndSum{}, WithWindow{});
  w.uid("w");
  collectInto(w, out);
  collectInto(w.getSideOutput(lateTag).map([](const Event& e) { return std::get<0>(e); }), late);
  runToEnd(env.takePlan(), config(1, state::BackendType::kRocksDb));
  EXPECT_EQ(out->get(), (std::multiset<std::string>{text({1'000'000, 1'001'000, "a", 3, 3}),
                                                     text({1'000'000, 1'001'000, "a", 4, 8}),
                                                     text({1'001'000, 1'002'000, "a", 1, 1}),
                                                     text({1'003'000, 1'004'000, "a", 1, 1})}));
  EXPECT_EQ(late->get(), (std::multiset<std::string>{"1000200"}));
}

// ---------------------------------------------------------------------------------------
// Timers

/// Counts each key's records per second in state and registers an event-time timer at
/// the end of the second; the timer emits "key@time:count" and drops that second's count.
struct TimerCounter : KeyedProcessFunction<std::string, Event, std::string> {
  MapState<int64_t, int64_t> perSecond{*this, "per-second"};
  void processElement(const Event& e, Context& ctx, Collector<std::string>&) override {
    const int64_t end = std::get<0>(e) - std::get<0>(e) % 1000 + 999;
    perSecond.put(end, perSecond.get(end).value_or(0) + 1);
    ctx.timerService().registerEventTimeTimer(end);
  }
  void onTimer(int64_t ts, OnTimerContext& ctx, Collector<std::string>& out) override {
    EXPECT_EQ(ctx.timeDomain(), TimeDomain::kEventTime);
    EXPECT_EQ(ctx.timestamp(), ts);
    out.collect(ctx.currentKey() + "@" + std::to_string(ts) + ":" + std::to_string(perSecond.get(ts).value_or(-1)));
    perSecond.remove(ts);
  }
};

TEST_P(WindowCases, EventTimeTimersFireOncePerKeyAndTimeWithTheStateOfTheirKey) {
  // Timers at the end of each second per key: as a tumbling window count (one timer per
  // (key, time) however many records register it).
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(3000, 9, 3, 300, 5));
  auto out = std::make_shared<Collected>();
  StreamEnvironment env;
  auto t = eventSource(env, events, events->size()).keyBy(keyOf).process<TimerCounter>();
  t.uid("timers");
  collectInto(t, out);
  runToEnd(env.takePlan(), config(GetParam().parallelism, GetParam().backend));
  std::map<std::pair<std::string, int64_t>, int64_t> ref;
  for (const auto& [ts, key, v] : *events) ++ref[{key, ts - ts % 1000 + 999}];
  std::multiset<std::string> expected;
  for (const auto& [k, n] : ref) expected.insert(k.first + "@" + std::to_string(k.second) + ":" + std::to_string(n));
  EXPECT_EQ(out->get(), expected);
}

/// A processing-time timer 2 s after each key's first record; the timer emits the key.
struct ProcessingTimeTimer : KeyedProcessFunction<std::string, Event, std::string> {
  ValueState<bool> armed{*this, "armed"};
  void processElement(const Event&, Context& ctx, Collector<std::string>&) override {
    if (armed.value()) return;
    armed.update(true);
    ctx.timerService().registerProcessingTimeTimer(ctx.timerService().currentProcessingTime() + 2000);
  }
  void onTimer(int64_t, OnTimerContext& ctx, Collector<std::string>& out) override {
    EXPECT_EQ(ctx.timeDomain(), TimeDomain::kProcessingTime);
    EXPECT_TRUE(ctx.timestamp().has_value()) << "the timer's time, as in Flink";
    out.collect("fired " + ctx.currentKey());
  }
};

TEST_P(WindowCases, ProcessingTimeTimersDueWhileTheJobWasDownFireRightAfterTheRestore) {
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(200, 11, 1, 0, 6));
  std::set<std::string> keys;
  for (const auto& e : *events) keys.insert(std::get<1>(e));
  auto flags = std::make_shared<Flags>();
  auto first = std::make_shared<Collected>(), out = std::make_shared<Collected>();
  auto plan = [&](bool restore) {
    StreamEnvironment env;
    auto t = eventSource(env, events, events->size(), flags, restore ? "done" : "never", restore ? "" : "emitted")
                 .keyBy(keyOf)
                 .process<ProcessingTimeTimer>();
    t.uid("proc-timers");
    collectInto(t, restore ? out : first);
    return env.takePlan();
  };
  // Checkpoint at once after the records, long before the timers are due; cancel; down
  // until they are.
  auto m = runAndCheckpoint(plan(false), config(GetParam().parallelism, GetParam().backend),
                            [&] { return flags->up("emitted"); }, 1);
  std::this_thread::sleep_for(2100ms);
  // Restored at another parallelism: every key's timer fires (its due time has passed).
  JobExecution exec(plan(true), config(GetParam().parallelism == 1 ? 3 : 1, GetParam().backend), &listener_);
  RestoreSource rs{&m, storage_.get(), false};
  ASSERT_TRUE(exec.prepare(&rs).ok());
  auto started = std::chrono::steady_clock::now();
  exec.start();
  EXPECT_TRUE(waitUntil([&] { return out->size() >= keys.size(); })) << out->size() << " of " << keys.size();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s) << "fired right after the restore";
  flags->raise("done");
  EXPECT_EQ(exec.wait().kind, ExecutionResult::kFinished);
  std::multiset<std::string> expected;
  for (const auto& k : keys) expected.insert("fired " + k);
  EXPECT_EQ(out->get(), expected);
}

// ---------------------------------------------------------------------------------------
// Checkpoints, restores, rescaling

struct RescaleCase {
  state::BackendType before, after;
  int from, to;
  state::SnapshotFormat format;
};

void PrintTo(const RescaleCase& c, std::ostream* os) {
  *os << state::backendTypeName(c.before) << " p=" << c.from << " -> " << state::backendTypeName(c.after)
      << " p=" << c.to << (c.format == state::SnapshotFormat::kCanonical ? " (canonical)" : "");
}

class RescaleCases : public EventTimeTest, public ::testing::WithParamInterface<RescaleCase> {};

std::string rescaleName(const ::testing::TestParamInfo<RescaleCase>& p) {
  return std::string(state::backendTypeName(p.param.before)) + "_to_" + state::backendTypeName(p.param.after) + "_p" +
         std::to_string(p.param.from) + "_to_p" + std::to_string(p.param.to) +
         (p.param.format == state::SnapshotFormat::kCanonical ? "_canonical" : "");
}

TEST_P(RescaleCases, WindowsAndTimersPendingAtACheckpointFireAfterTheRestoreWithTheirFullContents) {
  // Half the input, a checkpoint with every window and timer pending (no watermark yet),
  // then the rest after a restore at another parallelism (and maybe backend): every
  // window's result is the reference's, once.
  const RescaleCase& c = GetParam();
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(3000, 17, 5, 300, 7));
  const size_t half = events->size() / 2;
  auto flags = std::make_shared<Flags>();
  auto out = std::make_shared<Collected>();
  auto plan = [&](bool second) {
    StreamEnvironment env;
    auto keyed = eventSource(env, events, second ? events->size() : half, flags, second ? "" : "never",
                             second ? "" : "half")
                     .keyBy(keyOf);
    auto w = keyed.window(SlidingEventTimeWindows::of(600ms, 200ms)).aggregate(CountAndSum{}, WithWindow{});
    w.uid("sliding");
    collectInto(w, out);
    return env.takePlan();
  };
  // No periodic watermark in the first part: nothing fires before the checkpoint.
  auto m = runAndCheckpoint(plan(false), config(c.from, c.before, 0), [&] { return flags->up("half"); }, 1, c.format);
  EXPECT_EQ(out->size(), 0u);
  runToEnd(plan(true), config(c.to, c.after), &m);
  EXPECT_EQ(out->get(), referenceWindows(*events, 600, 200));
}

TEST_P(RescaleCases, AFailureAfterACheckpointReplaysRecordsWithoutReopeningWindowsThatFired) {
  // The source runs on after the checkpoint (windows fire, records flow) until the job is
  // cancelled, as a crash would stop it; the restore replays every record after the
  // checkpoint. The watermark generator's state is in the checkpoint, so replayed records
  // are judged late or not as before and fired windows are not reopened with a part of
  // their records: every result is the reference's (a window may be emitted twice, never
  // with another value).
  const RescaleCase& c = GetParam();
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(4000, 5, 5, 50, 8));
  auto flags = std::make_shared<Flags>();
  auto out = std::make_shared<Collected>();
  auto plan = [&](bool second) {
    StreamEnvironment env;
    auto w = eventSource(env, events, events->size(), flags, second ? "" : "never", {}, "events", 100, 0,
                         /*paced=*/!second)
                 .keyBy(keyOf)
                 .window(TumblingEventTimeWindows::of(500ms))
                 .aggregate(CountAndSum{}, WithWindow{});
    w.uid("tumbling");
    collectInto(w, out);
    return env.takePlan();
  };
  state::CheckpointMetadata m;
  {
    JobExecution exec(plan(false), config(c.from, c.before), &listener_);
    ASSERT_TRUE(exec.prepare(nullptr).ok());
    exec.start();
    ASSERT_TRUE(waitUntil([&] { return out->size() > 3; }));
    ASSERT_TRUE(exec.triggerCheckpoint(target(1, c.format)));
    ASSERT_TRUE(listener_.waitAcks(1, static_cast<size_t>(exec.taskCount()))) << listener_.declines(1);
    m = metadataOf(exec, listener_.acks(1), 1, config(c.from, c.before));
    // Let it go on for a while (windows after the checkpoint fire), then "crash".
    const size_t atCheckpoint = out->size();
    for (int i = 0; i < 500 && out->size() < atCheckpoint + 3; ++i) std::this_thread::sleep_for(2ms);
    exec.cancel();
    exec.wait();
  }
  runToEnd(plan(true), config(c.to, c.after), &m);
  auto got = out->get();
  auto expected = referenceWindows(*events, 500, 500);
  std::set<std::string> distinct(got.begin(), got.end());
  EXPECT_EQ(distinct, std::set<std::string>(expected.begin(), expected.end()));
}

/// Emits events in order; before index `pauseAt` raises "paused" and idles until "go".
class PausingEventSource : public SourceFunction<Event> {
 public:
  PausingEventSource(std::shared_ptr<const std::vector<Event>> e, size_t pauseAt, std::shared_ptr<Flags> f)
      : e_(std::move(e)), pauseAt_(pauseAt), f_(std::move(f)) {}
  PollStatus poll(SourceOutput<Event>& out) override {
    if (next_ >= e_->size()) return PollStatus::kEnd;
    if (next_ == pauseAt_ && !f_->up("go")) {
      f_->raise("paused");
      std::this_thread::sleep_for(1ms);
      return PollStatus::kIdle;
    }
    out.emit((*e_)[next_++]);
    return PollStatus::kMore;
  }
  std::string snapshotPosition() override { return std::to_string(next_); }
  void restorePosition(std::string_view p) override { next_ = std::stoull(std::string(p)); }

 private:
  std::shared_ptr<const std::vector<Event>> e_;
  size_t pauseAt_, next_ = 0;
  std::shared_ptr<Flags> f_;
};

/// `events` from a PausingEventSource (uid "events") pausing at `pauseAt`, timestamped
/// monotonously by an assigner with uid `assignerUid`, counted and summed per key in 1 s
/// tumbling windows (uid "tumbling") with `lateness`, into `out`.
Plan pausedTumblingWindows(std::shared_ptr<const std::vector<Event>> events, size_t pauseAt,
                           std::shared_ptr<Flags> flags, std::shared_ptr<Collected> out,
                           const std::string& assignerUid = "events-timestamps",
                           std::chrono::milliseconds lateness = 0ms, std::chrono::milliseconds slide = 0ms) {
  StreamEnvironment env;
  auto src = env.addSource<Event>([=] { return std::make_unique<PausingEventSource>(events, pauseAt, flags); },
                                  "Pausing Events");
  src.uid("events");
  auto stamped = src.assignTimestampsAndWatermarks(WatermarkStrategy<Event>::forMonotonousTimestamps().withTimestampAssigner(
      [](const Event& e) { return std::get<0>(e); }));
  stamped.uid(assignerUid);
  auto keyed = stamped.keyBy(keyOf);
  auto w = slide > 0ms ? keyed.window(SlidingEventTimeWindows::of(1000ms, slide))
                             .allowedLateness(lateness)
                             .aggregate(CountAndSum{}, WithWindow{})
                       : keyed.window(TumblingEventTimeWindows::of(1000ms))
                             .allowedLateness(lateness)
                             .aggregate(CountAndSum{}, WithWindow{});
  w.uid("tumbling");
  collectInto(w, out);
  return env.takePlan();
}

TEST_P(RescaleCases, ARecordLateBeforeTheFailureIsLateAfterTheRestoreToo) {
  // Window [1000000, 1001000) fires, the checkpoint is taken, then a record of that window
  // arrives: late, dropped. A restore replays it. Were the watermark not restored with
  // the generator's state, the record would reopen the window and emit it again with a
  // count of 1.
  const RescaleCase& c = GetParam();
  std::vector<Event> es;
  for (int i = 0; i < 100; ++i) es.emplace_back(1'000'000 + i * 10, "a", 1);
  es.emplace_back(1'001'500, "a", 1);  // watermark 1001499: the first window fires
  const size_t pauseAt = es.size();
  es.emplace_back(1'000'500, "a", 1);  // late
  for (int i = 0; i < 50; ++i) es.emplace_back(1'002'000 + i * 10, "a", 1);
  auto events = std::make_shared<const std::vector<Event>>(es);
  auto plan = [&](std::shared_ptr<Flags> flags, std::shared_ptr<Collected> out) {
    return pausedTumblingWindows(events, pauseAt, std::move(flags), std::move(out));
  };
  auto flags = std::make_shared<Flags>();
  auto first = std::make_shared<Collected>();
  state::CheckpointMetadata m;
  {
    JobExecution exec(plan(flags, first), config(c.from, c.before), &listener_);
    ASSERT_TRUE(exec.prepare(nullptr).ok());
    exec.start();
    ASSERT_TRUE(waitUntil([&] { return first->size() == 1 && flags->up("paused"); }));
    ASSERT_TRUE(exec.triggerCheckpoint(target(1, c.format)));
    ASSERT_TRUE(listener_.waitAcks(1, static_cast<size_t>(exec.taskCount()))) << listener_.declines(1);
    m = metadataOf(exec, listener_.acks(1), 1, config(c.from, c.before));
    flags->raise("go");
    std::this_thread::sleep_for(50ms);  // the late record and a few more go through, then the "crash"
    exec.cancel();
    exec.wait();
  }
  auto again = std::make_shared<Flags>();
  again->raise("go");
  auto second = std::make_shared<Collected>();
  runToEnd(plan(again, second), config(c.to, c.after), &m);
  const std::string firstWindow = text({1'000'000, 1'001'000, "a", 100, 100});
  EXPECT_EQ(first->get().count(firstWindow), 1u);
  EXPECT_EQ(second->get(), (std::multiset<std::string>{text({1'001'000, 1'002'000, "a", 1, 1}),
                                                        text({1'002'000, 1'003'000, "a", 50, 50})}))
      << "the restored job reopened a window that had fired (the late record was not late)";
}

TEST_P(RescaleCases, AWindowThatFiredBeforeTheCheckpointFiresAgainForALateRecordReplayedAfterTheRestore) {
  // Window [1000000, 1001000) with 2 s of allowed lateness fires, the checkpoint is taken
  // (the window's contents stay, its cleanup timer pends), then a late record of it comes.
  // The restore replays that record before any watermark reaches the window (here: the
  // timestamp assigner gets a new uid, so its watermark starts over, and periodic ones
  // are off; at p > 1 an input channel whose watermark comes late does the same): as in
  // Flink, the record registers the window's end timer again, so the window fires once
  // more with it. With the mini-batch, the record went into the batch and, the window's
  // state existing, no timer was registered: the window never fired again.
  const RescaleCase& c = GetParam();
  std::vector<Event> es;
  for (int i = 0; i < 100; ++i) es.emplace_back(1'000'000 + i * 10, "a", 1);
  es.emplace_back(1'001'500, "a", 1);  // watermark 1001499: the first window fires
  const size_t pauseAt = es.size();
  es.emplace_back(1'000'500, "a", 5);  // late, within the allowed lateness
  auto events = std::make_shared<const std::vector<Event>>(es);
  auto plan = [&](std::shared_ptr<Flags> flags, std::shared_ptr<Collected> out, const std::string& assignerUid) {
    return pausedTumblingWindows(events, pauseAt, std::move(flags), std::move(out), assignerUid, 2000ms);
  };
  auto flags = std::make_shared<Flags>();
  auto first = std::make_shared<Collected>();
  auto m = runAndCheckpoint(plan(flags, first, "events-timestamps"), config(c.from, c.before),
                            [&] { return first->size() == 1 && flags->up("paused"); }, 1, c.format);
  auto again = std::make_shared<Flags>();
  again->raise("go");
  auto second = std::make_shared<Collected>();
  // The old assigner's state has no place: -n.
  runToEnd(plan(again, second, "new-timestamps"), config(c.to, c.after, 0), &m, /*allowNonRestored=*/true);
  EXPECT_EQ(first->get(), (std::multiset<std::string>{text({1'000'000, 1'001'000, "a", 100, 100})}));
  EXPECT_EQ(second->get(), (std::multiset<std::string>{text({1'000'000, 1'001'000, "a", 101, 105}),
                                                        text({1'001'000, 1'002'000, "a", 1, 1})}));
}

TEST_P(RescaleCases, ALateRecordReplayedAfterTheRestoreFiresItsSlidingWindowsAgainAndNoOther) {
  // Sliding windows of 1 s every 500 ms with 5 s of allowed lateness: three windows fire
  // before the checkpoint and keep their contents; a late record of the two windows before
  // them comes after it, and the restore replays it before any watermark. Its two windows
  // fire again with it; the three that fired before and got nothing new must not. (With
  // the lazily registered firing timers of a sliding window, a window that fires would
  // register the next one's if it held contents: here, windows that had fired.)
  const RescaleCase& c = GetParam();
  std::vector<Event> es;
  for (int i = 0; i < 100; ++i) es.emplace_back(1'000'000 + i * 10, "a", 1);
  es.emplace_back(1'003'000, "a", 1);  // watermark 1002999: three windows fire
  const size_t pauseAt = es.size();
  es.emplace_back(999'600, "a", 5);  // late, within the allowed lateness
  auto events = std::make_shared<const std::vector<Event>>(es);
  auto plan = [&](std::shared_ptr<Flags> flags, std::shared_ptr<Collected> out, const std::string& assignerUid) {
    return pausedTumblingWindows(events, pauseAt, std::move(flags), std::move(out), assignerUid, 5000ms, 500ms);
  };
  auto flags = std::make_shared<Flags>();
  auto first = std::make_shared<Collected>();
  auto m = runAndCheckpoint(plan(flags, first, "events-timestamps"), config(c.from, c.before),
                            [&] { return first->size() == 3 && flags->up("paused"); }, 1, c.format);
  EXPECT_EQ(first->get(), (std::multiset<std::string>{text({999'500, 1'000'500, "a", 50, 50}),
                                                       text({1'000'000, 1'001'000, "a", 100, 100}),
                                                       text({1'000'500, 1'001'500, "a", 50, 50})}));
  auto again = std::make_shared<Flags>();
  again->raise("go");
  auto second = std::make_shared<Collected>();
  // The old assigner's state has no place: -n.
  runToEnd(plan(again, second, "new-timestamps"), config(c.to, c.after, 0), &m, /*allowNonRestored=*/true);
  EXPECT_EQ(second->get(), (std::multiset<std::string>{text({999'000, 1'000'000, "a", 1, 5}),
                                                        text({999'500, 1'000'500, "a", 51, 55}),
                                                        text({1'002'500, 1'003'500, "a", 1, 1}),
                                                        text({1'003'000, 1'004'000, "a", 1, 1})}));
}

/// `events` from a PausingEventSource ("events"), with monotonous timestamps
/// ("events-timestamps").
DataStream<Event> pausingStampedEvents(StreamEnvironment& env, std::shared_ptr<const std::vector<Event>> events,
                                       size_t pauseAt, std::shared_ptr<Flags> flags) {
  auto src = env.addSource<Event>(
      [events, pauseAt, flags] { return std::make_unique<PausingEventSource>(events, pauseAt, flags); },
      "Pausing Events");
  src.uid("events");
  auto stamped = src.assignTimestampsAndWatermarks(WatermarkStrategy<Event>::forMonotonousTimestamps().withTimestampAssigner(
      [](const Event& e) { return std::get<0>(e); }));
  stamped.uid("events-timestamps");
  return stamped;
}

/// Registers an event-time timer at each record's timestamp. A timer emits its key
/// ("twice <key>" if keyed state says it fired before) and marks it fired; unless the
/// "fast" flag is up each takes a millisecond, so one watermark fires them for seconds.
struct SlowTimers : KeyedProcessFunction<std::string, Event, std::string> {
  explicit SlowTimers(std::shared_ptr<Flags> f) : flags(std::move(f)) {}
  std::shared_ptr<Flags> flags;
  ValueState<bool> fired{*this, "fired"};
  void processElement(const Event& e, Context& ctx, Collector<std::string>&) override {
    ctx.timerService().registerEventTimeTimer(std::get<0>(e));
  }
  void onTimer(int64_t, OnTimerContext& ctx, Collector<std::string>& out) override {
    out.collect(fired.value() ? "twice " + ctx.currentKey() : ctx.currentKey());
    fired.update(true);
    flags->raise("firing");
    if (!flags->up("fast")) std::this_thread::sleep_for(1ms);
  }
};

/// Exactly once into `committed` (a transaction is its lines); counts the lines
/// pre-committed at checkpoint 1 into `atCheckpoint1`.
struct LinesSink : TwoPhaseCommitSink<std::string, std::string> {
  LinesSink(std::shared_ptr<Collected> c, std::shared_ptr<std::atomic<size_t>> n)
      : committed(std::move(c)), atCheckpoint1(std::move(n)) {}
  std::shared_ptr<Collected> committed;
  std::shared_ptr<std::atomic<size_t>> atCheckpoint1;
  std::string beginTransaction() override { return {}; }
  void invoke(std::string& txn, const std::string& line, int64_t) override { txn += line + "\n"; }
  void preCommit(std::string&) override {}
  void preCommitForCheckpoint(std::string& txn, uint64_t id) override {
    if (id == 1) *atCheckpoint1 += static_cast<size_t>(std::count(txn.begin(), txn.end(), '\n'));
  }
  void commit(const std::string& txn) override {
    for (size_t at = 0, nl; (nl = txn.find('\n', at)) != std::string::npos; at = nl + 1)
      committed->add(txn.substr(at, nl - at));
  }
  void abort(const std::string&) override {}
};

/// 1500 keys with a record each at one timestamp, then a record whose watermark fires all their timers
/// (SlowTimers) and, after `pauseAt` (where the first run's source pauses), one more;

/// What SlowTimersJob and SlowSlidingWindowsJob share: 1500 keys, whose firings take a
/// millisecond each unless the "fast" flag is up (a checkpoint barrier taken between
/// timers comes long before the last), the events (the first run's source pauses at
/// pauseAt), and the exactly-once sink of the lines fired.
struct SlowFiringJob {
  static constexpr int kKeys = 1500;
  std::shared_ptr<const std::vector<Event>> events;
  size_t pauseAt = 0;
  std::shared_ptr<Collected> committed = std::make_shared<Collected>();
  std::shared_ptr<std::atomic<size_t>> atCheckpoint1 = std::make_shared<std::atomic<size_t>>(0);

  static std::string keyName(int i) {
    char key[16];
    std::snprintf(key, sizeof key, "k%04d", i);
    return key;
  }
  /// The events, paused and stamped, keyed by keyOf, through `fire` (uid `uid`) into LinesSink.
  template <class Fire>
  Plan planWith(const std::shared_ptr<Flags>& flags, const std::string& uid, Fire&& fire) const {
    StreamEnvironment env;
    auto fired = fire(pausingStampedEvents(env, events, pauseAt, flags).keyBy(keyOf));
    fired.uid(uid);
    fired.sinkTo(LinesSink(committed, atCheckpoint1)).uid("lines");
    return env.takePlan();
  }
};

/// the timers' output goes through LinesSink. `expected`: every key once.
struct SlowTimersJob : SlowFiringJob {
  std::set<std::string> expected;

  SlowTimersJob() {
    std::vector<Event> es;
    for (int i = 0; i < kKeys; ++i) {
      const std::string key = keyName(i);
      // One timestamp for every key: no watermark fires a timer until "z" (its watermark
      // is 999 before), so a single watermark fires all of them, also when a periodic
      // watermark is emitted while the source is still emitting the keys (a slow build).
      es.emplace_back(1'000, key, 1);
      expected.insert(key);
    }
    es.emplace_back(10'000'000, "z", 1);  // its watermark fires every key's timer; its own fires at the end
    expected.insert("z");
    pauseAt = es.size();
    es.emplace_back(10'000'001, "zz", 1);
    expected.insert("zz");
    events = std::make_shared<const std::vector<Event>>(std::move(es));
  }
  Plan plan(std::shared_ptr<Flags> flags) const {
    return planWith(flags, "slow-timers", [&](auto keyed) {
      return keyed.template process<SlowTimers>([flags] { return std::make_unique<SlowTimers>(flags); });
    });
  }
};

TEST_P(RescaleCases, ACheckpointBarrierIsTakenBetweenTheTimersOfAWatermarkAndItsRestoreFiresTheRestOnce) {
  // One watermark fires a timer for each of 1500 keys, a millisecond each. A checkpoint
  // triggered meanwhile used to wait behind all of them (its barrier queued in the
  // channel); now the task takes the barrier between two timers. The snapshot holds the
  // timers not fired yet, and the output so far is pre-committed with it: restored, the
  // job fires exactly the rest, and the sink's output is every key once.
  const RescaleCase& c = GetParam();
  SlowTimersJob job;
  auto flags = std::make_shared<Flags>();
  auto m = runAndCheckpoint(job.plan(flags), config(c.from, c.before), [&] { return flags->up("firing"); }, 1, c.format);
  EXPECT_GT(job.atCheckpoint1->load(), 0u);
  EXPECT_LT(job.atCheckpoint1->load(), static_cast<size_t>(SlowTimersJob::kKeys))
      << "the checkpoint barrier waited until every timer of the watermark had fired";
  EXPECT_EQ(job.committed->size(), 0u) << "nothing is committed before checkpoint 1 completes";
  auto again = std::make_shared<Flags>();
  again->raise("go");
  again->raise("fast");
  runToEnd(job.plan(again), config(c.to, c.after), &m);
  const auto lines = job.committed->get();
  EXPECT_EQ(std::set<std::string>(lines.begin(), lines.end()), job.expected);
  EXPECT_EQ(lines.size(), job.expected.size()) << "a key's output was committed twice";
}

/// Sliding windows of 3 s every 1 s, aggregated (the mini-batch), over 1500 keys with a
/// record each at 2500 (in windows ending at 3000, 4000, 5000), then "y" at 5500 whose
/// watermark fires those, then "z"; a window's result takes a millisecond to emit unless
/// the "fast" flag is up. "key,end" lines go exactly once through LinesSink.
struct SlowSlidingWindowsJob : SlowFiringJob {
  std::multiset<std::string> expected;

  struct SlowResult : ProcessWindowFunction<std::pair<int64_t, int64_t>, std::string, std::string> {
    explicit SlowResult(std::shared_ptr<Flags> f) : flags(std::move(f)) {}
    std::shared_ptr<Flags> flags;
    void process(const std::string& key, Context& ctx, const std::vector<std::pair<int64_t, int64_t>>&,
                 Collector<std::string>& out) override {
      out.collect(key + "," + std::to_string(ctx.window().end));
      flags->raise("firing");
      if (!flags->up("fast")) std::this_thread::sleep_for(1ms);
    }
  };

  SlowSlidingWindowsJob() {
    std::vector<Event> es;
    for (int i = 0; i < kKeys; ++i) {
      const std::string key = keyName(i);
      es.emplace_back(2'500, key, 1);
      for (int end : {3000, 4000, 5000}) expected.insert(key + "," + std::to_string(end));
    }
    // With a mini-batch of one record, "y" stays in the batch while its watermark fires
    // the keys' first windows: the snapshot flushes it in the middle of them.
    es.emplace_back(5'500, "y", 1);
    pauseAt = es.size();
    es.emplace_back(10'000'000, "z", 1);  // the first run's source pauses before it
    for (int end : {6000, 7000, 8000}) expected.insert("y," + std::to_string(end));
    for (int end : {10'001'000, 10'002'000, 10'003'000}) expected.insert("z," + std::to_string(end));
    events = std::make_shared<const std::vector<Event>>(std::move(es));
  }
  Plan plan(std::shared_ptr<Flags> flags, std::chrono::milliseconds lateness) const {
    return planWith(flags, "slow-windows", [&](auto keyed) {
      return keyed.window(SlidingEventTimeWindows::of(3000ms, 1000ms))
          .allowedLateness(lateness)
          .aggregate(CountAndSum{}, SlowResult(flags));
    });
  }
};

TEST_P(RescaleCases, ACheckpointBetweenTheTimersOfAWatermarkHoldsEverySlidingWindowStillToFire) {
  // The first windows (ending at 3000) fire slowly; a checkpoint is taken between them,
  // while the windows after them have no timer yet (it is registered when the one before
  // fires). The snapshot must hold those timers all the same: restored with allowed
  // lateness (no chaining then) every window fires, exactly once over both runs. Before,
  // the snapshot step took the new watermark for "all fired" and dropped them.
  const RescaleCase& c = GetParam();
  SlowSlidingWindowsJob job;
  auto flags = std::make_shared<Flags>();
  ExecutionConfig first = config(c.from, c.before), second = config(c.to, c.after);
  first.windowMiniBatchSize = second.windowMiniBatchSize = 1;
  auto m = runAndCheckpoint(job.plan(flags, 0ms), first, [&] { return flags->up("firing"); }, 1, c.format);
  EXPECT_GT(job.atCheckpoint1->load(), 0u);
  EXPECT_LT(job.atCheckpoint1->load(), static_cast<size_t>(SlowSlidingWindowsJob::kKeys))
      << "the checkpoint barrier waited until every key's first window had fired";
  auto again = std::make_shared<Flags>();
  again->raise("go");
  again->raise("fast");
  runToEnd(job.plan(again, 1000ms), second, &m);
  EXPECT_EQ(job.committed->get(), job.expected);
}

TEST_F(EventTimeTest, ASavepointBarrierWaitsForEveryTimerOfTheWatermark) {
  // As above, but a savepoint: as in Flink, only checkpoints are taken between timers.
  SlowTimersJob job;
  auto flags = std::make_shared<Flags>();
  JobExecution exec(job.plan(flags), config(2, state::BackendType::kHashMap), &listener_);
  ASSERT_TRUE(exec.prepare(nullptr).ok());
  exec.start();
  ASSERT_TRUE(waitUntil([&] { return flags->up("firing"); }));
  CheckpointTarget savepoint = target(1, state::SnapshotFormat::kCanonical);
  savepoint.savepoint = true;
  ASSERT_TRUE(exec.triggerCheckpoint(savepoint));
  EXPECT_TRUE(listener_.waitAcks(1, static_cast<size_t>(exec.taskCount()))) << listener_.declines(1);
  EXPECT_EQ(job.atCheckpoint1->load(), static_cast<size_t>(SlowTimersJob::kKeys))
      << "a savepoint was taken between the timers of a watermark";
  exec.cancel();
  exec.wait();
}

// Issue 33 item 4: broadcast state. Rules (key -> multiplier) reach every subtask of a
// keyed broadcast function through the broadcast input; the keyed input is summed per
// key and, at the end of time, each key's sum is multiplied by its rule. The first run
// reads half the events and every rule, then checkpoints; the rules source restores past
// its last rule and reads nothing more, so every rule the second run applies came back
// from the broadcast state — at another parallelism, where each subtask gets the copy.
using RuleRecord = std::pair<std::string, int64_t>;  // (key, multiplier; 0 removes the rule)

/// Emits `rules` in order, raises `emittedFlag`, then idles until `waitFor` (if any).
class RuleSource : public SourceFunction<RuleRecord> {
 public:
  RuleSource(std::vector<RuleRecord> rules, std::shared_ptr<Flags> flags, std::string waitFor)
      : rules_(std::move(rules)), flags_(std::move(flags)), waitFor_(std::move(waitFor)) {}
  PollStatus poll(SourceOutput<RuleRecord>& out) override {
    while (next_ < rules_.size()) out.emit(rules_[next_++]);
    flags_->raise("rules");
    if (waitFor_.empty() || flags_->up(waitFor_)) return PollStatus::kEnd;
    std::this_thread::sleep_for(1ms);
    return PollStatus::kIdle;
  }
  std::string snapshotPosition() override { return std::to_string(next_); }
  void restorePosition(std::string_view p) override { next_ = std::stoull(std::string(p)); }

 private:
  std::vector<RuleRecord> rules_;
  size_t next_ = 0;
  std::shared_ptr<Flags> flags_;
  std::string waitFor_;
};

const BroadcastStateDescriptor<std::string, int64_t> kMultipliers{"multipliers"};

struct MultiplyByRule : KeyedBroadcastProcessFunction<std::string, Event, RuleRecord, std::string> {
  void processElement(const Event& e, ReadOnlyContext& ctx, Collector<std::string>&) override {
    sum.update(sum.value().value_or(0) + std::get<2>(e));
    ctx.timerService().registerEventTimeTimer(kMaxWatermark - 1);
  }
  void processBroadcastElement(const RuleRecord& r, Context& ctx, Collector<std::string>&) override {
    auto rules = ctx.getBroadcastState(kMultipliers);
    if (r.second == 0) rules.remove(r.first);
    else rules.put(r.first, r.second);
  }
  void onTimer(int64_t, OnTimerContext& ctx, Collector<std::string>& out) override {
    auto rule = ctx.getBroadcastState(kMultipliers).get(ctx.currentKey());
    out.collect(ctx.currentKey() + "=" + (rule ? std::to_string(*sum.value() * *rule) : "no rule"));
  }
  ValueState<int64_t> sum{*this, "sum"};
};

std::vector<RuleRecord> multiplierRules() {
  // k0..k16 are the keys of shuffledEvents(…, 17, …); k3 loses its rule again, k99 has no events.
  std::vector<RuleRecord> rules;
  for (int k = 0; k < 17; k += 2) rules.push_back({"k" + std::to_string(k), k + 1});
  rules.push_back({"k3", 7});
  rules.push_back({"k3", 0});
  rules.push_back({"k99", 5});
  return rules;
}

std::multiset<std::string> referenceMultiplied(const std::vector<Event>& events, const std::vector<RuleRecord>& rules) {
  std::map<std::string, int64_t> sums, rule;
  for (const auto& [ts, k, v] : events) sums[k] += v;
  for (const auto& [k, m] : rules) {
    if (m == 0) rule.erase(k);
    else rule[k] = m;
  }
  std::multiset<std::string> out;
  for (const auto& [k, s] : sums) out.insert(k + "=" + (rule.count(k) ? std::to_string(s * rule[k]) : "no rule"));
  return out;
}

TEST_P(RescaleCases, BroadcastStateIsInTheCheckpointAndEverySubtaskGetsItAtAnyParallelism) {
  const RescaleCase& c = GetParam();
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(2000, 17, 5, 300, 11));
  const size_t half = events->size() / 2;
  const auto rules = multiplierRules();
  auto flags = std::make_shared<Flags>();
  auto out = std::make_shared<Collected>();
  auto plan = [&](bool second) {
    StreamEnvironment env;
    auto ruleStream = env.addSource<RuleRecord>(
        [rules, flags, second] { return std::make_unique<RuleSource>(rules, flags, second ? "" : "never"); },
        "Rule Source");
    ruleStream.uid("rules");
    auto keyed = eventSource(env, events, second ? events->size() : half, flags, second ? "" : "never",
                             second ? "" : "half")
                     .keyBy(keyOf);
    auto applied = keyed.connect(ruleStream.broadcast(kMultipliers)).process<MultiplyByRule>();
    applied.uid("multiply");
    collectInto(applied, out);
    return env.takePlan();
  };
  auto m = runAndCheckpoint(plan(false), config(c.from, c.before, 0),
                            [&] { return flags->up("half") && flags->up("rules"); }, 1, c.format);
  EXPECT_EQ(out->size(), 0u);
  runToEnd(plan(true), config(c.to, c.after), &m);
  EXPECT_EQ(out->get(), referenceMultiplied(*events, rules));
}

TEST_F(EventTimeTest, EveryBroadcastRecordReachesEverySubtaskOnceAndEveryOtherRecordOneSubtask) {
  // An unkeyed BroadcastProcessFunction: each subtask reports each rule it receives and
  // passes the other input's records on; at p=3 every rule arrives three times, once per
  // subtask, and every record once.
  struct Report : BroadcastProcessFunction<Event, RuleRecord, std::string> {
    void processElement(const Event& e, ReadOnlyContext& ctx, Collector<std::string>& out) override {
      (void)ctx.getBroadcastState(kMultipliers).size();  // readable here
      out.collect("value " + std::to_string(std::get<2>(e)));
    }
    void processBroadcastElement(const RuleRecord& r, Context& ctx, Collector<std::string>& out) override {
      ctx.getBroadcastState(kMultipliers).put(r.first, r.second);
      out.collect("subtask " + std::to_string(ctx.subtaskIndex()) + " rule " + r.first + " " +
                  std::to_string(r.second));
    }
  };
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(500, 4, 5, 0, 3));
  const auto rules = multiplierRules();
  for (int p : {1, 3}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    auto flags = std::make_shared<Flags>();
    auto out = std::make_shared<Collected>();
    StreamEnvironment env;
    auto ruleStream = env.addSource<RuleRecord>(
        [rules, flags] { return std::make_unique<RuleSource>(rules, flags, ""); }, "Rule Source");
    auto reported = eventSource(env, events, events->size()).connect(ruleStream.broadcast(kMultipliers)).process<Report>();
    collectInto(reported, out);
    JobExecution exec(env.takePlan(), config(p, state::BackendType::kHashMap), &listener_);
    ASSERT_TRUE(exec.prepare(nullptr).ok());
    exec.start();
    ASSERT_EQ(exec.wait().kind, ExecutionResult::kFinished);
    // recordsOut counts what the rule source emitted, not one per receiving subtask (as
    // Flink's numRecordsOut); each receiver counts its copy in recordsIn.
    bool sawRuleSource = false;
    for (const auto& m : exec.taskMetrics())
      if (m.name.find("Rule Source") != std::string::npos) {
        sawRuleSource = true;
        EXPECT_EQ(m.recordsOut, rules.size()) << m.name;
      }
    EXPECT_TRUE(sawRuleSource);
    std::multiset<std::string> expected;
    for (const auto& e : *events) expected.insert("value " + std::to_string(std::get<2>(e)));
    for (int i = 0; i < p; ++i)
      for (const auto& [k, m] : rules) expected.insert("subtask " + std::to_string(i) + " rule " + k + " " + std::to_string(m));
    EXPECT_EQ(out->get(), expected);
  }
}

TEST_F(EventTimeTest, KeyedStateUsedForABroadcastRecordFailsTheTaskInsteadOfTouchingAnotherKey) {
  // A broadcast record has no key: keyed state there would be the last record's key's.
  struct Misuse : KeyedBroadcastProcessFunction<std::string, Event, RuleRecord, std::string> {
    void processElement(const Event& e, ReadOnlyContext&, Collector<std::string>&) override { seen.update(1); }
    void processBroadcastElement(const RuleRecord&, Context&, Collector<std::string>&) override { seen.update(2); }
    ValueState<int64_t> seen{*this, "seen"};
  };
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(50, 4, 5, 0, 3));
  auto flags = std::make_shared<Flags>();
  StreamEnvironment env;
  auto ruleStream = env.addSource<RuleRecord>(
      [flags] { return std::make_unique<RuleSource>(std::vector<RuleRecord>{{"k1", 1}}, flags, ""); }, "Rule Source");
  eventSource(env, events, events->size()).keyBy(keyOf).connect(ruleStream.broadcast(kMultipliers)).process<Misuse>().addSink(
      [](const std::string&) {});
  JobExecution exec(env.takePlan(), config(1, state::BackendType::kHashMap), &listener_);
  ASSERT_TRUE(exec.prepare(nullptr).ok());
  exec.start();
  ExecutionResult r = exec.wait();
  EXPECT_EQ(r.kind, ExecutionResult::kFailed);
  EXPECT_NE(r.message.find("keyed state is used in processBroadcastElement(), which runs for no key"),
            std::string::npos)
      << r.message;
}

INSTANTIATE_TEST_SUITE_P(
    Restores, RescaleCases,
    ::testing::Values(RescaleCase{state::BackendType::kHashMap, state::BackendType::kHashMap, 2, 3,
                                  state::SnapshotFormat::kNative},
                      RescaleCase{state::BackendType::kRocksDb, state::BackendType::kRocksDb, 3, 1,
                                  state::SnapshotFormat::kNative},
                      RescaleCase{state::BackendType::kRocksDb, state::BackendType::kHashMap, 2, 2,
                                  state::SnapshotFormat::kCanonical},
                      RescaleCase{state::BackendType::kHashMap, state::BackendType::kRocksDb, 1, 2,
                                  state::SnapshotFormat::kCanonical}),
    rescaleName);

// ---------------------------------------------------------------------------------------
// Two inputs

TEST_F(EventTimeTest, AUnionsWatermarkIsTheMinimumOfItsInputsSoEveryWindowHoldsRecordsOfBoth) {
  auto a = std::make_shared<const std::vector<Event>>(shuffledEvents(1500, 4, 4, 100, 9));
  auto b = std::make_shared<const std::vector<Event>>(shuffledEvents(1500, 4, 4, 100, 10));
  auto out = std::make_shared<Collected>();
  StreamEnvironment env;
  auto u = eventSource(env, a, a->size(), std::make_shared<Flags>(), {}, {}, "a")
               .unionWith(eventSource(env, b, b->size(), std::make_shared<Flags>(), {}, {}, "b"))
               .keyBy(keyOf)
               .window(TumblingEventTimeWindows::of(700ms))
               .aggregate(CountAndSum{}, WithWindow{});
  u.uid("union-windows");
  collectInto(u, out);
  runToEnd(env.takePlan(), config(2, state::BackendType::kHashMap));
  std::vector<Event> both(*a);
  both.insert(both.end(), b->begin(), b->end());
  EXPECT_EQ(out->get(), referenceWindows(both, 700, 700));
}

TEST_F(EventTimeTest, AnIdleInputDoesNotHoldBackTheWatermarkWithIdlenessAndDoesWithout) {
  // Input "busy" runs through event time; input "quiet" emits one early record and then
  // nothing while it stays open. With withIdleness on "quiet", windows fire while it is
  // still open; without, none fires until it ends.
  auto busy = std::make_shared<const std::vector<Event>>(shuffledEvents(2000, 3, 5, 0, 11));
  auto quiet = std::make_shared<const std::vector<Event>>(std::vector<Event>{{1'000'000, "q", 1}});
  for (int64_t idleness : {int64_t{100}, int64_t{0}}) {
    SCOPED_TRACE("idleness " + std::to_string(idleness));
    auto flags = std::make_shared<Flags>();
    auto out = std::make_shared<Collected>();
    StreamEnvironment env;
    auto w = eventSource(env, busy, busy->size(), flags, "end", "busy-done", "busy")
                 .unionWith(eventSource(env, quiet, 1, flags, "end", {}, "quiet", 1000, idleness))
                 .keyBy(keyOf)
                 .window(TumblingEventTimeWindows::of(1000ms))
                 .aggregate(CountAndSum{}, WithWindow{});
    w.uid("w");
    collectInto(w, out);
    JobExecution exec(env.takePlan(), config(1, state::BackendType::kHashMap), &listener_);
    ASSERT_TRUE(exec.prepare(nullptr).ok());
    exec.start();
    ASSERT_TRUE(waitUntil([&] { return flags->up("busy-done"); }));
    if (idleness > 0) {
      EXPECT_TRUE(waitUntil([&] { return out->size() > 0; })) << "no window fired while 'quiet' was idle";
    } else {
      std::this_thread::sleep_for(500ms);  // many watermark intervals
      EXPECT_EQ(out->size(), 0u) << "a window fired although 'quiet' held the watermark back";
    }
    flags->raise("end");
    EXPECT_EQ(exec.wait().kind, ExecutionResult::kFinished);
    std::vector<Event> both(*busy);
    both.push_back(quiet->front());
    EXPECT_EQ(out->get(), referenceWindows(both, 1000, 1000));
  }
}

/// Orders (input 1) wait in keyed state for their payment (input 2); a timer 500 ms after
/// an order reports it unpaid. Both inputs see one state and one timer service per key.
struct PaymentMatcher : KeyedCoProcessFunction<std::string, Event, Event, std::string> {
  ValueState<int64_t> order{*this, "order"};
  ValueState<bool> paid{*this, "paid"};
  void processElement1(const Event& o, Context& ctx, Collector<std::string>& out) override {
    order.update(std::get<0>(o));
    if (paid.value().value_or(false)) {
      out.collect(ctx.currentKey() + " paid");
      return;
    }
    ctx.timerService().registerEventTimeTimer(std::get<0>(o) + 500);
  }
  void processElement2(const Event&, Context& ctx, Collector<std::string>& out) override {
    paid.update(true);
    if (auto t = order.value()) {
      ctx.timerService().deleteEventTimeTimer(*t + 500);
      out.collect(ctx.currentKey() + " paid");
    }
  }
  void onTimer(int64_t, OnTimerContext& ctx, Collector<std::string>& out) override {
    out.collect(ctx.currentKey() + " unpaid");
  }
};

TEST_P(WindowCases, AKeyedCoProcessFunctionSharesStateAndTimersBetweenItsInputs) {
  std::vector<Event> orders, payments;
  std::multiset<std::string> expected;
  for (int i = 0; i < 300; ++i) {
    std::string id = "o" + std::to_string(i);
    orders.emplace_back(1'000'000 + i * 20, id, 1);
    if (i % 3 == 0) {
      expected.insert(id + " unpaid");
    } else {
      payments.emplace_back(1'000'000 + i * 20 + (i % 3 == 1 ? 100 : -5), id, 1);  // some before the order
      expected.insert(id + " paid");
    }
  }
  std::sort(payments.begin(), payments.end());
  auto o = std::make_shared<const std::vector<Event>>(orders);
  auto p = std::make_shared<const std::vector<Event>>(payments);
  auto out = std::make_shared<Collected>();
  StreamEnvironment env;
  auto matched = eventSource(env, o, o->size(), std::make_shared<Flags>(), {}, {}, "orders", 200)
                     .keyBy(keyOf)
                     .connect(eventSource(env, p, p->size(), std::make_shared<Flags>(), {}, {}, "payments", 200).keyBy(keyOf))
                     .process<PaymentMatcher>();
  matched.uid("matcher");
  collectInto(matched, out);
  runToEnd(env.takePlan(), config(GetParam().parallelism, GetParam().backend));
  EXPECT_EQ(out->get(), expected);
}

struct JoinPair : ProcessJoinFunction<Event, Event, std::string> {
  void processElement(const Event& l, const Event& r, Context& ctx, Collector<std::string>& out) override {
    EXPECT_EQ(ctx.timestamp(), std::max(std::get<0>(l), std::get<0>(r)));
    out.collect(std::get<1>(l) + ":" + std::to_string(std::get<0>(l)) + "-" + std::to_string(std::get<0>(r)));
  }
};

TEST_P(WindowCases, AnIntervalJoinEqualsAnIndependentlyComputedJoin) {
  auto left = std::make_shared<const std::vector<Event>>(shuffledEvents(800, 10, 10, 50, 12));
  auto right = std::make_shared<const std::vector<Event>>(shuffledEvents(800, 10, 10, 50, 13));
  auto out = std::make_shared<Collected>();
  StreamEnvironment env;
  auto joined = eventSource(env, left, left->size(), std::make_shared<Flags>(), {}, {}, "left", 100)
                    .keyBy(keyOf)
                    .intervalJoin(eventSource(env, right, right->size(), std::make_shared<Flags>(), {}, {}, "right", 100)
                                      .keyBy(keyOf))
                    .between(-30ms, 70ms)
                    .process<JoinPair>();
  joined.uid("join");
  collectInto(joined, out);
  runToEnd(env.takePlan(), config(GetParam().parallelism, GetParam().backend));
  // Reference: every pair with right.ts in [left.ts - 30, left.ts + 70]. The join drops
  // records behind the watermark; with 100 ms out-of-orderness for 50 ms of jitter none is.
  std::multiset<std::string> expected;
  for (const auto& l : *left)
    for (const auto& r : *right)
      if (std::get<1>(l) == std::get<1>(r) && std::get<0>(r) >= std::get<0>(l) - 30 && std::get<0>(r) <= std::get<0>(l) + 70)
        expected.insert(std::get<1>(l) + ":" + std::to_string(std::get<0>(l)) + "-" + std::to_string(std::get<0>(r)));
  EXPECT_EQ(out->get(), expected);
}

TEST_F(EventTimeTest, ConnectedUnkeyedStreamsReachTheirOwnProcessElement) {
  struct Tag : CoProcessFunction<Event, std::string, std::string> {
    void processElement1(const Event& e, Context&, Collector<std::string>& out) override { out.collect("1:" + std::get<1>(e)); }
    void processElement2(const std::string& s, Context&, Collector<std::string>& out) override { out.collect("2:" + s); }
  };
  auto a = std::make_shared<const std::vector<Event>>(shuffledEvents(100, 3, 1, 0, 14));
  auto out = std::make_shared<Collected>();
  StreamEnvironment env;
  auto b = env.fromGenerator<std::string>(50, [](uint64_t i) { return "s" + std::to_string(i); });
  b.uid("strings");
  auto c = eventSource(env, a, a->size()).connect(b).process<Tag>();
  collectInto(c, out);
  runToEnd(env.takePlan(), config(2, state::BackendType::kHashMap));
  std::multiset<std::string> expected;
  for (const auto& e : *a) expected.insert("1:" + std::get<1>(e));
  for (int i = 0; i < 50; ++i) expected.insert("2:s" + std::to_string(i));
  EXPECT_EQ(out->get(), expected);
}

TEST_F(EventTimeTest, SideOutputsOfAProcessFunctionReachTheirOwnStreams) {
  const OutputTag<int64_t> odd("odd");
  struct Split : ProcessFunction<Event, std::string> {
    explicit Split(OutputTag<int64_t> t) : tag(std::move(t)) {}
    OutputTag<int64_t> tag;
    void processElement(const Event& e, Context& ctx, Collector<std::string>& out) override {
      EXPECT_EQ(ctx.timestamp(), std::get<0>(e));
      if (std::get<2>(e) % 2) ctx.output(tag, std::get<2>(e));
      else out.collect(std::get<1>(e));
    }
  };
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(500, 4, 2, 0, 15));
  auto evens = std::make_shared<Collected>();
  auto odds = std::make_shared<Collected>();
  StreamEnvironment env;
  auto split = eventSource(env, events, events->size()).process<Split>([odd] { return std::make_unique<Split>(odd); });
  collectInto(split, evens);
  collectInto(split.getSideOutput(odd).keyBy([](int64_t v) { return v; }).reduce([](int64_t a, int64_t b) { return a + b; }), odds);
  runToEnd(env.takePlan(), config(2, state::BackendType::kHashMap));
  std::multiset<std::string> e, o;
  std::map<int64_t, int64_t> running;
  for (const auto& [ts, k, v] : *events) {
    if (v % 2) o.insert(std::to_string(running[v] += v));
    else e.insert(k);
  }
  EXPECT_EQ(evens->get(), e);
  EXPECT_EQ(odds->get(), o);
}

// Issue 33 item 4: one stream feeds any number of operators and sinks. The events go to
// a sink as they are and to a keyed running sum; the process function's main output to
// two sinks and its side output to a sink and a keyed reduce: each reader gets every
// record, at p=1 (chained in one task) and p=2.
TEST_F(EventTimeTest, AStreamAndASideOutputEachFeedSeveralOperatorsAndSinks) {
  const OutputTag<int64_t> odd("odd");
  struct Split : ProcessFunction<Event, std::string> {
    explicit Split(OutputTag<int64_t> t) : tag(std::move(t)) {}
    OutputTag<int64_t> tag;
    void processElement(const Event& e, Context& ctx, Collector<std::string>& out) override {
      if (std::get<2>(e) % 2) ctx.output(tag, std::get<2>(e));
      else out.collect(std::get<1>(e));
    }
  };
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(400, 4, 2, 0, 17));
  for (int p : {1, 2}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    auto raw = std::make_shared<Collected>(), sums = std::make_shared<Collected>();
    auto evensA = std::make_shared<Collected>(), evensB = std::make_shared<Collected>();
    auto oddsRaw = std::make_shared<Collected>(), oddsSum = std::make_shared<Collected>();
    StreamEnvironment env;
    auto src = eventSource(env, events, events->size());
    auto values = src.map([](const Event& e) { return std::get<2>(e); });
    collectInto(values, raw);
    collectInto(values.keyBy([](int64_t v) { return v % 3; }).reduce([](int64_t a, int64_t b) { return a + b; }).uid("sums"),
                sums);
    auto split = src.process<Split>([odd] { return std::make_unique<Split>(odd); });
    collectInto(split, evensA);
    collectInto(split, evensB);
    auto odds = split.getSideOutput(odd);
    collectInto(odds, oddsRaw);
    collectInto(odds.keyBy([](int64_t v) { return v; }).reduce([](int64_t a, int64_t b) { return a + b; }).uid("odd-sums"),
                oddsSum);
    runToEnd(env.takePlan(), config(p, state::BackendType::kHashMap));
    std::multiset<std::string> r, e, o, oSum, rSum;
    std::map<int64_t, int64_t> byResidue, running;
    for (const auto& [ts, k, v] : *events) {
      r.insert(std::to_string(v));
      rSum.insert(std::to_string(byResidue[v % 3] += v));
      if (v % 2) {
        o.insert(std::to_string(v));
        oSum.insert(std::to_string(running[v] += v));
      } else {
        e.insert(k);
      }
    }
    EXPECT_EQ(raw->get(), r);
    EXPECT_EQ(evensA->get(), e);
    EXPECT_EQ(evensB->get(), e);
    EXPECT_EQ(oddsRaw->get(), o);
    EXPECT_EQ(oddsSum->get(), oSum);
    EXPECT_EQ(sums->get(), rSum);
  }
}

// ---------------------------------------------------------------------------------------
// Stop with drain

TEST_F(EventTimeTest, ADrainingStopCheckpointFiresEveryWindowBeforeItsBarrierAndAPlainOneNone) {
  auto events = std::make_shared<const std::vector<Event>>(shuffledEvents(1000, 6, 5, 0, 16));
  for (bool drain : {true, false}) {
    SCOPED_TRACE(drain ? "drain" : "no drain");
    auto flags = std::make_shared<Flags>();
    auto out = std::make_shared<Collected>();
    StreamEnvironment env;
    auto w = eventSource(env, events, events->size(), flags, "never", "emitted")
                 .keyBy(keyOf)
                 .window(TumblingEventTimeWindows::of(1000ms))
                 .aggregate(CountAndSum{}, WithWindow{});
    w.uid("w");
    collectInto(w, out);
    // No periodic watermarks: only the drain can fire windows.
    JobExecution exec(env.takePlan(), config(2, state::BackendType::kHashMap, 0), &listener_);
    ASSERT_TRUE(exec.prepare(nullptr).ok());
    exec.start();
    ASSERT_TRUE(waitUntil([&] { return flags->up("emitted"); }));
    const uint64_t id = drain ? 1 : 2;
    CheckpointTarget t = target(id, state::SnapshotFormat::kCanonical);
    t.stopSources = true;
    t.drain = drain;
    ASSERT_TRUE(exec.triggerCheckpoint(t));
    ASSERT_TRUE(listener_.waitAcks(id, static_cast<size_t>(exec.taskCount())));
    // Every task acknowledged: whatever it emitted before its barrier is out.
    if (drain) EXPECT_EQ(out->get(), referenceWindows(*events, 1000, 1000));
    else EXPECT_EQ(out->size(), 0u);
    exec.cancel();
    exec.wait();
  }
}

/// Emits its phases in turn: phase 0 at once, phase i once flag "<name>go<i>" is up
/// (raising "<name>emitted<i>" after each); ends when "end" is up.
class PhasedSource : public SourceFunction<Event> {
 public:
  PhasedSource(std::vector<std::vector<Event>> phases, std::shared_ptr<Flags> f, std::string name)
      : phases_(std::move(phases)), f_(std::move(f)), name_(std::move(name)) {}
  PollStatus poll(SourceOutput<Event>& out) override {
    while (phase_ < phases_.size() && (phase_ == 0 || f_->up(name_ + "go" + std::to_string(phase_)))) {
      for (auto& e : phases_[phase_]) out.emit(e);
      f_->raise(name_ + "emitted" + std::to_string(phase_));
      ++phase_;
    }
    if (f_->up("end")) return PollStatus::kEnd;
    std::this_thread::sleep_for(1ms);
    return PollStatus::kIdle;
  }
  std::string snapshotPosition() override { return std::to_string(phase_); }
  void restorePosition(std::string_view p) override { phase_ = std::stoul(std::string(p)); }

 private:
  std::vector<std::vector<Event>> phases_;
  std::shared_ptr<Flags> f_;
  std::string name_;
  size_t phase_ = 0;
};

DataStream<Event> phased(StreamEnvironment& env, std::vector<std::vector<Event>> phases, std::shared_ptr<Flags> f,
                         const std::string& name, int64_t idleness = 0) {
  auto s = env.addSource<Event>([=] { return std::make_unique<PhasedSource>(phases, f, name); }, "Phased " + name);
  s.uid(name);
  auto st = WatermarkStrategy<Event>::forMonotonousTimestamps().withTimestampAssigner(
      [](const Event& e) { return std::get<0>(e); });
  if (idleness) st = st.withIdleness(std::chrono::milliseconds(idleness));
  auto t = s.assignTimestampsAndWatermarks(st);
  t.uid(name + "-timestamps");
  return t;
}

TEST_F(EventTimeTest, AnAbortedDrainFailsTheExecutionInsteadOfResumingAtTheEndOfTime) {
  // Regression (review of issue 14): the sources resumed after an aborted drain, with every
  // window fired and every later record late. Now the attempt fails, so the restart
  // strategy restores the latest checkpoint.
  auto flags = std::make_shared<Flags>();
  std::vector<Event> p0, p1;
  for (int i = 0; i < 20; ++i) p0.emplace_back(1'000'000 + i * 100, "k", 1);
  for (int i = 0; i < 20; ++i) p1.emplace_back(1'010'000 + i * 100, "k", 1);
  auto out = std::make_shared<Collected>();
  StreamEnvironment env;
  auto w = phased(env, {p0, p1}, flags, "a").keyBy(keyOf).window(TumblingEventTimeWindows::of(1000ms)).aggregate(
      CountAndSum{}, WithWindow{});
  w.uid("w");
  collectInto(w, out);
  JobExecution exec(env.takePlan(), config(1, state::BackendType::kHashMap, 0), &listener_);
  ASSERT_TRUE(exec.prepare(nullptr).ok());
  exec.start();
  ASSERT_TRUE(waitUntil([&] { return flags->up("aemitted0"); }));
  CheckpointTarget t = target(1, state::SnapshotFormat::kCanonical);
  t.stopSources = true;
  t.drain = true;
  ASSERT_TRUE(exec.triggerCheckpoint(t));
  ASSERT_TRUE(listener_.waitAcks(1, static_cast<size_t>(exec.taskCount())));
  EXPECT_EQ(out->size(), 2u) << "the drain fired the two windows";
  exec.notifyCheckpointAborted(1);  // e.g. the savepoint's metadata could not be written
  ExecutionResult r = exec.wait();
  EXPECT_EQ(r.kind, ExecutionResult::kFailed);
  EXPECT_NE(r.message.find("stop --drain"), std::string::npos) << r.message;
}

/// On each record, a processing-time timer `delay` ms later that emits a record.
struct EchoLater : KeyedProcessFunction<std::string, Event, Event> {
  explicit EchoLater(int64_t delay) : delay_(delay) {}
  void processElement(const Event&, Context& ctx, Collector<Event>&) override {
    ctx.timerService().registerProcessingTimeTimer(ctx.timerService().currentProcessingTime() + delay_);
  }
  void onTimer(int64_t, OnTimerContext& ctx, Collector<Event>& out) override { out.collect({0, "echo-" + ctx.currentKey(), 0}); }
  int64_t delay_;
};
/// An event-time timer at each record's time, except for echoes; reports both.
struct FireAtEventTime : KeyedProcessFunction<std::string, Event, std::string> {
  void processElement(const Event& e, Context& ctx, Collector<std::string>& out) override {
    if (std::get<1>(e).rfind("echo-", 0) == 0) {
      out.collect("echo");
      return;
    }
    ctx.timerService().registerEventTimeTimer(std::get<0>(e));
  }
  void onTimer(int64_t ts, OnTimerContext&, Collector<std::string>& out) override { out.collect("fired " + std::to_string(ts)); }
};

TEST_F(EventTimeTest, ARecordATimerOfAnIdleTaskEmitsLeavesItsOutputIdle) {
  // Regression (review of issue 14): input "a" is idle, so the keyed task behind it is
  // idle; a processing-time timer there emits a record downstream. That record made the
  // task's output active for good, with its watermark frozen at 1000005, and the
  // downstream watermark stopped there. As in Flink, the task's input decides its status.
  auto flags = std::make_shared<Flags>();
  std::vector<Event> a0{{1'000'005, "x", 1}};
  std::vector<Event> b0{{1'001'000, "b", 1}, {1'002'000, "c", 1}}, b1{{1'050'000, "b", 1}, {1'060'000, "d", 1}};
  auto out = std::make_shared<Collected>();
  StreamEnvironment env;
  auto echoed = phased(env, {a0}, flags, "a", 50).keyBy(keyOf).process<EchoLater>([] {
    return std::make_unique<EchoLater>(300);
  });
  echoed.uid("echo");
  auto fired = phased(env, {b0, b1}, flags, "b").unionWith(echoed).keyBy(keyOf).process<FireAtEventTime>();
  fired.uid("fire");
  collectInto(fired, out);
  JobExecution exec(env.takePlan(), config(1, state::BackendType::kHashMap), &listener_);
  ASSERT_TRUE(exec.prepare(nullptr).ok());
  exec.start();
  ASSERT_TRUE(waitUntil([&] { return out->get().count("fired 1001000") == 1; })) << "'a' idle: 'b' moves time";
  ASSERT_TRUE(waitUntil([&] { return out->get().count("echo") == 1; }));
  flags->raise("bgo1");
  EXPECT_TRUE(waitUntil([&] { return out->get().count("fired 1050000") == 1; }))
      << "the idle task's timer record made it active with an old watermark that held 'b' back";
  flags->raise("end");
  EXPECT_EQ(exec.wait().kind, ExecutionResult::kFinished);
}

}  // namespace
}  // namespace jobhost::host
