// host/job_worker.h — the worker process of `jobhost run`.
//
// The supervisor (`jobhost run`) starts one worker per attempt: `jobhost __worker` with
// the same run options, the job id, the snapshot to restore (decided by the supervisor:
// the worker never looks for one) and one end of a socketpair (JOBHOST_WORKER_FD). The
// worker loads the plugin, restores that snapshot, runs the tasks and the checkpoint
// coordinator, and reports to the supervisor over the socketpair
// (runtime/worker_protocol.capnp). It shares the job directory's lock with the
// supervisor (an inherited descriptor). A segfault or
// abort() in user code ends only the worker; the supervisor, its control endpoint and
// the checkpoints on disk survive, and the restart strategy decides what comes next.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "run_options.h"

namespace jobhost::host {

struct WorkerParams {
  std::string jobId;
  int attempt = 1;
  int channelFd = -1;  // socketpair end to the supervisor
  int crashFd = -1;    // pipe for the fatal-signal report
  int pluginFd = -1;   // the supervisor's pinned copy of the plugin (JOBHOST_PLUGIN_FD)
  std::string pluginDigest;  // the supervisor's digest of those bytes (JOBHOST_PLUGIN_DIGEST)
  /// The exact snapshot directory to restore (a chk-<n> or savepoint), if any.
  std::optional<std::string> restoreFrom;
  /// restoreFrom is the user's -s snapshot (then -n applies), not one of the job's own
  /// checkpoints.
  bool restoreInitial = false;
  uint64_t firstCheckpointId = 1;
};

int runWorker(const RunOptions& options, const WorkerParams& params);

}  // namespace jobhost::host
