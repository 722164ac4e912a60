#include "cli/source_positions.h"

#include <algorithm>
#include <tuple>

#include "jobhost/broadcast.h"
#include "jobhost/kafka_splits.h"

namespace jobhost::host {

bool holdsKafkaOffsets(const state::OperatorSnapshot& op) {
  return std::any_of(op.subtasks.begin(), op.subtasks.end(),
                     [](const auto& s) { return KafkaSourcePosition::is(s.operatorState); });
}

state::Status kafkaPartitions(const state::OperatorSnapshot& op, std::vector<SourcePartitionRow>* rows,
                              std::string* subscription) {
  rows->clear();
  subscription->clear();
  for (const auto& sub : op.subtasks) {
    if (!KafkaSourcePosition::is(sub.operatorState)) continue;
    try {
      KafkaSourcePosition p = KafkaSourcePosition::decode(sub.operatorState);
      if (!p.subscription.empty()) *subscription = KafkaSubscription::parse(p.subscription).describe();
      for (const auto& s : p.splits)
        rows->push_back({sub.index, s.topic, s.partition, s.offset, s.stoppingOffset, s.maxTimestamp});
    } catch (const std::exception& e) {
      return state::Status::Corruption("the Kafka offsets of source '" + op.uid + "' subtask " +
                                       std::to_string(sub.index) + " cannot be read: " + e.what());
    }
  }
  std::sort(rows->begin(), rows->end(), [](const SourcePartitionRow& a, const SourcePartitionRow& b) {
    return std::tie(a.subtask, a.topic, a.partition) < std::tie(b.subtask, b.topic, b.partition);
  });
  return state::Status::OK();
}

state::Status broadcastStates(const state::OperatorSnapshot& op, std::vector<BroadcastStateRow>* rows) {
  rows->clear();
  for (const auto& sub : op.subtasks) {
    if (!detail::BroadcastStates::is(sub.operatorState)) continue;
    try {
      detail::BroadcastStates states;
      states.restore(sub.operatorState);
      for (const auto& [name, m] : states.maps())
        rows->push_back({name, m.keySerializer, m.valueSerializer, m.entries.size()});
    } catch (const std::exception& e) {
      return state::Status::Corruption("the broadcast state of operator '" + op.uid + "' subtask " +
                                       std::to_string(sub.index) + " cannot be read: " + e.what());
    }
    break;  // every subtask holds the same
  }
  return state::Status::OK();
}

std::string offsetText(int64_t offset) { return kafkaOffsetText(offset); }

}  // namespace jobhost::host
