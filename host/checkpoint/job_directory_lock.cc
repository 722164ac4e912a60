#include "checkpoint/job_directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "jobhost/state/checkpoint_layout.h"

namespace jobhost::host {

namespace {

std::string lockPath(const std::string& dir) { return dir + "/" + state::kLockFileName; }

std::optional<LockHolder> readHolder(int fd) {
  char buf[1024];
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return std::nullopt;
  std::istringstream in(std::string(buf, static_cast<size_t>(n)));
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
  }
  return h;
}

std::string heldMessage(const std::string& dir, const std::optional<LockHolder>& h) {
  std::string who = h && h->pid ? describeHolder(*h) : "another process";
  return dir + " is in use by " + who + (h && !h->purpose.empty() ? " (" + h->purpose + ")" : "") +
         (h && !h->jobId.empty() ? "; stop that job first (jobhost cancel " + h->jobId + ")" : "; wait until it ends");
}

}  // namespace

std::string describeHolder(const LockHolder& h) {
  if (h.jobId.empty()) return "jobhost " + (h.purpose.empty() ? std::string("command") : h.purpose) + " (pid " + std::to_string(h.pid) + ")";
  return "job " + h.jobId + " (" + (h.jobClass.empty() ? "?" : h.jobClass) + ", pid " + std::to_string(h.pid) + ")";
}

state::Result<JobDirectoryLock> JobDirectoryLock::acquire(const std::string& dir, const LockHolder& me,
                                                          std::optional<LockHolder>* heldBy) {
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
    o.fd_ = -1;
  }
  return *this;
}

void JobDirectoryLock::release() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
  fd_ = -1;
}

}  // namespace jobhost::host
