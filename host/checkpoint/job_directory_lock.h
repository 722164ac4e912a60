// host/checkpoint/job_directory_lock.h — a checkpoint directory is locked by the process
// that writes (or cleans, or disposes of) it.
//
// The lock is an flock(2) on `<dir>/.lock` (state::kLockFileName), taken without waiting
// and held for as long as the object lives: a running job holds its job directory for its
// whole life (its worker processes inherit the lock), `jobhost gc` and `savepoint -d` hold
// it while they delete, a job restoring with `--restore-mode claim` holds the claimed
// snapshot's directory until it has disposed of it. The kernel releases it when the
// holder dies, so a crashed job never blocks anyone: no time-outs, no guessing from
// control sockets. The file records who holds it (pid, job id, class, purpose) so a
// refusal can name the holder.
//
// On an object store (s3://…) there is no flock: the lock is a lease object `<dir>/.lock`
// created with a conditional put (If-None-Match: *, so exactly one of two racing
// acquirers gets it), recording the holder, an owner id and an expiry (kLeaseSeconds
// ahead). A thread of the holder renews it every kLeaseSeconds/3 (delete + conditional
// put: another acquirer can only slip in if the renewal itself is late past the expiry
// window); release deletes it if it is still ours. A holder killed with SIGKILL leaves
// the lease behind until it expires: an acquirer before then is refused with the holder
// and the expiry named, unless it runs on the holder's host and the holder's pid no longer
// exists, or is the acquirer's own and no lock of it holds the lease any more (its release
// did not reach the store): then it takes the lease over at once. After the expiry the
// stale lease is replaced. Removing a stale lease that the store does not carry out is an
// error with the store's code (Unavailable: wait and try again), never taken for another
// acquirer. Guarantee: while the
// holder runs and can reach the store at least once per kLeaseSeconds/3, nobody else
// acquires the lock; a holder cut off from the store longer than kLeaseSeconds may lose
// it (it logs an error when a renewal finds the lease gone or someone else's). Workers
// do not share the lease (the supervisor renews it for the job).
//
// Thread-safety: a JobDirectoryLock is used by one thread; holder() is thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "jobhost/state/status.h"

namespace jobhost::state {
class CheckpointStorage;
}

namespace jobhost::host {

struct LockHolder {
  int pid = 0;
  std::string jobId;     // empty for a command (gc, savepoint -d)
  std::string jobClass;  // empty for a command
  std::string purpose;   // "running job", "gc", "savepoint -d", "claim"
};

/// "job 3f0c9a... (WordCount, pid 4242)" / "jobhost gc (pid 4242)".
std::string describeHolder(const LockHolder& h);

class ObjectStoreLease;  // job_directory_lock.cc

/// CLOCK_MONOTONIC in nanoseconds: the clock of LeaseState::publishUntilNanos (the same in
/// every process of this host, so the supervisor can hand the deadline to its workers).
int64_t monotonicNanos();

class JobDirectoryLock {
 public:
  /// Lifetime of an object-store lease without renewal.
  static constexpr int kLeaseSeconds = 30;

  /// Takes the lock of directory `dir` (which must exist), without waiting. If another
  /// process holds it: an error whose message names `dir` and the holder, and *heldBy
  /// (if given) is set. Other errors (cannot create the lock file) name the OS reason.
  static state::Result<JobDirectoryLock> acquire(const std::string& dir, const LockHolder& me,
                                                 std::optional<LockHolder>* heldBy = nullptr);
  /// The object-store lease of `dir` (see above) on `storage`, the store of `dir` (what
  /// acquire() does for an s3:// `dir`; tests pass a local or fault-injecting storage, whose
  /// put() never overwrites either). An error of the store keeps its code: Unavailable
  /// means the store did not answer, and trying again later may succeed.
  static state::Result<JobDirectoryLock> acquireLease(std::unique_ptr<state::CheckpointStorage> storage,
                                                      const std::string& dir, const LockHolder& me,
                                                      std::optional<LockHolder>* heldBy = nullptr);
  /// Who holds the lock of `dir`, if anyone (nullopt also when `dir` has no lock file).
  /// Does not take it.
  static std::optional<LockHolder> holder(const std::string& dir);

  JobDirectoryLock(JobDirectoryLock&& o) noexcept : fd_(o.fd_), dir_(std::move(o.dir_)), lease_(std::move(o.lease_)) {
    o.fd_ = -1;
  }
  JobDirectoryLock& operator=(JobDirectoryLock&& o) noexcept;
  JobDirectoryLock(const JobDirectoryLock&) = delete;
  JobDirectoryLock& operator=(const JobDirectoryLock&) = delete;
  ~JobDirectoryLock() { release(); }

  /// The locked file's descriptor (close-on-exec). A child process that should share the
  /// lock gets a dup of it without FD_CLOEXEC. -1 for an object-store lease.
  int fd() const { return fd_; }
  const std::string& directory() const { return dir_; }
  /// Releases the lock (also when the directory was deleted meanwhile).
  void release();

  /// Fencing (issue 31, item 3). A holder of an object-store lease publishes to the
  /// directory (a checkpoint's _metadata, deletions) only until publishUntilNanos
  /// (monotonicNanos()): half a lease after the start of its last successful renewal, so
  /// that a holder cut off from the store has stopped publishing long before its lease can
  /// expire and another process acquire it. Renewals that fail are retried every second,
  /// and a renewal that succeeds moves the deadline again: publishing goes on. `lost`: a
  /// renewal found the lease someone else's; it is never renewed again.
  struct LeaseState {
    int64_t publishUntilNanos = INT64_MAX;  // INT64_MAX: no lease to fence (a local flock)
    int64_t renewedMs = 0;                  // epoch ms of the last renewal; 0 for a flock
    bool lost = false;
    /// The lease had expired and was gone (another process may have held it meanwhile)
    /// and was acquired again: whatever this process did since its last renewal must be
    /// redone from the newest checkpoint in the directory.
    bool reacquired = false;
    std::string why;  // why renewals fail, or who took the lease over
  };
  using LeaseListener = std::function<void(const LeaseState&)>;
  /// Calls `f` with the current state at once and after every renewal or failed renewal
  /// (from the renewing thread). Never called for a local flock, which cannot be lost.
  void onLeaseChange(LeaseListener f);

 private:
  JobDirectoryLock(int fd, std::string dir) : fd_(fd), dir_(std::move(dir)) {}
  int fd_ = -1;
  std::string dir_;
  std::shared_ptr<ObjectStoreLease> lease_;  // object stores only
};

}  // namespace jobhost::host
