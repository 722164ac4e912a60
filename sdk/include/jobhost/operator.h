// jobhost/operator.h — the contract between plugin code and the host's runtime.
//
// Job authors rarely use this file directly: the fluent API in stream.h builds a Plan
// of PlanNodes whose factories create Operators. The host cuts the plan into stages at
// every keyBy, runs one thread per (stage, subtask), chains the operators of a stage
// with direct calls (each operator's input is a Collector<In>), and moves records
// across a keyBy as bytes through bounded queues.
//
// Thread-safety: an Operator instance is used by one task thread only. Context objects
// are owned by the host and outlive the operators they are given to.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/errors.h"

namespace jobhost {

/// Receives the records an operator emits. Operators implement Collector<In> for their
/// own input, so a chain is a series of direct virtual calls.
template <class T>
class Collector {
 public:
  virtual ~Collector() = default;
  virtual void collect(const T& value) = 0;
};

/// Time in jobhost is milliseconds since the epoch, as in Flink. A record without an
/// event timestamp carries kNoTimestamp; watermarks run from kMinWatermark (nothing
/// known yet) to kMaxWatermark (the input has ended: every event-time timer fires).
inline constexpr int64_t kNoTimestamp = INT64_MIN;
inline constexpr int64_t kMinWatermark = INT64_MIN;
inline constexpr int64_t kMaxWatermark = INT64_MAX;

/// Byte-level timers of one keyed operator in one subtask, implemented by the host.
/// A timer is keyed state: one per (current key, namespace, time) — registering it again
/// is a no-op — stored in the operator's state backend per key group, in every
/// checkpoint and savepoint, and redistributed with its key group when the job is
/// rescaled. Event-time timers fire when the operator's watermark reaches their time,
/// processing-time timers when the wall clock does (also those that fell due while the
/// job was down: right after the restore). The host calls Operator::onEventTime /
/// onProcessingTime with the timer's key set as the current key.
/// Every call applies to the current key; outside a keyed context it throws StateError.
class InternalTimerService {
 public:
  virtual ~InternalTimerService() = default;
  /// The operator's current event-time watermark (kMinWatermark before the first).
  virtual int64_t currentWatermark() const = 0;
  /// Wall-clock milliseconds since the epoch.
  virtual int64_t currentProcessingTime() const = 0;
  virtual void registerEventTimeTimer(std::string_view ns, int64_t time) = 0;
  virtual void deleteEventTimeTimer(std::string_view ns, int64_t time) = 0;
  virtual void registerProcessingTimeTimer(std::string_view ns, int64_t time) = 0;
  virtual void deleteProcessingTimeTimer(std::string_view ns, int64_t time) = 0;
};

enum class StateKind : uint8_t { kValue = 0, kList = 1, kMap = 2 };

inline const char* stateKindName(StateKind k) {
  switch (k) {
    case StateKind::kValue: return "ValueState";
    case StateKind::kList: return "ListState";
    case StateKind::kMap: return "MapState";
  }
  return "?";
}

/// A declared keyed state: its name (unique within the operator), kind and serializers.
/// Recorded in checkpoint metadata and compared on restore.
struct StateDescriptorInfo {
  std::string name;
  StateKind kind = StateKind::kValue;
  std::string keySerializer;  // the operator's key type
  uint32_t keySerializerVersion = 0;
  std::string userKeySerializer;  // MapState only
  uint32_t userKeySerializerVersion = 0;
  std::string valueSerializer;  // element type for ListState
  uint32_t valueSerializerVersion = 0;
};

/// A broadcast state an operator takes (broadcast(descriptor)): its name and the
/// serializers of its keys and values as the state records them ("string v1").
struct BroadcastStateInfo {
  std::string name;
  std::string keySerializer;
  std::string valueSerializer;
};

class ByteReader;  // serializer.h

/// How the bytes of a user's serializer print, for `jobhost state dump|diff`
/// (serializer_text.h). The SDK records one per non-built-in type in keyed state.
struct SerializerTextForm {
  std::string id;
  uint32_t version = 0;
  /// Reads one value from r and appends its text (as the print sink shows it) to out.
  std::function<void(ByteReader& r, std::string& out)> append;
};

/// Byte-level keyed state of one stateful operator in one subtask, implemented by the
/// host's state backends. Every call applies to the current key, which the host sets
/// before each record reaches a keyed operator. Values are opaque bytes encoded by the
/// typed wrappers in state.h. Calling these outside a keyed context throws StateError.
class KeyedStateAccess {
 public:
  virtual ~KeyedStateAccess() = default;
  /// Declares a state and returns its handle. Declaring the same name again with the
  /// same descriptor returns the same handle; with another kind throws StateError.
  virtual int registerState(const StateDescriptorInfo& descriptor) = 0;
  /// ValueState/ListState: the current key's whole value, not copied: `*out` stays valid
  /// until the next call on this object. Returns false when absent.
  virtual bool get(int state, std::string_view* out) = 0;
  /// The same, copied into `out`.
  bool get(int state, std::string& out) {
    std::string_view v;
    if (!get(state, &v)) return false;
    out.assign(v);
    return true;
  }
  virtual void put(int state, std::string_view value) = 0;
  /// ListState: appends one encoded element (length-prefixed by the caller).
  virtual void append(int state, std::string_view encodedElement) = 0;
  /// Removes the current key's entry (all map entries for MapState).
  virtual void clear(int state) = 0;
  /// MapState access under the current key.
  /// `*out` stays valid until the next call on this object.
  virtual bool mapGet(int state, std::string_view userKey, std::string_view* out) = 0;
  /// The same, copied into `out`.
  bool mapGet(int state, std::string_view userKey, std::string& out) {
    std::string_view v;
    if (!mapGet(state, userKey, &v)) return false;
    out.assign(v);
    return true;
  }
  virtual void mapPut(int state, std::string_view userKey, std::string_view value) = 0;
  virtual void mapRemove(int state, std::string_view userKey) = 0;
  /// Visits every entry of the current key's map, in an unspecified order, until fn
  /// returns false.
  virtual void mapForEach(int state,
                          const std::function<bool(std::string_view, std::string_view)>& fn) = 0;
  /// MapState whose values are lists: appends one encoded element (length-prefixed by
  /// the caller) to the value under `userKey`, creating it; does not read the value.
  virtual void mapAppend(int state, std::string_view userKey, std::string_view encodedElement) = 0;
};

/// Thread-safe line output owned by the host (stdout, or a text file).
class LineSink {
 public:
  virtual ~LineSink() = default;
  virtual void writeLine(std::string_view line) = 0;
};

/// Where a keyBy sends records: the host routes each by the key group of its key bytes.
/// The host carries each record's event timestamp (OperatorContext::currentTimestamp)
/// across the exchange with it.
class ExchangeWriter {
 public:
  virtual ~ExchangeWriter() = default;
  virtual void emit(std::string_view keyBytes, std::string_view recordBytes) = 0;
  /// Not keyed (union, connect of unkeyed streams): the host picks the receiving subtask
  /// (the same index when both sides have the same parallelism, else round-robin), or
  /// sends it to every one of them (PlanNode::broadcastExchange).
  virtual void emitAny(std::string_view recordBytes) = 0;
};

/// What the host tells an operator about where it runs.
class OperatorContext {
 public:
  virtual ~OperatorContext() = default;
  virtual int subtaskIndex() const = 0;    // 0-based
  virtual int parallelism() const = 0;     // of this operator
  virtual int maxParallelism() const = 0;  // number of key groups
  virtual const std::string& operatorName() const = 0;
  virtual const std::string& uid() const = 0;
  /// The keyed state of this operator; throws StateError for a non-keyed operator.
  virtual KeyedStateAccess& keyedState() = 0;
  /// Serialized key of the record being processed (empty outside a keyed context).
  virtual std::string_view currentKey() const = 0;
  /// Exchange receivers set the key of each record before passing it on.
  virtual void setCurrentKey(std::string_view keyBytes) = 0;
  /// For the sending side of a keyBy.
  virtual ExchangeWriter& exchange() = 0;
  virtual LineSink& stdoutSink() = 0;
  virtual LineSink& fileSink(const std::string& path) = 0;
  /// True once the job is being cancelled; long-running sources should return.
  virtual bool cancelled() const = 0;
  /// Where the SDK records which operator of this task is running user code, so a crash
  /// report can name it. May be null.
  virtual std::atomic<const char*>* activeOperatorSlot() { return nullptr; }

  // --- Event time (issue 14). The host keeps one "current record" per task: the key
  // above and the record's event timestamp below, set before a record or a timer reaches
  // an operator and carried across exchanges.
  /// The event timestamp of the record being processed; kNoTimestamp if it has none.
  virtual int64_t currentTimestamp() const = 0;
  /// Sets the timestamp of the records this operator emits next (and that its downstream
  /// operators see), e.g. a watermark assigner or a window firing.
  virtual void setCurrentTimestamp(int64_t timestamp) = 0;
  /// This operator's watermark: the minimum over its inputs (kMinWatermark at first).
  virtual int64_t currentWatermark() const = 0;
  /// Keyed operators that use timers (PlanNode::timers); throws StateError otherwise.
  virtual InternalTimerService& timerService() = 0;
  /// A watermark assigner (PlanNode::watermarkAssigner): the watermark of its output.
  /// Watermarks only advance; an older one is ignored.
  virtual void emitWatermark(int64_t watermark) = 0;
  /// A watermark assigner whose input has been idle for its idleness timeout: while
  /// idle, downstream tasks do not wait for its watermark. Emitting a record or a
  /// watermark makes it active again.
  virtual void markIdle() = 0;
  /// The input of the consumer of side output `tagId` in this task, as Collector<T>*
  /// type-erased (T: the tag's type); nullptr when no operator consumes that output.
  virtual void* sideOutput(const std::string& tagId) = 0;
  /// execution.checkpointing.interval in milliseconds; 0 when the job takes no periodic
  /// checkpoints (a sink checks its transaction timeout against it, KafkaSink).
  virtual int64_t checkpointIntervalMs() const = 0;

  // --- Operators that hold records of several keys in memory before they reach keyed
  // state (issue 33: a window's mini-batch).
  /// The key group of the current key (-1 outside a keyed context).
  virtual int currentKeyGroup() const { return -1; }
  /// Makes `keyBytes` of key group `keyGroup` (what currentKeyGroup() returned while that
  /// key was current) the current key of this task's keyed state and timers.
  virtual void setCurrentKeyAndGroup(int keyGroup, std::string_view keyBytes) {
    throw StateError("operator '" + operatorName() + "' is not keyed: it has no key to set");
  }
  /// pipeline.window.mini-batch.size: how many (key, pane) accumulators an event-time
  /// aggregate or reduce window may hold in memory before writing them to keyed state;
  /// 0: none (every record goes to state).
  virtual size_t windowMiniBatchSize() const { return 0; }
};

/// One operator instance in one subtask.
class Operator {
 public:
  virtual ~Operator() = default;
  /// This operator's input as `Collector<In>*`, type-erased; nullptr for sources.
  virtual void* input() { return nullptr; }
  virtual void open(OperatorContext& ctx) {}
  /// Called once when all input has arrived (bounded input), before close().
  virtual void endInput() {}
  virtual void close() {}
  /// Operator (non-keyed) state, e.g. a source's read position or a watermark
  /// generator's progress. Called between records when a checkpoint barrier passes;
  /// restored before open(). After a change of parallelism, restoreState() is called
  /// once for every subtask's snapshot (as Flink's union list state) and the operator
  /// merges them (PlanNode::operatorState).
  virtual std::string snapshotState() { return {}; }
  virtual void restoreState(std::string_view state) {}
  /// A two-input operator's second input as `Collector<In2>*`; nullptr otherwise.
  virtual void* input2() { return nullptr; }
  /// An event-time timer of this operator is due (its time <= the watermark). The host
  /// has set the timer's key as the current key and its time as the current timestamp.
  virtual void onEventTime(int64_t time, std::string_view ns) {}
  /// A processing-time timer is due; the current timestamp is kNoTimestamp.
  virtual void onProcessingTime(int64_t time, std::string_view ns) {}
  /// The operator's watermark advanced to `watermark`, after its event-time timers up
  /// to it fired. The host forwards it downstream afterwards (not past a watermark
  /// assigner, which emits its own).
  virtual void onWatermark(int64_t watermark) {}
  /// Called every pipeline.auto-watermark-interval on watermark assigners.
  virtual void onPeriodicEmit() {}

  // --- Checkpoints (issue 15): for operators whose node has twoPhaseCommit or
  // checkpointListener set.
  /// Right before snapshotState() for checkpoint `checkpointId`, on the task thread. It
  /// and snapshotState() must not emit: the checkpoint's barrier has already been sent
  /// downstream (as in Flink), so a record emitted now would belong after it.
  virtual void beforeSnapshot(uint64_t checkpointId) {}
  /// Checkpoint `checkpointId` is complete (its `_metadata` is durable), or was aborted.
  /// On the task thread, between records, after every checkpoint before it was notified.
  virtual void notifyCheckpointComplete(uint64_t checkpointId) {}
  virtual void notifyCheckpointAborted(uint64_t checkpointId) {}

  // --- Operators that hold records in memory before they reach keyed state (issue 33:
  // a window's mini-batch). Both are called on the task thread between records; they may
  // change the current key (the host sets it again before the next record or timer) and
  // must not emit.
  /// Checkpoint `checkpointId` is about to be snapshotted (Flink's
  /// prepareSnapshotPreBarrier): write what is held into keyed state and timers, so that
  /// the snapshot has it.
  virtual void prepareSnapshotPreBarrier(uint64_t checkpointId) {}
  /// The operator's watermark is about to advance to `watermark`: its event-time timers
  /// up to it fire right after this call. Write into keyed state and timers what those
  /// timers need.
  virtual void prepareWatermark(int64_t watermark) {}
};

enum class PollStatus { kMore, kIdle, kEnd };

/// The first operator of a source stage. The host calls poll() in a loop; between two
/// calls it may take a checkpoint, so each poll must leave the source at a record
/// boundary whose position snapshotState() can describe.
class SourceOperator : public Operator {
 public:
  /// Emits zero or more records. kIdle: nothing available now (the host flushes
  /// buffers and polls again); kEnd: the bounded input is exhausted.
  virtual PollStatus poll() = 0;
};

/// The receiving side of a keyBy: decodes a record and passes it down the chain. The
/// host has set the current key before calling receive().
class ExchangeReceiver : public Operator {
 public:
  virtual void receive(std::string_view recordBytes) = 0;
};

enum class NodeKind : uint8_t { kSource, kOperator, kExchange, kSink };

/// One node of a job's plan. Factories are called once per subtask, downstream-first:
/// `downstream` is the next node's input() (a Collector<Out>*), nullptr for sinks.
struct PlanNode {
  int id = -1;
  NodeKind kind = NodeKind::kOperator;
  std::string name;         // for people: "Flat Map", "Keyed Reduce", ...
  std::string uid;          // stable id; state is mapped by it on restore
  bool uidExplicit = false;
  int input = -1;           // upstream node id; -1 for sources
  bool keyed = false;       // has keyed state
  std::vector<StateDescriptorInfo> states;
  /// Keyed: the text forms of the user types in its key and states (for reading
  /// snapshots without running the job; serializer_text.h).
  std::vector<SerializerTextForm> textForms;
  std::string keySerializer;  // kExchange: the key type
  std::function<std::unique_ptr<Operator>(void* downstream)> create;
  /// kExchange only: the sending side ends the upstream chain.
  std::function<std::unique_ptr<Operator>()> createSender;

  // --- Graphs beyond a chain (issue 14).
  /// Every upstream node, in input order; `input` is the first. Several for a union
  /// (kExchange, each input runs a sender) and for a two-input operator (exactly two,
  /// both kExchange; its first input arrives at input(), the second at input2()).
  std::vector<int> inputs;
  /// Per input: which output of it this node consumes: empty for the main output, else
  /// a side output's OutputTag::key(). An output may feed any number of nodes.
  std::vector<std::string> inputTags;
  /// Fan-out (issue 33): per output of this node (empty key: the main output, else a
  /// side output's tag key), makes the collector the node writes to when several nodes
  /// read that output: its input() passes each record to every reader's input (the
  /// `void*` inputs, in plan order). Set by the SDK for every output it hands out as a
  /// stream, where it knows the element type.
  std::map<std::string, std::function<std::unique_ptr<Operator>(std::vector<void*> readers)>> fanOut;
  /// kExchange: true for keyBy (records routed by key group), false for a union or the
  /// input of an unkeyed two-input operator (ExchangeWriter::emitAny).
  bool keyedExchange = true;
  /// Keyed operators whose timers the host keeps (two states "_timer_state/…" in
  /// `states`, see InternalTimerService).
  bool timers = false;
  /// Generates watermarks: upstream watermarks stop here (but kMaxWatermark, the end of
  /// input, which it forwards); onPeriodicEmit() is called periodically.
  bool watermarkAssigner = false;
  /// Has non-keyed operator state besides a source position (snapshotState()).
  bool operatorState = false;
  /// A transactional sink (issue 15): gets beforeSnapshot() and the checkpoint
  /// notifications, and a bounded job that has one ends with a final checkpoint after its
  /// sources ended, so everything it wrote is committed at the end exactly once.
  bool twoPhaseCommit = false;

  // --- Sources that split their input (issue 32).
  /// kSource: runs `parallelism.default` subtasks instead of one; each subtask reads its
  /// own share of the input (KafkaSource: the partitions it owns). Its position is
  /// per subtask; after a change of parallelism every subtask gets every former subtask's
  /// position (restoreState() once per non-empty one, as Flink's union list state) and
  /// keeps what it now owns.
  bool parallelSource = false;
  /// Gets beforeSnapshot() and notifyCheckpointComplete()/notifyCheckpointAborted() on its
  /// task thread, like a transactional sink, without the final checkpoint of
  /// twoPhaseCommit (a source committing its offsets to Kafka for monitoring).
  bool checkpointListener = false;
  /// A source whose position names what it reads (KafkaSource: topics and partitions):
  /// what the class subscribes to, in the text form jobhost/kafka_splits.h defines, so
  /// that the restore check compares a snapshot's positions with it without running the
  /// source. Empty for other sources.
  std::string subscription;

  // --- Broadcast (issue 33).
  /// kExchange, not keyed: every record goes to every receiving subtask
  /// (DataStream::broadcast), not to one of them.
  bool broadcastExchange = false;
  /// A (keyed) broadcast function: the broadcast states it takes, so that a restore
  /// compares a snapshot's with them before anything is restored.
  std::vector<BroadcastStateInfo> broadcastStates;
};

/// The dataflow a job's build() defined.
struct Plan {
  std::vector<PlanNode> nodes;
};

}  // namespace jobhost
