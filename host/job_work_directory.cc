// host/job_work_directory.cc — see job_work_directory.h.
#include "job_work_directory.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "control/control_server.h"
#include "job_id.h"
#include "jobhost/state/checkpoint_layout.h"
#include "private_directory.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kAttemptPrefix = "attempt-";
const char* const kHint = " — remove it, or set state.local.dir to a directory of yours";

/// A job id: one the supervisor makes up (32 hex digits) or a --job-id NAME. Staging
/// directories (".<id>.new") are not.
bool isJobId(const std::string& name) { return jobIdProblem(name).empty(); }

uint64_t bytesBelow(const fs::path& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    std::error_code sizeError;
    if (it->is_regular_file(sizeError)) {
      uint64_t size = it->file_size(sizeError);
      if (!sizeError) total += size;
    }
  }
  return total;
}

}  // namespace

std::string workDirectoryProblem(const std::string& dir, bool requireLock) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return "cannot be read: " + std::string(std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != ::geteuid()) return "belongs to another user";
  if ((st.st_mode & 07777) != 0700) return "is not private (mode 0700)";
  bool locked = false;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code typeError;
    if (name == state::kLockFileName && e.is_regular_file(typeError) && !e.is_symlink(typeError)) {
      locked = true;
      continue;
    }
    const bool attempt = name.size() > kAttemptPrefix.size() && name.rfind(kAttemptPrefix, 0) == 0 &&
                         std::all_of(name.begin() + static_cast<long>(kAttemptPrefix.size()), name.end(),
                                     [](char c) { return c >= '0' && c <= '9'; });
    if (!attempt || !e.is_directory(typeError) || e.is_symlink(typeError))
      return "holds '" + name + "', which a job's working directory never does";
  }
  if (ec) return "cannot be listed: " + ec.message();
  if (requireLock && !locked) return "has no " + std::string(state::kLockFileName) + " file";
  return "";
}

std::string defaultWorkRoot() { return runtimeDirPath() + "/work"; }

state::Result<std::string> prepareWorkRoot(const std::string& root, bool isDefault) {
  if (isDefault) {
    auto runtime = ensureRuntimeDir();
    if (!runtime.ok()) return runtime.status();
    return ensurePrivateDirectory(root, "the working directory", kHint);
  }
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return state::fromErrno("cannot create state.local.dir " + root, ec.value());
  if (!fs::is_directory(root, ec))
    return state::Status::InvalidArgument("state.local.dir " + root + " is not a directory");
  return root;
}

std::string attemptWorkDir(const std::string& root, const std::string& jobId, int attempt) {
  return (fs::path(root) / jobId / (std::string(kAttemptPrefix) + std::to_string(attempt))).string();
}

state::Result<JobWorkDirectory> JobWorkDirectory::create(const std::string& root, bool rootIsDefault,
                                                         const std::string& jobId, const LockHolder& me) {
  auto prepared = prepareWorkRoot(root, rootIsDefault);
  if (!prepared.ok()) return prepared.status();
  std::string dir = (fs::path(root) / jobId).string();
  // A --job-id NAME is used again by every run of that job: a directory of an earlier run
  // that died (kill -9) is still there. Nobody holds its lock then; taking it makes it ours.
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(dir, ec)) && !fs::is_symlink(fs::symlink_status(dir, ec))) {
    // Everything in it but the lock is removed below: only if it is one (state.local.dir
    // may hold other directories, such as a home directory's).
    if (std::string problem = workDirectoryProblem(dir, /*requireLock=*/false); !problem.empty())
      return state::Status::InvalidArgument("cannot use " + dir + " as the working directory of job " + jobId +
                                            ": it exists and is not one (it " + problem +
                                            "); remove or rename it, or set state.local.dir to another directory");
    std::optional<LockHolder> heldBy;
    auto lock = JobDirectoryLock::acquire(dir, me, &heldBy);
    if (!lock.ok())
      return state::Status::InvalidArgument("the working directory " + dir + " is in use: " + lock.status().message() +
                                            " (two runs with one --job-id?)");
    auto checked = ensurePrivateDirectory(dir, "the working directory", kHint);
    if (!checked.ok()) return checked.status();
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().filename() == state::kLockFileName) continue;
      std::error_code rm;
      fs::remove_all(e.path(), rm);
      if (rm) return state::fromErrno("cannot clear the working directory " + dir + " of an earlier run", rm.value());
    }
    spdlog::info("reusing the working directory {} of an earlier run of job {}", dir, jobId);
    return JobWorkDirectory(root, dir, std::move(*lock));
  }
  // Made under a name gc never considers (not a job id), locked, then renamed into place:
  // a concurrent `jobhost gc` never sees it unlocked. A new job id has no directory yet,
  // so one that appears meanwhile was not made by this job.
  std::string staging = (fs::path(root) / ("." + jobId + ".new")).string();
  if (::mkdir(staging.c_str(), 0700) != 0)
    return state::fromErrno("cannot create the working directory " + staging +
                                (errno == EEXIST ? " (it already exists: somebody else made it)" : ""),
                            errno);
  auto checked = ensurePrivateDirectory(staging, "the working directory", kHint);
  if (!checked.ok()) return checked.status();
  auto lock = JobDirectoryLock::acquire(staging, me);
  if (!lock.ok()) return lock.status();
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.c_str(), RENAME_NOREPLACE) != 0) {
    int err = errno;
    std::error_code ec;
    fs::remove_all(staging, ec);
    return state::fromErrno("cannot create the working directory " + dir, err);
  }
  return JobWorkDirectory(root, dir, std::move(*lock));
}

state::Result<std::string> JobWorkDirectory::beginAttempt(int attempt) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(kAttemptPrefix, 0) != 0) continue;
    std::error_code rm;
    uint64_t bytes = bytesBelow(e.path());
    fs::remove_all(e.path(), rm);
    if (rm) spdlog::warn("could not remove the working directory {} of an earlier attempt: {}", e.path().string(),
                         rm.message());
    else spdlog::debug("removed the working directory {} of an earlier attempt ({} bytes)", e.path().string(), bytes);
  }
  return ensurePrivateDirectory(attemptWorkDir(root_, fs::path(dir_).filename().string(), attempt),
                                "the working directory", kHint);
}

void JobWorkDirectory::remove() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
  if (ec) spdlog::warn("could not remove the working directory {}: {}", dir_, ec.message());
  lock_.reset();
}

std::vector<StaleWorkDirectory> findStaleWorkDirectories(const std::string& root) {
  std::vector<StaleWorkDirectory> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string name = e.path().filename().string();
    std::error_code typeError;
    if (!isJobId(name) || !e.is_directory(typeError) || e.is_symlink(typeError)) continue;
    // Only what a job made: state.local.dir may be shared (/tmp, a home directory).
    if (std::string problem = workDirectoryProblem(e.path().string(), /*requireLock=*/true); !problem.empty()) {
      spdlog::debug("{} is not a job's working directory: it {}", e.path().string(), problem);
      continue;
    }
    if (JobDirectoryLock::holder(e.path().string())) continue;  // a running job holds it
    out.push_back({e.path().string(), bytesBelow(e.path())});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  return out;
}

state::Status removeStaleWorkDirectory(const std::string& path) {
  auto lock = JobDirectoryLock::acquire(path, {static_cast<int>(::getpid()), "", "", "gc"});
  if (!lock.ok()) return lock.status();
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return state::fromErrno("cannot remove " + path, ec.value());
  return state::Status::OK();
}

}  // namespace jobhost::host
