// host/job_setup.h — what `jobhost run` and its worker process both derive from the
// command line: the loaded plugin, the selected class, the layered configuration and the
// settings read from it, and the class's plan.
//
// Thread-safety: built once per process.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "config/configuration.h"
#include "jobhost/job.h"
#include "jobhost/operator.h"
#include "jobhost/state/keyed_backend.h"
#include "plugin/plugin_loader.h"
#include "run_options.h"
#include "runtime/stage_graph.h"

namespace jobhost::host {

struct JobSetup {
  std::unique_ptr<PluginLibrary> plugin;  // kept loaded for the life of the process
  const JobClassInfo* info = nullptr;
  std::string className;
  Configuration config;
  Plan plan;  // from the first instance; each attempt builds its own
  /// What the first build() left unread of the job arguments, one sentence each
  /// (JobArgs::unread): `run` and `check` warn about them.
  std::vector<std::string> unreadArguments;
  std::vector<OperatorInfo> operators;
  state::BackendType backend = state::BackendType::kHashMap;
  bool incremental = false;
  state::RocksDbOptions rocksdb;  // state.backend.rocksdb.* (config/rocksdb_settings.h)
  int parallelism = 1;
  int maxParallelism = 128;
  int numRetained = 1;
  int tolerableFailures = 0;
  std::chrono::milliseconds checkpointTimeout{std::chrono::minutes(10)};
  std::chrono::milliseconds heartbeatTimeout{std::chrono::seconds(50)};  // heartbeat.timeout
  std::chrono::milliseconds interval{0};
  bool unalignedCheckpoints = false;  // execution.checkpointing.unaligned
  std::chrono::milliseconds alignedCheckpointTimeout{0};  // execution.checkpointing.aligned-checkpoint-timeout
  std::chrono::milliseconds autoWatermarkInterval{200};  // pipeline.auto-watermark-interval
  int64_t windowMiniBatchSize = 0;                        // pipeline.window.mini-batch.size
  /// taskmanager.network.memory.buffer-debloat.target, 0 when .enabled is false.
  std::chrono::milliseconds bufferDebloatTarget{0};
  std::chrono::milliseconds bufferDebloatPeriod{200};  // taskmanager.network.memory.buffer-debloat.period
  std::string checkpointDir;  // state.checkpoints.dir (absolute)
  std::string savepointDir;   // state.savepoints.dir, may be empty
  bool deleteOnCancel = false;
  bool stopWithSavepointOnSigterm = false;  // execution.stop-with-savepoint-on-sigterm
  /// health.readiness.max-checkpoint-age (0 with checkpoints off: RUNNING is ready).
  std::chrono::milliseconds readinessMaxCheckpointAge{0};
  std::string localDirRoot;   // state.local.dir, else defaultWorkRoot() (job_work_directory.h)
  bool localDirIsDefault = true;
};

/// The local working directory of one attempt (rocksdb instances go below it; layout in
/// job_work_directory.h): the supervisor creates it, the worker removes it when it ends,
/// the supervisor after a worker that died and before the next attempt.
std::string attemptLocalDir(const JobSetup& setup, const std::string& jobId, int attempt);

/// Loads the plugin (with `pluginOptions`: the supervisor pins it and probes its static
/// initialisers, a worker loads the supervisor's pinned copy), selects the class, layers
/// the configuration and builds the plan. Every call into the plugin is fenced
/// (plugin/user_code.h). On error prints one line to stderr and returns the exit code
/// (kExitUsage); else 0.
int setupJob(const RunOptions& options, JobSetup* setup, const PluginOpenOptions& pluginOptions = {});

/// A fresh instance of the class and its plan (restarts never reuse objects, so plain
/// member variables start over, as in Flink). Throws what build() throws. With
/// `unreadArguments`, says there which job arguments build() did not read.
Plan buildPlan(const JobSetup& setup, const RunOptions& options, std::vector<std::string>* unreadArguments = nullptr);

}  // namespace jobhost::host
