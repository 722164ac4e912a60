// host/job_work_directory.h — the private local working directory of a running job
// (RocksDB instances of each attempt), and finding those of jobs that no longer run.
//
// Layout: <root>/<jobId>/attempt-<n>/<uid>-<subtask>/...   with <root> = state.local.dir,
// by default <runtime directory>/work (`$XDG_RUNTIME_DIR/jobhost/work`, else
// `/tmp/jobhost-<uid>/work`). The default root, every job directory and every attempt
// directory are created and checked by ensurePrivateDirectory() (owned by us, 0700, not a
// symbolic link); a configured root may be shared (e.g. /tmp) because the job directory
// inside it is private, and it is created by us with an exclusive mkdir, so another user
// cannot pre-create it. RocksDB's own files are 0600 (the rocksdb backend turns off its
// non-owner access).
//
// Liveness has one owner: the job holds a JobDirectoryLock (flock on <root>/<jobId>/.lock)
// for its whole life, shared with its workers, exactly like its checkpoint directory. A
// working directory whose lock is free belongs to a job that no longer runs:
// findStaleWorkDirectories() lists those for `jobhost gc`.
//
// Thread-safety: a JobWorkDirectory is used by the supervisor's main thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/job_directory_lock.h"
#include "jobhost/state/status.h"

namespace jobhost::host {

/// <runtime directory>/work.
std::string defaultWorkRoot();

/// Creates `root` for use: the default root (isDefault) is made private like the runtime
/// directory; a configured one is created if missing and must be a directory.
state::Result<std::string> prepareWorkRoot(const std::string& root, bool isDefault);

/// <root>/<jobId>/attempt-<n>.
std::string attemptWorkDir(const std::string& root, const std::string& jobId, int attempt);

class JobWorkDirectory {
 public:
  /// Prepares `root`, creates <root>/<jobId> (private) and locks it for `me`.
  static state::Result<JobWorkDirectory> create(const std::string& root, bool rootIsDefault, const std::string& jobId,
                                                const LockHolder& me);

  /// Removes what earlier attempts left (a worker killed by a signal cannot clean up) and
  /// creates the private directory of `attempt`; returns its path.
  state::Result<std::string> beginAttempt(int attempt);
  /// Removes the whole job directory and releases the lock (the job has ended).
  void remove();

  const std::string& path() const { return dir_; }
  /// The lock's descriptor: a worker gets a dup of it, so the lock lives while it does.
  int lockFd() const { return lock_ ? lock_->fd() : -1; }

 private:
  JobWorkDirectory(std::string root, std::string dir, JobDirectoryLock lock)
      : root_(std::move(root)), dir_(std::move(dir)), lock_(std::move(lock)) {}
  std::string root_, dir_;
  std::optional<JobDirectoryLock> lock_;
};

/// Why `dir` is not laid out as a job's working directory ("" when it is): a directory
/// of ours (not a symbolic link), mode 0700, holding nothing but the lock file (required
/// with `requireLock`) and attempt-<n> directories. One owner for what gc may remove and
/// what a run may clear and reuse: a configured state.local.dir may hold anything else.
std::string workDirectoryProblem(const std::string& dir, bool requireLock);

struct StaleWorkDirectory {
  std::string path;    // <root>/<jobId>
  uint64_t bytes = 0;  // regular files below it
};

/// The working directories under `root` whose job no longer runs (their lock is free).
/// Never lists a directory a running job holds, nor one that is not laid out as a job's
/// (workDirectoryProblem).
std::vector<StaleWorkDirectory> findStaleWorkDirectories(const std::string& root);

/// Removes one stale working directory, taking its lock first (so a job that starts
/// meanwhile is never touched). An error names the directory and the reason.
state::Status removeStaleWorkDirectory(const std::string& path);

}  // namespace jobhost::host
