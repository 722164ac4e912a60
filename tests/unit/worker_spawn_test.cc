// Tests of starting a worker process (host/worker_spawn.h) with bash standing in for
// `jobhost __worker`: what the worker inherits (descriptors, environment, signals), and
// that a start never hangs while another thread of the supervisor changes the environment.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "worker_spawn.h"

namespace {

using jobhost::host::spawnWorkerProcess;
using jobhost::host::WorkerProcess;
using jobhost::host::WorkerSpawn;

std::string readAll(int fd) {
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

/// The worker's exit status, or -1 when it has not exited within `limit` (then it is
/// killed).
int waitFor(pid_t pid, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return status;
}

// The stand-in prints, on the channel, the supervisor's pid, the plugin descriptor and digest
// it was given and whether that descriptor is open; "crash" on the crash pipe; "lock" on
// the inherited descriptor $1; and on the channel again the signals it ignores.
const char* kWorker =
    "eval \"printf '%s %s %s ' \\\"$JOBHOST_SUPERVISOR_PID\\\" \\\"${JOBHOST_PLUGIN_FD-none}\\\" "
    "\\\"${JOBHOST_PLUGIN_DIGEST-none}\\\" >&$JOBHOST_WORKER_FD\"; "
    "if [ -n \"$JOBHOST_PLUGIN_FD\" ] && [ -e /proc/self/fd/$JOBHOST_PLUGIN_FD ]; then p=open; else p=closed; fi; "
    "eval \"printf '%s %s' $p \\\"$(grep SigIgn /proc/$$/status | cut -f2)\\\" >&$JOBHOST_WORKER_FD\"; "
    "eval \"printf crash >&$JOBHOST_CRASH_FD\"; "
    "eval \"printf lock >&$1\"";

// Before: the child set JOBHOST_WORKER_FD and the others with setenv() between fork and
// exec. setenv() takes glibc's environment lock; a supervisor thread that held it at the
// fork (anything calling setenv) left it held in the child for good, and the worker never
// started: with a thread changing the environment, nearly every start hung.
TEST(WorkerSpawn, AWorkerStartsWhileAnotherThreadChangesTheEnvironmentAndGetsWhatItNeeds) {
  if (::access("/bin/bash", X_OK) != 0) GTEST_SKIP() << "needs /bin/bash as the worker's stand-in";
  struct Restore {  // the environment as it was, however the test ends
    ~Restore() {
      for (const char* v : {"JOBHOST_TEST_NOISE", "JOBHOST_WORKER_FD", "JOBHOST_PLUGIN_FD", "JOBHOST_PLUGIN_DIGEST"})
        ::unsetenv(v);
    }
  } restore;
  ::setenv("JOBHOST_TEST_NOISE", "0", 1);  // exists before the thread: it only replaces the value
  ::setenv("JOBHOST_WORKER_FD", "999", 1);     // stale values of the supervisor's environment:
  ::setenv("JOBHOST_PLUGIN_FD", "998", 1);     // replaced, or dropped without a plugin descriptor
  ::setenv("JOBHOST_PLUGIN_DIGEST", "stale", 1);
  struct Noise {  // stopped and joined however the test ends
    std::atomic<bool> stop{false};
    std::thread thread{[this] {
      unsigned long i = 0;
      while (!stop.load(std::memory_order_relaxed)) ::setenv("JOBHOST_TEST_NOISE", std::to_string(++i).c_str(), 1);
    }};
    ~Noise() {
      stop = true;
      thread.join();
    }
  };
  std::optional<Noise> noise(std::in_place);
  // A descriptor number of two digits, as a supervisor's are.
  const int opened = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(opened, 0);
  const int plugin = ::fcntl(opened, F_DUPFD_CLOEXEC, 40);
  ::close(opened);
  ASSERT_GE(plugin, 40);
  for (int i = 0; i < 40; ++i) {
    SCOPED_TRACE("start " + std::to_string(i + 1));
    const bool withPlugin = i % 2 == 1;
    int lock[2];
    ASSERT_EQ(::pipe2(lock, O_CLOEXEC), 0);
    WorkerSpawn spawn;
    spawn.executable = "/bin/bash";  // not dash: its redirections take descriptors 0-9 only
    spawn.args = {"bash", "-c", kWorker, "bash", std::to_string(lock[1])};
    spawn.inheritFds = {-1, lock[1]};
    if (withPlugin) {
      spawn.pluginFd = plugin;
      spawn.pluginDigest = "d1g3st";
    }
    WorkerProcess w = spawnWorkerProcess(spawn);
    ::close(lock[1]);
    const int status = waitFor(w.pid, std::chrono::seconds(20));
    const std::string channel = readAll(w.channel), crash = readAll(w.crash), locked = readAll(lock[0]);
    ::close(w.channel);
    ::close(w.crash);
    ::close(lock[0]);
    ASSERT_NE(status, -1) << "the worker did not start within 20 s (blocked between fork and exec)";
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << ", channel '" << channel << "'";
    const std::string expected = std::to_string(::getpid()) + " " +
                                 (withPlugin ? std::to_string(plugin) + " d1g3st open " : "none none closed ");
    ASSERT_EQ(channel.substr(0, expected.size()), expected);
    const unsigned long ignored = std::strtoul(channel.substr(expected.size()).c_str(), nullptr, 16);
    EXPECT_TRUE(ignored & (1ul << (SIGINT - 1))) << "SIGINT not ignored: " << channel;
    EXPECT_TRUE(ignored & (1ul << (SIGTERM - 1))) << "SIGTERM not ignored: " << channel;
    EXPECT_EQ(crash, "crash");
    EXPECT_EQ(locked, "lock");
  }
  noise.reset();
  ::close(plugin);
}

TEST(WorkerSpawn, AnExecutableThatCannotRunEndsTheWorkerWith127) {
  WorkerSpawn spawn;
  spawn.executable = "/nonexistent/jobhost";
  spawn.args = {"jobhost", "__worker"};
  WorkerProcess w = spawnWorkerProcess(spawn);
  const int status = waitFor(w.pid, std::chrono::seconds(20));
  ::close(w.channel);
  ::close(w.crash);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 127);
}

}  // namespace
