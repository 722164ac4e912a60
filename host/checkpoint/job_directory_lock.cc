#include "checkpoint/job_directory_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <time.h>

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "jobhost/state/checkpoint_layout.h"
#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/s3_storage.h"
#include "wall_clock.h"

namespace jobhost::host {

namespace {

std::string lockPath(const std::string& dir) { return dir + "/" + state::kLockFileName; }

struct LeaseText {
  std::string owner;
  std::string host;
  int64_t expiresMs = 0;
};

std::optional<LockHolder> parseHolder(const std::string& text, LeaseText* lease = nullptr) {
  if (text.empty()) return std::nullopt;
  std::istringstream in(text);
  LockHolder h;
  std::string line;
  while (std::getline(in, line)) {
    auto sp = line.find(' ');
    if (sp == std::string::npos) continue;
    std::string key = line.substr(0, sp), value = line.substr(sp + 1);
    if (key == "pid") h.pid = std::atoi(value.c_str());
    else if (key == "job") h.jobId = value;
    else if (key == "class") h.jobClass = value;
    else if (key == "purpose") h.purpose = value;
    else if (lease && key == "owner") lease->owner = value;
    else if (lease && key == "host") lease->host = value;
    else if (lease && key == "expires") lease->expiresMs = std::atoll(value.c_str());
  }
  return h;
}

std::optional<LockHolder> readHolder(int fd) {
  char buf[1024];
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return std::nullopt;
  return parseHolder(std::string(buf, static_cast<size_t>(n)));
}

std::string holderText(const LockHolder& me) {
  std::string text = "pid " + std::to_string(::getpid()) + "\n";
  if (!me.jobId.empty()) text += "job " + me.jobId + "\n";
  if (!me.jobClass.empty()) text += "class " + me.jobClass + "\n";
  if (!me.purpose.empty()) text += "purpose " + me.purpose + "\n";
  return text;
}

std::string hostName();

/// The lease's lifetime: JobDirectoryLock::kLeaseSeconds, or JOBHOST_LEASE_SECONDS (tests
/// only: an outage longer than a lease without waiting 30 s), at least 3 s.
int leaseSeconds() {
  if (const char* e = std::getenv("JOBHOST_LEASE_SECONDS"); e && std::atoi(e) >= 3) return std::atoi(e);
  return JobDirectoryLock::kLeaseSeconds;
}

/// A lease whose holder ran on this host under a pid that no longer exists: it was
/// killed and can be taken over at once instead of after its expiry. (A reused pid only
/// makes us wait for the expiry.)
bool holderIsGone(const LeaseText& lease, const std::optional<LockHolder>& h) {
  return h && h->pid > 0 && lease.host == hostName() && ::kill(h->pid, 0) != 0 && errno == ESRCH;
}

std::string hostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::string heldMessage(const std::string& dir, const std::optional<LockHolder>& h) {
  std::string who = h && h->pid ? describeHolder(*h) : "another process";
  return dir + " is in use by " + who + (h && !h->purpose.empty() ? " (" + h->purpose + ")" : "") +
         (h && !h->jobId.empty() ? "; stop that job first (jobhost cancel " + h->jobId + ")" : "; wait until it ends");
}

}  // namespace

using LeaseState = JobDirectoryLock::LeaseState;

/// The lease object of an object-store directory and the thread that renews it.
class ObjectStoreLease {
 public:
  ObjectStoreLease(std::unique_ptr<state::CheckpointStorage> storage, std::string dir, std::string body)
      : storage_(std::move(storage)), dir_(std::move(dir)), body_(std::move(body)) {
    std::random_device device;
    char rnd[17];
    std::snprintf(rnd, sizeof rnd, "%08x%08x", device(), device());
    owner_ = hostName() + ":" + std::to_string(::getpid()) + ":" + rnd;
  }

  ~ObjectStoreLease() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (renewer_.joinable()) renewer_.join();
    if (held_ && stillOurs()) {
      state::Status s = storage_->remove(state::kLockFileName);
      if (!s.ok() && !s.isNotFound()) spdlog::warn("cannot release the lease {}: {}", where(), s.message());
    }
    if (held_) liveOwners().erase(owner_);
  }

  std::string where() const { return storage_->describe(state::kLockFileName); }

  std::string text() const {
    return body_ + "host " + hostName() + "\nowner " + owner_ + "\nexpires " +
           std::to_string(wallClockMs() + int64_t{leaseSeconds()} * 1000) + "\n";
  }

  /// Calls `f` now and after every change of the publishing deadline (from the renewing
  /// thread; not under any lock of ours).
  void setListener(JobDirectoryLock::LeaseListener f) {
    LeaseState now;
    {
      std::lock_guard lock(mu_);
      listener_ = std::move(f);
      now = state_;
    }
    if (listener_) listener_(now);
  }

  // One conditional put, replacing an expired lease once.
  state::Status acquire(std::optional<LockHolder>* heldBy) {
    for (int tries = 0; tries < 2; ++tries) {
      const int64_t started = monotonicNanos();
      state::Status s = storage_->put(state::kLockFileName, text());
      if (s.ok()) {
        held_ = true;
        liveOwners().insert(owner_);
        renewed(started);
        renewer_ = std::thread([this] { renewLoop(); });
        return s;
      }
      if (!s.isInvalidArgument()) return s.withContext("cannot lock " + dir_);  // keeps the code: Unavailable waits
      std::string current;
      state::Status g = storage_->get(state::kLockFileName, &current);
      if (g.isNotFound()) continue;  // released meanwhile
      if (!g.ok()) return g.withContext("cannot read the lease " + where());
      LeaseText lease;
      auto h = parseHolder(current, &lease);
      if (lease.expiresMs < wallClockMs()) {
        spdlog::info("replacing the expired lease {} of {} (expired {} s ago)", where(),
                     h ? describeHolder(*h) : std::string("?"), (wallClockMs() - lease.expiresMs) / 1000);
        if (state::Status r = removeStale(); !r.ok()) return r;
        continue;
      }
      if (leftBehindByThisProcess(lease, h)) {
        spdlog::info("replacing the lease {} that this process left behind (releasing it did not reach the store)",
                     where());
        if (state::Status r = removeStale(); !r.ok()) return r;
        continue;
      }
      if (holderIsGone(lease, h)) {
        spdlog::info("replacing the lease {} of {}: that process no longer runs on this host", where(),
                     describeHolder(*h));
        if (state::Status r = removeStale(); !r.ok()) return r;
        continue;
      }
      if (heldBy) *heldBy = h;
      std::string who = h && h->pid ? describeHolder(*h) : std::string("another process");
      return state::Status::InvalidArgument(
          dir_ + " is in use by " + who + " on host " + lease.host + (h && !h->purpose.empty() ? " (" + h->purpose + ")" : "") +
          ": its lease " + where() + " expires in " + std::to_string((lease.expiresMs - wallClockMs()) / 1000 + 1) +
          " s unless renewed; stop that job first" + (h && !h->jobId.empty() ? " (jobhost cancel " + h->jobId + ")" : "") +
          ", or, if it was killed, retry after the lease expires");
    }
    return state::Status::InvalidArgument("cannot lock " + dir_ + ": the lease " + where() +
                                          " keeps changing; another process is acquiring it");
  }

 private:
  /// The owner ids of the leases this process holds now (ObjectStoreLease objects alive).
  struct LiveOwners {
    std::mutex mu;
    std::set<std::string> ids;
    void insert(const std::string& id) {
      std::lock_guard lock(mu);
      ids.insert(id);
    }
    void erase(const std::string& id) {
      std::lock_guard lock(mu);
      ids.erase(id);
    }
    bool contains(const std::string& id) {
      std::lock_guard lock(mu);
      return ids.count(id) != 0;
    }
  };
  static LiveOwners& liveOwners() {
    static LiveOwners* owners = new LiveOwners;  // never destroyed: leases may outlive static destruction order
    return *owners;
  }

  /// A lease of this very process (host and pid ours) that no lease object of ours holds:
  /// an earlier lock of this process (the start-up probe of a run) was released while the
  /// store did not answer, and its lease stayed. Taken over at once, as a dead holder's is;
  /// a lease this process still holds is refused as any other holder's.
  bool leftBehindByThisProcess(const LeaseText& lease, const std::optional<LockHolder>& h) {
    return h && h->pid == ::getpid() && lease.host == hostName() && !lease.owner.empty() &&
           !liveOwners().contains(lease.owner);
  }

  /// Removes a stale lease before the next conditional put. A remove the store did not
  /// carry out is returned with its code (Unavailable is waited out by the caller): taken
  /// as done, the put after it would fail on the stale lease again, and after two tries
  /// an outage would read as another process acquiring the lease (a final error).
  state::Status removeStale() {
    state::Status s = storage_->remove(state::kLockFileName);
    if (s.ok() || s.isNotFound()) return state::Status::OK();
    return s.withContext("cannot lock " + dir_ + ": cannot remove the stale lease " + where());
  }

  bool stillOurs() {
    std::string current;
    if (!storage_->get(state::kLockFileName, &current).ok()) return false;
    LeaseText lease;
    parseHolder(current, &lease);
    return lease.owner == owner_;
  }

  /// A renewal (or the acquisition) whose request started at `startedNanos` succeeded:
  /// nobody else can take the lease before startedNanos + leaseSeconds (the expiry it
  /// wrote is later than that); we publish for half of it, so that a holder cut off from
  /// the store stops publishing long before anyone may take over (clock rates differ
  /// little; the expiry others compare is written from our wall clock at the same moment).
  void renewed(int64_t startedNanos) {
    LeaseState next;
    next.publishUntilNanos = startedNanos + int64_t{leaseSeconds()} * 1'000'000'000 / 2;
    next.renewedMs = wallClockMs();
    notify(next);
  }

  void notify(const LeaseState& next) {
    JobDirectoryLock::LeaseListener f;
    {
      std::lock_guard lock(mu_);
      state_ = next;
      f = listener_;
    }
    if (f) f(next);
  }

  // Renews every leaseSeconds/3; while renewals fail (the store does not answer), tries
  // again every second. A lease found to be someone else's (a complete answer) is lost for
  // good: the listener hears lost = true. A lease found gone (expired and removed, nobody
  // holds it) is acquired again with the conditional put.
  void renewLoop() {
    std::unique_lock lock(mu_);
    int64_t failingSinceMs = 0;
    for (;;) {
      const auto pause = failingSinceMs != 0 ? std::chrono::seconds(1) : std::chrono::seconds(leaseSeconds() / 3);
      if (cv_.wait_for(lock, pause, [&] { return stop_; })) return;
      LeaseState before = state_;
      lock.unlock();
      const int64_t started = monotonicNanos();
      std::string current;
      state::Status s = storage_->get(state::kLockFileName, &current);
      std::string lostTo;
      if (s.ok()) {
        LeaseText lease;
        auto h = parseHolder(current, &lease);
        if (lease.owner != owner_) {
          lostTo = h && h->pid ? describeHolder(*h) + " on host " + lease.host : "another process";
        } else {
          s = storage_->remove(state::kLockFileName);
          if (s.ok() || s.isNotFound()) s = storage_->put(state::kLockFileName, text());
          if (s.isInvalidArgument()) lostTo = "another process (it created the lease between our delete and put)";
        }
      } else if (s.isNotFound()) {
        // Gone: it expired and someone removed it, maybe holding it meanwhile. Take it
        // again; what we did since our last renewal is redone from the newest checkpoint.
        s = storage_->put(state::kLockFileName, text());
        if (s.isInvalidArgument()) lostTo = "another process";
        if (s.ok()) {
          spdlog::warn("the lease {} had expired and was gone: acquired it again; the job restarts from the newest "
                       "checkpoint in {} (another instance may have run it meanwhile)",
                       where(), dir_);
          failingSinceMs = 0;
          LeaseState again;
          again.publishUntilNanos = started + int64_t{leaseSeconds()} * 1'000'000'000 / 2;
          again.renewedMs = wallClockMs();
          again.reacquired = true;
          notify(again);
          lock.lock();
          continue;
        }
      }
      if (!lostTo.empty()) {
        spdlog::error("lost the lease {} to {}: this process no longer publishes to {}", where(), lostTo, dir_);
        LeaseState gone = before;
        gone.publishUntilNanos = 0;
        gone.lost = true;
        gone.why = "the lease " + where() + " was taken over by " + lostTo;
        notify(gone);
        lock.lock();
        held_ = false;
        return;
      }
      if (s.ok()) {
        if (failingSinceMs != 0)
          spdlog::info("renewed the lease {} again after {} s without", where(), (wallClockMs() - failingSinceMs) / 1000);
        failingSinceMs = 0;
        renewed(started);
      } else {
        if (failingSinceMs == 0) {
          failingSinceMs = wallClockMs();
          spdlog::warn("cannot renew the lease {}: {}; checkpoints are not published after {} s without a renewal, "
                       "and go on once it is renewed",
                       where(), s.toString(), leaseSeconds() / 2);
        }
        LeaseState failing = before;
        failing.why = "the lease " + where() + " could not be renewed since " + std::to_string(failingSinceMs) +
                      " (epoch ms): " + s.toString();
        notify(failing);
      }
      lock.lock();
    }
  }

  std::unique_ptr<state::CheckpointStorage> storage_;
  const std::string dir_;
  const std::string body_;
  std::string owner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  bool held_ = false;
  LeaseState state_;                          // guarded by mu_
  JobDirectoryLock::LeaseListener listener_;  // guarded by mu_
  std::thread renewer_;
};

std::string describeHolder(const LockHolder& h) {
  if (h.jobId.empty()) return "jobhost " + (h.purpose.empty() ? std::string("command") : h.purpose) + " (pid " + std::to_string(h.pid) + ")";
  return "job " + h.jobId + " (" + (h.jobClass.empty() ? "?" : h.jobClass) + ", pid " + std::to_string(h.pid) + ")";
}

state::Result<JobDirectoryLock> JobDirectoryLock::acquire(const std::string& dir, const LockHolder& me,
                                                          std::optional<LockHolder>* heldBy) {
  if (state::isObjectStoreUri(dir)) {
    auto storage = state::openStorage(dir);
    if (!storage.ok()) return storage.status();
    return acquireLease(std::move(*storage), dir, me, heldBy);
  }
  std::string path = lockPath(dir);
  int fd = -1;
  // A holder that removes the directory it leaves (DELETE_ON_CANCELLATION, a run that
  // wrote nothing) unlinks the lock file while it still holds it: whoever opened the file
  // before that may get the lock of the unlinked file once it is released. That lock
  // counts only if the path still names the locked file; else open it again.
  for (int attempt = 0;; ++attempt) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return state::fromErrno("cannot open the lock file " + path, errno);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      if (err == EWOULDBLOCK) {
        auto h = readHolder(fd);
        ::close(fd);
        if (heldBy) *heldBy = h;
        return state::Status::InvalidArgument(heldMessage(dir, h));
      }
      ::close(fd);
      return state::fromErrno("cannot lock " + path, err);
    }
    struct stat locked {}, named {};
    if (::fstat(fd, &locked) == 0 && ::stat(path.c_str(), &named) == 0 && locked.st_dev == named.st_dev &&
        locked.st_ino == named.st_ino)
      break;
    ::close(fd);
    if (attempt == 100) return state::Status::IOError("cannot lock " + path + ": it is removed and created again all the time");
  }
  std::string text = "pid " + std::to_string(::getpid()) + "\n";
  if (!me.jobId.empty()) text += "job " + me.jobId + "\n";
  if (!me.jobClass.empty()) text += "class " + me.jobClass + "\n";
  if (!me.purpose.empty()) text += "purpose " + me.purpose + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    int err = errno;
    ::close(fd);
    return state::fromErrno("cannot write the lock file " + path, err);
  }
  return JobDirectoryLock(fd, dir);
}

state::Result<JobDirectoryLock> JobDirectoryLock::acquireLease(std::unique_ptr<state::CheckpointStorage> storage,
                                                               const std::string& dir, const LockHolder& me,
                                                               std::optional<LockHolder>* heldBy) {
  auto lease = std::make_shared<ObjectStoreLease>(std::move(storage), dir, holderText(me));
  if (state::Status s = lease->acquire(heldBy); !s.ok()) return s;
  JobDirectoryLock lock(-1, dir);
  lock.lease_ = std::move(lease);
  return lock;
}

std::optional<LockHolder> JobDirectoryLock::holder(const std::string& dir) {
  if (state::isObjectStoreUri(dir)) {
    auto storage = state::openStorage(dir);
    std::string text;
    if (!storage.ok() || !(*storage)->get(state::kLockFileName, &text).ok()) return std::nullopt;
    LeaseText lease;
    auto h = parseHolder(text, &lease);
    if (lease.expiresMs < wallClockMs() || holderIsGone(lease, h)) return std::nullopt;
    return h.value_or(LockHolder{});
  }
  int fd = ::open(lockPath(dir).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  std::optional<LockHolder> h;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) h = readHolder(fd).value_or(LockHolder{});
  ::close(fd);
  return h;
}

JobDirectoryLock& JobDirectoryLock::operator=(JobDirectoryLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    dir_ = std::move(o.dir_);
    lease_ = std::move(o.lease_);
    o.fd_ = -1;
  }
  return *this;
}

void JobDirectoryLock::onLeaseChange(LeaseListener f) {
  if (lease_) lease_->setListener(std::move(f));
}

int64_t monotonicNanos() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void JobDirectoryLock::release() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
  fd_ = -1;
  lease_.reset();  // stops renewing and deletes the lease object
}

}  // namespace jobhost::host
