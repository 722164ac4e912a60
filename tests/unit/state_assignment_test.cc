// Unit tests of host/runtime/state_assignment: which state of a snapshot is restored
// where, skipped, kept or refused — the one decision both the preflight and
// JobExecution::prepare() follow.
#include "runtime/state_assignment.h"

#include <gtest/gtest.h>

#include "jobhost/broadcast.h"
#include "jobhost/kafka_splits.h"
#include "../support/contains.h"

#include <functional>
#include <string>
#include <vector>

namespace jobhost::host {
namespace {

using Action = StateAssignment::Action;
using StateFate = StateAssignment::StateFate;

StateDescriptorInfo valueState(const std::string& name) {
  StateDescriptorInfo d;
  d.name = name;
  d.kind = StateKind::kValue;
  d.keySerializer = "string";
  d.keySerializerVersion = 1;
  d.valueSerializer = "i64";
  d.valueSerializerVersion = 1;
  return d;
}

state::OperatorSnapshot keyedSnapshot(const std::string& uid, std::vector<StateDescriptorInfo> states) {
  state::OperatorSnapshot op;
  op.uid = uid;
  op.name = "Keyed Aggregation";
  op.keyed = true;
  op.states = std::move(states);
  state::SubtaskSnapshot sub;
  state::KeyGroupsStateHandle kg;
  kg.file = {"job/chk-5/" + uid + "-0.kg", 10};
  kg.range = {0, 127};
  kg.offsets.assign(128, 0);
  sub.keyed = kg;
  op.subtasks = {sub};
  return op;
}

state::OperatorSnapshot sourceSnapshot(const std::string& uid, const std::string& position) {
  state::OperatorSnapshot op;
  op.uid = uid;
  op.name = "Text File Source";
  state::SubtaskSnapshot sub;
  sub.operatorState = position;
  op.subtasks = {sub};
  return op;
}

/// An OperatorInfo with the fields most tests set (the rest default).
OperatorInfo operatorInfo(const std::string& uid, const std::string& name, bool keyed, bool source, int parallelism,
                          std::vector<StateDescriptorInfo> states = {}) {
  OperatorInfo o;
  o.uid = uid;
  o.name = name;
  o.keyed = keyed;
  o.source = source;
  o.parallelism = parallelism;
  o.states = std::move(states);
  return o;
}

OperatorInfo keyedOperator(const std::string& uid, std::vector<StateDescriptorInfo> states) {
  return operatorInfo(uid, "Keyed Aggregation", true, false, 1, std::move(states));
}

OperatorInfo sourceOperator(const std::string& uid) { return operatorInfo(uid, "Text File Source", false, true, 1); }

/// An unaligned checkpoint's in-flight records on exchange `uid`, sent to input `input`.
state::OperatorSnapshot inFlightSnapshot(const std::string& uid, int input = 0) {
  state::OperatorSnapshot op;
  op.uid = uid;
  op.name = "Key By";
  op.parallelism = 2;
  state::SubtaskSnapshot sub;
  sub.inputChannels.push_back({input, 0, std::string(19, 'r')});
  sub.inputChannels.push_back({input, 0, std::string(38, 'r')});
  op.subtasks = {sub};
  return op;
}

OperatorInfo broadcastExchange(const std::string& uid, int parallelism);

OperatorInfo exchange(const std::string& uid, int inputs = 1) {
  OperatorInfo info;
  info.uid = uid;
  info.name = "Key By";
  info.parallelism = 2;
  info.channelReceiver = true;
  info.inputs = inputs;
  return info;
}

OperatorInfo broadcastExchange(const std::string& uid, int parallelism) {
  OperatorInfo info = exchange(uid);
  info.broadcastReceiver = true;
  info.parallelism = parallelism;
  return info;
}

/// A snapshot, a plan, -n or not, and what must be decided for the snapshot's operator
/// `uid`.
struct Case {
  std::string what;
  std::vector<state::OperatorSnapshot> snapshot;
  std::vector<OperatorInfo> plan;
  bool allowNonRestoredState;
  std::string uid;
  Action action;
  std::vector<std::string> mentions;  // in the operator's reason
};

TEST(StateAssignment, EachSnapshotOperatorIsRestoredSkippedOrRefusedAsTheRulesSay) {
  const auto counts = keyedSnapshot("counts", {valueState("reduce")});
  const auto lines = sourceSnapshot("lines", std::string(8, '\x01'));
  const auto socket = sourceSnapshot("ticks", "");  // a source without a position
  const std::vector<Case> cases = {
      {"keyed state into the keyed operator with its uid", {counts},
       {sourceOperator("lines"), keyedOperator("counts", {valueState("reduce")})}, false, "counts",
       Action::kRestoreKeyedState, {}},
      {"a position into the source with its uid", {lines}, {sourceOperator("lines")}, false, "lines",
       Action::kRestoreSourcePosition, {}},
      {"a stateless operator the class lacks is fine", {socket}, {keyedOperator("counts", {})}, false, "ticks",
       Action::kSkip, {"'ticks'", "holds no state"}},
      {"a stateless operator whose uid changed role is fine", {socket}, {keyedOperator("ticks", {})}, false, "ticks",
       Action::kSkip, {"holds no state"}},
      {"keyed state of a uid the class lacks is an error", {counts}, {sourceOperator("lines")}, false, "counts",
       Action::kError,
       {"operator uid 'counts' (Keyed Aggregation)", "keyed state: ValueState 'reduce'", "no operator of the job",
        "its stateful operators: 'lines'", "--allow-non-restored-state (-n)"}},
      {"keyed state of a uid the class lacks is skipped with -n", {counts}, {sourceOperator("lines")}, true, "counts",
       Action::kSkip, {"'counts'", "--allow-non-restored-state is set"}},
      {"a position of a uid the class lacks is an error", {lines}, {keyedOperator("counts", {})}, false, "lines",
       Action::kError, {"'lines'", "a source position", "its stateful operators: 'counts'", "-n"}},
      {"keyed state whose uid is now a source is an error", {counts}, {sourceOperator("counts")}, false, "counts",
       Action::kError,
       {"holds keyed state: ValueState 'reduce'", "that uid is the source 'Text File Source'",
        "restores only a source position", "another uid", "--allow-non-restored-state (-n)"}},
      {"keyed state whose uid is now a source is skipped with -n", {counts}, {sourceOperator("counts")}, true,
       "counts", Action::kSkip, {"keyed state", "the source 'Text File Source'", "--allow-non-restored-state is set"}},
      {"a position whose uid is now a keyed operator is an error", {lines}, {keyedOperator("lines", {})}, false,
       "lines", Action::kError,
       {"holds a source position", "that uid is the keyed operator 'Keyed Aggregation'", "restores only keyed state",
        "-n"}},
      {"a position whose uid is now a keyed operator is skipped with -n", {lines}, {keyedOperator("lines", {})}, true,
       "lines", Action::kSkip, {"a source position", "--allow-non-restored-state is set"}},
      {"a keyed handle without declared states still counts as state", {keyedSnapshot("audit", {})},
       {sourceOperator("lines")}, false, "audit", Action::kError, {"'audit'", "keyed state"}},
      // Unaligned checkpoints: in-flight records go to the exchange with their uid.
      {"in-flight records into the exchange with their uid", {inFlightSnapshot("by-word")},
       {keyedOperator("counts", {}), exchange("by-word")}, false, "by-word", Action::kRestoreChannelState, {}},
      {"in-flight records of an exchange the job lacks are an error", {inFlightSnapshot("by-word")},
       {keyedOperator("counts", {}), exchange("by-user")}, false, "by-word", Action::kError,
       {"operator uid 'by-word' (Key By)", "in-flight records of an unaligned checkpoint", "2 buffers, 57 bytes",
        "no exchange of the job has that uid", "the job's shape changed", "aligned savepoint",
        "--allow-non-restored-state (-n)"}},
      {"in-flight records of an exchange the job lacks are dropped with -n", {inFlightSnapshot("by-word")},
       {exchange("by-user")}, true, "by-word", Action::kSkip,
       {"in-flight records", "are dropped", "never sees them"}},
      {"in-flight records whose uid now names a keyed operator are an error", {inFlightSnapshot("counts")},
       {keyedOperator("counts", {})}, false, "counts", Action::kError,
       {"the keyed operator 'Keyed Aggregation', not an exchange"}},
      {"in-flight records of an input the exchange no longer has are an error", {inFlightSnapshot("union", 1)},
       {exchange("union", 1)}, false, "union", Action::kError, {"input 2 of the exchange", "has 1"}},
      {"in-flight records of the second input of a union", {inFlightSnapshot("union", 1)}, {exchange("union", 2)},
       false, "union", Action::kRestoreChannelState, {}},
      {"in-flight records of a broadcast exchange at another parallelism are an error", {inFlightSnapshot("rules")},
       {broadcastExchange("rules", 3)}, false, "rules", Action::kError,
       {"broadcast exchange, written at parallelism 2 and restored at 3", "restore at parallelism 2",
        "aligned savepoint", "-n"}},
      {"in-flight records of a broadcast exchange at their parallelism", {inFlightSnapshot("rules")},
       {broadcastExchange("rules", 2)}, false, "rules", Action::kRestoreChannelState, {}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    state::CheckpointMetadata m;
    m.operators = c.snapshot;
    StateAssignment a = assignState(m, c.plan, c.allowNonRestoredState);
    ASSERT_EQ(a.operators.size(), c.snapshot.size());
    const StateAssignment::Operator* op = nullptr;
    for (const auto& o : a.operators)
      if (o.snapshot->uid == c.uid) op = &o;
    ASSERT_NE(op, nullptr);
    EXPECT_EQ(op->action, c.action) << op->reason;
    EXPECT_EQ(a.ok(), c.action != Action::kError) << op->reason;
    EXPECT_EQ(op->droppedState, c.action == Action::kSkip && c.allowNonRestoredState) << op->reason;
    for (const auto& m : c.mentions) EXPECT_TRUE(contains(op->reason, m)) << "expected '" << m << "' in: " << op->reason;
    if (c.action == Action::kError) {
      ASSERT_EQ(a.errors().size(), 1u);
      EXPECT_EQ(a.errors()[0], op->reason);
    } else {
      EXPECT_TRUE(a.errors().empty());
    }
  }
}

// A keyed broadcast function's snapshot (keyed state and its broadcast state, which is
// operator state) whose uid now names a keyed operator without operator state: the keyed
// state has its place there, the broadcast state none. Without -n one error that names
// what has no place; with -n the keyed state is restored and only the broadcast state
// dropped, with a note. (Before: the message called the keyed operator a source, and -n
// dropped the keyed state too.)
TEST(StateAssignment, BroadcastStateWithoutAPlaceIsRefusedOrDroppedAloneWithN) {
  auto thresholds = keyedSnapshot("thresholds", {valueState("counts")});
  thresholds.subtasks[0].operatorState = "jhbcast-bytes";
  state::CheckpointMetadata m;
  m.operators = {thresholds};
  const std::vector<OperatorInfo> plan = {keyedOperator("thresholds", {valueState("counts")})};

  StateAssignment refused = assignState(m, plan, false);
  ASSERT_EQ(refused.operators.size(), 1u);
  EXPECT_EQ(refused.operators[0].action, Action::kError);
  const std::string& why = refused.operators[0].reason;
  EXPECT_TRUE(contains(why, "operator state (a broadcast state)")) << why;
  EXPECT_TRUE(contains(why, "the keyed operator 'Keyed Aggregation'")) << why;
  EXPECT_TRUE(contains(why, "holds no operator state")) << why;
  EXPECT_TRUE(contains(why, "restore the keyed state and drop the operator state")) << why;
  EXPECT_FALSE(contains(why, "source")) << why;

  StateAssignment allowed = assignState(m, plan, true);
  ASSERT_EQ(allowed.operators.size(), 1u);
  const auto& op = allowed.operators[0];
  EXPECT_TRUE(allowed.ok());
  EXPECT_EQ(op.action, Action::kRestoreKeyedState) << op.reason;
  EXPECT_FALSE(op.withOperatorState);
  ASSERT_EQ(op.states.size(), 1u);
  EXPECT_EQ(op.states[0].fate, StateFate::kRestored);
  ASSERT_EQ(op.notes.size(), 1u);
  EXPECT_TRUE(contains(op.notes[0], "is dropped")) << op.notes[0];
  EXPECT_TRUE(contains(op.notes[0], "its keyed state is restored")) << op.notes[0];

  // Into a keyed broadcast function (operator state declared), both are restored.
  auto withBroadcast = plan;
  withBroadcast[0].operatorState = true;
  StateAssignment both = assignState(m, withBroadcast, false);
  ASSERT_EQ(both.operators.size(), 1u);
  EXPECT_EQ(both.operators[0].action, Action::kRestoreKeyedState) << both.operators[0].reason;
  EXPECT_TRUE(both.operators[0].withOperatorState);
  EXPECT_TRUE(both.operators[0].notes.empty());
}

/// The operator state a broadcast function with `states` (name, key, value) snapshots.
std::string broadcastBytes(const std::vector<BroadcastStateInfo>& states) {
  detail::BroadcastStates b;
  for (const auto& s : states) b.declare(s.name, s.keySerializer, s.valueSerializer);
  return b.snapshot();
}

TEST(StateAssignment, ABroadcastStateOfAnotherTypeOrNoBroadcastStateIsAnErrorBeforeAnythingIsRestored) {
  const std::vector<BroadcastStateInfo> written = {{"thresholds", "string v1", "i64 v1"}, {"labels", "i64 v1", "string v1"}};
  auto keyedWithRules = keyedSnapshot("apply", {valueState("counts")});
  keyedWithRules.subtasks[0].operatorState = broadcastBytes(written);
  auto unkeyedWithRules = sourceSnapshot("apply", broadcastBytes(written));
  unkeyedWithRules.name = "Broadcast Process";
  auto aPosition = sourceSnapshot("apply", std::string(8, '\x01'));  // not broadcast state
  auto keyedTarget = [](std::vector<BroadcastStateInfo> b) {
    OperatorInfo o = keyedOperator("apply", {valueState("counts")});
    o.operatorState = true;
    o.broadcastStates = std::move(b);
    return o;
  };
  auto unkeyedTarget = [](std::vector<BroadcastStateInfo> b) {
    OperatorInfo o = operatorInfo("apply", "Broadcast Process", false, false, 1);
    o.operatorState = true;
    o.broadcastStates = std::move(b);
    return o;
  };
  struct BroadcastCase {
    std::string what;
    state::OperatorSnapshot snapshot;
    OperatorInfo target;
    Action action;
    std::vector<std::string> mentions;
  };
  const std::vector<BroadcastCase> cases = {
      {"the same states: restored with the keyed state", keyedWithRules, keyedTarget(written),
       Action::kRestoreKeyedState, {}},
      {"a state the class no longer declares is kept (the SDK carries it on)", keyedWithRules,
       keyedTarget({written[0]}), Action::kRestoreKeyedState, {}},
      {"another value type", keyedWithRules, keyedTarget({{"thresholds", "string v1", "f64 v1"}}), Action::kError,
       {"operator uid 'apply'", "'thresholds'", "string v1 -> i64 v1", "string v1 -> f64 v1", "new uid"}},
      {"another key type, unkeyed function", unkeyedWithRules, unkeyedTarget({{"labels", "string v1", "string v1"}}),
       Action::kError, {"'labels'", "i64 v1 -> string v1", "string v1 -> string v1"}},
      {"the same states, unkeyed function", unkeyedWithRules, unkeyedTarget(written), Action::kRestoreSourcePosition,
       {}},
      {"operator state that is not broadcast state", aPosition, unkeyedTarget(written), Action::kError,
       {"operator uid 'apply'", "not broadcast state"}},
  };
  for (const auto& c : cases) {
    state::CheckpointMetadata m;
    m.operators = {c.snapshot};
    for (bool n : {false, true}) {  // -n drops nothing here: the operator is still there
      StateAssignment a = assignState(m, {c.target}, n);
      ASSERT_EQ(a.operators.size(), 1u) << c.what;
      EXPECT_EQ(a.operators[0].action, c.action) << c.what << (n ? " (-n)" : "") << ": " << a.operators[0].reason;
      for (const auto& word : c.mentions)
        EXPECT_TRUE(contains(a.operators[0].reason, word)) << c.what << ": '" << word << "' not in: " << a.operators[0].reason;
      EXPECT_EQ(a.ok(), c.action != Action::kError) << c.what;
    }
  }
}

TEST(StateAssignment, AStateTheClassNoLongerDeclaresIsKeptNotRead) {
  state::CheckpointMetadata m;
  m.operators = {keyedSnapshot("distinct", {valueState("distinct"), valueState("words")})};
  StateAssignment a = assignState(m, {keyedOperator("distinct", {valueState("distinct")})}, false);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a.operators.size(), 1u);
  const auto& op = a.operators[0];
  EXPECT_EQ(op.action, Action::kRestoreKeyedState);
  ASSERT_EQ(op.states.size(), 2u);
  EXPECT_EQ(op.states[0].descriptor->name, "distinct");
  EXPECT_EQ(op.states[0].fate, StateFate::kRestored);
  EXPECT_EQ(op.states[1].descriptor->name, "words");
  EXPECT_EQ(op.states[1].fate, StateFate::kKeptNotRead);
  EXPECT_EQ(a.find("distinct", Action::kRestoreKeyedState), &op);
  EXPECT_EQ(a.find("distinct", Action::kRestoreSourcePosition), nullptr);
}

TEST(StateAssignment, ADeclaredStateOfAnotherKindOrSerializerIsAnErrorEvenWithAllowNonRestoredState) {
  struct StateCase {
    std::string what;
    std::function<void(StateDescriptorInfo&)> change;
    std::vector<std::string> mentions;
  };
  const std::vector<StateCase> cases = {
      {"kind", [](StateDescriptorInfo& d) { d.kind = StateKind::kList; },
       {"operator 'counts'", "state 'reduce' is a ValueState in the snapshot", "class WordCount declares a ListState"}},
      {"value serializer", [](StateDescriptorInfo& d) { d.valueSerializerVersion = 2; },
       {"'reduce' was written as ValueState<i64 v1> keyed by string v1", "class WordCount declares ValueState<i64 v2>"}},
      {"key serializer", [](StateDescriptorInfo& d) { d.keySerializer = "i64"; }, {"keyed by i64 v1"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    state::CheckpointMetadata m;
    m.operators = {keyedSnapshot("counts", {valueState("reduce")})};
    StateDescriptorInfo declared = valueState("reduce");
    c.change(declared);
    for (bool n : {false, true}) {
      StateAssignment a = assignState(m, {keyedOperator("counts", {declared})}, n, "class WordCount");
      EXPECT_FALSE(a.ok());
      ASSERT_EQ(a.operators[0].states.size(), 1u);
      EXPECT_EQ(a.operators[0].states[0].fate, StateFate::kError);
      ASSERT_EQ(a.errors().size(), 1u);
      for (const auto& s : c.mentions) EXPECT_TRUE(contains(a.errors()[0], s)) << a.errors()[0];
    }
  }
}

TEST(StateAssignment, EveryOperatorOfTheSnapshotGetsOneDecisionInTheSnapshotsOrder) {
  state::CheckpointMetadata m;
  m.operators = {sourceSnapshot("lines", "pos"), sourceSnapshot("ticks", ""),
                 keyedSnapshot("counts", {valueState("reduce")}), keyedSnapshot("gone", {valueState("x")})};
  StateAssignment a =
      assignState(m, {sourceOperator("lines"), keyedOperator("counts", {valueState("reduce")})}, false);
  ASSERT_EQ(a.operators.size(), 4u);
  EXPECT_EQ(a.operators[0].action, Action::kRestoreSourcePosition);
  EXPECT_EQ(a.operators[1].action, Action::kSkip);
  EXPECT_EQ(a.operators[2].action, Action::kRestoreKeyedState);
  EXPECT_EQ(a.operators[3].action, Action::kError);
  ASSERT_EQ(a.errors().size(), 1u);
  EXPECT_TRUE(contains(a.errors()[0], "'gone'")) << a.errors()[0];
}

// --- Kafka sources (issue 32): offsets restore into a Kafka source only, and a topic the
// class no longer reads is state without a place.
namespace kafka {

std::string position(const std::string& subscription, std::vector<std::pair<std::string, int>> partitions) {
  KafkaSourcePosition p;
  p.initialDiscoveryDone = true;
  p.subscription = subscription;
  for (const auto& [topic, partition] : partitions) {
    KafkaSplit s;
    s.topic = topic;
    s.partition = partition;
    s.offset = 42;
    p.splits.push_back(s);
  }
  return p.encode();
}

state::OperatorSnapshot kafkaSnapshot(std::vector<std::string> positions) {
  state::OperatorSnapshot op;
  op.uid = "lines";
  op.name = "Kafka Source";
  op.parallelism = static_cast<int>(positions.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    state::SubtaskSnapshot sub;
    sub.index = static_cast<int>(i);
    sub.operatorState = positions[i];
    op.subtasks.push_back(sub);
  }
  return op;
}

OperatorInfo kafkaSource(const std::string& subscription) {
  OperatorInfo o = operatorInfo("lines", "Kafka Source", false, true, 2);
  o.subscription = subscription;
  return o;
}

const StateAssignment::Operator& only(const StateAssignment& a) { return a.operators.at(0); }

TEST(StateAssignment, KafkaOffsetsOfATopicTheClassNoLongerReadsAreAnErrorUnlessAllowed) {
  state::CheckpointMetadata m;
  m.operators = {kafkaSnapshot({position("topics:a,b", {{"a", 0}, {"b", 1}}), position("topics:a,b", {{"b", 0}})})};
  auto refused = assignState(m, {kafkaSource("topics:a,c")}, false, "class WordCount");
  EXPECT_EQ(only(refused).action, Action::kError);
  EXPECT_TRUE(contains(only(refused).reason, "holds offsets of topic 'b', which class WordCount no longer reads"))
      << only(refused).reason;
  EXPECT_TRUE(contains(only(refused).reason, "the snapshot's source read topics a, b; it reads topics a, c"))
      << only(refused).reason;
  EXPECT_TRUE(contains(only(refused).reason, "--allow-non-restored-state")) << only(refused).reason;

  auto allowed = assignState(m, {kafkaSource("topics:a,c")}, true, "class WordCount");
  ASSERT_EQ(only(allowed).action, Action::kRestoreSourcePosition);
  ASSERT_EQ(only(allowed).notes.size(), 2u);
  EXPECT_TRUE(contains(only(allowed).notes[0], "offsets are dropped")) << only(allowed).notes[0];
  EXPECT_TRUE(contains(only(allowed).notes[1], "'c' has no saved offsets and is read from the earliest offset"))
      << only(allowed).notes[1];
}

TEST(StateAssignment, KafkaOffsetsRestoreIntoAPatternThatStillMatchesTheirTopics) {
  state::CheckpointMetadata m;
  m.operators = {kafkaSnapshot({position("topics:in-a", {{"in-a", 0}})})};
  auto a = assignState(m, {kafkaSource("pattern:in-.*")}, false);
  EXPECT_EQ(only(a).action, Action::kRestoreSourcePosition) << only(a).reason;
  ASSERT_EQ(only(a).notes.size(), 1u);
  EXPECT_TRUE(contains(only(a).notes[0], "reads topics matching /in-.*/")) << only(a).notes[0];
  // The same subscription: nothing to say.
  auto same = assignState(m, {kafkaSource("topics:in-a")}, false);
  EXPECT_EQ(only(same).action, Action::kRestoreSourcePosition);
  EXPECT_TRUE(only(same).notes.empty());
  // A pattern that no longer matches a saved topic.
  auto other = assignState(m, {kafkaSource("pattern:out-.*")}, false);
  EXPECT_EQ(only(other).action, Action::kError) << only(other).reason;
}

TEST(StateAssignment, KafkaOffsetsAndOtherSourcePositionsDoNotRestoreIntoEachOther) {
  state::CheckpointMetadata kafkaSnap;
  kafkaSnap.operators = {kafkaSnapshot({position("topics:a", {{"a", 0}})})};
  auto intoFile = assignState(kafkaSnap, {sourceOperator("lines")}, false);
  EXPECT_EQ(only(intoFile).action, Action::kError);
  EXPECT_TRUE(contains(only(intoFile).reason, "holds a Kafka source's offsets")) << only(intoFile).reason;
  EXPECT_EQ(only(assignState(kafkaSnap, {sourceOperator("lines")}, true)).action, Action::kSkip);

  state::CheckpointMetadata fileSnap;
  fileSnap.operators = {sourceSnapshot("lines", std::string(8, '\x01'))};
  auto intoKafka = assignState(fileSnap, {kafkaSource("topics:a")}, false);
  EXPECT_EQ(only(intoKafka).action, Action::kError);
  EXPECT_TRUE(contains(only(intoKafka).reason, "the position of a source that is not Kafka")) << only(intoKafka).reason;
}

TEST(StateAssignment, DamagedKafkaOffsetsAreAnErrorNamingTheSource) {
  state::CheckpointMetadata m;
  std::string bad = position("topics:a", {{"a", 0}});
  bad.resize(bad.size() - 3);
  m.operators = {kafkaSnapshot({bad})};
  auto a = assignState(m, {kafkaSource("topics:a")}, false);
  EXPECT_EQ(only(a).action, Action::kError);
  EXPECT_TRUE(contains(only(a).reason, "the Kafka offsets of operator uid 'lines'")) << only(a).reason;
}

}  // namespace kafka

}  // namespace
}  // namespace jobhost::host
