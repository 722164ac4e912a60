// host/cli/source_positions.h — the operator state of a snapshot that the host can read
// without the plugin: a Kafka source's offsets per partition (`jobhost inspect` and
// `jobhost state`), decoded from the format jobhost/kafka_splits.h owns, and the broadcast
// states of a broadcast function (jobhost/broadcast.h; `jobhost inspect` only). Other
// sources' positions are opaque bytes, shown by size only.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jobhost/state/checkpoint_metadata.h"
#include "jobhost/state/status.h"

namespace jobhost::host {

/// One partition of one source subtask.
struct SourcePartitionRow {
  int subtask = 0;
  std::string topic;
  int32_t partition = 0;
  int64_t offset = 0;          // the next offset to read, or kEarliestOffset
  int64_t stoppingOffset = 0;  // kNoStoppingOffset: unbounded
  int64_t maxTimestamp = 0;    // kNoTimestamp: none seen
};

/// Whether some subtask of `op` holds a Kafka source's position.
bool holdsKafkaOffsets(const state::OperatorSnapshot& op);

/// Every partition of `op`'s Kafka positions, by subtask then topic and partition, and
/// the subscription they were read for ("topics a, b"). Corruption naming the operator
/// for a position that does not decode.
state::Status kafkaPartitions(const state::OperatorSnapshot& op, std::vector<SourcePartitionRow>* rows,
                              std::string* subscription);

/// One broadcast state of an operator: the same in every subtask, so read from the first.
struct BroadcastStateRow {
  std::string name, keySerializer, valueSerializer;
  size_t entries = 0;
};

/// The broadcast states of `op` (none if it holds no broadcast state). Corruption naming
/// the operator for a broadcast state that does not decode.
state::Status broadcastStates(const state::OperatorSnapshot& op, std::vector<BroadcastStateRow>* rows);

/// "earliest", "-" or the number (jobhost/kafka_splits.h's kafkaOffsetText).
std::string offsetText(int64_t offset);

}  // namespace jobhost::host
