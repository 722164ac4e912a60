#include "checkpoint/job_directory_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "jobhost/state/checkpoint_layout.h"
#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/s3_storage.h"

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

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string holderText(const LockHolder& me) {
  std::string text = "pid " + std::to_string(::getpid()) + "\n";
  if (!me.jobId.empty()) text += "job " + me.jobId + "\n";
  if (!me.jobClass.empty()) text += "class " + me.jobClass + "\n";
  if (!me.purpose.empty()) text += "purpose " + me.purpose + "\n";
  return text;
}

std::string hostName();

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
  }

  std::string where() const { return storage_->describe(state::kLockFileName); }

  std::string text() const {
    return body_ + "host " + hostName() + "\nowner " + owner_ + "\nexpires " +
           std::to_string(nowMs() + JobDirectoryLock::kLeaseSeconds * 1000) + "\n";
  }

  // One conditional put, replacing an expired lease once.
  state::Status acquire(std::optional<LockHolder>* heldBy) {
    for (int tries = 0; tries < 2; ++tries) {
      state::Status s = storage_->put(state::kLockFileName, text());
      if (s.ok()) {
        held_ = true;
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
      if (lease.expiresMs < nowMs()) {
        spdlog::info("replacing the expired lease {} of {} (expired {} s ago)", where(),
                     h ? describeHolder(*h) : std::string("?"), (nowMs() - lease.expiresMs) / 1000);
        (void)storage_->remove(state::kLockFileName);
        continue;
      }
      if (holderIsGone(lease, h)) {
        spdlog::info("replacing the lease {} of {}: that process no longer runs on this host", where(),
                     describeHolder(*h));
        (void)storage_->remove(state::kLockFileName);
        continue;
      }
      if (heldBy) *heldBy = h;
      std::string who = h && h->pid ? describeHolder(*h) : std::string("another process");
      return state::Status::InvalidArgument(
          dir_ + " is in use by " + who + " on host " + lease.host + (h && !h->purpose.empty() ? " (" + h->purpose + ")" : "") +
          ": its lease " + where() + " expires in " + std::to_string((lease.expiresMs - nowMs()) / 1000 + 1) +
          " s unless renewed; stop that job first" + (h && !h->jobId.empty() ? " (jobhost cancel " + h->jobId + ")" : "") +
          ", or, if it was killed, retry after the lease expires");
    }
    return state::Status::InvalidArgument("cannot lock " + dir_ + ": the lease " + where() +
                                          " keeps changing; another process is acquiring it");
  }

 private:
  bool stillOurs() {
    std::string current;
    if (!storage_->get(state::kLockFileName, &current).ok()) return false;
    LeaseText lease;
    parseHolder(current, &lease);
    return lease.owner == owner_;
  }

  void renewLoop() {
    std::unique_lock lock(mu_);
    for (;;) {
      if (cv_.wait_for(lock, std::chrono::seconds(JobDirectoryLock::kLeaseSeconds / 3), [&] { return stop_; })) return;
      lock.unlock();
      if (!stillOurs()) {
        spdlog::error("lost the lease {}: another process may now write {}", where(), dir_);
        lock.lock();
        held_ = false;
        return;
      }
      state::Status s = storage_->remove(state::kLockFileName);
      if (s.ok()) s = storage_->put(state::kLockFileName, text());
      if (!s.ok()) spdlog::error("cannot renew the lease {}: {}", where(), s.message());
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
    auto lease = std::make_shared<ObjectStoreLease>(std::move(*storage), dir, holderText(me));
    if (state::Status s = lease->acquire(heldBy); !s.ok()) return s;
    JobDirectoryLock lock(-1, dir);
    lock.lease_ = std::move(lease);
    return lock;
  }
  std::string path = lockPath(dir);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
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

std::optional<LockHolder> JobDirectoryLock::holder(const std::string& dir) {
  if (state::isObjectStoreUri(dir)) {
    auto storage = state::openStorage(dir);
    std::string text;
    if (!storage.ok() || !(*storage)->get(state::kLockFileName, &text).ok()) return std::nullopt;
    LeaseText lease;
    auto h = parseHolder(text, &lease);
    if (lease.expiresMs < nowMs() || holderIsGone(lease, h)) return std::nullopt;
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

void JobDirectoryLock::release() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
  fd_ = -1;
  lease_.reset();  // stops renewing and deletes the lease object
}

}  // namespace jobhost::host
