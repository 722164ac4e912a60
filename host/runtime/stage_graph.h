// host/runtime/stage_graph.h — a job's plan cut into stages (as Flink's JobGraph of
// chained operators): the plan's checks, which operators run together in one task, and
// which stateful operators a snapshot of the job records.
//
// A stage starts at a source or at the receiving side of exchanges (keyBy, union, the
// inputs of connect; both inputs of a two-input operator start the same stage) and holds
// every operator that follows without an exchange in between: the operator chain of
// each of its subtasks (operator_chain.h). A stage's inputs are channel groups, one per
// input of each exchange it receives, with one channel per producing subtask.
//
// Thread-safety: immutable once built.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/operator.h"

namespace jobhost::host {

/// A stateful or source operator of the plan, as recorded in metadata.
struct OperatorInfo {
  std::string uid;
  std::string name;
  bool keyed = false;
  bool source = false;
  int parallelism = 1;
  std::vector<StateDescriptorInfo> states;
  /// Non-keyed operator state besides a source position (a watermark assigner's).
  bool operatorState = false;
  /// A source's subscription (PlanNode::subscription), for the restore check.
  std::string subscription;
  /// A (keyed) broadcast function's broadcast states (PlanNode::broadcastStates).
  std::vector<BroadcastStateInfo> broadcastStates;
  /// An exchange: its receivers restore the in-flight records an unaligned checkpoint
  /// stored for them (StageGraph::restoreTargets()). `inputs`: how many inputs it has
  /// (a union has several).
  bool channelReceiver = false;
  int inputs = 0;
  bool broadcastReceiver = false;  // a channelReceiver of a broadcast() exchange
};

/// Who reads an output of a node: `consumer`'s input `position`, output `tag` (empty:
/// the main output).
struct Use {
  int consumer;
  std::string tag;
  size_t position;
};

/// An input of a stage: input `position` of exchange `exchange`, whose every producing
/// subtask (of `producerStage`) has its own channel in [firstChannel, firstChannel + count).
struct ChannelGroup {
  int exchange;
  size_t position;
  int producerStage;
  int firstChannel;
  int count;
};

/// Input `position` of exchange `exchange`, fed by `producer` (a node of this stage).
struct StageOutput {
  int exchange;
  size_t position;
  int producer;
};

struct Stage {
  std::vector<int> nodes;  // ascending id, so producers before consumers; heads included
  std::vector<int> heads;  // the source, or the exchanges whose receivers start the stage
  std::vector<StageOutput> outputs;
  std::vector<ChannelGroup> channels;  // stages with input exchanges
  int parallelism = 1;
  int channelCount() const {
    int n = 0;
    for (const auto& g : channels) n += g.count;
    return n;
  }
};

class StageGraph {
 public:
  /// Checks the plan and cuts it into stages of `parallelism` subtasks (a source's stage
  /// has one). Throws JobArgumentError for shapes it cannot run and for an operator uid
  /// that is not valid (see validateOperatorUid). `plan` must outlive the graph.
  StageGraph(const Plan& plan, int parallelism);

  const Plan& plan() const { return *plan_; }
  const std::vector<Stage>& stages() const { return stages_; }
  /// Who reads node `id`'s outputs.
  const std::vector<Use>& usesOf(int id) const { return uses_[static_cast<size_t>(id)]; }
  /// The stage that exchange `exchange`'s receivers start.
  size_t stageReceiving(int exchange) const;
  /// The stateful and source operators, stage by stage, as metadata records them.
  std::vector<OperatorInfo> operators() const;
  /// operators() and then every exchange (channelReceiver): where a snapshot's state may
  /// go, including an unaligned checkpoint's in-flight records.
  std::vector<OperatorInfo> restoreTargets() const;

 private:
  const Plan* plan_;
  std::vector<std::vector<Use>> uses_;
  std::vector<Stage> stages_;
};

/// StageGraph(plan, parallelism).restoreTargets(); throws as StageGraph does.
std::vector<OperatorInfo> describeOperators(const Plan& plan, int parallelism);

/// Empty if `uid` may name an operator, else why not. A uid names files and directories
/// (the rocksdb working directory, snapshot file names), so it must be one plain path
/// component: 1 to 128 characters out of letters, digits, '.', '_', '-', not starting
/// with '.'.
std::string validateOperatorUid(std::string_view uid);

}  // namespace jobhost::host
