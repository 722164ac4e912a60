// Unit tests for host/control/: the control server and client over real Unix sockets and
// real Cap'n Proto RPC, against a scripted JobControl. The runtime directory is redirected
// with XDG_RUNTIME_DIR to a fresh temp directory per test.
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "control/control_client.h"
#include "control/control_server.h"
#include "../support/contains.h"

namespace jobhost::host {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// A JobControl whose savepoints block until released.
class ScriptedJob : public JobControl {
 public:
  std::mutex mu;
  std::condition_variable cv;
  bool blockSavepoints = false;  // guarded by mu
  int savepointsEntered = 0;     // guarded by mu
  state::Status savepointError;  // guarded by mu
  std::optional<std::string> lastTarget;
  state::SnapshotFormat lastFormat = state::SnapshotFormat::kNative;
  bool cancelled = false, stopped = false, lastWithSavepoint = false;

  JobStatusInfo status() override {
    JobStatusInfo s;
    s.jobId = "0123456789abcdef0123456789abcdef";
    s.jobClass = "WordCount";
    s.pluginPath = "/plugins/libwordcount_jobs.so";
    s.backend = "rocksdb (incremental)";
    s.parallelism = 2;
    s.state = JobState::kRunning;
    s.startedMs = 1700000000123;
    s.restarts = 1;
    s.lastFailure = "boom";
    s.lastCheckpointId = 7;
    s.lastCheckpointPath = "/ck/0123/chk-7";
    s.checkpointDir = "/ck/0123";
    s.recordsIn = 42;
    s.recordsOut = 41;
    s.pid = getpid();
    return s;
  }
  state::Result<std::string> savepoint(const std::optional<std::string>& targetDir,
                                       state::SnapshotFormat format) override {
    std::unique_lock lock(mu);
    ++savepointsEntered;
    cv.notify_all();
    cv.wait(lock, [&] { return !blockSavepoints; });
    lastTarget = targetDir;
    lastFormat = format;
    if (!savepointError.ok()) return savepointError;
    return targetDir.value_or("/default-savepoints") + "/savepoint-012345-abcdef";
  }
  state::Result<std::string> cancel(bool withSavepoint, const std::optional<std::string>& targetDir) override {
    std::string path;
    if (withSavepoint) {
      auto r = savepoint(targetDir, state::SnapshotFormat::kCanonical);
      if (!r.ok()) return r.status();
      path = *r;
    }
    std::lock_guard lock(mu);
    cancelled = true;
    lastWithSavepoint = withSavepoint;
    return path;
  }
  state::Result<std::string> stop(const std::optional<std::string>& targetDir, bool) override {
    auto r = cancel(true, targetDir);
    std::lock_guard lock(mu);
    if (r.ok()) stopped = true;
    return r;
  }
  void release() {
    std::lock_guard lock(mu);
    blockSavepoints = false;
    cv.notify_all();
  }
  bool waitEntered(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 30s, [&] { return savepointsEntered >= n; });
  }
};

class ControlServerTest : public ::testing::Test {
 protected:
  fs::path tmp;
  std::optional<std::string> oldXdg;

  void SetUp() override {
    std::random_device rd;
    tmp = fs::temp_directory_path() / ("jhctl-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(tmp);
    fs::permissions(tmp, fs::perms::owner_all);
    if (const char* x = std::getenv("XDG_RUNTIME_DIR")) oldXdg = x;
    setenv("XDG_RUNTIME_DIR", tmp.c_str(), 1);
  }
  void TearDown() override {
    if (oldXdg) setenv("XDG_RUNTIME_DIR", oldXdg->c_str(), 1);
    else unsetenv("XDG_RUNTIME_DIR");
    std::error_code ec;
    fs::remove_all(tmp, ec);
  }
  fs::path runDir() const { return tmp / "jobhost"; }

  /// A socket file nobody listens on: bind, then close.
  static void makeDeadSocket(const fs::path& p) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, p.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
    close(fd);
  }
};

TEST_F(ControlServerTest, ServesStatusOnAPrivateSocketAndRemovesItWhenDestroyed) {
  ScriptedJob job;
  std::string path;
  {
    auto server = ControlServer::start(job, "job1");
    ASSERT_TRUE(server.ok()) << server.status();
    path = (*server)->socketPath();
    EXPECT_EQ(path, (runDir() / "job1.sock").string());
    struct stat st {};
    ASSERT_EQ(lstat(runDir().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0700u);
    ASSERT_EQ(lstat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 077, 0u);

    auto s = callStatus(path);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->jobId, "0123456789abcdef0123456789abcdef");
    EXPECT_EQ(s->jobClass, "WordCount");
    EXPECT_EQ(s->pluginPath, "/plugins/libwordcount_jobs.so");
    EXPECT_EQ(s->backend, "rocksdb (incremental)");
    EXPECT_EQ(s->parallelism, 2);
    EXPECT_EQ(s->state, JobState::kRunning);
    EXPECT_EQ(s->startedMs, 1700000000123);
    EXPECT_EQ(s->restarts, 1);
    EXPECT_EQ(s->lastFailure, "boom");
    EXPECT_EQ(s->lastCheckpointId, 7u);
    EXPECT_EQ(s->lastCheckpointPath, "/ck/0123/chk-7");
    EXPECT_EQ(s->checkpointDir, "/ck/0123");
    EXPECT_EQ(s->recordsIn, 42u);
    EXPECT_EQ(s->recordsOut, 41u);
    EXPECT_EQ(s->pid, getpid());
  }
  EXPECT_FALSE(fs::exists(fs::symlink_status(path)));
  auto gone = callStatus(path);
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(contains(gone.status().message(), "has ended")) << gone.status();
}

TEST_F(ControlServerTest, StatusAnswersWhileASavepointIsInProgress) {
  ScriptedJob job;
  job.blockSavepoints = true;
  auto server = ControlServer::start(job, "busy");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string path = (*server)->socketPath();
  auto sp = std::async(std::launch::async, [&] { return callSavepoint(path, "/sp", state::SnapshotFormat::kNative); });
  ASSERT_TRUE(job.waitEntered(1));
  for (int i = 0; i < 5; ++i) {
    auto s = callStatus(path, 10s);
    ASSERT_TRUE(s.ok()) << s.status();
  }
  EXPECT_EQ(sp.wait_for(0s), std::future_status::timeout);
  job.release();
  auto r = sp.get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "/sp/savepoint-012345-abcdef");
  EXPECT_EQ(job.lastTarget, std::optional<std::string>("/sp"));
  EXPECT_EQ(job.lastFormat, state::SnapshotFormat::kNative);
}

TEST_F(ControlServerTest, AFailedSavepointCarriesTheJobsReason) {
  ScriptedJob job;
  job.savepointError = state::Status::IOError("cannot create savepoint directory /x/y: Not a directory");
  auto server = ControlServer::start(job, "failing");
  ASSERT_TRUE(server.ok()) << server.status();
  auto r = callSavepoint((*server)->socketPath(), "/x/y", state::SnapshotFormat::kCanonical);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "cannot create savepoint directory /x/y: Not a directory")) << r.status();
  EXPECT_FALSE(contains(r.status().message(), "remote exception")) << r.status();
  auto c = callCancel((*server)->socketPath(), true, "/x/y");
  ASSERT_FALSE(c.ok());
  EXPECT_FALSE(job.cancelled);  // the job keeps running
  EXPECT_TRUE(callStatus((*server)->socketPath()).ok());
}

TEST_F(ControlServerTest, DefaultTargetIsSentAsEmptyAndRelativeTargetsAreRefused) {
  ScriptedJob job;
  auto server = ControlServer::start(job, "targets");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string path = (*server)->socketPath();
  auto r = callSavepoint(path, std::nullopt, state::SnapshotFormat::kCanonical);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "/default-savepoints/savepoint-012345-abcdef");
  EXPECT_EQ(job.lastTarget, std::nullopt);
  EXPECT_EQ(job.lastFormat, state::SnapshotFormat::kCanonical);
  auto rel = callSavepoint(path, "relative/dir", state::SnapshotFormat::kCanonical);
  ASSERT_FALSE(rel.ok());
  EXPECT_TRUE(contains(rel.status().message(), "not absolute")) << rel.status();
  auto dots = callSavepoint(path, "/a/../b", state::SnapshotFormat::kCanonical);
  ASSERT_FALSE(dots.ok());
  EXPECT_TRUE(contains(dots.status().message(), "'..'")) << dots.status();
  // An object-store target goes to the job as it is (issue 17).
  auto s3 = callSavepoint(path, "s3://bucket/savepoints", state::SnapshotFormat::kCanonical);
  ASSERT_TRUE(s3.ok()) << s3.status();
  EXPECT_EQ(job.lastTarget, std::optional<std::string>("s3://bucket/savepoints"));
  auto s3dots = callSavepoint(path, "s3://bucket/../x", state::SnapshotFormat::kCanonical);
  ASSERT_FALSE(s3dots.ok());
  EXPECT_TRUE(contains(s3dots.status().message(), "'..'")) << s3dots.status();
}

TEST_F(ControlServerTest, CancelAndStopReachTheJob) {
  ScriptedJob job;
  auto server = ControlServer::start(job, "cancel");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string path = (*server)->socketPath();
  auto c = callCancel(path, false, std::nullopt);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, "");
  EXPECT_TRUE(job.cancelled);
  EXPECT_FALSE(job.lastWithSavepoint);
  auto s = callStop(path, "/stops", false);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, "/stops/savepoint-012345-abcdef");
  EXPECT_TRUE(job.stopped);
  EXPECT_EQ(job.lastTarget, std::optional<std::string>("/stops"));
}

TEST_F(ControlServerTest, DestroyingTheServerDuringACallStillDeliversTheReply) {
  ScriptedJob job;
  job.blockSavepoints = true;
  auto server = ControlServer::start(job, "ending");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string path = (*server)->socketPath();
  auto c = std::async(std::launch::async, [&] { return callCancel(path, true, "/last"); });
  ASSERT_TRUE(job.waitEntered(1));
  auto destroy = std::async(std::launch::async, [&] { server->reset(); });
  // The socket disappears at once: new clients do not find an ending job.
  for (int i = 0; i < 3000 && fs::exists(fs::symlink_status(path)); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(fs::exists(fs::symlink_status(path)));
  job.release();
  destroy.get();
  auto r = c.get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "/last/savepoint-012345-abcdef");
}

TEST_F(ControlServerTest, DiscoverFindsJobsAndRemovesOnlyStaleSocketsOfOurs) {
  ScriptedJob job;
  auto server = ControlServer::start(job, "live");
  ASSERT_TRUE(server.ok()) << server.status();
  makeDeadSocket(runDir() / "dead.sock");
  std::vector<std::string> stale, problems;
  auto jobs = discoverJobs(&stale, &problems);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].jobId, "live");
  EXPECT_EQ(jobs[0].socketPath, (*server)->socketPath());
  EXPECT_EQ(jobs[0].status.jobClass, "WordCount");
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_EQ(stale[0], (runDir() / "dead.sock").string());
  EXPECT_FALSE(fs::exists(fs::symlink_status(runDir() / "dead.sock")));
  EXPECT_TRUE(problems.empty());

  // Not a socket, or another user's socket: never removed.
  { std::ofstream(runDir() / "file.sock") << "x"; }
  if (geteuid() == 0) {
    makeDeadSocket(runDir() / "other.sock");
    ASSERT_EQ(chown((runDir() / "other.sock").c_str(), 65534, 65534), 0);
  }
  stale.clear();
  problems.clear();
  jobs = discoverJobs(&stale, &problems);
  EXPECT_EQ(jobs.size(), 1u);
  EXPECT_TRUE(stale.empty());
  EXPECT_TRUE(fs::exists(runDir() / "file.sock"));
  if (geteuid() == 0) {
    EXPECT_TRUE(fs::exists(fs::symlink_status(runDir() / "other.sock")));
    bool named = false;
    for (const auto& p : problems) named |= contains(p, "other.sock") && contains(p, "uid 65534");
    EXPECT_TRUE(named) << ::testing::PrintToString(problems);
  }
}

TEST_F(ControlServerTest, AStaleSocketWithTheSameJobIdIsReplaced) {
  fs::create_directories(runDir());
  fs::permissions(runDir(), fs::perms::owner_all, fs::perm_options::replace);
  makeDeadSocket(runDir() / "again.sock");
  ScriptedJob job;
  auto server = ControlServer::start(job, "again");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(callStatus((*server)->socketPath()).ok());
  // A live one is not taken over.
  ScriptedJob other;
  auto second = ControlServer::start(other, "again");
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(contains(second.status().message(), "not a stale socket")) << second.status();
  EXPECT_TRUE(callStatus((*server)->socketPath()).ok());
}

TEST_F(ControlServerTest, RefusesARuntimeDirectoryOthersCanEnter) {
  fs::create_directories(runDir());
  chmod(runDir().c_str(), 0755);
  ScriptedJob job;
  auto server = ControlServer::start(job, "open");
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(contains(server.status().message(), "mode is 0755, not 0700")) << server.status();
  EXPECT_TRUE(contains(server.status().message(), runDir().string())) << server.status();
  fs::remove(runDir());
  fs::create_directory_symlink(tmp, runDir());
  auto viaLink = ControlServer::start(job, "open");
  ASSERT_FALSE(viaLink.ok());
  EXPECT_TRUE(contains(viaLink.status().message(), "symbolic link")) << viaLink.status();
}

TEST_F(ControlServerTest, ATooLongSocketPathIsRefusedWithTheLimit) {
  fs::path deep = tmp / std::string(100, 'd');
  fs::create_directories(deep);
  setenv("XDG_RUNTIME_DIR", deep.c_str(), 1);
  ScriptedJob job;
  auto server = ControlServer::start(job, "0123456789abcdef0123456789abcdef");
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(contains(server.status().message(), "at most 107")) << server.status();
}

TEST_F(ControlServerTest, ConnectionsFromAnotherUidAreDropped) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to connect as another uid";
  ScriptedJob job;
  auto server = ControlServer::start(job, "peer");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string path = (*server)->socketPath();
  // Open the directory and socket to everyone, so that only the SO_PEERCRED check remains.
  chmod(tmp.c_str(), 0711);
  chmod(runDir().c_str(), 0711);
  chmod(path.c_str(), 0666);
  pid_t pid = fork();
  if (pid == 0) {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(10);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, path.c_str());
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(11);
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20000) != 1) _exit(12);  // never closed: not refused
    char c;
    _exit(read(fd, &c, 1) == 0 ? 0 : 13);   // EOF: dropped by the server
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setuid failed, 11: connect failed, 12: not dropped, 13: data";
  EXPECT_TRUE(callStatus(path).ok());  // the owner still gets answers
}

}  // namespace
}  // namespace jobhost::host
