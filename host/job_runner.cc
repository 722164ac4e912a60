// `jobhost run` and `jobhost check`: load the plugin, select the class, layer the
// configuration, resolve and preflight the -s snapshot once, then hand the job to its
// supervisor (job_supervisor.h) behind the control endpoint.
#include "job_runner.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "checkpoint/checkpoint_coordinator.h"
#include "checkpoint/job_directory_lock.h"
#include "checkpoint/preflight.h"
#include "checkpoint/store_outage.h"
#include "config/units.h"
#include "jobhost/state/checkpoint_layout.h"
#include "jobhost/state/s3_storage.h"
#include "jobhost/state/snapshot_registry.h"
#include "control/control_server.h"
#include "exit_codes.h"
#include "job_id.h"
#include "job_setup.h"
#include "job_supervisor.h"
#include "runtime/restart_strategy.h"
#include "signal_handling.h"
#include "startup_wait.h"
#include "ui/health_server.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {

/// Returned by the start-up steps below when the store did not answer and `jobhost run`
/// waited for it: do the whole decision again.
constexpr int kTryAgain = -1;

/// --job-id / --restore latest / --max-checkpoint-age: checks them against each other and
/// the job's directory, and for --restore latest sets *snapshot to the checkpoint to
/// restore (unset: start without state). 0, kTryAgain (the store did not answer and
/// `wait` waited), or the exit code after printing the error.
int decideStableJobRestore(const RunOptions& o, const JobSetup& setup, std::optional<std::string>* snapshot,
                           std::optional<ResolvedSnapshot>* resolved, StartupWait& wait) {
  *snapshot = o.fromSnapshot;
  if (o.jobId) {
    if (std::string why = jobIdProblem(*o.jobId); !why.empty()) {
      std::cerr << "error: --job-id '" << *o.jobId << "' is not a usable job id: " << why
                << " (it names the job's checkpoint directory, working directory and control socket)\n";
      return kExitUsage;
    }
  }
  if (o.maxCheckpointAge && !o.restoreLatest) {
    std::cerr << "error: --max-checkpoint-age applies only with --restore latest (it limits how old a checkpoint "
                 "that restore may pick)\n";
    return kExitUsage;
  }
  if (o.claimSnapshot && !o.fromSnapshot && !o.restoreLatest) {
    std::cerr << "error: --restore-mode claim applies to a restore from -s (the job then owns that snapshot); "
                 "without -s there is nothing to claim: add -s <snapshot>, or leave --restore-mode out\n";
    return kExitUsage;
  }
  if (!o.jobId) {
    if (o.restoreLatest) {
      std::cerr << "error: --restore latest needs --job-id NAME: the newest checkpoint is looked for in "
                   "<state.checkpoints.dir>/NAME, the directory a run with that --job-id writes (e.g. jobhost run "
                   "--job-id wordcount --restore latest -c "
                << setup.className << " " << o.pluginPath << ")\n";
      return kExitUsage;
    }
    return 0;
  }
  const bool checkpointing = setup.interval.count() > 0;
  // A local path or an object-store URI (s3://bucket/prefix/NAME): only the storage
  // interface looks inside it.
  const bool objectStore = state::isObjectStoreUri(setup.checkpointDir);
  const fs::path jobDir = fs::path(setup.checkpointDir) / *o.jobId;
  if (o.restoreLatest && o.fromSnapshot) {
    std::cerr << "error: -s and --restore latest exclude each other: -s restores the snapshot it names, --restore "
                 "latest the newest checkpoint in "
              << jobDir.string() << "\n";
    return kExitUsage;
  }
  if (o.restoreLatest && o.claimSnapshot) {
    std::cerr << "error: --restore-mode does not apply to --restore latest: the job continues in its own directory "
              << jobDir.string() << ", whose checkpoints it owns anyway\n";
    return kExitUsage;
  }
  if (o.restoreLatest && !checkpointing) {
    std::cerr << "error: --restore latest needs checkpoints, but checkpointing is off for " << setup.className
              << ": set execution.checkpointing.interval (e.g. -D execution.checkpointing.interval=10s)\n";
    return kExitUsage;
  }
  std::error_code ec;
  if (!checkpointing || (!objectStore && !fs::is_directory(jobDir, ec))) {
    if (o.restoreLatest)
      spdlog::info("no checkpoint in {} (the directory does not exist yet): starting without state", jobDir.string());
    return 0;
  }
  // A running instance of this job owns the directory: say so before reading checkpoints
  // it may be deleting. Taken and released at once; the supervisor takes it for good
  // (a start racing this one is refused there).
  {
    LockHolder probe{static_cast<int>(::getpid()), *o.jobId, setup.className, "start of a run"};
    auto lock = JobDirectoryLock::acquire(jobDir.string(), probe);
    if (!lock.ok() && wait.retry(lock.status(), "locking " + jobDir.string())) return kTryAgain;
    if (!lock.ok() && isStoreUnavailability(lock.status())) {
      std::cerr << "error: cannot lock " << jobDir.string() << ": " << lock.status().message() << "\n";
      return wait.interrupted() ? kExitInterrupted : kExitUnavailable;
    }
    if (!lock.ok()) {
      std::cerr << "error: " << lock.status().message() << " — job " << *o.jobId
                << " may run already: stop it first (jobhost cancel " << *o.jobId << "), or use another --job-id\n";
      return kExitUsage;
    }
  }
  // The newest checkpoint can vanish between the listing and its reading: on an object
  // store a DELETE the killed run sent may still be carried out while a lagging listing
  // does not show its successor yet. Look again then (SnapshotRegistry::load does too).
  fs::path newest;
  for (int attempt = 1;; ++attempt) {
    auto storage = state::openStorage(jobDir.string());
    auto registry = storage.ok() ? state::SnapshotRegistry::load(std::move(*storage))
                                 : state::Result<state::SnapshotRegistry>(storage.status());
    if (!registry.ok() && wait.retry(registry.status(), "reading the checkpoints in " + jobDir.string()))
      return kTryAgain;
    if (!registry.ok()) {
      std::cerr << "error: cannot read the checkpoints of job " << *o.jobId << " in " << jobDir.string() << ": "
                << registry.status().message() << "\n";
      return wait.interrupted() ? kExitInterrupted : registry.status().isUnavailable() ? kExitUnavailable : kExitUsage;
    }
    std::vector<uint64_t> ids = registry->checkpointIds();
    if (!o.restoreLatest) {
      if (ids.empty()) return 0;  // leftovers of a run that never completed a checkpoint: the job cleans them up
      std::cerr << "error: the directory of job " << *o.jobId << ", " << jobDir.string()
                << ", already holds checkpoints (the newest: " << state::checkpointDirName(ids.back())
                << "); a run with this --job-id continues them or starts elsewhere:\n"
                << "  continue from the newest:  add --restore latest\n"
                << "  start another job:         use another --job-id\n"
                << "  start this one afresh:     remove " << jobDir.string() << " first (after jobhost checkpoints "
                << jobDir.string() << ")\n";
      return kExitUsage;
    }
    if (ids.empty()) {
      if (!registry->unreadable().empty()) {
        std::cerr << "error: none of the checkpoints of job " << *o.jobId << " in " << jobDir.string()
                  << " can be read (" << registry->unreadable().begin()->first << ": "
                  << registry->unreadable().begin()->second
                  << "); restoring nothing would silently lose their progress. Restore one by hand with -s, or remove "
                     "the directory to start without state\n";
        return kExitIncompatible;
      }
      spdlog::info("no complete checkpoint in {}: starting without state", jobDir.string());
      return 0;
    }
    newest = jobDir / state::checkpointDirName(ids.back());
    auto snap = openSnapshot(newest.string());
    if (!snap.ok() && wait.retry(snap.status(), "reading " + newest.string())) return kTryAgain;
    if (!snap.ok() && attempt < 5 && !isStoreUnavailability(snap.status())) {  // gone (NotFound), or not a snapshot any more on S3
      std::this_thread::sleep_for(std::chrono::milliseconds(100 * attempt));
      continue;
    }
    if (!snap.ok()) {
      std::cerr << "error: cannot read " << newest.string() << ": " << snap.status().message() << "\n";
      return wait.interrupted() ? kExitInterrupted : exitCodeForSnapshotError(snap.status());
    }
    if (o.maxCheckpointAge) {
      const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
      const int64_t taken = snap->metadata.timestampMs;
      const std::chrono::milliseconds age{now - taken};
      if (age > *o.maxCheckpointAge) {
        std::cerr << "error: the newest checkpoint of job " << *o.jobId << ", " << newest.string() << ", was taken at "
                  << formatLocalTime(taken) << ", " << formatDuration(age) << " ago: older than --max-checkpoint-age "
                  << formatDuration(*o.maxCheckpointAge)
                  << ". Restoring it would go back that far in the input. Restore it anyway with a larger "
                     "--max-checkpoint-age (or -s "
                  << newest.string() << "), or remove " << jobDir.string() << " to start without state\n";
        return kExitIncompatible;
      }
    }
    *resolved = std::move(*snap);
    break;
  }
  *snapshot = newest.string();
  spdlog::info("--restore latest: restoring {}, the newest complete checkpoint of job {}", newest.string(), *o.jobId);
  return 0;
}

}  // namespace

int runJob(const RunOptions& o) {
  JobSetup setup;
  // Pinned: every attempt loads the bytes read now (plugin_loader.h, "Pinning"). A dry
  // run (`jobhost check`) starts no attempt: no private copy (for the 21 MB example plugin
  // that copy was half of every `jobhost check`, issue 33 H1).
  PluginOpenOptions pluginOptions;
  pluginOptions.pin = !o.dryRun;
  // A failing static initialiser ends a run or a check before anything else has started
  // (no lock, no thread, no worker): both fence the initialisers in this process rather
  // than loading the plugin a second time in a probe child (H1; for `run` 30 ms of every
  // start, issue 33 N7). setupJob() would print the same error and return the same code.
  pluginOptions.exitOnInitialiserFailure = kExitUsage;
  if (int rc = setupJob(o, &setup, pluginOptions); rc != 0) return rc;
  for (const auto& w : setup.config.suspiciousKeys()) spdlog::warn("{}", w);
  for (const auto& w : setup.unreadArguments) spdlog::warn("job argument {}", w);
  auto restart = createRestartStrategy(setup.config);

  // Restore preflight: only _metadata and the plan, before anything starts. The snapshot
  // is resolved here, once: every attempt that restores it restores this very one.
  // An unavailable store is waited out here (`jobhost run`), or reported with exit 4
  // (`jobhost check`): never taken for a missing or damaged snapshot.
  StartupWait wait(!o.dryRun);
  std::optional<ResolvedSnapshot> initial;
  for (;;) {
  std::optional<std::string> from;
  std::optional<ResolvedSnapshot> latest;  // --restore latest: resolved already
  if (int rc = decideStableJobRestore(o, setup, &from, &latest, wait); rc == kTryAgain) continue;
  else if (rc != 0) return rc;
  if (from) {
    auto snapshot = latest ? state::Result<ResolvedSnapshot>(std::move(*latest)) : resolveSnapshot(*from);
    if (!snapshot.ok() && wait.retry(snapshot.status(), "reading " + *from)) continue;
    if (!snapshot.ok()) {
      std::cerr << "error: cannot restore from " << *from << ": " << snapshot.status().message() << "\n";
      return wait.interrupted() ? kExitInterrupted : exitCodeForSnapshotError(snapshot.status());
    }
    logResolution(*snapshot);
    PreflightInput in;
    in.metadata = &snapshot->metadata;
    in.storage = snapshot->storage.get();
    in.snapshotPath = snapshot->directory;
    in.operators = setup.operators;
    in.selectedClass = setup.className;
    in.pluginPath = o.pluginPath;
    in.pluginDigest = setup.plugin->contentDigest();
    for (const auto& c : setup.plugin->classes()) in.pluginClasses.push_back(c.name);
    in.backend = setup.backend;
    in.incremental = setup.incremental;
    in.maxParallelism = setup.maxParallelism;
    in.parallelism = setup.parallelism;
    in.allowNonRestoredState = o.allowNonRestoredState;
    PreflightReport report = runPreflight(in);
    if (!report.compatible()) {
      std::cerr << report.format(snapshot->directory);
      return kExitIncompatible;
    }
    if (!report.unavailable.ok() && wait.retry(report.unavailable, "checking the files of " + snapshot->directory))
      continue;
    if (!report.unavailable.ok()) {
      std::cerr << "error: cannot check " << snapshot->directory << ": " << report.unavailable.message()
                << "\n  nothing was decided about the snapshot: the storage did not answer; try again later\n";
      return wait.interrupted() ? kExitInterrupted : kExitUnavailable;
    }
    wait.answered();
    if (o.dryRun) {
      std::cout << report.format(snapshot->directory);
      return kExitOk;
    }
    for (const auto& f : report.findings) spdlog::warn("restore check [{}]: {}", f.check, f.message);
    initial = std::move(*snapshot);
  } else if (o.dryRun) {
    std::cout << (o.restoreLatest ? "nothing to check: job " + *o.jobId + " has no checkpoint yet\n"
                                  : std::string("nothing to check: no snapshot given (-s)\n"));
    return kExitOk;
  }
  break;
  }

  JobSupervisor supervisor(o, setup, std::move(restart), std::move(initial));
  if (int rc = supervisor.prepare(); rc != 0) return rc;
  setSignalTarget(&supervisor, setup.stopWithSavepointOnSigterm);
  std::unique_ptr<ControlServer> server;
  {
    auto started = ControlServer::start(supervisor, supervisor.jobId());
    if (started.ok()) server = std::move(*started);
    else spdlog::warn("control endpoint unavailable ({}); list/savepoint/cancel cannot reach this job",
                      started.status().message());
  }
  std::unique_ptr<HealthServer> health;
  if (o.healthPort) {
    HealthOptions ho;
    ho.address = o.healthAddress;
    ho.port = *o.healthPort;
    ho.maxCheckpointAge = setup.readinessMaxCheckpointAge;
    auto started = HealthServer::start(supervisor, ho);
    if (!started.ok()) {
      setSignalTarget(nullptr);
      std::cerr << "error: " << started.status().message() << "\n";
      return kExitUsage;
    }
    health = std::move(*started);
  }
  int exitCode = supervisor.run();
  health.reset();
  server.reset();  // the socket goes before the process does
  setSignalTarget(nullptr);
  return exitCode;
}

}  // namespace jobhost::host
