// host/run_options.h — the options of `jobhost run` and `jobhost check` (and of the
// worker process, which the supervisor starts with the same options).
//
// Thread-safety: a plain value, built once from the command line.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <set>
#include <vector>

namespace jobhost::host {

struct RunOptions {
  std::string pluginPath;
  std::optional<std::string> jobClass;
  std::optional<int> parallelism;
  std::vector<std::string> defines;  // -D key=value
  std::optional<std::string> configFile;
  std::vector<std::string> jobArgs;
  /// The names of the command's own options ("-s", "--job-id"): a job argument the job
  /// does not read that is one of them was meant for jobhost (given after the plugin).
  std::set<std::string> hostOptionNames;
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

}  // namespace jobhost::host
