// Starting a worker process: see worker_spawn.h.
#include "worker_spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <utility>

extern char** environ;

namespace jobhost::host {

std::vector<std::string> environmentFor(const std::vector<std::pair<std::string, std::string>>& set,
                                        const std::vector<std::string_view>& drop) {
  // environ is read here, maybe with threads running: see worker_spawn.h on changing the
  // environment.
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    bool skip = false;
    for (const auto& v : set) skip = skip || v.first == name;
    for (std::string_view d : drop) skip = skip || d == name;
    if (!skip) env.emplace_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> execPointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

namespace {

/// Forks and execs the worker with `channel` and `crash` (the worker's ends) as its
/// JOBHOST_WORKER_FD and JOBHOST_CRASH_FD; the pid, or -1 with errno set.
pid_t startWorker(const WorkerSpawn& spawn, int channel, int crash) {
  // The worker's descriptors keep their numbers: the child clears FD_CLOEXEC on them, so
  // their numbers are known here and go into the environment built here. (setenv() in the
  // child could block for good: it takes a lock that another thread of this process may
  // have held at the fork, and nothing releases it in the child.)
  std::vector<std::pair<std::string, std::string>> vars = {
      {"JOBHOST_WORKER_FD", std::to_string(channel)},
      {"JOBHOST_CRASH_FD", std::to_string(crash)},
      {"JOBHOST_SUPERVISOR_PID", std::to_string(::getpid())},
  };
  if (spawn.pluginFd >= 0) {
    vars.emplace_back("JOBHOST_PLUGIN_FD", std::to_string(spawn.pluginFd));
    vars.emplace_back("JOBHOST_PLUGIN_DIGEST", spawn.pluginDigest);
  }
  // A stale JOBHOST_PLUGIN_* of this process's environment without a plugin descriptor
  // would point the worker at a descriptor that is not its plugin.
  std::vector<std::string> env = environmentFor(vars, {"JOBHOST_PLUGIN_FD", "JOBHOST_PLUGIN_DIGEST"});
  std::vector<std::string> args = spawn.args;
  const std::vector<char*> envp = execPointers(env), argv = execPointers(args);
  std::vector<int> keep = {channel, crash, spawn.pluginFd};
  keep.insert(keep.end(), spawn.inheritFds.begin(), spawn.inheritFds.end());

  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child: async-signal-safe calls only, until exec.
    for (int fd : keep)
      if (fd >= 0) ::fcntl(fd, F_SETFD, 0);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGINT, &ignore, nullptr);  // Ctrl-C and a TERM are the supervisor's to handle
    ::sigaction(SIGTERM, &ignore, nullptr);
    sigset_t none;
    ::sigemptyset(&none);
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
    ::execve(spawn.executable.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace

WorkerProcess spawnWorkerProcess(const WorkerSpawn& spawn) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw std::runtime_error(std::string("cannot create the worker channel: ") + std::strerror(errno));
  int crash[2];
  if (::pipe2(crash, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    throw std::runtime_error(std::string("cannot create the worker's crash-report pipe: ") + std::strerror(e));
  }
  pid_t pid = -1;
  int forkError = 0;
  try {
    pid = startWorker(spawn, sv[1], crash[1]);
    forkError = errno;
  } catch (...) {  // std::bad_alloc building the worker's environment: nothing stays open
    for (int fd : {sv[0], sv[1], crash[0], crash[1]}) ::close(fd);
    throw;
  }
  ::close(sv[1]);
  ::close(crash[1]);
  if (pid < 0) {
    ::close(sv[0]);
    ::close(crash[0]);
    throw std::runtime_error(std::string("cannot start the worker process: ") + std::strerror(forkError));
  }
  return {pid, sv[0], crash[0]};
}

}  // namespace jobhost::host
