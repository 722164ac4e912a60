// host/runtime/execution_config.h — the settings of one execution attempt (JobExecution),
// read from the job's configuration by the worker.
//
// Thread-safety: a plain value, fixed before the execution is built.
#pragma once

#include <cstdint>
#include <string>

#include "jobhost/state/keyed_backend.h"
#include "runtime/buffer_debloat.h"

namespace jobhost::host {

struct ExecutionConfig {
  int parallelism = 1;
  int maxParallelism = 128;
  state::BackendType backend = state::BackendType::kHashMap;
  bool incremental = false;
  state::RocksDbOptions rocksdb;  // state.backend.rocksdb.* (rocksdb only)
  std::string localStateDir;  // rocksdb working directories go below it
  /// pipeline.auto-watermark-interval: how often watermark assigners emit. 0: never
  /// periodically (only the end of input's kMaxWatermark).
  int64_t autoWatermarkIntervalMs = 200;
  /// pipeline.window.mini-batch.size (OperatorContext::windowMiniBatchSize).
  size_t windowMiniBatchSize = 0;
  /// taskmanager.network.memory.buffer-debloat.*: input channel sizes (buffer_debloat.h).
  BufferDebloatOptions bufferDebloat;
  /// Checkpoints are taken (a coordinator triggers them). With a transactional sink in the
  /// plan, sources that end then wait for a final checkpoint (job_execution.h).
  bool checkpointing = false;
  /// execution.checkpointing.interval (OperatorContext::checkpointIntervalMs); 0: none.
  int64_t checkpointIntervalMs = 0;
  /// execution.checkpointing.unaligned: checkpoint barriers (not a savepoint's) overtake
  /// the records in the channels, which are stored in the snapshot (channel_state.h).
  bool unalignedCheckpoints = false;
  /// execution.checkpointing.aligned-checkpoint-timeout, with unalignedCheckpoints: > 0,
  /// checkpoints start aligned and turn unaligned where their barriers are this late
  /// (channel.h); 0, unaligned from the start.
  std::chrono::milliseconds alignedCheckpointTimeout{0};
};

}  // namespace jobhost::host
