// host/runtime/state_assignment.h — which state of a snapshot goes where on restore.
//
// The one owner of the restore mapping (as Flink's StateAssignmentOperation). Given a
// snapshot's metadata and the stateful operators of the plan that will run, it decides
// for every operator of the snapshot:
//   - restore its keyed state into the keyed operator of the plan with the same uid,
//   - restore its source position into the source of the plan with the same uid,
//   - skip it (it holds no state, or --allow-non-restored-state drops it), or
//   - refuse the restore (what, why and how to fix it).
// and, for every state of an operator whose keyed state is restored, whether the plan
// declares it (restored and read), does not declare it ("kept, not read": restored,
// carried forward in every later checkpoint, read again by a version of the class that
// declares it again) or declares it differently (refused).
//
// The restore preflight (`jobhost check`, `run`'s check before anything starts) reports
// this decision, and JobExecution::prepare() restores exactly what it says, so the check
// and the restore cannot disagree.
//
// Rules:
//   - Operators are matched by uid only.
//   - In-flight records (an unaligned checkpoint's InputChannelStateHandle) restore into
//     the exchange with the same uid that has the input they were sent to, at any
//     parallelism (task_setup.cc redistributes them by key group). Without such an
//     exchange the job's shape changed: an error unless allowNonRestoredState, which
//     drops them (those records are lost to the restored job, and said so).
//   - An operator "holds state" if a subtask has a keyed state handle (keyed state, even
//     for an operator that declares no state: the handle's files are never guessed
//     empty) or a non-empty source position. An operator that holds none is skipped
//     wherever it went: there is nothing to lose.
//   - State the plan has no place for — no operator with that uid, or an operator of the
//     other role (keyed state for a source, a position for a keyed operator) — is an
//     error unless allowNonRestoredState, which skips it. It is never dropped silently.
//   - A state declared with another kind, key, user-key or value serializer (name and
//     version) than the snapshot recorded is an error; -n does not change that.
//   - States the plan declares but the snapshot lacks start empty (not reported).
//   - A Kafka source's position (jobhost/kafka_splits.h) restores into a Kafka source only
//     (and another source's position not into one). Offsets of topics the class no longer
//     subscribes to are state without a place: an error unless allowNonRestoredState,
//     which drops them (noted); a subscription that changed otherwise is noted (new
//     topics are read from their earliest offsets).
//
// Thread-safety: a pure function. The result points into `metadata`, which must
// outlive it.
#pragma once

#include <string>
#include <vector>

#include "jobhost/state/checkpoint_metadata.h"
#include "runtime/stage_graph.h"

namespace jobhost::host {

struct StateAssignment {
  enum class Action {
    kRestoreKeyedState,      // into the plan's keyed operator with this uid
    kRestoreSourcePosition,  // into the plan's source (or operator with operator state) with this uid
    kRestoreChannelState,    // in-flight records of an unaligned checkpoint, into the plan's exchange with this uid
    kSkip,                   // nothing is restored; `reason` says why
    kError,                  // the restore must not start; `reason` says what and how to fix
  };
  enum class StateFate {
    kRestored,     // declared by the plan's operator as the snapshot recorded it
    kKeptNotRead,  // not declared by the plan: restored and carried forward, not read
    kError,        // declared differently; `reason` says how
  };
  struct State {
    const StateDescriptorInfo* descriptor = nullptr;  // as recorded in the snapshot
    StateFate fate = StateFate::kRestored;
    std::string reason;  // kError only
  };
  struct Operator {
    const state::OperatorSnapshot* snapshot = nullptr;
    Action action = Action::kSkip;
    /// kSkip: why nothing is restored; kError: what is wrong, why, and how to fix it.
    std::string reason;
    /// kSkip: true when --allow-non-restored-state dropped state (false: it held none).
    bool droppedState = false;
    /// kRestoreKeyedState: one entry per state of the snapshot, in the snapshot's order.
    std::vector<State> states;
    /// kRestoreKeyedState of an operator that also holds operator state (a keyed
    /// broadcast function's broadcast state): that is restored too, as a source position is.
    bool withOperatorState = false;
    /// kRestoreSourcePosition: what the restore changes and people should know (a
    /// changed topic subscription); kRestoreKeyedState: operator state dropped by
    /// --allow-non-restored-state (the target holds none).
    std::vector<std::string> notes;
  };

  /// One entry per operator of the snapshot, in the snapshot's order.
  std::vector<Operator> operators;

  /// True if neither an operator nor a state is an error.
  bool ok() const;
  /// Every error message (operators first, then states), in the snapshot's order.
  std::vector<std::string> errors() const;
  /// The entry restoring into the plan operator `uid` with `action`, or null.
  const Operator* find(const std::string& uid, Action action) const;
};

/// Decides the restore mapping (see the file comment). `plan` holds the stateful
/// operators of the plan (describeOperators()); `jobName` names the job in messages,
/// e.g. "class WordCount" ("the job" if empty).
StateAssignment assignState(const state::CheckpointMetadata& metadata, const std::vector<OperatorInfo>& plan,
                            bool allowNonRestoredState, const std::string& jobName = "");

/// "ValueState<i64 v1> keyed by string v1": a recorded or declared descriptor for messages.
std::string describeStateDescriptor(const StateDescriptorInfo& d);

}  // namespace jobhost::host
