// host/job_worker.h — the worker process of `jobhost run`.
//
// The supervisor (`jobhost run`) starts one worker per attempt: `jobhost __worker` with
// the same run options, the job id and one end of a socketpair (JOBHOST_WORKER_FD). The
// worker loads the plugin, restores the latest completed checkpoint of the job directory
// (else the -s snapshot), runs the tasks and the checkpoint coordinator, and reports to
// the supervisor over the socketpair (runtime/worker_protocol.capnp). A segfault or
// abort() in user code ends only the worker; the supervisor, its control endpoint and
// the checkpoints on disk survive, and the restart strategy decides what comes next.
#pragma once

#include <string>

#include "job_runner.h"

namespace jobhost::host {

struct WorkerParams {
  std::string jobId;
  int attempt = 1;
  int channelFd = -1;  // socketpair end to the supervisor
  int crashFd = -1;    // pipe for the fatal-signal report
};

int runWorker(const RunOptions& options, const WorkerParams& params);

}  // namespace jobhost::host
