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
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "jobhost/format.h"
#include "jobhost/operator.h"
#include "jobhost/serializer.h"
#include "jobhost/sources.h"
#include "jobhost/state.h"

namespace jobhost {

/// The job's command-line arguments (everything after the plugin path).
class JobArgs {
 public:
  JobArgs() = default;
  explicit JobArgs(std::vector<std::string> args) : args_(std::move(args)) {}
  const std::vector<std::string>& all() const { return args_; }
  /// Value of `--name VALUE` or `--name=VALUE`; nullopt when absent. A flag given
  /// without a value throws JobArgumentError.
  std::optional<std::string> get(const std::string& name) const {
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
  bool has(const std::string& name) const {
    return std::find(args_.begin(), args_.end(), name) != args_.end();
  }

 private:
  std::vector<std::string> args_;
};

template <class T>
class DataStream;
template <class K, class T>
class KeyedStream;

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
  /// `count` records fn(0), fn(1), ... (count 0 = unbounded); deterministic, its
  /// sequence number is checkpointed. `perSecond` > 0 throttles.
  template <class T>
  DataStream<T> fromGenerator(uint64_t count, std::function<T(uint64_t)> fn, double perSecond = 0);
  /// A user-defined source: `factory` creates one SourceFunction<T> per run.
  template <class T>
  DataStream<T> addSource(std::function<std::unique_ptr<SourceFunction<T>>()> factory,
                          std::string name = "Custom Source");

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
  /// Internal: marks `id` as consumed; a stream can feed one operator only.
  void consume(int id) {
    if (consumed_.size() <= static_cast<size_t>(id)) consumed_.resize(static_cast<size_t>(id) + 1);
    if (consumed_[static_cast<size_t>(id)])
      throw JobArgumentError("the output of '" + node(id).name +
                             "' is used twice; one stream can feed one operator in this version");
    consumed_[static_cast<size_t>(id)] = true;
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
  std::vector<bool> consumed_;
  bool planOnly_ = false;  // last: plugins built against earlier headers see the same layout before it
};

namespace detail {

/// Remembers the operator's name so exceptions from user code can name it, and marks
/// the operator as active while its user code runs (for crash reports).
class NamedOp : public Operator {
 public:
  void open(OperatorContext& ctx) override {
    name_ = ctx.operatorName();
    slot_ = ctx.activeOperatorSlot();
  }

 protected:
  template <class F>
  decltype(auto) invoke(F&& f) {
    struct Mark {
      std::atomic<const char*>* slot;
      const char* previous;
      Mark(std::atomic<const char*>* s, const char* name) : slot(s), previous(s ? s->exchange(name, std::memory_order_relaxed) : nullptr) {}
      ~Mark() {
        if (slot) slot->store(previous, std::memory_order_relaxed);
      }
    } mark(slot_, name_.c_str());
    return callUser(name_, std::forward<F>(f));
  }
  std::string name_;
  std::atomic<const char*>* slot_ = nullptr;
};

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
    invoke([&] { fn_->open(ctx); });
  }
  void collect(const In& v) override { invoke([&] { fn_->processElement(v, *keyed_, *down_); }); }
  void close() override { invoke([&] { fn_->close(); }); }

 private:
  std::unique_ptr<Fn> fn_;
  Collector<Out>* down_;
  std::optional<KeyedContext<K>> keyed_;
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

}  // namespace detail

/// A stream of T produced by one plan node.
template <class T>
class DataStream {
 public:
  DataStream(StreamEnvironment& env, int node) : env_(&env), node_(node) {}

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
  /// Partitions by key: f(const T&) -> K; K and T need Serializers.
  template <class F, class K = std::decay_t<std::invoke_result_t<F, const T&>>>
  KeyedStream<K, T> keyBy(F f) {
    env_->consume(node_);
    PlanNode n;
    n.kind = NodeKind::kExchange;
    n.name = "Key By";
    n.input = node_;
    n.keySerializer = Serializer<K>::id();
    n.createSender = [f]() -> std::unique_ptr<Operator> {
      return std::make_unique<detail::ExchangeSenderOp<T, K, F>>(f);
    };
    n.create = [](void* down) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::ExchangeReceiverOp<T>>(down);
    };
    return KeyedStream<K, T>(*env_, env_->addNode(std::move(n)));
  }
  /// Prints each record as a line to stdout; with parallelism > 1 prefixed by the
  /// 1-based subtask index and "> ", as Flink's print().
  void print() { sink("Print to Std. Out", std::nullopt); }
  /// Appends each record as a line to a text file (same format as print()).
  void writeAsText(std::string path) { sink("Text File Sink", std::move(path)); }
  /// Calls f(const T&) for each record.
  template <class F>
  void addSink(F f, std::string name = "Custom Sink") {
    env_->consume(node_);
    PlanNode n;
    n.kind = NodeKind::kSink;
    n.name = std::move(name);
    n.input = node_;
    n.create = [f](void*) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::FunctionSinkOp<T, F>>(f);
    };
    env_->addNode(std::move(n));
  }

  StreamEnvironment& environment() const { return *env_; }
  int nodeId() const { return node_; }

 private:
  template <class U, class Factory>
  DataStream<U> chain(const char* name, Factory factory) {
    env_->consume(node_);
    PlanNode n;
    n.kind = NodeKind::kOperator;
    n.name = name;
    n.input = node_;
    n.create = std::move(factory);
    return DataStream<U>(*env_, env_->addNode(std::move(n)));
  }
  void sink(const char* name, std::optional<std::string> path) {
    env_->consume(node_);
    PlanNode n;
    n.kind = NodeKind::kSink;
    n.name = name;
    n.input = node_;
    n.create = [path](void*) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::LineSinkOp<T>>(path);
    };
    env_->addNode(std::move(n));
  }

  StreamEnvironment* env_;
  int node_;
};

/// A stream partitioned by key K. Keyed operations keep state per key.
template <class K, class T>
class KeyedStream {
 public:
  KeyedStream(StreamEnvironment& env, int node) : env_(&env), node_(node) {}

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
  /// A keyed process function; `factory` creates one instance per subtask (default:
  /// Fn's default constructor). Fn's declared states are read from one instance at
  /// plan time.
  template <class Fn>
  DataStream<typename Fn::OutputType> process(
      std::function<std::unique_ptr<Fn>()> factory = [] { return std::make_unique<Fn>(); }) {
    static_assert(std::is_same_v<typename Fn::KeyType, K>,
                  "the process function's key type must be the keyBy key type");
    static_assert(std::is_same_v<typename Fn::InputType, T>,
                  "the process function's input type must be the stream's element type");
    std::vector<StateDescriptorInfo> states;
    std::vector<SerializerTextForm> forms;
    textFormsOf<K>(forms);
    {
      auto proto = factory();
      for (const StateBase* s : proto->declaredStates()) {
        states.push_back(s->descriptor(Serializer<K>::id(), Serializer<K>::version()));
        s->collectTextForms(forms);
      }
    }
    return keyedNode<typename Fn::OutputType>(
        "Keyed Process", std::move(states), std::move(forms), [factory](void* down) -> std::unique_ptr<Operator> {
          return std::make_unique<detail::ProcessOp<Fn>>(factory(), down);
        });
  }

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
    env_->consume(node_);
    PlanNode n;
    n.kind = NodeKind::kOperator;
    n.name = name;
    n.input = node_;
    n.keyed = true;
    n.states = std::move(states);
    n.textForms = std::move(forms);
    n.create = std::move(f);
    return DataStream<U>(*env_, env_->addNode(std::move(n)));
  }
  StreamEnvironment* env_;
  int node_;
};

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

inline DataStream<std::string> StreamEnvironment::socketTextStream(std::string host, int port) {
  if (port <= 0 || port > 65535)
    throw JobArgumentError("socket port must be between 1 and 65535, got " + std::to_string(port));
  return addSource<std::string>(
      [host, port] { return std::make_unique<SocketTextSource>(host, port); }, "Socket Stream");
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
