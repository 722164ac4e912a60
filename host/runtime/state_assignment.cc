#include "runtime/state_assignment.h"

#include <algorithm>
#include <map>
#include <set>

#include "jobhost/broadcast.h"
#include "jobhost/kafka_splits.h"

namespace jobhost::host {

namespace {

using Action = StateAssignment::Action;
using StateFate = StateAssignment::StateFate;

bool holdsKeyedState(const state::OperatorSnapshot& op) {
  return std::any_of(op.subtasks.begin(), op.subtasks.end(), [](const auto& s) { return s.keyed.index() != 0; });
}

bool holdsChannelState(const state::OperatorSnapshot& op) {
  return std::any_of(op.subtasks.begin(), op.subtasks.end(), [](const auto& s) { return !s.inputChannels.empty(); });
}

/// "412 records in 9 buffers" of an operator's in-flight records.
std::string inFlightText(const state::OperatorSnapshot& op) {
  uint64_t buffers = 0, bytes = 0;
  for (const auto& s : op.subtasks) {
    buffers += s.inputChannels.size();
    bytes += s.inFlightBytes();
  }
  return std::to_string(buffers) + (buffers == 1 ? " buffer, " : " buffers, ") + std::to_string(bytes) + " bytes";
}

bool holdsPosition(const state::OperatorSnapshot& op) {
  return std::any_of(op.subtasks.begin(), op.subtasks.end(), [](const auto& s) { return !s.operatorState.empty(); });
}

/// Whether the operator can take operator state: a source's position or a (keyed)
/// broadcast function's broadcast state.
bool takesOperatorState(const OperatorInfo& target) { return target.source || target.operatorState; }

/// Why the operator state of `op` cannot be the broadcast state `target` takes (another
/// type under a name, or no broadcast state at all), or "" when it can. Decoded by the
/// SDK's own reader (jobhost/broadcast.h), which restores it the same way; every subtask
/// holds the same states, so the first one is read.
std::string broadcastStateMismatch(const state::OperatorSnapshot& op, const OperatorInfo& target) {
  if (target.broadcastStates.empty()) return "";
  detail::BroadcastStates declared;
  for (const auto& b : target.broadcastStates) declared.declare(b.name, b.keySerializer, b.valueSerializer);
  for (const auto& sub : op.subtasks) {
    if (sub.operatorState.empty()) continue;
    try {
      declared.restore(sub.operatorState);
    } catch (const std::exception& e) {
      return e.what();
    }
    break;
  }
  return "";
}

/// "operator uid 'counts' (Keyed Aggregation)"
std::string operatorText(const state::OperatorSnapshot& op) {
  return "operator uid '" + op.uid + "'" + (op.name.empty() ? "" : " (" + op.name + ")");
}

/// "keyed state: ValueState 'reduce', MapState 'words'" / "a source position".
std::string heldText(const state::OperatorSnapshot& op, bool keyed, bool position) {
  std::string s;
  if (keyed) {
    s = "keyed state";
    for (size_t i = 0; i < op.states.size(); ++i)
      s += (i == 0 ? ": " : ", ") + std::string(stateKindName(op.states[i].kind)) + " '" + op.states[i].name + "'";
  }
  if (position) s += (s.empty() ? "" : " and ") + std::string("a source position or operator state");
  return s;
}

/// "the source 'Text File Source'" / "the keyed operator 'Keyed Aggregation'"
std::string roleText(const OperatorInfo& p) {
  return std::string(p.source ? "the source '" : p.keyed ? "the keyed operator '" : "the operator '") + p.name + "'";
}

/// The window assigner a window operator's state is namespaced by ("TumblingEventTime
/// Windows(size=10000ms offset=0ms)" in "TimeWindow<…>" or "Timer<TimeWindow<…>>"), or "".
std::string windowAssignerOf(const StateDescriptorInfo& d) {
  std::string id = d.userKeySerializer;
  if (id.rfind("Timer<", 0) == 0 && id.size() > 7) id = id.substr(6, id.size() - 7);
  if (id.rfind("TimeWindow<", 0) != 0 || id.back() != '>') return "";
  return id.substr(11, id.size() - 12);
}

bool sameSerializers(const StateDescriptorInfo& a, const StateDescriptorInfo& b) {
  return a.valueSerializer == b.valueSerializer && a.valueSerializerVersion == b.valueSerializerVersion &&
         a.keySerializer == b.keySerializer && a.keySerializerVersion == b.keySerializerVersion &&
         a.userKeySerializer == b.userKeySerializer && a.userKeySerializerVersion == b.userKeySerializerVersion;
}

/// Checks a source position against the plan's source (see the file comment's Kafka
/// rule): sets `out` to an error, or adds notes.
void checkSourcePosition(const state::OperatorSnapshot& op, const OperatorInfo& target, bool allowNonRestoredState,
                         const std::string& job, StateAssignment::Operator& out) {
  std::vector<std::string_view> positions;
  bool kafka = false, other = false;
  std::string writerSubscription;
  for (const auto& sub : op.subtasks) {
    if (sub.operatorState.empty()) continue;
    positions.push_back(sub.operatorState);
    if (KafkaSourcePosition::is(sub.operatorState)) kafka = true;
    else other = true;
  }
  const bool toKafka = !target.subscription.empty();
  if ((kafka && !toKafka) || (other && toKafka)) {
    out.action = StateAssignment::Action::kError;
    out.reason = operatorText(op) + " holds " + (kafka ? "a Kafka source's offsets" : "the position of a source that is not Kafka") +
                 " in the snapshot, but in " + job + " that uid is " + roleText(target) +
                 (toKafka ? ", a Kafka source" : ", which does not read Kafka") +
                 "; give the source that should take this position the uid '" + op.uid +
                 "' (and the other one another uid), or add --allow-non-restored-state (-n) to start the source afresh";
    if (allowNonRestoredState) {
      out.action = StateAssignment::Action::kSkip;
      out.droppedState = true;
      out.reason = "the position of " + operatorText(op) + " is skipped: it is " +
                   (kafka ? "a Kafka source's" : "not a Kafka source's") + " and in " + job + " that uid is " +
                   roleText(target) + "; --allow-non-restored-state is set";
    }
    return;
  }
  if (!kafka) return;
  KafkaSubscription now;
  std::vector<std::string> dropped;
  try {
    now = KafkaSubscription::parse(target.subscription);
    dropped = kafkaTopicsNotSubscribed(positions, now);
    for (auto p : positions) {
      std::string sub = KafkaSourcePosition::decode(p).subscription;
      if (!sub.empty()) writerSubscription = sub;
    }
  } catch (const std::exception& e) {
    out.action = StateAssignment::Action::kError;
    out.reason = "the Kafka offsets of " + operatorText(op) + " in the snapshot cannot be read: " + e.what() +
                 "; restore from another checkpoint or savepoint";
    return;
  }
  std::string was;
  try {
    was = writerSubscription.empty() ? "" : KafkaSubscription::parse(writerSubscription).describe();
  } catch (const std::exception&) {
    was = writerSubscription;
  }
  if (!dropped.empty()) {
    std::string list;
    for (const auto& t : dropped) list += (list.empty() ? "'" : ", '") + t + "'";
    std::string what = "source '" + op.uid + "': the snapshot holds offsets of " +
                       (dropped.size() == 1 ? "topic " : "topics ") + list + ", which " + job + " no longer reads (" +
                       (was.empty() ? "" : "the snapshot's source read " + was + "; ") + "it reads " + now.describe() + ")";
    if (!allowNonRestoredState) {
      out.action = StateAssignment::Action::kError;
      out.reason = what + "; subscribe to " + (dropped.size() == 1 ? "it" : "them") +
                   " again, or add --allow-non-restored-state (-n) to drop " + (dropped.size() == 1 ? "its" : "their") +
                   " offsets";
      return;
    }
    out.notes.push_back(what + "; their offsets are dropped (--allow-non-restored-state)");
  }
  if (!writerSubscription.empty() && writerSubscription != now.text()) {
    std::vector<std::string> added;
    if (!now.isPattern()) {
      std::set<std::string> saved;
      for (auto p : positions)
        for (const auto& sp : KafkaSourcePosition::decode(p).splits) saved.insert(sp.topic);
      for (const auto& t : now.topicList())
        if (!saved.count(t)) added.push_back(t);
    }
    std::string note = "source '" + op.uid + "': the snapshot's source read " + was + ", " + job + " reads " + now.describe();
    if (!added.empty()) {
      std::string list;
      for (const auto& t : added) list += (list.empty() ? "'" : ", '") + t + "'";
      note += "; " + list + (added.size() == 1 ? " has" : " have") +
              " no saved offsets and " + (added.size() == 1 ? "is" : "are") + " read from the earliest offset";
    } else if (now.isPattern()) {
      note += "; topics without saved offsets are read from the earliest offset";
    }
    out.notes.push_back(note);
  }
}

}  // namespace

std::string describeStateDescriptor(const StateDescriptorInfo& d) {
  std::string s = std::string(stateKindName(d.kind)) + "<";
  if (d.kind == StateKind::kMap) s += d.userKeySerializer + " v" + std::to_string(d.userKeySerializerVersion) + ", ";
  s += d.valueSerializer + " v" + std::to_string(d.valueSerializerVersion) + ">";
  return s + " keyed by " + d.keySerializer + " v" + std::to_string(d.keySerializerVersion);
}

bool StateAssignment::ok() const {
  for (const auto& op : operators) {
    if (op.action == Action::kError) return false;
    for (const auto& st : op.states)
      if (st.fate == StateFate::kError) return false;
  }
  return true;
}

std::vector<std::string> StateAssignment::errors() const {
  std::vector<std::string> out;
  for (const auto& op : operators)
    if (op.action == Action::kError) out.push_back(op.reason);
  for (const auto& op : operators)
    for (const auto& st : op.states)
      if (st.fate == StateFate::kError) out.push_back(st.reason);
  return out;
}

const StateAssignment::Operator* StateAssignment::find(const std::string& uid, Action action) const {
  for (const auto& op : operators)
    if (op.action == action && op.snapshot->uid == uid) return &op;
  return nullptr;
}

StateAssignment assignState(const state::CheckpointMetadata& metadata, const std::vector<OperatorInfo>& plan,
                            bool allowNonRestoredState, const std::string& jobName) {
  const std::string job = jobName.empty() ? "the job" : jobName;
  std::map<std::string, const OperatorInfo*> byUid;
  for (const auto& p : plan) byUid[p.uid] = &p;
  std::string planUids;
  for (const auto& p : plan)
    if (!p.channelReceiver) planUids += (planUids.empty() ? "'" : ", '") + p.uid + "'";

  StateAssignment a;
  for (const auto& op : metadata.operators) {
    StateAssignment::Operator out;
    out.snapshot = &op;
    const bool keyed = holdsKeyedState(op);
    const bool position = holdsPosition(op);
    auto it = byUid.find(op.uid);
    const OperatorInfo* target = it == byUid.end() ? nullptr : it->second;

    if (holdsChannelState(op) && !keyed && !position) {
      int inputs = 0;
      for (const auto& s : op.subtasks)
        for (const auto& b : s.inputChannels) inputs = std::max(inputs, b.input + 1);
      std::string why;
      std::string fix =
          "the job's shape changed since the checkpoint. Restore with the job that wrote it (then take an aligned "
          "savepoint, `jobhost savepoint`, before changing the job)";
      if (target == nullptr) why = "no exchange of " + job + " has that uid";
      else if (!target->channelReceiver) why = "in " + job + " that uid is " + roleText(*target) + ", not an exchange";
      else if (inputs > target->inputs)
        why = "the records were sent to input " + std::to_string(inputs) + " of the exchange, which in " + job +
              " has " + std::to_string(target->inputs);
      else if (target->broadcastReceiver && op.parallelism != target->parallelism)
      {
        why = "it is a broadcast exchange, written at parallelism " + std::to_string(op.parallelism) +
              " and restored at " + std::to_string(target->parallelism) +
              " (each subtask snapshotted at another point of the broadcast stream, so their copies differ)";
        fix = "restore at parallelism " + std::to_string(op.parallelism) +
              ", take an aligned savepoint (`jobhost savepoint`) and rescale from that";
      }
      if (why.empty()) {
        out.action = Action::kRestoreChannelState;
      } else if (allowNonRestoredState) {
        out.action = Action::kSkip;
        out.droppedState = true;
        out.reason = "the in-flight records of " + operatorText(op) + " (" + inFlightText(op) +
                     ", stored by an unaligned checkpoint) are dropped: " + why +
                     "; --allow-non-restored-state is set, so the restored job never sees them";
      } else {
        out.action = Action::kError;
        out.reason = operatorText(op) + " holds in-flight records of an unaligned checkpoint (" + inFlightText(op) +
                     ") but " + why + "; " + fix + ", or add --allow-non-restored-state (-n) to drop those records";
      }
    } else if (!keyed && !position) {
      out.action = Action::kSkip;
      out.reason = operatorText(op) + " holds no state in the snapshot; nothing to restore";
    } else if (target == nullptr) {
      if (allowNonRestoredState) {
        out.action = Action::kSkip;
        out.droppedState = true;
        out.reason = "state of " + operatorText(op) + " is skipped: --allow-non-restored-state is set";
      } else {
        out.action = Action::kError;
        out.reason = operatorText(op) + " has state in the snapshot (" + heldText(op, keyed, position) +
                     ") but no operator of " + job + " has that uid (its stateful operators: " +
                     (planUids.empty() ? "none" : planUids) + "); give the operator that should take this state the uid '" +
                     op.uid + "', or add --allow-non-restored-state (-n) to drop it";
      }
    } else if ((keyed && !target->keyed) || (!keyed && position && !takesOperatorState(*target))) {
      // The uid now names an operator of the other role: it has no place for this state.
      if (allowNonRestoredState) {
        out.action = Action::kSkip;
        out.droppedState = true;
        out.reason = "state of " + operatorText(op) + " (" + heldText(op, keyed, position) +
                     ") is skipped: in " + job + " that uid is " + roleText(*target) +
                     ", and --allow-non-restored-state is set";
      } else {
        const bool toSource = keyed && !target->keyed;
        out.action = Action::kError;
        out.reason = operatorText(op) + " holds " + heldText(op, keyed, position) + " in the snapshot, but in " + job +
                     " that uid is " + roleText(*target) + ", which restores only " +
                     (toSource ? (target->source ? "a source position" : "operator state") : "keyed state") +
                     "; give " + roleText(*target) +
                     " another uid and the " + (toSource ? "keyed operator" : "source") +
                     " that should take this state the uid '" + op.uid +
                     "', or add --allow-non-restored-state (-n) to drop it";
      }
    } else if (keyed && position && !takesOperatorState(*target) && !allowNonRestoredState) {
      // A keyed operator with operator state (a keyed broadcast function's broadcast state)
      // whose uid now names a keyed operator without any: the keyed state has its place,
      // the operator state has none.
      out.action = Action::kError;
      out.reason = operatorText(op) + " holds keyed state and operator state (a broadcast state) in the snapshot, but in " +
                   job + " that uid is " + roleText(*target) +
                   ", which holds no operator state; give the operator that should take it the uid '" + op.uid +
                   "', or add --allow-non-restored-state (-n) to restore the keyed state and drop the operator state";
    } else if (keyed) {
      out.action = Action::kRestoreKeyedState;
      out.withOperatorState = position && takesOperatorState(*target);
      if (position && !out.withOperatorState)
        out.notes.push_back("the operator state (a broadcast state) of " + operatorText(op) + " is dropped: in " + job +
                            " that uid is " + roleText(*target) +
                            ", which holds none; its keyed state is restored (--allow-non-restored-state is set)");
      bool assignerReported = false;
      for (const auto& saved : op.states) {
        StateAssignment::State st;
        st.descriptor = &saved;
        const StateDescriptorInfo* now = nullptr;
        for (const auto& d : target->states)
          if (d.name == saved.name) now = &d;
        const std::string savedAssigner = now ? windowAssignerOf(saved) : "";
        const std::string nowAssigner = now ? windowAssignerOf(*now) : "";
        if (now == nullptr) {
          st.fate = StateFate::kKeptNotRead;
        } else if (!savedAssigner.empty() && !nowAssigner.empty() && savedAssigner != nowAssigner) {
          // Window contents and timers are namespaced by their windows: one error for the
          // operator, not one per state.
          if (assignerReported) {
            st.fate = StateFate::kRestored;
          } else {
            assignerReported = true;
            st.fate = StateFate::kError;
            st.reason = "operator '" + op.uid + "': its windows were written by " + savedAssigner + ", " + job +
                        " now assigns " + nowAssigner +
                        "; window contents and timers do not carry over to other windows: restore with the window "
                        "assigner the snapshot was written with, or give the window operator a new uid and add "
                        "--allow-non-restored-state (-n) to drop its windows";
          }
        } else if (now->kind != saved.kind) {
          st.fate = StateFate::kError;
          st.reason = "operator '" + op.uid + "': state '" + saved.name + "' is a " + stateKindName(saved.kind) +
                      " in the snapshot but " + job + " declares a " + stateKindName(now->kind) +
                      "; declare it as a " + stateKindName(saved.kind) + ", or declare the new state under another name";
        } else if (!sameSerializers(*now, saved)) {
          st.fate = StateFate::kError;
          st.reason = "operator '" + op.uid + "': state '" + saved.name + "' was written as " +
                      describeStateDescriptor(saved) + ", " + job + " declares " + describeStateDescriptor(*now) +
                      "; declare it with the serializers it was written with, or declare the new state under another name";
        }
        out.states.push_back(std::move(st));
      }
    } else {
      out.action = Action::kRestoreSourcePosition;
      checkSourcePosition(op, *target, allowNonRestoredState, job, out);
    }
    // A broadcast state restored under another type would fail in the task; decided
    // here, before anything is restored, whatever --allow-non-restored-state says (the
    // operator keeps its uid: nothing is dropped).
    const bool restoresOperatorState = out.action == Action::kRestoreSourcePosition ||
                                       (out.action == Action::kRestoreKeyedState && out.withOperatorState);
    if (restoresOperatorState && target) {
      if (std::string why = broadcastStateMismatch(op, *target); !why.empty()) {
        out.action = Action::kError;
        out.reason = operatorText(op) + ": " + why;
      }
    }
    a.operators.push_back(std::move(out));
  }
  return a;
}

}  // namespace jobhost::host
