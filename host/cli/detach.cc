// `jobhost run -d`: runs the job in the background and returns once it runs.
//
// The job is this same binary (/proc/self/exe) with the same arguments minus -d, in a new
// session (setsid), stdin from /dev/null, stdout and stderr appended to a log file in the
// runtime directory. Handshake: the child gets JOBHOST_READY_FD=<fd>, the write end of a
// pipe, and writes "<jobId>\n" to it once the job runs and its control socket is up
// (DetachHandshake, detach.h, held by the supervisor). Fallback, should the pipe close
// without an id: a new socket in the runtime directory whose status names the child's
// pid. The parent then waits until the job answers `status` on its socket.
#include "cli/detach.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

#include "cli/commands.h"
#include "control/control_client.h"
#include "control/control_server.h"
#include "exit_codes.h"
#include "worker_spawn.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {

constexpr auto kReadyTimeout = std::chrono::minutes(5);
constexpr char kReadyFdVariable[] = "JOBHOST_READY_FD";

std::set<std::string> socketsIn(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".sock") == 0) out.insert(it->path().string());
  }
  return out;
}

std::string tail(const std::string& path, size_t lines) {
  std::ifstream in(path, std::ios::binary);
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += "  " + l + "\n";
  return out;
}

std::string timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace

int runDetached(const std::vector<std::string>& cliArgs, const std::vector<std::string>& jobArgs) {
  auto dir = ensureRuntimeDir();
  if (!dir.ok()) {
    std::cerr << "error: cannot run detached: " << dir.status().message() << "\n";
    return kExitUsage;
  }
  if (controlSocketPath(*dir, std::string(32, 'x')).size() > kMaxSocketPathLength) {
    std::cerr << "error: cannot run detached: control sockets in " << *dir << " would be longer than "
              << kMaxSocketPathLength << " bytes; set XDG_RUNTIME_DIR to a shorter directory of yours\n";
    return kExitUsage;
  }
  // The same command line without -d/--detached (only among our options: the job's own
  // arguments after the plugin path are passed as they are).
  std::vector<std::string> argv = {"jobhost"};
  bool seenRun = false;
  for (const auto& a : cliArgs) {
    if (seenRun && (a == "-d" || a == "--detached")) continue;
    if (a == "run") seenRun = true;
    argv.push_back(a);
  }
  argv.insert(argv.end(), jobArgs.begin(), jobArgs.end());

  std::string logPath = *dir + "/run-" + timestamp() + "-" + std::to_string(getpid()) + ".log";
  int logFd = open(logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (logFd < 0) {
    std::cerr << "error: cannot create the log file " << logPath << ": " << std::strerror(errno) << "\n";
    return kExitUsage;
  }
  int nullFd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int ready[2];
  if (nullFd < 0 || pipe2(ready, O_CLOEXEC) != 0) {
    std::cerr << "error: cannot run detached: " << std::strerror(errno) << "\n";
    return kExitUsage;
  }
  const std::set<std::string> before = socketsIn(*dir);

  // Everything the child needs, prepared before fork (the child only makes syscalls).
  std::vector<std::string> env = environmentFor({{kReadyFdVariable, std::to_string(ready[1])}});
  const std::vector<char*> cargv = execPointers(argv), cenv = execPointers(env);
  std::string execFailed = "jobhost run -d: cannot execute /proc/self/exe\n";

  std::cout.flush();
  std::cerr.flush();
  pid_t pid = fork();
  if (pid < 0) {
    std::cerr << "error: cannot run detached: fork: " << std::strerror(errno) << "\n";
    return kExitUsage;
  }
  if (pid == 0) {
    setsid();
    dup2(nullFd, 0);
    dup2(logFd, 1);
    dup2(logFd, 2);
    // Close every other inherited descriptor at exec, except the ready pipe.
    syscall(SYS_close_range, 3u, static_cast<unsigned>(ready[1]) - 1, 4u /* CLOSE_RANGE_CLOEXEC */);
    syscall(SYS_close_range, static_cast<unsigned>(ready[1]) + 1, ~0u, 4u);
    fcntl(ready[1], F_SETFD, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve("/proc/self/exe", cargv.data(), cenv.data());
    ssize_t n = write(2, execFailed.data(), execFailed.size());
    (void)n;
    _exit(127);
  }
  close(ready[1]);
  close(nullFd);
  close(logFd);

  std::string jobId, buffer;
  bool pipeOpen = true;
  auto deadline = std::chrono::steady_clock::now() + kReadyTimeout;
  auto nextScan = std::chrono::steady_clock::now();
  std::string socketPath;
  std::optional<std::chrono::steady_clock::time_point> answerDeadline;  // once the job id is known
  bool answered = false;
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      std::cerr << "error: the job exited with code " << code << " before it was running. The end of its log ("
                << logPath << "):\n"
                << tail(logPath, 20);
      close(ready[0]);
      return code == 0 ? kExitJobFailed : code;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::cerr << "error: the job (pid " << pid << ") has not reported running within "
                << std::chrono::duration_cast<std::chrono::seconds>(kReadyTimeout).count()
                << " s; it is still starting in the background. Its log: " << logPath << "\n";
      close(ready[0]);
      return kExitJobFailed;
    }
    if (jobId.empty() && pipeOpen) {
      pollfd p{ready[0], POLLIN, 0};
      if (poll(&p, 1, 50) > 0) {
        char buf[128];
        ssize_t n = read(ready[0], buf, sizeof buf);
        if (n > 0) {
          buffer.append(buf, static_cast<size_t>(n));
          if (auto nl = buffer.find('\n'); nl != std::string::npos) jobId = buffer.substr(0, nl);
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          pipeOpen = false;  // closed without an id: rely on the socket scan
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!jobId.empty() && socketPath.empty()) socketPath = controlSocketPath(*dir, jobId);
    if (!jobId.empty() && !answerDeadline) answerDeadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    if (jobId.empty() && std::chrono::steady_clock::now() >= nextScan) {
      // Fallback: a new socket whose job runs in our child.
      nextScan = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
      for (const auto& s : socketsIn(*dir)) {
        if (before.count(s)) continue;
        auto st = callStatus(s, std::chrono::seconds(2));
        if (st.ok() && st->pid == pid) {
          jobId = st->jobId;
          socketPath = s;
          break;
        }
      }
    }
    if (!socketPath.empty()) {
      auto st = callStatus(socketPath, std::chrono::seconds(5));
      if (st.ok()) {
        answered = true;
        break;
      }
      if (answerDeadline && std::chrono::steady_clock::now() > *answerDeadline) break;  // runs, but cannot be reached
    }
  }
  close(ready[0]);
  std::string finalLog = *dir + "/" + jobId + ".log";
  struct stat st {};
  if (lstat(finalLog.c_str(), &st) != 0 && rename(logPath.c_str(), finalLog.c_str()) == 0) logPath = finalLog;
  std::cout << "Job has been submitted with JobID " << jobId << "\n"
            << "Log: " << logPath << "\n";
  if (!answered)
    std::cerr << "warning: the job runs (pid " << pid << ") but its control socket " << socketPath
              << " does not answer: list, savepoint, cancel and stop cannot reach it; see the log\n";
  return kExitOk;
}

DetachHandshake DetachHandshake::fromEnvironment() {
  const char* v = std::getenv(kReadyFdVariable);
  if (v == nullptr) return DetachHandshake();
  char* end = nullptr;
  long fd = std::strtol(v, &end, 10);
  unsetenv(kReadyFdVariable);  // no process started from here on sees it
  if (end == v || *end != '\0' || fd < 3 || fd > (1L << 20)) return DetachHandshake();
  int flags = fcntl(static_cast<int>(fd), F_GETFD);
  if (flags < 0) return DetachHandshake();  // not an open fd: nothing to signal
  fcntl(static_cast<int>(fd), F_SETFD, flags | FD_CLOEXEC);  // nor inherits the fd
  return DetachHandshake(static_cast<int>(fd));
}

DetachHandshake::DetachHandshake(DetachHandshake&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

DetachHandshake& DetachHandshake::operator=(DetachHandshake&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

DetachHandshake::~DetachHandshake() {
  if (fd_ >= 0) close(fd_);
}

void DetachHandshake::signalReady(const std::string& jobId) {
  if (fd_ < 0) return;
  std::string line = jobId + "\n";
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the parent is gone: nothing to tell
    p += n;
    left -= static_cast<size_t>(n);
  }
  close(fd_);
  fd_ = -1;
}

}  // namespace jobhost::host
