// host/job_runner.h — `jobhost run` and `jobhost check`: load the plugin, select the
// class, layer the configuration, build the plan, preflight a restore, then run attempts
// under the restart strategy with periodic checkpoints.
//
// Thread-safety: runJob() is called once per process.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jobhost/state/status.h"

namespace jobhost {
class Job;
struct JobClassInfo;
}

namespace jobhost::host {

/// Process exit codes (README "Exit codes").
enum ExitCode : int {
  kExitOk = 0,
  kExitJobFailed = 1,
  kExitUsage = 2,          // bad arguments, configuration, plugin or job class
  kExitIncompatible = 3,   // the snapshot cannot be restored into this job
  kExitUnavailable = 4,    // a storage did not answer: nothing was decided or changed; try again
  kExitInterrupted = 130,  // stopped by Ctrl-C / SIGTERM
};

struct RunOptions {
  std::string pluginPath;
  std::optional<std::string> jobClass;
  std::optional<int> parallelism;
  std::vector<std::string> defines;  // -D key=value
  std::optional<std::string> configFile;
  std::vector<std::string> jobArgs;
  std::optional<std::string> fromSnapshot;  // -s
  bool allowNonRestoredState = false;
  bool dryRun = false;  // preflight only (jobhost check / run --dry-run)
  /// The plan is built only to be looked at (dryRun, `jobhost state --plugin`): sources do
  /// not open their inputs (StreamEnvironment::planOnly).
  bool planOnly = false;
  /// no-claim (default): the snapshot's files are never modified or deleted and the first
  /// checkpoint is a full one. claim: the job owns the snapshot (its directory is locked)
  /// and deletes it once its first own checkpoint has completed.
  bool claimSnapshot = false;
  /// --job-id NAME: the job's id is NAME instead of a random one, so its checkpoints go to
  /// the stable directory <state.checkpoints.dir>/NAME (and its working directory,
  /// control socket and `jobhost list` entry are named NAME).
  std::optional<std::string> jobId;
  /// --restore latest (the only value): restore the newest complete checkpoint of
  /// <state.checkpoints.dir>/<jobId> (preflighted like -s), or start without state when
  /// it has none. What a scheduler that restarts the job anywhere runs every time.
  bool restoreLatest = false;
  /// --max-checkpoint-age: with restoreLatest, refuse (exit 3) a newest checkpoint taken
  /// longer ago than this, instead of silently going back that far.
  std::optional<std::chrono::milliseconds> maxCheckpointAge;
  /// --health-port: serve /healthz, /readyz and /metrics (ui/health_server.h) on this port
  /// of --health-address ("*": every interface).
  std::optional<int> healthPort;
  std::string healthAddress = "*";
  /// --log-format: "text" or "json" (log_format.h); the worker processes get the same.
  std::string logFormat = "text";
};

/// Why `id` cannot be a job id (empty if it can): 1 to 64 letters, digits, '-' and '_',
/// not starting with '-'. The ids the supervisor makes up (32 hex digits) are valid.
std::string jobIdProblem(const std::string& id);

int runJob(const RunOptions& options);

/// The exit code of a command that could not read a snapshot with error `s`:
/// kExitUnavailable when the storage did not answer (state::Status::isUnavailable: try
/// again later), else kExitIncompatible (missing, damaged, not a snapshot).
int exitCodeForSnapshotError(const state::Status& s);

class Configuration;
/// The user's layers: the YAML file (--config, else $JOBHOST_CONF_DIR/config.yaml), then
/// `-D` and `-p`. Throws ConfigError.
void loadUserConfiguration(const std::optional<std::string>& configFile, const std::vector<std::string>& defines,
                           const std::optional<int>& parallelism, Configuration* config);
/// A new instance of the class (runs its constructor). Throws UserCodeFailure
/// (plugin/user_code.h) for anything the constructor throws.
std::unique_ptr<Job> createJob(const JobClassInfo& info);
/// Adds the job class's layer: its declared backend (JOBHOST_JOB), then what configure()
/// sets (runs plugin code). Throws ConfigError when configure() contradicts the declared
/// backend, UserCodeFailure naming the class for anything configure() throws except a
/// JobArgumentError.
void applyJobConfiguration(const JobClassInfo& info, Job& job, Configuration* config);


}  // namespace jobhost::host
