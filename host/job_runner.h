// host/job_runner.h — `jobhost run` and `jobhost check`: load the plugin, select the
// class, layer the configuration, build the plan, preflight a restore, then run attempts
// under the restart strategy with periodic checkpoints.
//
// Thread-safety: runJob() is called once per process.
#pragma once

#include "run_options.h"

namespace jobhost::host {

/// Runs (or, with options.dryRun, only checks) the job; returns the process's exit code
/// (exit_codes.h).
int runJob(const RunOptions& options);

}  // namespace jobhost::host
