// jobhost/stream.h — the fluent dataflow API: sources, transformations, keyBy, sinks.
//
//   void build(jobhost::StreamEnvironment& env) override {
//     env.readTextFile(env.args().get("--input").value())
//         .flatMap<std::pair<std::string, int64_t>>(tokenize)
//         .keyBy([](const auto& p) { return p.first; })
//         .sum<1>().uid("counts")
//         .print();
//   }
//
// Sources run with parallelism 1, and the operators chained after them share their
// thread. keyBy() starts a new stage that runs `parallelism.default` subtasks; each
// record goes to the subtask owning its key group (hash of the serialized key modulo
// the max parallelism), so all records of one key meet in one subtask and its state.
// Operators after a keyed operator are chained into the same subtask.
//
// Every stateful operator should get a stable `.uid("...")`: state is mapped to
// operators by uid on restore. Without one, a default derived from the operator's
// position and kind is used, which changes when the plan changes.
//
// Thread-safety: build() runs on one thread; the resulting Plan is immutable.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "jobhost/broadcast.h"
#include "jobhost/detail/interval_join_operator.h"
#include "jobhost/detail/named_op.h"
#include "jobhost/detail/time_operators.h"
#include "jobhost/detail/window_operator.h"
#include "jobhost/format.h"
#include "jobhost/functions.h"
#include "jobhost/operator.h"
#include "jobhost/serializer.h"
#include "jobhost/sinks.h"
#include "jobhost/sources.h"
#include "jobhost/state.h"
#include "jobhost/time.h"
#include "jobhost/windows.h"

namespace jobhost {

/// The job's command-line arguments (everything after the plugin path).
///
/// JobArgs remembers which names the job asked for (get, getInt, getDuration, getAll,
/// has; copies share the record), so that the host can say which arguments the job never
/// read — a typo such as `--inpt` — instead of running as if they had not been given
/// (`unread()`). A job that reads the raw list (`all()`) is taken to read everything.
class JobArgs {
 public:
  JobArgs() = default;
  explicit JobArgs(std::vector<std::string> args) : args_(std::move(args)) {}
  /// Every argument as given. The host then no longer tells which ones the job ignored.
  const std::vector<std::string>& all() const {
    note("", kRaw);
    return args_;
  }
  /// Value of `--name VALUE` or `--name=VALUE`; nullopt when absent. A flag given
  /// without a value throws JobArgumentError. Given twice, the first one counts (and the
  /// host warns about the second).
  std::optional<std::string> get(const std::string& name) const {
    note(name, kValue);
    for (size_t i = 0; i < args_.size(); ++i) {
      if (args_[i] == name) {
        if (i + 1 >= args_.size()) throw JobArgumentError("job argument " + name + " needs a value");
        return args_[i + 1];
      }
      if (args_[i].rfind(name + "=", 0) == 0) return args_[i].substr(name.size() + 1);
    }
    return std::nullopt;
  }
  std::string get(const std::string& name, const std::string& fallback) const {
    return get(name).value_or(fallback);
  }
  /// Every value of a repeatable `--name VALUE` / `--name=VALUE`, in order.
  std::vector<std::string> getAll(const std::string& name) const {
    note(name, kValues);
    std::vector<std::string> out;
    for (size_t i = 0; i < args_.size(); ++i) {
      if (args_[i] == name) {
        if (i + 1 >= args_.size()) throw JobArgumentError("job argument " + name + " needs a value");
        out.push_back(args_[++i]);
      } else if (args_[i].rfind(name + "=", 0) == 0) {
        out.push_back(args_[i].substr(name.size() + 1));
      }
    }
    return out;
  }
  /// Integer option; a non-integer value throws JobArgumentError naming the option.
  int64_t getInt(const std::string& name, int64_t fallback) const {
    auto v = get(name);
    if (!v) return fallback;
    try {
      size_t used = 0;
      int64_t n = std::stoll(*v, &used);
      if (used != v->size()) throw std::invalid_argument("trailing");
      return n;
    } catch (const std::exception&) {
      throw JobArgumentError("job argument " + name + " must be an integer, got '" + *v + "'");
    }
  }
  /// Duration option: an integer with a unit, "500ms", "10s", "2min" (also "m"), "1h",
  /// or "0"; a plain number is milliseconds. Anything else throws JobArgumentError.
  std::chrono::milliseconds getDuration(const std::string& name, std::chrono::milliseconds fallback) const {
    auto v = get(name);
    if (!v) return fallback;
    size_t digits = 0;
    while (digits < v->size() && std::isdigit(static_cast<unsigned char>((*v)[digits]))) ++digits;
    std::string unit = v->substr(digits);
    int64_t scale = unit.empty() || unit == "ms" ? 1 : unit == "s" ? 1000 : unit == "m" || unit == "min" ? 60000
                    : unit == "h" ? 3600000 : 0;
    if (digits == 0 || digits > 12 || scale == 0)
      throw JobArgumentError("job argument " + name + " must be a duration such as 500ms, 10s, 2min or 1h, got '" +
                             *v + "'");
    return std::chrono::milliseconds(std::stoll(v->substr(0, digits)) * scale);
  }
  /// Whether the flag `name` is given (a whole argument: `--verbose`).
  bool has(const std::string& name) const {
    note(name, kFlag);
    return std::find(args_.begin(), args_.end(), name) != args_.end();
  }

  /// The arguments the job has not read, one sentence each (empty when the job read the
  /// raw list). An argument counts as read when the job asked for its name: `--name`
  /// or `--name=...`, plus the value after `--name` for get() — only the first time
  /// for get(), every time for getAll(). Anything else had no effect: an unknown
  /// `--option` (with the argument after it, when that is not an option itself, as its
  /// likely value), a positional argument, a second `--name` of a get().
  struct Unread {
    std::string option;   // "--inpt"; empty for a positional argument or a repeated option
    std::string message;  // one sentence, starting with the argument
  };
  std::vector<Unread> unread(const std::string& job = "the job") const {
    std::vector<std::pair<std::string, int>> asked;
    {
      std::lock_guard<std::mutex> lock(reads_->mu);
      if (reads_->raw) return {};
      asked = reads_->asked;
    }
    auto kindOf = [&](const std::string& n) {
      int k = 0;
      for (const auto& [a, kind] : asked)
        if (a == n) k |= kind;
      return k;
    };
    std::vector<Unread> out;
    std::set<std::string> seen;
    for (size_t i = 0; i < args_.size(); ++i) {
      const std::string& a = args_[i];
      const bool option = a.size() > 1 && a[0] == '-';
      const size_t eq = option ? a.find('=') : std::string::npos;
      const std::string name = a.substr(0, eq);
      const int kind = option ? kindOf(name) : 0;
      const bool takesValue = (kind & (kValue | kValues)) && eq == std::string::npos;
      if (kind & kValues) {  // repeatable: every occurrence counts
        if (takesValue) ++i;
      } else if (kind & kValue) {
        if (!seen.insert(name).second)
          out.push_back({"", name + " is given more than once: " + job + " reads only the first, so '" +
                        (takesValue ? (i + 1 < args_.size() ? args_[i + 1] : std::string()) : a.substr(eq + 1)) +
                        "' has no effect"});
        if (takesValue) ++i;
      } else if (kind & kFlag) {
        if (eq != std::string::npos)
          out.push_back({"", a + " has no effect: " + job + " asks for " + name + " as a flag, without a value"});
      } else if (option) {
        std::string given = a;
        if (eq == std::string::npos && i + 1 < args_.size() && !(args_[i + 1].size() > 1 && args_[i + 1][0] == '-'))
          given += " " + args_[++i];
        out.push_back({name, given + " is not read by " + job + ": it has no effect" + suggestion(name, asked, job)});
      } else {
        out.push_back({"", "'" + a + "' is not read by " + job +
                               ": it takes no positional arguments, so it has no effect" + suggestion("", asked, job)});
      }
    }
    return out;
  }

 private:
  enum Kind { kFlag = 1, kValue = 2, kValues = 4, kRaw = 8 };
  struct Reads {
    std::mutex mu;  // a job may read a copy of its arguments from its tasks' threads
    std::vector<std::pair<std::string, int>> asked;
    bool raw = false;
  };
  void note(const std::string& name, Kind kind) const {
    std::lock_guard<std::mutex> lock(reads_->mu);
    if (kind == kRaw) {
      reads_->raw = true;
      return;
    }
    for (const auto& [n, k] : reads_->asked)
      if (n == name && k == kind) return;
    reads_->asked.emplace_back(name, kind);
  }
  /// " (did you mean --input?)" for a name one or two edits from an asked one, then
  /// what the job asked for. (Edit distance written here: a few lines; the SDK is
  /// header-only and depends on the standard library alone.)
  static std::string suggestion(const std::string& name, const std::vector<std::pair<std::string, int>>& asked,
                                const std::string& job) {
    std::string best;
    size_t bestDistance = 3;
    std::string names;
    std::set<std::string> listed;
    for (const auto& [n, kind] : asked) {
      if (!listed.insert(n).second) continue;
      names += (names.empty() ? "" : ", ") + n;
      if (name.empty()) continue;
      std::vector<size_t> row(n.size() + 1);
      for (size_t j = 0; j <= n.size(); ++j) row[j] = j;
      for (size_t i = 1; i <= name.size(); ++i) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= n.size(); ++j) {
          size_t up = row[j];
          row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (name[i - 1] == n[j - 1] ? 0 : 1)});
          diagonal = up;
        }
      }
      if (row[n.size()] < bestDistance) bestDistance = row[n.size()], best = n;
    }
    std::string s;
    if (!best.empty()) s += " (did you mean " + best + "?)";
    s += names.empty() ? "; " + job + " asked for no arguments" : "; " + job + " asked for " + names;
    return s;
  }

  std::vector<std::string> args_;
  std::shared_ptr<Reads> reads_ = std::make_shared<Reads>();
};

template <class T>
class DataStream;
template <class K, class T>
class KeyedStream;
class SinkNode;
template <class A, class B>
class ConnectedStreams;
template <class T>
class BroadcastStream;
template <class A, class B>
class BroadcastConnectedStreams;
template <class K, class A, class B>
class KeyedBroadcastConnectedStreams;

/// Collects the plan; given to Job::build().
class StreamEnvironment {
 public:
  explicit StreamEnvironment(JobArgs args = {}) : args_(std::move(args)) {}
  /// `planOnly`: the host builds the plan only to look at it (`jobhost check`, `run
  /// --dry-run`, `state`): nothing will run, so sources do not open their inputs.
  StreamEnvironment(JobArgs args, bool planOnly) : args_(std::move(args)), planOnly_(planOnly) {}
  StreamEnvironment(const StreamEnvironment&) = delete;
  StreamEnvironment& operator=(const StreamEnvironment&) = delete;

  const JobArgs& args() const { return args_; }
  /// True when build() runs only so the host can inspect the plan (see the constructor).
  /// A build() that opens files or connects itself should skip that when this is true.
  bool planOnly() const { return planOnly_; }
  const Plan& plan() const { return plan_; }
  Plan takePlan() { return std::move(plan_); }

  /// Lines from a TCP socket (host, port), as Flink's socketTextStream. Unbounded; ends
  /// when the peer closes the connection. A socket cannot be replayed: after a restore
  /// the job continues with whatever arrives next.
  DataStream<std::string> socketTextStream(std::string host, int port);
  /// Lines of a text file; bounded. The read position is checkpointed, so a restore
  /// resumes after the last line of the checkpoint. `linesPerSecond` > 0 throttles
  /// (for demos and tests). A missing file throws JobArgumentError.
  DataStream<std::string> readTextFile(std::string path, double linesPerSecond = 0);
  /// Lines of every file in directory `dir`, each file exactly once, in name order
  /// (DirectorySource). `monitorInterval` > 0: unbounded, the directory is listed again
  /// every interval and new files are read; 0: the files there at the start, then the
  /// end. Which files were read, and where in the current one, is checkpointed. A
  /// missing directory throws JobArgumentError.
  DataStream<std::string> readTextFiles(std::string dir, std::chrono::milliseconds monitorInterval,
                                        double linesPerSecond = 0);
  /// `count` records fn(0), fn(1), ... (count 0 = unbounded); deterministic, its
  /// sequence number is checkpointed. `perSecond` > 0 throttles.
  template <class T>
  DataStream<T> fromGenerator(uint64_t count, std::function<T(uint64_t)> fn, double perSecond = 0);
  /// A user-defined source: `factory` creates one SourceFunction<T> per run.
  template <class T>
  DataStream<T> addSource(std::function<std::unique_ptr<SourceFunction<T>>()> factory,
                          std::string name = "Custom Source");
  /// A source that makes its own plan node, as Flink's env.fromSource(source, strategy,
  /// name): KafkaSource<T> (jobhost/kafka.h). It gives each record its event timestamp
  /// itself (Kafka: the record's timestamp) and generates watermarks with `strategy`, per
  /// split (Kafka: per partition), combined into the source's watermark. S provides
  /// `using ElementType` and `PlanNode planNode(const WatermarkStrategy<ElementType>*,
  /// bool planOnly) const`.
  template <class S>
  DataStream<typename S::ElementType> fromSource(const S& source,
                                                 const WatermarkStrategy<typename S::ElementType>& strategy,
                                                 std::string name);
  /// The same without watermarks (records still carry the source's timestamps).
  template <class S>
  DataStream<typename S::ElementType> fromSource(const S& source, std::string name);

  /// Internal: appends a node and returns its id.
  int addNode(PlanNode node) {
    node.id = static_cast<int>(plan_.nodes.size());
    if (node.uid.empty()) {
      // A default never takes a uid that an explicit one already uses.
      std::string base = defaultUid(node), uid = base;
      for (int n = 2; uidTaken(uid); ++n) uid = base + "-" + std::to_string(n);
      node.uid = uid;
    }
    plan_.nodes.push_back(std::move(node));
    return plan_.nodes.back().id;
  }
  PlanNode& node(int id) { return plan_.nodes.at(static_cast<size_t>(id)); }
  /// Internal: marks output `tag` of node `id` (empty: its main output) as consumed. A
  /// stream may feed any number of operators and sinks (fan-out): each gets every record.
  void consume(int id, const std::string& tag = {}) { consumed_.insert({id, tag}); }
  /// Internal: output `tag` of node `id` carries T records (PlanNode::fanOut).
  template <class T>
  void registerOutput(int id, const std::string& tag);
  /// Internal: whether anything reads output `tag` of node `id`.
  bool consumed(int id, const std::string& tag = {}) const { return consumed_.count({id, tag}) != 0; }
  /// Internal: `n` reads output `tag` of node `id` (consumed).
  void attach(PlanNode& n, int id, const std::string& tag = {}) {
    consume(id, tag);
    if (n.inputs.empty()) n.input = id;
    n.inputs.push_back(id);
    n.inputTags.push_back(tag);
  }
  void setUid(int id, std::string uid) {
    for (const auto& n : plan_.nodes)
      if (n.id != id && n.uid == uid)
        throw JobArgumentError("uid '" + uid + "' is used by two operators ('" + n.name + "' and '" +
                               node(id).name + "'); uids must be unique within a job");
    node(id).uid = std::move(uid);
    node(id).uidExplicit = true;
  }

 private:
  bool uidTaken(const std::string& uid) const {
    for (const auto& n : plan_.nodes)
      if (n.uid == uid) return true;
    return false;
  }
  /// "auto-<node id>-<name>": the name lower-cased, and every character a uid may not hold
  /// (anything but letters, digits, '.', '_', '-': a uid names state files) as '-'.
  static std::string defaultUid(const PlanNode& n) {
    std::string kind = n.name;
    std::transform(kind.begin(), kind.end(), kind.begin(), [](char c) {
      unsigned char u = static_cast<unsigned char>(c);
      bool allowed = std::isalnum(u) != 0 || c == '.' || c == '_' || c == '-';
      return allowed && u < 0x80 ? static_cast<char>(std::tolower(u)) : '-';
    });
    return ("auto-" + std::to_string(n.id) + "-" + kind).substr(0, 128);
  }
  JobArgs args_;
  Plan plan_;
  std::set<std::pair<int, std::string>> consumed_;
  bool planOnly_ = false;
};

/// The sink a DataStream::sinkTo() added, to give it a uid or a name.
class SinkNode {
 public:
  SinkNode(StreamEnvironment& env, int node) : env_(&env), node_(node) {}
  SinkNode& uid(std::string id) {
    env_->setUid(node_, std::move(id));
    return *this;
  }
  SinkNode& name(std::string n) {
    env_->node(node_).name = std::move(n);
    return *this;
  }

 private:
  StreamEnvironment* env_;
  int node_;
};

namespace detail {

template <class In, class Out, class F>
class MapOp : public NamedOp, public Collector<In> {
 public:
  MapOp(F f, void* down) : f_(std::move(f)), down_(static_cast<Collector<Out>*>(down)) {}
  void* input() override { return static_cast<Collector<In>*>(this); }
  void collect(const In& v) override { down_->collect(invoke([&] { return f_(v); })); }

 private:
  F f_;
  Collector<Out>* down_;
};

template <class In, class Out, class F>
class FlatMapOp : public NamedOp, public Collector<In> {
 public:
  FlatMapOp(F f, void* down) : f_(std::move(f)), down_(static_cast<Collector<Out>*>(down)) {}
  void* input() override { return static_cast<Collector<In>*>(this); }
  void collect(const In& v) override { invoke([&] { f_(v, *down_); }); }

 private:
  F f_;
  Collector<Out>* down_;
};

template <class T, class F>
class FilterOp : public NamedOp, public Collector<T> {
 public:
  FilterOp(F f, void* down) : f_(std::move(f)), down_(static_cast<Collector<T>*>(down)) {}
  void* input() override { return static_cast<Collector<T>*>(this); }
  void collect(const T& v) override {
    if (invoke([&] { return static_cast<bool>(f_(v)); })) down_->collect(v);
  }

 private:
  F f_;
  Collector<T>* down_;
};

template <class T, class K, class KeyF>
class ExchangeSenderOp : public Operator, public Collector<T> {
 public:
  explicit ExchangeSenderOp(KeyF f) : keyOf_(std::move(f)) {}
  void* input() override { return static_cast<Collector<T>*>(this); }
  void open(OperatorContext& ctx) override { writer_ = &ctx.exchange(); }
  void collect(const T& v) override {
    serializeInto(key_, static_cast<const K&>(keyOf_(v)));
    serializeInto(record_, v);
    writer_->emit(key_, record_);
  }

 private:
  KeyF keyOf_;
  ExchangeWriter* writer_ = nullptr;
  std::string key_, record_;
};

template <class T>
class ExchangeReceiverOp : public ExchangeReceiver {
 public:
  explicit ExchangeReceiverOp(void* down) : down_(static_cast<Collector<T>*>(down)) {}
  void receive(std::string_view bytes) override { down_->collect(deserialize<T>(bytes)); }

 private:
  Collector<T>* down_;
};

/// Keyed reduce: keeps the running result per key in ValueState "reduce" and emits it
/// after every record, as Flink's streaming reduce does.
template <class K, class T, class F>
class ReduceOp : public NamedOp, public Collector<T>, public StateOwner {
 public:
  ReduceOp(F f, void* down) : f_(std::move(f)), down_(static_cast<Collector<T>*>(down)) {}
  void* input() override { return static_cast<Collector<T>*>(this); }
  void open(OperatorContext& ctx) override {
    NamedOp::open(ctx);
    acc_.bind(ctx.keyedState(), Serializer<K>::id(), Serializer<K>::version());
  }
  void collect(const T& v) override {
    std::optional<T> cur = acc_.value();
    if (cur) {
      T next = invoke([&] { return f_(*cur, v); });
      acc_.update(next);
      down_->collect(next);
    } else {
      acc_.update(v);
      down_->collect(v);
    }
  }
  ValueState<T> acc_{*this, "reduce"};

 private:
  F f_;
  Collector<T>* down_;
};

template <class Fn>
class ProcessOp : public NamedOp, public Collector<typename Fn::InputType> {
 public:
  using K = typename Fn::KeyType;
  using In = typename Fn::InputType;
  using Out = typename Fn::OutputType;
  ProcessOp(std::unique_ptr<Fn> fn, void* down)
      : fn_(std::move(fn)), down_(static_cast<Collector<Out>*>(down)) {}
  void* input() override { return static_cast<Collector<In>*>(this); }
  void open(OperatorContext& ctx) override {
    NamedOp::open(ctx);
    for (StateBase* s : fn_->declaredStates())
      s->bind(ctx.keyedState(), Serializer<K>::id(), Serializer<K>::version());
    keyed_.emplace(ctx);
    timerCtx_.emplace(ctx);
    invoke([&] { fn_->open(ctx); });
  }
  void collect(const In& v) override { invoke([&] { fn_->processElement(v, *keyed_, *down_); }); }
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
};

template <class T>
class LineSinkOp : public Operator, public Collector<T> {
 public:
  explicit LineSinkOp(std::optional<std::string> path) : path_(std::move(path)) {}
  void* input() override { return static_cast<Collector<T>*>(this); }
  void open(OperatorContext& ctx) override {
    sink_ = path_ ? &ctx.fileSink(*path_) : &ctx.stdoutSink();
    if (ctx.parallelism() > 1) prefix_ = std::to_string(ctx.subtaskIndex() + 1) + "> ";
  }
  void collect(const T& v) override {
    line_ = prefix_;
    appendText(line_, v);
    sink_->writeLine(line_);
  }

 private:
  std::optional<std::string> path_;
  LineSink* sink_ = nullptr;
  std::string prefix_, line_;
};

/// User sink: fn(value) per record, on the subtask's thread.
template <class T, class F>
class FunctionSinkOp : public NamedOp, public Collector<T> {
 public:
  explicit FunctionSinkOp(F f) : f_(std::move(f)) {}
  void* input() override { return static_cast<Collector<T>*>(this); }
  void collect(const T& v) override { invoke([&] { f_(v); }); }

 private:
  F f_;
};

template <class T>
class SourceOp : public SourceOperator, public SourceOutput<T> {
 public:
  SourceOp(std::unique_ptr<SourceFunction<T>> fn, void* down)
      : fn_(std::move(fn)), down_(static_cast<Collector<T>*>(down)) {}
  void open(OperatorContext& ctx) override {
    name_ = ctx.operatorName();
    slot_ = ctx.activeOperatorSlot();
    callUser(name_, [&] { fn_->open(ctx); });
  }
  PollStatus poll() override {
    if (slot_) slot_->store(name_.c_str(), std::memory_order_relaxed);
    return callUser(name_, [&] { return fn_->poll(*this); });
  }
  void emit(const T& v) override { down_->collect(v); }
  void close() override { fn_->close(); }
  std::string snapshotState() override { return fn_->snapshotPosition(); }
  void restoreState(std::string_view s) override { fn_->restorePosition(s); }

 private:
  std::unique_ptr<SourceFunction<T>> fn_;
  Collector<T>* down_;
  std::string name_;
  std::atomic<const char*>* slot_ = nullptr;
};

/// Fan-out: one output read by several operators or sinks. Each record is passed, by
/// reference, to every reader in turn (as Flink's chained outputs do without object
/// reuse copies: readers take `const T&` and must not keep it beyond the call).
template <class T>
class FanOutOp : public Operator, public Collector<T> {
 public:
  explicit FanOutOp(std::vector<void*> readers) {
    for (void* r : readers) readers_.push_back(static_cast<Collector<T>*>(r));
  }
  void* input() override { return static_cast<Collector<T>*>(this); }
  void collect(const T& v) override {
    for (Collector<T>* r : readers_) r->collect(v);
  }

 private:
  std::vector<Collector<T>*> readers_;
};

}  // namespace detail

template <class T>
void StreamEnvironment::registerOutput(int id, const std::string& tag) {
  auto& fan = node(id).fanOut;
  if (fan.count(tag)) return;
  fan[tag] = [](std::vector<void*> readers) -> std::unique_ptr<Operator> {
    return std::make_unique<detail::FanOutOp<T>>(std::move(readers));
  };
}

/// A stream of T produced by one plan node (its main output, or one of its side outputs).
template <class T>
class DataStream {
 public:
  using ElementType = T;
  DataStream(StreamEnvironment& env, int node, std::string tag = {}) : env_(&env), node_(node), tag_(std::move(tag)) {
    env_->registerOutput<T>(node_, tag_);
  }

  /// Sets the stable id of the operator that produces this stream.
  DataStream& uid(std::string id) {
    env_->setUid(node_, std::move(id));
    return *this;
  }
  /// Sets the display name of that operator.
  DataStream& name(std::string n) {
    env_->node(node_).name = std::move(n);
    return *this;
  }

  /// One output per input: f(const T&) -> U.
  template <class F, class U = std::decay_t<std::invoke_result_t<F, const T&>>>
  DataStream<U> map(F f) {
    return chain<U>("Map", [f](void* down) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::MapOp<T, U, F>>(f, down);
    });
  }
  /// Zero or more outputs per input: f(const T&, Collector<U>&).
  template <class U, class F>
  DataStream<U> flatMap(F f) {
    return chain<U>("Flat Map", [f](void* down) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::FlatMapOp<T, U, F>>(f, down);
    });
  }
  /// Keeps records for which f(const T&) is true.
  template <class F>
  DataStream<T> filter(F f) {
    return chain<T>("Filter", [f](void* down) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::FilterOp<T, F>>(f, down);
    });
  }
  /// An unkeyed ProcessFunction<T, Out>: any number of outputs per record, side outputs
  /// (ctx.output(tag, v)). `factory` creates one instance per subtask.
  template <class Fn>
  DataStream<typename Fn::OutputType> process(
      std::function<std::unique_ptr<Fn>()> factory = [] { return std::make_unique<Fn>(); }) {
    static_assert(std::is_same_v<typename Fn::InputType, T>,
                  "the process function's input type must be the stream's element type");
    return chain<typename Fn::OutputType>("Process", [factory](void* down) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::ProcessFunctionOp<Fn>>(factory(), down);
    });
  }
  /// Event timestamps and watermarks for the records of this stream (time.h). Place it
  /// right after the source: watermarks from before it are replaced by its own.
  DataStream<T> assignTimestampsAndWatermarks(WatermarkStrategy<T> strategy) {
    PlanNode n;
    n.kind = NodeKind::kOperator;
    n.name = "Timestamps/Watermarks";
    n.watermarkAssigner = true;
    n.operatorState = true;
    n.create = [strategy](void* down) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::TimestampsAndWatermarksOp<T>>(strategy, down);
    };
    return add<T>(std::move(n));
  }
  /// The side output `tag` of the operator that produces this stream.
  template <class U>
  DataStream<U> getSideOutput(const OutputTag<U>& tag) const {
    if (!tag_.empty()) throw JobArgumentError("getSideOutput() is called on the operator's main stream, not on a side output");
    return DataStream<U>(*env_, node_, tag.key());
  }
  /// The records of this stream and of `others` (all of type T) as one stream. (Flink's
  /// union(); `union` is a C++ keyword.) Watermarks: the minimum over all inputs.
  template <class... More>
  DataStream<T> unionWith(const DataStream<T>& other, const More&... more) {
    PlanNode n = unkeyedExchange("Union");
    env_->attach(n, node_, tag_);
    env_->attach(n, other.nodeId(), other.tag());
    (env_->attach(n, more.nodeId(), more.tag()), ...);
    return DataStream<T>(*env_, env_->addNode(std::move(n)));
  }
  /// Two streams of possibly different types into one CoProcessFunction.
  template <class U>
  ConnectedStreams<T, U> connect(const DataStream<U>& other);
  /// This stream to every subtask of the operators it is connected to (connect() of a
  /// DataStream or a KeyedStream with it), which keep what it brings in the broadcast
  /// states `descriptors` (BroadcastStateDescriptor, broadcast.h).
  template <class... Descriptors>
  BroadcastStream<T> broadcast(const Descriptors&... descriptors) const;
  /// This stream with a broadcast stream, into a BroadcastProcessFunction.
  template <class U>
  BroadcastConnectedStreams<T, U> connect(const BroadcastStream<U>& broadcastStream);
  /// Partitions by key: f(const T&) -> K; K and T need Serializers.
  template <class F, class K = std::decay_t<std::invoke_result_t<F, const T&>>>
  KeyedStream<K, T> keyBy(F f) {
    auto sender = [f]() -> std::unique_ptr<Operator> { return std::make_unique<detail::ExchangeSenderOp<T, K, F>>(f); };
    PlanNode& self = env_->node(node_);
    if (tag_.empty() && self.kind == NodeKind::kExchange && !self.keyedExchange && self.name == "Union" &&
        !env_->consumed(node_)) {
      // keyBy right after unionWith: one keyed exchange from every input of the union, no
      // extra hop.
      self.name = "Key By";
      self.keyedExchange = true;
      self.keySerializer = Serializer<K>::id();
      self.createSender = sender;
      return KeyedStream<K, T>(*env_, node_);
    }
    PlanNode n;
    n.kind = NodeKind::kExchange;
    n.name = "Key By";
    n.keySerializer = Serializer<K>::id();
    n.createSender = sender;
    n.create = [](void* down) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::ExchangeReceiverOp<T>>(down);
    };
    env_->attach(n, node_, tag_);
    return KeyedStream<K, T>(*env_, env_->addNode(std::move(n)));
  }
  /// Prints each record as a line to stdout; with parallelism > 1 prefixed by the
  /// 1-based subtask index and "> ", as Flink's print().
  void print() { sink("Print to Std. Out", std::nullopt); }
  /// Appends each record as a line to a text file (same format as print()).
  void writeAsText(std::string path) { sink("Text File Sink", std::move(path)); }
  /// Writes the records exactly once through a two-phase-commit sink (sinks.h), e.g. a
  /// FileSink<T>: `sink` is copied once per subtask. Give it a stable uid: its pending
  /// transactions are state, restored by uid.
  template <class S>
    requires std::is_base_of_v<TwoPhaseCommitSink<T, typename S::TransactionType>, S>
  SinkNode sinkTo(S sink, std::string name = "Transactional Sink") {
    PlanNode n;
    n.kind = NodeKind::kSink;
    n.name = std::move(name);
    n.operatorState = true;
    n.twoPhaseCommit = true;
    n.create = [sink](void*) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::TwoPhaseCommitSinkOp<S>>(std::make_unique<S>(sink));
    };
    env_->attach(n, node_, tag_);
    return SinkNode(*env_, env_->addNode(std::move(n)));
  }
  /// Calls f(const T&) for each record.
  template <class F>
  void addSink(F f, std::string name = "Custom Sink") {
    PlanNode n;
    n.kind = NodeKind::kSink;
    n.name = std::move(name);
    n.create = [f](void*) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::FunctionSinkOp<T, F>>(f);
    };
    add<T>(std::move(n));
  }

  StreamEnvironment& environment() const { return *env_; }
  int nodeId() const { return node_; }
  /// Internal: an exchange of T records that are not keyed (union, connect); its inputs
  /// are attached by the caller.
  static PlanNode unkeyedExchange(const char* name) {
    PlanNode n;
    n.kind = NodeKind::kExchange;
    n.name = name;
    n.keyedExchange = false;
    n.createSender = [] { return std::unique_ptr<Operator>(new detail::RebalanceSenderOp<T>()); };
    n.create = [](void* down) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::ExchangeReceiverOp<T>>(down);
    };
    return n;
  }
  /// The side output this stream is (OutputTag::key()), empty for a main output.
  const std::string& tag() const { return tag_; }

  /// Internal: appends `n` reading this stream.
  template <class U>
  DataStream<U> add(PlanNode n) {
    env_->attach(n, node_, tag_);
    return DataStream<U>(*env_, env_->addNode(std::move(n)));
  }

 private:
  template <class U, class Factory>
  DataStream<U> chain(const char* name, Factory factory) {
    PlanNode n;
    n.kind = NodeKind::kOperator;
    n.name = name;
    n.create = std::move(factory);
    return add<U>(std::move(n));
  }
  void sink(const char* name, std::optional<std::string> path) {
    PlanNode n;
    n.kind = NodeKind::kSink;
    n.name = name;
    n.create = [path](void*) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::LineSinkOp<T>>(path);
    };
    add<T>(std::move(n));
  }

  StreamEnvironment* env_;
  int node_;
  std::string tag_;
};

namespace detail {
/// Adds a keyed operator reading `inputs` (keyed exchanges) to the plan.
template <class Factory>
int addKeyedNode(StreamEnvironment& env, std::vector<int> inputs, const char* name,
                 std::vector<StateDescriptorInfo> states, std::vector<SerializerTextForm> forms, bool timers,
                 Factory f) {
  PlanNode n;
  n.kind = NodeKind::kOperator;
  n.name = name;
  for (int in : inputs) env.attach(n, in);
  n.keyed = true;
  n.timers = timers;
  n.states = std::move(states);
  n.textForms = std::move(forms);
  n.create = std::move(f);
  return env.addNode(std::move(n));
}
/// The states and text forms `Fn` (a StateOwner) declares, read from one instance.
template <class K, class Fn>
void declaredStatesOf(const std::function<std::unique_ptr<Fn>()>& factory, std::vector<StateDescriptorInfo>& states,
                      std::vector<SerializerTextForm>& forms) {
  textFormsOf<K>(forms);
  auto proto = factory();
  for (const StateBase* s : proto->declaredStates()) {
    if (s->name().rfind("_timer_state/", 0) == 0)
      throw JobArgumentError("state name '" + s->name() + "' is reserved for timers: give the state another name");
    states.push_back(s->descriptor(Serializer<K>::id(), Serializer<K>::version()));
    s->collectTextForms(forms);
  }
}
}  // namespace detail

template <class K, class T>
class WindowedStream;
template <class K, class A, class B>
class KeyedConnectedStreams;
template <class K, class A, class B>
class IntervalJoin;

/// A stream partitioned by key K. Keyed operations keep state per key.
template <class K, class T>
class KeyedStream {
 public:
  using KeyType = K;
  using ElementType = T;
  KeyedStream(StreamEnvironment& env, int node) : env_(&env), node_(node) { env_->registerOutput<T>(node_, {}); }

  /// Running reduce per key: emits f(accumulated, value) for every record.
  template <class F>
  DataStream<T> reduce(F f) {
    return keyedNode<T>("Keyed Reduce", reduceStates(), reduceTextForms(), [f](void* down) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::ReduceOp<K, T, F>>(f, down);
    });
  }
  /// Running sum of tuple/pair field I per key; other fields come from the first record.
  template <size_t I>
  DataStream<T> sum() {
    auto add = [](const T& acc, const T& v) {
      T out = acc;
      std::get<I>(out) += std::get<I>(v);
      return out;
    };
    return keyedNode<T>("Keyed Aggregation", reduceStates(), reduceTextForms(),
                        [add](void* down) -> std::unique_ptr<Operator> {
                          return std::make_unique<detail::ReduceOp<K, T, decltype(add)>>(add, down);
                        });
  }
  /// A keyed process function with keyed state and timers; `factory` creates one
  /// instance per subtask (default: Fn's default constructor). Fn's declared states are
  /// read from one instance at plan time.
  template <class Fn>
  DataStream<typename Fn::OutputType> process(
      std::function<std::unique_ptr<Fn>()> factory = [] { return std::make_unique<Fn>(); }) {
    static_assert(std::is_same_v<typename Fn::KeyType, K>,
                  "the process function's key type must be the keyBy key type");
    static_assert(std::is_same_v<typename Fn::InputType, T>,
                  "the process function's input type must be the stream's element type");
    std::vector<StateDescriptorInfo> states;
    std::vector<SerializerTextForm> forms;
    detail::declaredStatesOf<K>(factory, states, forms);
    for (auto& t : detail::timerStates<K>("")) states.push_back(t);
    detail::timerTextForms(forms, "", nullptr);
    return DataStream<typename Fn::OutputType>(
        *env_, detail::addKeyedNode(*env_, {node_}, "Keyed Process", std::move(states), std::move(forms), true,
                                    [factory](void* down) -> std::unique_ptr<Operator> {
                                      return std::make_unique<detail::ProcessOp<Fn>>(factory(), down);
                                    }));
  }
  /// Windows per key (windows.h); finish with reduce, aggregate or process.
  WindowedStream<K, T> window(WindowAssigner assigner);
  /// This keyed stream and `other` (keyed by the same key type) into a
  /// KeyedCoProcessFunction that sees both with one keyed state and one set of timers.
  template <class U>
  KeyedConnectedStreams<K, T, U> connect(const KeyedStream<K, U>& other);
  /// This keyed stream with a broadcast stream, into a KeyedBroadcastProcessFunction:
  /// its records with their key's state and timers, the broadcast records in every subtask.
  template <class U>
  KeyedBroadcastConnectedStreams<K, T, U> connect(const BroadcastStream<U>& broadcastStream);
  /// Joins each record with the records of `other` of the same key whose timestamps
  /// are within [its timestamp + lower, its timestamp + upper] (between()). Event time.
  template <class U>
  IntervalJoin<K, T, U> intervalJoin(const KeyedStream<K, U>& other);

  StreamEnvironment& environment() const { return *env_; }
  int nodeId() const { return node_; }

 private:
  std::vector<StateDescriptorInfo> reduceStates() {
    StateDescriptorInfo d{"reduce", StateKind::kValue, Serializer<K>::id(), Serializer<K>::version(),
                          "", 0, Serializer<T>::id(), Serializer<T>::version()};
    return {d};
  }
  std::vector<SerializerTextForm> reduceTextForms() {
    std::vector<SerializerTextForm> forms;
    textFormsOf<K>(forms);
    textFormsOf<T>(forms);
    return forms;
  }
  template <class U, class Factory>
  DataStream<U> keyedNode(const char* name, std::vector<StateDescriptorInfo> states,
                          std::vector<SerializerTextForm> forms, Factory f) {
    return DataStream<U>(*env_, detail::addKeyedNode(*env_, {node_}, name, std::move(states), std::move(forms), false,
                                                     std::move(f)));
  }
  StreamEnvironment* env_;
  int node_;
};

/// A keyed stream cut into windows: set allowedLateness / sideOutputLateData, then
/// finish with reduce, aggregate or process (one of them, once).
template <class K, class T>
class WindowedStream {
 public:
  WindowedStream(StreamEnvironment& env, int node, WindowAssigner a) : env_(&env), node_(node), assigner_(a) {}

  /// Event time: a window keeps its contents until the watermark passes its end by
  /// `lateness`; a record arriving in that time fires the window again. Default 0.
  WindowedStream& allowedLateness(std::chrono::milliseconds lateness) {
    if (lateness.count() < 0)
      throw JobArgumentError("allowedLateness must not be negative, got " + std::to_string(lateness.count()) + " ms");
    latenessMs_ = lateness.count();
    return *this;
  }
  /// Records too late for every window they belong to go to `tag` instead of being
  /// dropped (consume it with getSideOutput(tag) on the result).
  WindowedStream& sideOutputLateData(const OutputTag<T>& tag) {
    lateTag_ = tag.key();
    return *this;
  }

  /// Incremental: f(const T& acc, const T& v) -> T; emits the window's result.
  template <class F>
  DataStream<T> reduce(F f) {
    return reduceImpl<T>(f, [](const K&, const TimeWindow&, T&& v, OperatorContext&, detail::SideOutputs&,
                               Collector<T>& out) { out.collect(v); });
  }
  /// Incremental reduce, then `windowFn` (a ProcessWindowFunction<T, Out, K>) sees the
  /// window and its one result.
  template <class F, class WF>
    requires std::is_base_of_v<ProcessWindowFunction<T, typename WF::OutputType, K>, WF>
  DataStream<typename WF::OutputType> reduce(F f, WF windowFn) {
    return reduceImpl<typename WF::OutputType>(f, processWith<T>(std::move(windowFn)));
  }
  /// Incremental with an AggregateFunction<T, Acc, Out>; emits getResult(acc).
  template <class Agg>
    requires std::is_base_of_v<
        AggregateFunction<T, typename Agg::AccumulatorType, typename Agg::OutputType>, Agg>
  DataStream<typename Agg::OutputType> aggregate(Agg agg) {
    using Acc = typename Agg::AccumulatorType;
    using Out = typename Agg::OutputType;
    return aggregateImpl<Out>(agg, [agg](const K&, const TimeWindow&, Acc&& acc, OperatorContext&, detail::SideOutputs&,
                                         Collector<Out>& out) { out.collect(agg.getResult(acc)); });
  }
  /// Aggregate, then `windowFn` (a ProcessWindowFunction<Agg's Out, Out2, K>) sees the
  /// window and getResult(acc).
  template <class Agg, class WF>
    requires std::is_base_of_v<ProcessWindowFunction<typename Agg::OutputType, typename WF::OutputType, K>, WF>
  DataStream<typename WF::OutputType> aggregate(Agg agg, WF windowFn) {
    using Acc = typename Agg::AccumulatorType;
    using Out = typename WF::OutputType;
    auto then = processWith<typename Agg::OutputType>(std::move(windowFn));
    return aggregateImpl<Out>(agg, [agg, then](const K& k, const TimeWindow& w, Acc&& acc, OperatorContext& ctx,
                                               detail::SideOutputs& side, Collector<Out>& out) mutable {
      then(k, w, agg.getResult(acc), ctx, side, out);
    });
  }
  /// All elements of a fired window at once: `fn` (a ProcessWindowFunction<T, Out, K>,
  /// copied per subtask). The window keeps every element in state until it fires.
  template <class WF>
    requires std::is_base_of_v<ProcessWindowFunction<T, typename WF::OutputType, K>, WF>
  DataStream<typename WF::OutputType> process(WF fn) {
    using Out = typename WF::OutputType;
    using Op = detail::WindowOp<K, T, T, Out, true>;
    typename Op::Functions f;
    f.fire = [fn](const K& k, const TimeWindow& w, std::vector<T>&& elements, OperatorContext& ctx,
                  detail::SideOutputs& side, Collector<Out>& out) mutable {
      typename WF::Context c(ctx, side, w);
      fn.process(k, c, elements, out);
    };
    return finish<Op, Out>("Window(process)", std::move(f));
  }

 private:
  /// A fire function calling `fn` with the window and one result.
  template <class R, class WF>
  static auto processWith(WF fn) {
    return [fn](const K& k, const TimeWindow& w, R&& r, OperatorContext& ctx, detail::SideOutputs& side,
                Collector<typename WF::OutputType>& out) mutable {
      typename WF::Context c(ctx, side, w);
      std::vector<R> one;
      one.push_back(std::move(r));
      fn.process(k, c, one, out);
    };
  }
  template <class Out, class F, class Fire>
  DataStream<Out> reduceImpl(F f, Fire fire) {
    using Op = detail::WindowOp<K, T, T, Out, false>;
    typename Op::Functions fs;
    fs.fold = [f](std::optional<T>&& acc, const T& v) -> T { return acc ? T(f(*acc, v)) : v; };
    fs.merge = [f](T a, const T& b) -> T { return f(a, b); };
    fs.fire = std::move(fire);
    return finish<Op, Out>("Window(reduce)", std::move(fs));
  }
  template <class Out, class Agg, class Fire>
  DataStream<Out> aggregateImpl(Agg agg, Fire fire) {
    using Acc = typename Agg::AccumulatorType;
    using Op = detail::WindowOp<K, T, Acc, Out, false>;
    typename Op::Functions fs;
    fs.fold = [agg](std::optional<Acc>&& acc, const T& v) -> Acc {
      return agg.add(v, acc ? std::move(*acc) : agg.createAccumulator());
    };
    fs.merge = [agg](Acc a, const Acc& b) -> Acc { return agg.merge(std::move(a), b); };
    fs.fire = std::move(fire);
    return finish<Op, Out>("Window(aggregate)", std::move(fs));
  }

  template <class Op, class Out>
  DataStream<Out> finish(const char* name, typename Op::Functions f) {
    if (finished_) throw JobArgumentError("a windowed stream is finished once (reduce, aggregate or process)");
    finished_ = true;
    typename Op::Options o{assigner_, latenessMs_, lateTag_};
    int id = detail::addKeyedNode(*env_, {node_}, name, Op::states(assigner_), Op::textForms(assigner_), true,
                                  [o, f](void* down) -> std::unique_ptr<Operator> { return std::make_unique<Op>(o, f, down); });
    return DataStream<Out>(*env_, id);
  }

  StreamEnvironment* env_;
  int node_;
  WindowAssigner assigner_;
  int64_t latenessMs_ = 0;
  std::string lateTag_;
  bool finished_ = false;
};

/// Two unkeyed streams for a CoProcessFunction (DataStream::connect).
template <class A, class B>
class ConnectedStreams {
 public:
  ConnectedStreams(StreamEnvironment& env, int first, int second) : env_(&env), first_(first), second_(second) {}
  template <class Fn>
  DataStream<typename Fn::OutputType> process(
      std::function<std::unique_ptr<Fn>()> factory = [] { return std::make_unique<Fn>(); }) {
    static_assert(std::is_same_v<typename Fn::Input1Type, A> && std::is_same_v<typename Fn::Input2Type, B>,
                  "the CoProcessFunction's input types must be the connected streams' element types");
    PlanNode n;
    n.kind = NodeKind::kOperator;
    n.name = "Co-Process";
    env_->attach(n, first_);
    env_->attach(n, second_);
    n.create = [factory](void* down) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::CoProcessOp<Fn>>(factory(), down);
    };
    return DataStream<typename Fn::OutputType>(*env_, env_->addNode(std::move(n)));
  }

 private:
  StreamEnvironment* env_;
  int first_, second_;  // the unkeyed exchanges feeding the two inputs
};

/// Two keyed streams for a KeyedCoProcessFunction (KeyedStream::connect).
template <class K, class A, class B>
class KeyedConnectedStreams {
 public:
  KeyedConnectedStreams(StreamEnvironment& env, int first, int second) : env_(&env), first_(first), second_(second) {}
  template <class Fn>
  DataStream<typename Fn::OutputType> process(
      std::function<std::unique_ptr<Fn>()> factory = [] { return std::make_unique<Fn>(); }) {
    static_assert(std::is_same_v<typename Fn::KeyType, K>, "the function's key type must be the streams' key type");
    static_assert(std::is_same_v<typename Fn::Input1Type, A> && std::is_same_v<typename Fn::Input2Type, B>,
                  "the KeyedCoProcessFunction's input types must be the connected streams' element types");
    std::vector<StateDescriptorInfo> states;
    std::vector<SerializerTextForm> forms;
    detail::declaredStatesOf<K>(factory, states, forms);
    for (auto& t : detail::timerStates<K>("")) states.push_back(t);
    detail::timerTextForms(forms, "", nullptr);
    return DataStream<typename Fn::OutputType>(
        *env_, detail::addKeyedNode(*env_, {first_, second_}, "Keyed Co-Process", std::move(states), std::move(forms),
                                    true, [factory](void* down) -> std::unique_ptr<Operator> {
                                      return std::make_unique<detail::KeyedCoProcessOp<Fn>>(factory(), down);
                                    }));
  }

 private:
  StreamEnvironment* env_;
  int first_, second_;  // the keyed exchanges
};

/// KeyedStream::intervalJoin(other).between(lower, upper).process(fn).
template <class K, class A, class B>
class IntervalJoin {
 public:
  IntervalJoin(StreamEnvironment& env, int first, int second) : env_(&env), first_(first), second_(second) {}
  /// A record of the first stream at t joins records of the second at [t + lower, t + upper].
  IntervalJoin& between(std::chrono::milliseconds lower, std::chrono::milliseconds upper) {
    if (lower > upper)
      throw JobArgumentError("intervalJoin().between(lower, upper): lower (" + std::to_string(lower.count()) +
                             " ms) must not be greater than upper (" + std::to_string(upper.count()) + " ms)");
    lower_ = lower.count();
    upper_ = upper.count();
    bounded_ = true;
    return *this;
  }
  /// `factory` creates one ProcessJoinFunction<A, B, Out> per subtask.
  template <class Fn>
  DataStream<typename Fn::OutputType> process(
      std::function<std::unique_ptr<Fn>()> factory = [] { return std::make_unique<Fn>(); }) {
    static_assert(std::is_same_v<typename Fn::Input1Type, A> && std::is_same_v<typename Fn::Input2Type, B>,
                  "the ProcessJoinFunction's input types must be the joined streams' element types");
    if (!bounded_) throw JobArgumentError("intervalJoin(): call between(lower, upper) before process()");
    using Op = detail::IntervalJoinOp<K, Fn>;
    int64_t lower = lower_, upper = upper_;
    return DataStream<typename Fn::OutputType>(
        *env_, detail::addKeyedNode(*env_, {first_, second_}, "Interval Join", Op::states(), Op::textForms(), true,
                                    [factory, lower, upper](void* down) -> std::unique_ptr<Operator> {
                                      return std::make_unique<Op>(lower, upper, factory(), down);
                                    }));
  }

 private:
  StreamEnvironment* env_;
  int first_, second_;
  int64_t lower_ = 0, upper_ = 0;
  bool bounded_ = false;
};

/// A stream every subtask of its consumers receives whole (DataStream::broadcast), with the
/// broadcast states those consumers keep (broadcast.h).
template <class T>
class BroadcastStream {
 public:
  BroadcastStream(StreamEnvironment& env, int node, std::string tag, detail::BroadcastStates states)
      : env_(&env), node_(node), tag_(std::move(tag)), states_(std::move(states)) {}
  /// Internal: a new broadcast exchange from this stream, for one consumer.
  int exchange() const {
    PlanNode n = DataStream<T>::unkeyedExchange("Broadcast");
    n.broadcastExchange = true;
    env_->attach(n, node_, tag_);
    return env_->addNode(std::move(n));
  }
  const detail::BroadcastStates& states() const { return states_; }
  StreamEnvironment& environment() const { return *env_; }

 private:
  StreamEnvironment* env_;
  int node_;
  std::string tag_;
  detail::BroadcastStates states_;
};

/// An unkeyed stream and a broadcast stream for a BroadcastProcessFunction.
template <class A, class B>
class BroadcastConnectedStreams {
 public:
  BroadcastConnectedStreams(StreamEnvironment& env, int first, int second, detail::BroadcastStates states)
      : env_(&env), first_(first), second_(second), states_(std::move(states)) {}
  template <class Fn>
  DataStream<typename Fn::OutputType> process(
      std::function<std::unique_ptr<Fn>()> factory = [] { return std::make_unique<Fn>(); }) {
    static_assert(std::is_same_v<typename Fn::Input1Type, A> && std::is_same_v<typename Fn::Input2Type, B>,
                  "the BroadcastProcessFunction's input types must be the stream's and the broadcast stream's "
                  "element types");
    PlanNode n;
    n.kind = NodeKind::kOperator;
    n.name = "Broadcast Process";
    n.operatorState = true;  // the broadcast states
    n.broadcastStates = states_.infos();
    env_->attach(n, first_);
    env_->attach(n, second_);
    n.create = [factory, states = states_](void* down) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::BroadcastProcessOp<Fn>>(factory(), states, down);
    };
    return DataStream<typename Fn::OutputType>(*env_, env_->addNode(std::move(n)));
  }

 private:
  StreamEnvironment* env_;
  int first_, second_;  // the unkeyed exchange of the stream, the broadcast exchange
  detail::BroadcastStates states_;
};

/// A keyed stream and a broadcast stream for a KeyedBroadcastProcessFunction.
template <class K, class A, class B>
class KeyedBroadcastConnectedStreams {
 public:
  KeyedBroadcastConnectedStreams(StreamEnvironment& env, int first, int second, detail::BroadcastStates states)
      : env_(&env), first_(first), second_(second), states_(std::move(states)) {}
  template <class Fn>
  DataStream<typename Fn::OutputType> process(
      std::function<std::unique_ptr<Fn>()> factory = [] { return std::make_unique<Fn>(); }) {
    static_assert(std::is_same_v<typename Fn::KeyType, K>, "the function's key type must be the stream's key type");
    static_assert(std::is_same_v<typename Fn::Input1Type, A> && std::is_same_v<typename Fn::Input2Type, B>,
                  "the KeyedBroadcastProcessFunction's input types must be the keyed stream's and the broadcast "
                  "stream's element types");
    std::vector<StateDescriptorInfo> states;
    std::vector<SerializerTextForm> forms;
    detail::declaredStatesOf<K>(factory, states, forms);
    for (auto& t : detail::timerStates<K>("")) states.push_back(t);
    detail::timerTextForms(forms, "", nullptr);
    int id = detail::addKeyedNode(*env_, {first_, second_}, "Keyed Broadcast Process", std::move(states),
                                  std::move(forms), true,
                                  [factory, bs = states_](void* down) -> std::unique_ptr<Operator> {
                                    return std::make_unique<detail::KeyedBroadcastProcessOp<Fn>>(factory(), bs, down);
                                  });
    env_->node(id).operatorState = true;  // the broadcast states
    env_->node(id).broadcastStates = states_.infos();
    return DataStream<typename Fn::OutputType>(*env_, id);
  }

 private:
  StreamEnvironment* env_;
  int first_, second_;  // the keyed exchange, the broadcast exchange
  detail::BroadcastStates states_;
};

template <class T>
template <class... Descriptors>
BroadcastStream<T> DataStream<T>::broadcast(const Descriptors&... descriptors) const {
  static_assert(sizeof...(Descriptors) > 0, "broadcast() needs the descriptors of the broadcast states to keep");
  detail::BroadcastStates states;
  auto declare = [&states]<class K, class V>(const BroadcastStateDescriptor<K, V>& d) {
    states.declare(d.name(), detail::serializerName<K>(), detail::serializerName<V>());
  };
  (declare(descriptors), ...);
  return BroadcastStream<T>(*env_, node_, tag_, std::move(states));
}

template <class T>
template <class U>
BroadcastConnectedStreams<T, U> DataStream<T>::connect(const BroadcastStream<U>& broadcastStream) {
  PlanNode a = unkeyedExchange("Rebalance");
  env_->attach(a, node_, tag_);
  int ia = env_->addNode(std::move(a));
  int ib = broadcastStream.exchange();
  return BroadcastConnectedStreams<T, U>(*env_, ia, ib, broadcastStream.states());
}

template <class K, class T>
template <class U>
KeyedBroadcastConnectedStreams<K, T, U> KeyedStream<K, T>::connect(const BroadcastStream<U>& broadcastStream) {
  int ib = broadcastStream.exchange();
  return KeyedBroadcastConnectedStreams<K, T, U>(*env_, node_, ib, broadcastStream.states());
}

template <class T>
template <class U>
ConnectedStreams<T, U> DataStream<T>::connect(const DataStream<U>& other) {
  // Each input reaches the co-process function through an unkeyed exchange.
  PlanNode a = unkeyedExchange("Rebalance"), b = DataStream<U>::unkeyedExchange("Rebalance");
  env_->attach(a, node_, tag_);
  env_->attach(b, other.nodeId(), other.tag());
  int ia = env_->addNode(std::move(a));
  int ib = env_->addNode(std::move(b));
  return ConnectedStreams<T, U>(*env_, ia, ib);
}

template <class K, class T>
WindowedStream<K, T> KeyedStream<K, T>::window(WindowAssigner assigner) {
  return WindowedStream<K, T>(*env_, node_, assigner);
}

template <class K, class T>
template <class U>
KeyedConnectedStreams<K, T, U> KeyedStream<K, T>::connect(const KeyedStream<K, U>& other) {
  return KeyedConnectedStreams<K, T, U>(*env_, node_, other.nodeId());
}

template <class K, class T>
template <class U>
IntervalJoin<K, T, U> KeyedStream<K, T>::intervalJoin(const KeyedStream<K, U>& other) {
  return IntervalJoin<K, T, U>(*env_, node_, other.nodeId());
}

template <class T>
DataStream<T> StreamEnvironment::addSource(std::function<std::unique_ptr<SourceFunction<T>>()> factory,
                                           std::string name) {
  PlanNode n;
  n.kind = NodeKind::kSource;
  n.name = std::move(name);
  n.create = [factory](void* down) -> std::unique_ptr<Operator> {
    return std::make_unique<detail::SourceOp<T>>(factory(), down);
  };
  return DataStream<T>(*this, addNode(std::move(n)));
}

template <class T>
DataStream<T> StreamEnvironment::fromGenerator(uint64_t count, std::function<T(uint64_t)> fn,
                                               double perSecond) {
  return addSource<T>(
      [count, fn, perSecond] { return std::make_unique<GeneratorSource<T>>(count, fn, perSecond); },
      "Generator Source");
}

template <class S>
DataStream<typename S::ElementType> StreamEnvironment::fromSource(
    const S& source, const WatermarkStrategy<typename S::ElementType>& strategy, std::string name) {
  PlanNode n = source.planNode(&strategy, planOnly_);
  n.name = std::move(name);
  return DataStream<typename S::ElementType>(*this, addNode(std::move(n)));
}
template <class S>
DataStream<typename S::ElementType> StreamEnvironment::fromSource(const S& source, std::string name) {
  PlanNode n = source.planNode(nullptr, planOnly_);
  n.name = std::move(name);
  return DataStream<typename S::ElementType>(*this, addNode(std::move(n)));
}
inline DataStream<std::string> StreamEnvironment::socketTextStream(std::string host, int port) {
  if (port <= 0 || port > 65535)
    throw JobArgumentError("socket port must be between 1 and 65535, got " + std::to_string(port));
  return addSource<std::string>(
      [host, port] { return std::make_unique<SocketTextSource>(host, port); }, "Socket Stream");
}

inline DataStream<std::string> StreamEnvironment::readTextFiles(std::string dir, std::chrono::milliseconds monitorInterval,
                                                                 double linesPerSecond) {
  std::error_code ec;
  if (!planOnly_ && !std::filesystem::is_directory(dir, ec))
    throw JobArgumentError("input directory '" + dir + "' does not exist or is not a directory");
  if (monitorInterval.count() < 0) throw JobArgumentError("the monitor interval must not be negative");
  return addSource<std::string>(
      [dir, monitorInterval, linesPerSecond] {
        return std::make_unique<DirectorySource>(dir, monitorInterval, linesPerSecond);
      },
      monitorInterval.count() > 0 ? "Continuous File Source" : "Directory Source");
}

inline DataStream<std::string> StreamEnvironment::readTextFile(std::string path, double linesPerSecond) {
  if (planOnly_) {
    // the plan is only looked at: the file need not exist here (it is opened when a run starts)
  } else if (FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fclose(f);
  } else {
    throw JobArgumentError("cannot read input file '" + path + "': " + std::strerror(errno));
  }
  return addSource<std::string>(
      [path, linesPerSecond] { return std::make_unique<TextFileSource>(path, linesPerSecond); },
      "Text File Source");
}

}  // namespace jobhost
