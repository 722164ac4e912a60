// `jobhost list / savepoint / cancel / stop` — talk to running jobs over their control
// sockets (host/control/) — and `jobhost savepoint -d` (dispose), which is local.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <thread>

#include "jobhost/state/s3_storage.h"
#include "checkpoint/checkpoint_coordinator.h"
#include "checkpoint/job_directory_lock.h"
#include "config/units.h"
#include "jobhost/state/checkpoint_layout.h"
#include "jobhost/state/snapshot_registry.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "control/control_client.h"
#include "control/control_server.h"
#include "exit_codes.h"
#include "plugin/elf_metadata.h"
#include "plugin/plugin_loader.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {

void reportDiscovery(const std::vector<std::string>& stale, const std::vector<std::string>& problems) {
  for (const auto& s : stale) std::cerr << "note: removed stale control socket " << s << " (its job is gone)\n";
  for (const auto& p : problems) std::cerr << "warning: " << p << "\n";
}

/// A savepoint without a target directory goes to the job's state.savepoints.dir. A job
/// without one would refuse it, which the control protocol reports as any failure (exit
/// 1); it is a usage error, so it is said here, before the job is asked, with exit 2.
/// The job's configuration in effect tells (an older job that cannot tell is asked
/// anyway, and refuses with the same words). `fix` says how to pass a directory.
bool savepointDirectoryMissing(const JobEndpoint& job, const std::optional<std::string>& targetDir,
                               const std::string& fix) {
  if (targetDir) return false;
  auto config = callConfiguration(job.socketPath);
  if (!config.ok()) return false;
  auto it = config->find("state.savepoints.dir");
  if (it != config->end() && !it->second.empty()) return false;
  std::cerr << "error: no savepoint directory: job " << job.jobId
            << " has no state.savepoints.dir; pass one (" << fix
            << "), or set state.savepoints.dir when starting the job. The job was not asked; it keeps running.\n";
  return true;
}

/// The running job `idOrPrefix` names (its full id or a unique prefix); nullopt after
/// printing why not (unknown: lists the running ids).
std::optional<JobEndpoint> findJob(const std::string& idOrPrefix) {
  std::vector<std::string> stale, problems;
  auto jobs = discoverJobs(&stale, &problems);
  reportDiscovery(stale, problems);
  std::vector<const JobEndpoint*> matches;
  for (const auto& j : jobs)
    if (j.jobId == idOrPrefix) return j;
  if (!idOrPrefix.empty())
    for (const auto& j : jobs)
      if (j.jobId.rfind(idOrPrefix, 0) == 0) matches.push_back(&j);
  if (matches.size() == 1) return *matches[0];
  if (matches.size() > 1) {
    std::cerr << "error: job id prefix '" << idOrPrefix << "' is ambiguous; it matches:\n";
    for (const auto* m : matches) std::cerr << "  " << m->jobId << "  " << m->status.jobClass << "\n";
    return std::nullopt;
  }
  if (jobs.empty()) {
    std::cerr << "error: no running job with id '" << idOrPrefix << "': no jobs are running (control sockets in "
              << runtimeDirPath() << ")\n";
    return std::nullopt;
  }
  std::cerr << "error: no running job with id '" << idOrPrefix << "'. Running jobs:\n";
  for (const auto& j : jobs)
    std::cerr << "  " << j.jobId << "  " << jobStateName(j.status.state) << "  " << j.status.jobClass << "\n";
  return std::nullopt;
}

std::optional<std::string> absoluteDir(const std::optional<std::string>& dir) {
  if (!dir || dir->empty()) return std::nullopt;
  if (state::isObjectStoreUri(*dir)) {  // s3://bucket/prefix: the job opens it as it is
    std::string s = *dir;
    while (!s.empty() && s.back() == '/') s.pop_back();
    return s;
  }
  std::string s = fs::absolute(*dir).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

/// Waits (bounded) until the job's socket is gone, i.e. the job has ended.
void waitForEnd(const JobEndpoint& job, const char* what) {
  struct stat st {};
  if (lstat(job.socketPath.c_str(), &st) != 0) return;
  auto until = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (std::chrono::steady_clock::now() < until) {
    struct stat now {};
    if (lstat(job.socketPath.c_str(), &now) != 0 || now.st_ino != st.st_ino) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::cerr << "note: job " << job.jobId << " (pid " << job.status.pid << ") is still " << what
            << " after 2 minutes\n";
}

std::string restoreHint(const JobEndpoint& job, const std::string& path) {
  std::string cmd = "jobhost run -s " + shellQuote(path);
  if (!job.status.jobClass.empty()) cmd += " -c " + shellQuote(job.status.jobClass);
  if (!job.status.pluginPath.empty()) cmd += " " + shellQuote(job.status.pluginPath);
  return cmd;
}

}  // namespace

int listCommand() {
  std::vector<std::string> stale, problems;
  auto jobs = discoverJobs(&stale, &problems);
  reportDiscovery(stale, problems);
  if (jobs.empty()) {
    std::cout << "No running jobs.\n";
    return kExitOk;
  }
  // PLUGIN FILE: does the file still hold the bytes the job loaded? A job keeps running
  // (and restarting) with those bytes (plugin_loader.h, "Pinning"); CHANGED says a restore
  // or a new run would load something else.
  Table t({"JOB ID", "STATUS", "CLASS", "SINCE", "LAST CHECKPOINT", "PLUGIN FILE", "PLUGIN"});
  bool anyChanged = false;
  for (const auto& j : jobs) {
    const JobStatusInfo& s = j.status;
    std::string status = jobStateName(s.state);
    if (s.restarts > 0) status += " (" + std::to_string(s.restarts) + (s.restarts == 1 ? " restart)" : " restarts)");
    std::string last;
    if (s.lastCheckpointId > 0) last = std::to_string(s.lastCheckpointId) + " " + s.lastCheckpointPath;
    else last = s.checkpointDir.empty() ? "checkpoints off" : "none yet";
    std::string onDisk = "-";
    if (!s.pluginDigest.empty()) {
      PluginFileBytes bytes;
      PluginError unreadable;
      if (!readPluginFile(s.pluginPath, &bytes, &unreadable)) onDisk = "MISSING";
      else onDisk = pluginDigestHex(bytes.view()) == s.pluginDigest ? "unchanged" : "CHANGED";
      anyChanged |= onDisk != "unchanged";
    }
    t.add({j.jobId, status, s.jobClass, formatLocalTime(s.startedMs), last, onDisk, s.pluginPath});
  }
  std::cout << t.render();
  if (anyChanged)
    std::cout << "\nPLUGIN FILE CHANGED/MISSING: the file differs from the bytes the job started with; the job "
                 "keeps running and restarting with those, a new run loads the file as it is now.\n";
  return kExitOk;
}

int savepointCommand(const std::string& jobId, const std::optional<std::string>& targetDir, const std::string& format) {
  auto job = findJob(jobId);
  if (!job) return kExitUsage;
  if (savepointDirectoryMissing(*job, targetDir,
                                "jobhost savepoint " + std::string(format == "native" ? "--format native " : "") +
                                    job->jobId + " <directory>"))
    return kExitUsage;
  auto fmt = format == "native" ? state::SnapshotFormat::kNative : state::SnapshotFormat::kCanonical;
  std::cout << "Triggering savepoint for job " << job->jobId << ".\nWaiting for response..." << std::endl;
  auto r = callSavepoint(job->socketPath, absoluteDir(targetDir), fmt);
  if (!r.ok()) {
    std::cerr << "error: " << r.status().message() << "\n";
    return kExitJobFailed;
  }
  std::cout << "Savepoint completed. Path: " << *r << "\n"
            << "You can resume your program from this savepoint with the run command:\n  " << restoreHint(*job, *r)
            << "\n";
  return kExitOk;
}

int disposeSavepointCommand(const std::string& path) {
  // Exactly the snapshot named: never "the latest one" of a job directory.
  auto r = openSnapshot(path);
  if (!r.ok()) {
    std::cerr << "error: cannot dispose " << path << ": " << r.status().message() << "\n";
    return kExitUsage;
  }
  const state::CheckpointMetadata& m = r->metadata;
  fs::path dir = fs::path(r->directory);
  bool checkpoint = state::parseCheckpointDirName(dir.filename().string()).has_value();
  // The lock of the directory that owns it: a running job's checkpoint, a claimed
  // snapshot or a directory gc is cleaning is refused with the holder named.
  fs::path owner = checkpoint ? dir.parent_path() : dir;
  auto lock = JobDirectoryLock::acquire(owner.string(), {static_cast<int>(::getpid()), "", "", "savepoint -d"});
  if (!lock.ok()) {
    std::cerr << "error: cannot dispose " << dir.string() << ": " << lock.status().message() << "\n";
    return kExitUsage;
  }
  // Through the registry of the directory holding it: `_metadata` first, then the files
  // no other snapshot there references.
  // A checkpoint shares files with its siblings: the whole job directory is read. A
  // savepoint is self-contained: only it is read (its neighbours are none of our business).
  auto registry = checkpoint ? state::SnapshotRegistry::load(r->storage)
                             : state::SnapshotRegistry::loadOne(r->storage, dir.filename().string());
  if (!registry.ok()) {
    std::cerr << "error: cannot read " << dir.parent_path().string() << ": " << registry.status().message()
              << " — nothing was removed\n";
    return kExitJobFailed;
  }
  std::cout << "Disposing " << (checkpoint ? "checkpoint" : "savepoint") << " '" << dir.string() << "'." << std::endl;
  std::vector<state::RemovedFile> removed;
  state::Status s = registry->discard(dir.filename().string(), &removed);
  if (!s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    bool gone = state::isObjectStoreUri(r->directory) ? !r->storage->exists(dir.filename().string() + "/" + state::kMetadataFileName)
                                                      : !fs::exists(dir / state::kMetadataFileName);
    if (gone)
      std::cerr << "The snapshot no longer exists (its _metadata was removed first); what is left is garbage: "
                << (checkpoint ? "jobhost gc " + owner.string() : "rm -r " + dir.string()) << "\n";
    return kExitJobFailed;
  }
  size_t shared = 0;
  for (const auto& f : m.referencedFiles())
    if (!registry->referencesOf(f.path).empty()) ++shared;
  lock->release();
  // The lock file (created by acquire() inside a savepoint's directory) is not the user's.
  std::erase_if(removed, [](const state::RemovedFile& f) {
    return fs::path(f.path).filename() == state::kLockFileName;
  });
  uint64_t bytes = 0;
  for (const auto& f : removed) bytes += f.size;
  std::cout << (checkpoint ? "Checkpoint '" : "Savepoint '") << dir.string() << "' disposed: removed " << removed.size()
            << (removed.size() == 1 ? " file" : " files") << " (" << formatBytes(bytes) << "; "
            << (checkpoint ? "checkpoint " : "savepoint ") << m.checkpointId << " of job " << m.jobId << ", class "
            << m.jobClass << ")"
            << (shared ? "; kept " + std::to_string(shared) + " shared files newer checkpoints still reference" : "")
            << ".\n";
  return kExitOk;
}

int cancelCommand(const std::string& jobId, bool withSavepoint, const std::optional<std::string>& targetDir) {
  auto job = findJob(jobId);
  if (!job) return kExitUsage;
  auto dir = absoluteDir(targetDir);
  if (withSavepoint && savepointDirectoryMissing(*job, dir, "jobhost cancel -s <directory> " + job->jobId))
    return kExitUsage;
  if (withSavepoint)
    std::cout << "Cancelling job " << job->jobId << " with a savepoint to "
              << (dir ? *dir : std::string("the job's state.savepoints.dir")) << "." << std::endl;
  else
    std::cout << "Cancelling job " << job->jobId << "." << std::endl;
  auto r = callCancel(job->socketPath, withSavepoint, dir);
  if (!r.ok()) {
    std::cerr << "error: " << r.status().message() << "\n";
    if (withSavepoint) std::cerr << "The job was not cancelled; it keeps running.\n";
    return kExitJobFailed;
  }
  if (withSavepoint) std::cout << "Cancelled job " << job->jobId << ". Savepoint stored in " << *r << ".\n";
  else std::cout << "Cancelled job " << job->jobId << ".\n";
  waitForEnd(*job, "cancelling");
  return kExitOk;
}

int stopCommand(const std::string& jobId, const std::optional<std::string>& savepointDir, bool drain) {
  auto job = findJob(jobId);
  if (!job) return kExitUsage;
  if (savepointDirectoryMissing(*job, savepointDir,
                                "jobhost stop --savepoint-path <directory> " + std::string(drain ? "--drain " : "") +
                                    job->jobId))
    return kExitUsage;
  std::cout << (drain ? "Draining job " : "Suspending job ") << job->jobId << " with a savepoint"
            << (drain ? " (the maximum watermark first: every event-time window fires)." : ".") << std::endl;
  auto r = callStop(job->socketPath, absoluteDir(savepointDir), drain);
  if (!r.ok()) {
    std::cerr << "error: " << r.status().message() << "\n" << "The job was not stopped; it keeps running.\n";
    return kExitJobFailed;
  }
  std::cout << "Savepoint completed. Path: " << *r << "\n" << "Stopped job " << job->jobId << ".\n";
  waitForEnd(*job, "stopping");
  return kExitOk;
}

}  // namespace jobhost::host
