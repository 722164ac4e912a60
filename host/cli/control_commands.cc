// `jobhost list / savepoint / cancel / stop` — talk to running jobs over their control
// sockets (host/control/) — and `jobhost savepoint -d` (dispose), which is local.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <thread>

#include "checkpoint/checkpoint_coordinator.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "control/control_client.h"
#include "control/control_server.h"
#include "job_runner.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {

std::string localTime(int64_t epochMs) {
  if (epochMs <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(epochMs / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string human(uint64_t b) {
  char buf[32];
  if (b < 1024) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  else if (b < (1 << 20)) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else if (b < (1ULL << 30)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  return buf;
}

void reportDiscovery(const std::vector<std::string>& stale, const std::vector<std::string>& problems) {
  for (const auto& s : stale) std::cerr << "note: removed stale control socket " << s << " (its job is gone)\n";
  for (const auto& p : problems) std::cerr << "warning: " << p << "\n";
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
  std::string cmd = "jobhost run -s " + path;
  if (!job.status.jobClass.empty()) cmd += " -c " + job.status.jobClass;
  if (!job.status.pluginPath.empty()) cmd += " " + job.status.pluginPath;
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
  Table t({"JOB ID", "STATUS", "CLASS", "SINCE", "LAST CHECKPOINT", "PLUGIN"});
  for (const auto& j : jobs) {
    const JobStatusInfo& s = j.status;
    std::string status = jobStateName(s.state);
    if (s.restarts > 0) status += " (" + std::to_string(s.restarts) + (s.restarts == 1 ? " restart)" : " restarts)");
    std::string last;
    if (s.lastCheckpointId > 0) last = std::to_string(s.lastCheckpointId) + " " + s.lastCheckpointPath;
    else last = s.checkpointDir.empty() ? "checkpoints off" : "none yet";
    t.add({j.jobId, status, s.jobClass, localTime(s.startedMs), last, s.pluginPath});
  }
  std::cout << t.render();
  return kExitOk;
}

int savepointCommand(const std::string& jobId, const std::optional<std::string>& targetDir, const std::string& format) {
  auto job = findJob(jobId);
  if (!job) return kExitUsage;
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
  auto r = resolveSnapshot(path);
  if (!r.ok()) {
    std::cerr << "error: cannot dispose " << path << ": " << r.status().message() << "\n";
    return kExitUsage;
  }
  const state::CheckpointMetadata& m = r->metadata;
  if (m.kind != state::SnapshotKind::kSavepoint) {
    std::cerr << "error: refusing to dispose " << r->directory << ": it is checkpoint " << m.checkpointId << " of job "
              << m.jobId << ", not a savepoint. Checkpoints belong to their job and its retention "
              << "(state.checkpoints.num-retained, execution.checkpointing.externalized-checkpoint-retention); "
              << "savepoint -d removes only savepoints.\n";
    return kExitUsage;
  }
  fs::path dir = fs::path(r->directory);
  std::error_code ec;
  uint64_t files = 0, bytes = 0;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) {
      ++files;
      bytes += it->file_size(ec);
    }
  }
  std::cout << "Disposing savepoint '" << dir.string() << "'." << std::endl;
  fs::remove_all(dir, ec);
  if (ec) {
    std::cerr << "error: cannot remove " << dir.string() << ": " << ec.message() << "\n";
    return kExitJobFailed;
  }
  std::cout << "Savepoint '" << dir.string() << "' disposed: removed " << files << (files == 1 ? " file" : " files")
            << " (" << human(bytes) << "; savepoint " << m.checkpointId << " of job " << m.jobId << ", class "
            << m.jobClass << ").\n";
  return kExitOk;
}

int cancelCommand(const std::string& jobId, bool withSavepoint, const std::optional<std::string>& targetDir) {
  auto job = findJob(jobId);
  if (!job) return kExitUsage;
  auto dir = absoluteDir(targetDir);
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

int stopCommand(const std::string& jobId, const std::optional<std::string>& savepointDir) {
  auto job = findJob(jobId);
  if (!job) return kExitUsage;
  std::cout << "Suspending job " << job->jobId << " with a savepoint." << std::endl;
  auto r = callStop(job->socketPath, absoluteDir(savepointDir));
  if (!r.ok()) {
    std::cerr << "error: " << r.status().message() << "\n" << "The job was not stopped; it keeps running.\n";
    return kExitJobFailed;
  }
  std::cout << "Savepoint completed. Path: " << *r << "\n" << "Stopped job " << job->jobId << ".\n";
  waitForEnd(*job, "stopping");
  return kExitOk;
}

}  // namespace jobhost::host
