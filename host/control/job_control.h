// host/control/job_control.h — what a running job offers its control endpoint: status,
// checkpoint history, configuration, savepoints, cancel and stop. Implemented by the
// job's supervisor (job_supervisor.h); called by the control server (Cap'n Proto RPC
// over a Unix socket) and the signal handler from their own threads, which know this
// interface only.
//
// Thread-safety: every method is thread-safe and may block (savepoints take as long as
// the snapshot takes).
#pragma once

#include <cstdint>
#include <climits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_record.h"
#include "jobhost/state/keyed_backend.h"
#include "jobhost/state/status.h"

namespace jobhost::host {

enum class JobState { kCreated, kRunning, kRestarting, kCancelling, kFinished, kFailed, kCanceled };
const char* jobStateName(JobState s);  // "RUNNING", ...

/// One task's numbers (Flink's task metrics: a task is one subtask of a chain of
/// operators between two exchanges), as the supervisor last heard them from the worker,
/// with rates over the last few seconds (host/metrics/task_rates.h). Counters start at 0
/// with every attempt, as a restarted Flink task's do.
struct TaskStatusInfo {
  std::string name;  // "Source: Lines -> Flat Map"
  int subtask = 0;   // 0-based
  int parallelism = 1;
  uint64_t recordsIn = 0;   // numRecordsIn: received across an exchange
  uint64_t recordsOut = 0;  // numRecordsOut: sent across an exchange
  double recordsInPerSecond = 0;
  double recordsOutPerSecond = 0;
  double busyTimeMsPerSecond = 0;          // 1000 - idle - back-pressured
  double backPressuredTimeMsPerSecond = 0;  // waiting for room downstream
  double idleTimeMsPerSecond = 0;           // waiting for input
  int64_t inputWatermark = INT64_MIN;       // currentInputWatermark; INT64_MIN: none yet
  struct Backend {
    std::string operatorUid;
    std::string backend;  // "hashmap", "rocksdb"
    uint64_t entries = 0;  // keys, as of the restore or the task's last checkpoint
  };
  std::vector<Backend> backends;
};

struct JobStatusInfo {
  std::string jobId;
  std::string jobClass;
  std::string pluginPath;  // absolute
  std::string backend;     // "hashmap" / "rocksdb (incremental)" ...
  int parallelism = 1;
  JobState state = JobState::kCreated;
  int64_t startedMs = 0;   // epoch ms
  int restarts = 0;
  std::string lastFailure;
  uint64_t lastCheckpointId = 0;  // 0: none yet
  std::string lastCheckpointPath;
  std::string checkpointDir;  // <state.checkpoints.dir>/<jobId>, empty if checkpoints are off
  uint64_t recordsIn = 0;
  uint64_t recordsOut = 0;
  int pid = 0;
  int64_t lastFailureMs = 0;          // epoch ms of lastFailure; 0: none
  uint64_t checkpointsCompleted = 0;  // since the job started (all attempts)
  uint64_t checkpointsFailed = 0;
  std::string pluginDigest;  // of the bytes the job loaded (and every attempt loads)

  // Metrics (README "Running in production": the dashboard and /metrics show these).
  double recordsInPerSecond = 0;   // sums of the tasks' rates
  double recordsOutPerSecond = 0;
  std::vector<TaskStatusInfo> tasks;  // of the running attempt (the last one, once it ended)
  uint64_t checkpointsInProgress = 0;
  /// The newest completed checkpoint (not savepoint) of any attempt; 0: none yet.
  uint64_t lastCheckpointDurationMs = 0;
  uint64_t lastCheckpointSizeBytes = 0;      // what it wrote itself (Flink's lastCheckpointSize)
  uint64_t lastCheckpointFullSizeBytes = 0;  // everything it references (lastCheckpointFullSize)
  int64_t lastCheckpointCompletedMs = 0;     // epoch ms
  /// When an attempt last restored a snapshot (epoch ms; lastCheckpointRestoreTimestamp); 0: never.
  int64_t lastRestoreMs = 0;
  /// When the running attempt reached RUNNING (epoch ms); 0 while none runs.
  int64_t runningSinceMs = 0;

  // The checkpoint store (issue 31): outages are waited out, never a failure of the job.
  /// Epoch ms since the store has not answered (checkpoints declined, or a restore
  /// waiting); 0 while it answers.
  int64_t storeUnavailableSinceMs = 0;
  /// The store's last error during the current outage ("" while it answers).
  std::string checkpointStoreError;
  /// Outages of the store since the job started (all attempts, restores included).
  uint64_t checkpointStoreOutages = 0;
  /// Checkpoints declined because the store did not answer or its disk was full (all
  /// attempts): the first one that met the outage, then one per interval it lasted.
  uint64_t checkpointsDeclinedUnavailable = 0;
  /// Restores tried again because the store did not answer (not restarts: the restart
  /// strategy does not count them).
  uint64_t restoreRetries = 0;
  /// The job directory's lease on an object store (job_directory_lock.h); both 0 for a
  /// local directory (an flock cannot be lost). Epoch ms of its last renewal, and since
  /// when publishing is held back because it could not be renewed (0: publishing).
  int64_t leaseRenewedMs = 0;
  int64_t publishingFencedSinceMs = 0;
};

class JobControl {
 public:
  virtual ~JobControl() = default;
  virtual JobStatusInfo status() = 0;
  /// The newest checkpoints and savepoints (at most CheckpointCoordinator::kHistoryLimit),
  /// oldest first, including failed and subsumed ones. (Not pure: older implementations,
  /// e.g. test doubles, answer with an empty history.)
  virtual std::vector<CheckpointRecord> checkpointHistory() { return {}; }
  /// The configuration in effect (every layer applied): key -> value.
  virtual std::map<std::string, std::string> configuration() { return {}; }
  /// A savepoint into `targetDir` (default: state.savepoints.dir). Returns its path.
  virtual state::Result<std::string> savepoint(const std::optional<std::string>& targetDir,
                                               state::SnapshotFormat format) = 0;
  /// Cancels the job; with `withSavepoint`, takes a savepoint first (if it fails, the job
  /// keeps running and the error is returned). Returns the savepoint path or "".
  virtual state::Result<std::string> cancel(bool withSavepoint, const std::optional<std::string>& targetDir) = 0;
  /// Savepoint, then a clean stop; `drain`: the maximum watermark first, so every
  /// event-time window and timer fires before the savepoint. Returns the savepoint path.
  virtual state::Result<std::string> stop(const std::optional<std::string>& targetDir, bool drain) = 0;
};

}  // namespace jobhost::host
