// End-to-end tests of job control: `jobhost run -d`, `list`, `savepoint` (and `-d`),
// `cancel`, `stop` against real jobs in other processes, talking Cap'n Proto RPC over
// their control sockets. Every test gets its own runtime directory (XDG_RUNTIME_DIR), so
// only its own jobs are visible. Waits poll with generous deadlines; nothing sleeps and
// hopes.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <set>

#include "cli_fixture.h"
#include "../support/contains.h"

using namespace e2e;

namespace {

/// The rest of the first line that starts with (or contains) `prefix`.
std::string lineAfter(const std::string& text, const std::string& prefix) {
  auto pos = text.find(prefix);
  if (pos == std::string::npos) return "";
  pos += prefix.size();
  auto end = text.find('\n', pos);
  return text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
}

/// The line of `text` that contains `needle`.
std::string lineWith(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (contains(line, needle)) return line;
  return "";
}

size_t lineCount(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

size_t tokenCount(const std::string& text) {
  std::istringstream in(text);
  std::string w;
  size_t n = 0;
  while (in >> w) ++n;
  return n;
}

/// A socket file nobody listens on: bind, then close.
void makeDeadSocket(const fs::path& p) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  ASSERT_LT(p.string().size(), sizeof a.sun_path);
  std::strcpy(a.sun_path, p.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  close(fd);
}

/// Every job this test binary starts (not only this file's) serves a control socket; jobs
/// killed by tests would leave stale sockets in the user's runtime directory. Point
/// XDG_RUNTIME_DIR at a private directory for the whole binary and remove it at the end.
class PrivateRuntimeDir : public ::testing::Environment {
 public:
  void SetUp() override {
    if (const char* x = std::getenv("XDG_RUNTIME_DIR")) old_ = x;
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("jobhost-e2e-run-" + std::to_string(getpid()) + "-" + std::to_string(rd() % 100000));
    fs::create_directories(dir_);
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::replace);
    setenv("XDG_RUNTIME_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (old_) setenv("XDG_RUNTIME_DIR", old_->c_str(), 1);
    else unsetenv("XDG_RUNTIME_DIR");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

 private:
  fs::path dir_;
  std::optional<std::string> old_;
};
[[maybe_unused]] const auto* const kPrivateRuntimeDir = ::testing::AddGlobalTestEnvironment(new PrivateRuntimeDir);

class Control : public Cli {
 protected:
  std::optional<std::string> oldXdg_;
  int launched_ = 0;

  fs::path runtime() const { return tmp / "r"; }
  fs::path socketDir() const { return runtime() / "jobhost"; }

  void SetUp() override {
    fs::create_directories(runtime());
    fs::permissions(runtime(), fs::perms::owner_all, fs::perm_options::replace);
    if (const char* x = std::getenv("XDG_RUNTIME_DIR")) oldXdg_ = x;
    setenv("XDG_RUNTIME_DIR", runtime().c_str(), 1);  // inherited by every jobhost we start
  }

  void TearDown() override {
    // Detached jobs are not our children: cancel what still runs, then kill whatever
    // process still works on this test's files.
    for (const auto& id : jobIds()) cli({"cancel", id}, std::chrono::seconds(30));
    killStrays();
    if (oldXdg_) setenv("XDG_RUNTIME_DIR", oldXdg_->c_str(), 1);
    else unsetenv("XDG_RUNTIME_DIR");
  }

  /// Pids of processes whose command line mentions this test's temp directory.
  std::vector<pid_t> strays() const {
    std::vector<pid_t> out;
    std::error_code ec;
    for (auto it = fs::directory_iterator("/proc", ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
      std::string name = it->path().filename().string();
      if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
      pid_t pid = std::stoi(name);
      if (pid == getpid()) continue;
      std::string cmd = readFile(it->path() / "cmdline");
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      if (contains(cmd, tmp.path.string())) out.push_back(pid);
    }
    return out;
  }
  void killStrays() {
    for (pid_t p : strays()) kill(p, SIGKILL);
  }
  /// Waits until no process works on this test's files (a detached job has exited).
  bool waitNoStrays(std::chrono::seconds timeout = std::chrono::seconds(60)) {
    auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      bool any = false;
      for (pid_t p : strays()) {
        std::string stat = readFile("/proc/" + std::to_string(p) + "/stat");
        auto close = stat.rfind(')');
        if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') continue;  // zombie
        any = true;
      }
      if (!any) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::set<std::string> jobIds() const {
    std::set<std::string> out;
    std::error_code ec;
    for (auto it = fs::directory_iterator(socketDir(), ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
      std::string n = it->path().filename().string();
      if (n.size() > 5 && n.substr(n.size() - 5) == ".sock") out.insert(n.substr(0, n.size() - 5));
    }
    return out;
  }

  /// Waits for a job socket not in `known` (started by `p`) and returns its job id.
  std::string waitForNewJob(Process& p, const std::set<std::string>& known, const fs::path& errFile,
                            std::chrono::seconds timeout = std::chrono::seconds(90)) {
    auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until && p.running()) {
      for (const auto& id : jobIds())
        if (!known.count(id)) return id;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "no control socket appeared; job stderr:\n" << readFile(errFile);
    return "";
  }

  /// Polls `jobhost list` until `pred` holds; returns the last result.
  Result waitForList(const std::function<bool(const Result&)>& pred,
                     std::chrono::seconds timeout = std::chrono::seconds(90)) {
    auto until = std::chrono::steady_clock::now() + timeout;
    Result r;
    while (std::chrono::steady_clock::now() < until) {
      r = cli({"list"});
      if (pred(r)) return r;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "list never matched; last output:\n" << r.out << r.err;
    return r;
  }
  /// Waits until `list` shows job `id` RUNNING with a completed checkpoint.
  Result waitForRunningWithCheckpoint(const std::string& id) {
    return waitForList([&](const Result& r) {
      std::string row = lineWith(r.out, id);
      return r.exitCode == 0 && contains(row, "RUNNING") && contains(row, "/chk-");
    });
  }

  /// `run` arguments for a word count on `in`, throttled to `rate` lines/s (0: full
  /// speed), writing to `out`.
  std::vector<std::string> runArgs(const std::string& cls, const fs::path& in, const fs::path& out, int rate,
                                   std::vector<std::string> extra = {}, const std::string& interval = "200ms") {
    std::vector<std::string> a = {"run", "-c", cls};
    for (auto& f : ckFlags(interval)) a.push_back(f);
    a.insert(a.end(), extra.begin(), extra.end());
    a.insert(a.end(), {kPlugin, "--input", in.string(), "--output-file", out.string()});
    if (rate > 0) a.insert(a.end(), {"--rate", std::to_string(rate)});
    return a;
  }

  /// Starts `jobhost args...` in the background with its own output files.
  std::unique_ptr<Process> launch(const std::vector<std::string>& args, const std::string& name) {
    ++launched_;
    std::string base = name + "-" + std::to_string(launched_);
    return std::make_unique<Process>(jobhost(args), tmp / (base + ".out"), tmp / (base + ".err"));
  }
  fs::path errOf(const std::string& name) const { return tmp / (name + "-" + std::to_string(launched_) + ".err"); }
};

TEST_F(Control, DetachedJobListSavepointCancelWithSavepointAndRestoreFromTheMovedSavepoint) {
  const fs::path in = input(400);  // 5600 lines at 100 lines/s: ~56 s, cancelled long before
  const fs::path out1 = tmp / "out1.txt", out2 = tmp / "out2.txt";
  std::vector<std::string> args = runArgs("WordCount", in, out1, 100, {"-D", "state.savepoints.dir=" + (tmp / "default-sp").string()});
  args.insert(args.begin() + 1, "-d");
  Result d = cli(args);
  ASSERT_EQ(d.exitCode, 0) << d.out << d.err;
  const std::string id = lineAfter(d.out, "Job has been submitted with JobID ");
  ASSERT_EQ(id.size(), 32u) << d.out;
  const std::string log = lineAfter(d.out, "Log: ");
  EXPECT_TRUE(fs::exists(log)) << d.out;
  EXPECT_TRUE(fs::exists(socketDir() / (id + ".sock")));

  // list: RUNNING, class, since, last checkpoint with its path, plugin.
  Result l = waitForRunningWithCheckpoint(id);
  EXPECT_TRUE(contains(l.out, "JOB ID")) << l.out;
  EXPECT_TRUE(contains(l.out, "LAST CHECKPOINT")) << l.out;
  std::string row = lineWith(l.out, id);
  EXPECT_TRUE(contains(row, "WordCount")) << row;
  EXPECT_TRUE(contains(row, (ckdir() / id).string() + "/chk-")) << row;
  EXPECT_TRUE(contains(row, kPlugin)) << row;

  // An unknown id names the running ones.
  Result unknown = cli({"savepoint", "ffffnope", (tmp / "sp").string()});
  EXPECT_EQ(unknown.exitCode, 2) << unknown.err;
  EXPECT_TRUE(contains(unknown.err, "no running job with id 'ffffnope'")) << unknown.err;
  EXPECT_TRUE(contains(unknown.err, id)) << unknown.err;

  // A savepoint by id prefix, into a relative directory (resolved against the client's
  // working directory, not the job's).
  Result s = cli({"savepoint", id.substr(0, 8), fs::relative(tmp / "sp", fs::current_path()).string()});
  ASSERT_EQ(s.exitCode, 0) << s.out << s.err;
  const std::string sp1 = lineAfter(s.out, "Savepoint completed. Path: ");
  EXPECT_EQ(sp1.rfind((tmp / "sp" / ("savepoint-" + id.substr(0, 6) + "-")).string(), 0), 0u) << s.out;
  ASSERT_TRUE(fs::exists(fs::path(sp1) / "_metadata")) << s.out;
  Result ins = cli({"inspect", "--json", sp1});
  ASSERT_EQ(ins.exitCode, 0) << ins.err;
  EXPECT_TRUE(contains(ins.out, "\"kind\":\"savepoint\"")) << ins.out;

  // Without a directory: the job's state.savepoints.dir.
  Result sd = cli({"savepoint", id});
  ASSERT_EQ(sd.exitCode, 0) << sd.out << sd.err;
  EXPECT_EQ(lineAfter(sd.out, "Savepoint completed. Path: ").rfind((tmp / "default-sp").string(), 0), 0u) << sd.out;

  // A directory that cannot be created (under a regular file: even root cannot) fails the
  // command with the reason; the job keeps running.
  writeFile(tmp / "afile", "x");
  Result bad = cli({"savepoint", id, (tmp / "afile" / "sub").string()});
  EXPECT_EQ(bad.exitCode, 1) << bad.out << bad.err;
  EXPECT_TRUE(contains(bad.err, (tmp / "afile" / "sub").string())) << bad.err;
  Result still = cli({"list"});
  EXPECT_TRUE(contains(lineWith(still.out, id), "RUNNING")) << still.out << still.err;

  // cancel -s: a savepoint, then the process ends and its socket goes.
  Result c = cli({"cancel", "-s", (tmp / "sp2").string(), id.substr(0, 10)});
  ASSERT_EQ(c.exitCode, 0) << c.out << c.err;
  const std::string sp2 = lineAfter(c.out, "Cancelled job " + id + ". Savepoint stored in ");
  ASSERT_FALSE(sp2.empty()) << c.out;
  ASSERT_EQ(sp2.back(), '.');
  const fs::path savepoint = sp2.substr(0, sp2.size() - 1);
  ASSERT_TRUE(fs::exists(savepoint / "_metadata")) << c.out;
  ASSERT_TRUE(waitNoStrays()) << "the cancelled job is still running";
  EXPECT_FALSE(fs::exists(fs::symlink_status(socketDir() / (id + ".sock"))));
  Result none = cli({"list"});
  EXPECT_EQ(none.exitCode, 0);
  EXPECT_TRUE(contains(none.out, "No running jobs.")) << none.out;

  // The savepoint is relocatable: move it, then restore; the counts continue exactly.
  fs::create_directories(tmp / "elsewhere");
  const fs::path moved = tmp / "elsewhere" / "moved-savepoint";
  fs::rename(savepoint, moved);
  std::vector<std::string> restore = runArgs("WordCount", in, out2, 0);
  restore.insert(restore.begin() + 1, {"-s", moved.string()});
  Result r = cli(restore);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const std::string o1 = readFile(out1), o2 = readFile(out2), text = readFile(in);
  EXPECT_EQ(finalCounts(o1 + o2), expectedCounts(text));
  EXPECT_GT(lineCount(o1), 0u);
  EXPECT_LT(lineCount(o2), tokenCount(text)) << "the restored job started from scratch";

  // Dispose of the first savepoint.
  Result disp = cli({"savepoint", "-d", sp1});
  ASSERT_EQ(disp.exitCode, 0) << disp.err;
  EXPECT_TRUE(contains(disp.out, "disposed")) << disp.out;
  EXPECT_FALSE(fs::exists(sp1));
}

TEST_F(Control, ASavepointWithoutADirectoryForAJobWithoutStateSavepointsDirIsAUsageErrorAndTheJobRunsOn) {
  // No target directory and no state.savepoints.dir: exit 2 (a usage error), one line
  // saying how to fix it, for savepoint, cancel -s and stop alike; the job is not asked
  // (no savepoint attempt, no stop) and keeps running. Before: exit 1, as for a failed
  // savepoint.
  const fs::path in = input(400);
  // Empty: none, whatever a configuration file on this machine says.
  std::vector<std::string> args = runArgs("WordCount", in, tmp / "out.txt", 100, {"-D", "state.savepoints.dir="});
  args.insert(args.begin() + 1, "-d");
  Result d = cli(args);
  ASSERT_EQ(d.exitCode, 0) << d.out << d.err;
  const std::string id = lineAfter(d.out, "Job has been submitted with JobID ");
  ASSERT_EQ(id.size(), 32u) << d.out;
  waitForRunningWithCheckpoint(id);
  struct Case {
    std::vector<std::string> args;
    std::string fix;
  };
  for (const Case& c : {Case{{"savepoint", id}, "jobhost savepoint " + id + " <directory>"},
                        Case{{"savepoint", id.substr(0, 8), "--format", "native"},
                             "jobhost savepoint --format native " + id + " <directory>"},
                        Case{{"cancel", "-s", id}, "jobhost cancel -s <directory> " + id},
                        Case{{"stop", id}, "jobhost stop --savepoint-path <directory> " + id},
                        Case{{"stop", "--drain", id}, "jobhost stop --savepoint-path <directory> --drain " + id}}) {
    Result r = cli(c.args);
    EXPECT_EQ(r.exitCode, 2) << c.args[0] << ": " << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "no savepoint directory: job " + id + " has no state.savepoints.dir")) << r.err;
    EXPECT_TRUE(contains(r.err, c.fix)) << r.err;
    EXPECT_TRUE(contains(r.err, "it keeps running")) << r.err;
  }
  Result still = cli({"list"});
  EXPECT_TRUE(contains(lineWith(still.out, id), "RUNNING")) << still.out << still.err;
  // With a directory the same job takes one.
  Result ok = cli({"cancel", "-s", (tmp / "sp").string(), id});
  ASSERT_EQ(ok.exitCode, 0) << ok.out << ok.err;
  EXPECT_TRUE(contains(ok.out, "Savepoint stored in " + (tmp / "sp").string())) << ok.out;
  ASSERT_TRUE(waitNoStrays()) << "the cancelled job is still running";
}

TEST_F(Control, HashmapToRocksdbAndBackThroughCanonicalSavepointsKeepsEveryCount) {
  const fs::path in = input(400);
  const fs::path o1 = tmp / "o1.txt", o2 = tmp / "o2.txt", o3 = tmp / "o3.txt";

  // hashmap, stopped with a (canonical) savepoint.
  auto p1 = launch(runArgs("WordCount", in, o1, 100), "hashmap");
  std::string id1 = waitForNewJob(*p1, {}, errOf("hashmap"));
  ASSERT_FALSE(id1.empty());
  waitForRunningWithCheckpoint(id1);
  Result st = cli({"stop", "--savepoint-path", (tmp / "sp").string(), id1});
  ASSERT_EQ(st.exitCode, 0) << st.out << st.err;
  const std::string sp1 = lineAfter(st.out, "Savepoint completed. Path: ");
  ASSERT_TRUE(fs::exists(fs::path(sp1) / "_metadata")) << st.out;
  EXPECT_TRUE(contains(st.out, "Stopped job " + id1)) << st.out;
  Result e1 = p1->wait(std::chrono::seconds(60));
  ASSERT_NE(e1.exitCode, -2) << "the stopped job did not exit";
  Result i1 = cli({"inspect", sp1});
  EXPECT_TRUE(contains(i1.out, "canonical")) << i1.out;

  // rocksdb from the canonical savepoint, then a canonical savepoint of it.
  std::vector<std::string> a2 = runArgs("WordCount", in, o2, 100, {"-D", "state.backend.type=rocksdb"});
  a2.insert(a2.begin() + 1, {"-s", sp1});
  auto p2 = launch(a2, "rocksdb");
  std::string id2 = waitForNewJob(*p2, {}, errOf("rocksdb"));
  ASSERT_FALSE(id2.empty());
  Result l2 = waitForRunningWithCheckpoint(id2);
  EXPECT_TRUE(contains(lineWith(l2.out, id2), "WordCount")) << l2.out;
  Result s2 = cli({"savepoint", id2, (tmp / "sp").string(), "--format", "canonical"});
  ASSERT_EQ(s2.exitCode, 0) << s2.out << s2.err;
  const std::string sp2 = lineAfter(s2.out, "Savepoint completed. Path: ");
  Result i2 = cli({"inspect", sp2});
  EXPECT_TRUE(contains(i2.out, "rocksdb")) << i2.out;
  EXPECT_TRUE(contains(i2.out, "canonical")) << i2.out;
  Result c2 = cli({"cancel", id2});
  ASSERT_EQ(c2.exitCode, 0) << c2.out << c2.err;
  EXPECT_TRUE(contains(c2.out, "Cancelled job " + id2 + ".")) << c2.out;
  Result e2 = p2->wait(std::chrono::seconds(60));
  ASSERT_NE(e2.exitCode, -2) << "the cancelled job did not exit";

  // Back to hashmap, to the end of the input.
  std::vector<std::string> a3 = runArgs("WordCount", in, o3, 0);
  a3.insert(a3.begin() + 1, {"-s", sp2});
  Result r3 = cli(a3);
  ASSERT_EQ(r3.exitCode, 0) << r3.err;

  const std::string t1 = readFile(o1), t2 = readFile(o2), t3 = readFile(o3), text = readFile(in);
  EXPECT_EQ(finalCounts(t1 + t2 + t3), expectedCounts(text));
  EXPECT_LT(lineCount(t2), tokenCount(text)) << "the rocksdb job started from scratch";
  EXPECT_LT(lineCount(t3), tokenCount(text)) << "the last hashmap job started from scratch";
  // Each restore continued where the savepoint left off: the counts it prints start high.
  EXPECT_GT(lineCount(t1), 0u);
  EXPECT_GT(lineCount(t2), 0u);
}

TEST_F(Control, ControlRequestsWhileCheckpointsAreInFlightAllSucceed) {
  const fs::path in = input(400);
  auto p = launch(runArgs("WordCount", in, tmp / "o.txt", 100, {}, "50ms"), "busy");
  std::string id = waitForNewJob(*p, {}, errOf("busy"));
  ASSERT_FALSE(id.empty());
  waitForRunningWithCheckpoint(id);
  for (int round = 0; round < 4; ++round) {
    std::vector<std::unique_ptr<Process>> requests;
    requests.push_back(launch({"savepoint", id, (tmp / "sp").string()}, "sp-canonical"));
    requests.push_back(launch({"savepoint", id, (tmp / "sp").string(), "--format", "native"}, "sp-native"));
    requests.push_back(launch({"list"}, "list"));
    requests.push_back(launch({"savepoint", id.substr(0, 4), (tmp / "sp").string()}, "sp-prefix"));
    for (size_t i = 0; i < requests.size(); ++i) {
      Result r = requests[i]->wait(std::chrono::seconds(120));
      ASSERT_EQ(r.exitCode, 0) << "round " << round << " request " << i << ":\n" << r.out << r.err;
      if (i == 2) {
        EXPECT_TRUE(contains(lineWith(r.out, id), "RUNNING")) << r.out;
      } else {
        std::string path = lineAfter(r.out, "Savepoint completed. Path: ");
        EXPECT_TRUE(fs::exists(fs::path(path) / "_metadata")) << r.out;
      }
    }
  }
  std::set<std::string> savepoints;
  for (const auto& e : fs::directory_iterator(tmp / "sp")) savepoints.insert(e.path().string());
  EXPECT_EQ(savepoints.size(), 12u);
  Result c = cli({"cancel", id});
  ASSERT_EQ(c.exitCode, 0) << c.out << c.err;
  Result e = p->wait(std::chrono::seconds(60));
  EXPECT_NE(e.exitCode, -2) << "the cancelled job did not exit";
  EXPECT_FALSE(fs::exists(fs::symlink_status(socketDir() / (id + ".sock"))));
}

TEST_F(Control, DisposeRemovesExactlyTheNamedSnapshotThroughItsDirectorysRegistry) {
  fs::path chk = checkpointOf("WordCount");
  ASSERT_FALSE(chk.empty());
  // A job directory is not one snapshot: dispose never picks "the latest" for you.
  Result jobDir = cli({"savepoint", "-d", chk.parent_path().string()});
  EXPECT_EQ(jobDir.exitCode, 2) << jobDir.out << jobDir.err;
  EXPECT_TRUE(contains(jobDir.err, "is not a snapshot")) << jobDir.err;
  EXPECT_TRUE(fs::exists(chk / "_metadata"));
  Result missing = cli({"savepoint", "-d", (tmp / "no-such-savepoint").string()});
  EXPECT_EQ(missing.exitCode, 2) << missing.err;

  Result conv = cli({"convert", chk.string(), (tmp / "canonical-sp").string()});
  ASSERT_EQ(conv.exitCode, 0) << conv.err;
  Result d = cli({"savepoint", "--dispose", (tmp / "canonical-sp" / "_metadata").string()});
  ASSERT_EQ(d.exitCode, 0) << d.out << d.err;
  EXPECT_TRUE(contains(d.out, "Savepoint '" + (tmp / "canonical-sp").string() + "' disposed")) << d.out;
  EXPECT_FALSE(fs::exists(tmp / "canonical-sp"));
  EXPECT_TRUE(fs::exists(chk / "_metadata"));  // only the named snapshot

  // A retained checkpoint of a job that no longer runs may be disposed of, as in Flink.
  Result c = cli({"savepoint", "-d", chk.string()});
  ASSERT_EQ(c.exitCode, 0) << c.out << c.err;
  EXPECT_TRUE(contains(c.out, "Checkpoint '" + chk.string() + "' disposed")) << c.out;
  EXPECT_FALSE(fs::exists(chk));
}

TEST_F(Control, ListRemovesStaleSocketsOfOursAndLeavesOthersAlone) {
  fs::create_directories(socketDir());
  fs::permissions(socketDir(), fs::perms::owner_all, fs::perm_options::replace);
  const fs::path dead = socketDir() / "0123456789abcdef0123456789abcdef.sock";
  makeDeadSocket(dead);
  const fs::path foreign = socketDir() / "fedcba9876543210fedcba9876543210.sock";
  const bool root = geteuid() == 0;
  if (root) {
    makeDeadSocket(foreign);
    ASSERT_EQ(chown(foreign.c_str(), 65534, 65534), 0);
  }
  Result l = cli({"list"});
  EXPECT_EQ(l.exitCode, 0) << l.err;
  EXPECT_TRUE(contains(l.out, "No running jobs.")) << l.out;
  EXPECT_TRUE(contains(l.err, "removed stale control socket " + dead.string())) << l.err;
  EXPECT_FALSE(fs::exists(fs::symlink_status(dead)));
  if (root) {
    EXPECT_TRUE(fs::exists(fs::symlink_status(foreign)));
    EXPECT_TRUE(contains(l.err, "owned by uid 65534")) << l.err;
  }
  Result c = cli({"cancel", "0123"});
  EXPECT_EQ(c.exitCode, 2) << c.err;
  EXPECT_TRUE(contains(c.err, "no jobs are running")) << c.err;
}

TEST_F(Control, ARuntimeDirectoryOthersCanEnterIsRefused) {
  fs::create_directories(socketDir());
  fs::permissions(socketDir(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                   fs::perms::others_read | fs::perms::others_exec,
                  fs::perm_options::replace);
  Result l = cli({"list"});
  EXPECT_TRUE(contains(l.err, "mode is 0755, not 0700")) << l.err;
  // The job itself runs, but says it cannot be controlled.
  Result r = cli({"run", "-c", "WordCount", kPlugin, "--input", kWords});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "mode is 0755")) << r.err;
}

TEST_F(Control, ADetachedJobThatFailsToStartReportsItsLogAndExitCode) {
  Result r = cli({"run", "-d", "-c", "WordCont", kPlugin, "--input", kWords});
  EXPECT_EQ(r.exitCode, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "exited with code 2")) << r.err;
  EXPECT_TRUE(contains(r.err, "did you mean 'WordCount'?")) << r.err;
  EXPECT_FALSE(contains(r.out, "Job has been submitted")) << r.out;
}

TEST_F(Control, EveryControlSubcommandHasHelpWithExamples) {
  for (const char* cmd : {"list", "savepoint", "cancel", "stop"}) {
    Result r = cli({cmd, "--help"});
    EXPECT_EQ(r.exitCode, 0) << cmd;
    EXPECT_TRUE(contains(r.out, "Example")) << cmd << ": " << r.out;
  }
  Result s = cli({"savepoint"});
  EXPECT_EQ(s.exitCode, 2);
  EXPECT_TRUE(contains(s.err, "needs a job id")) << s.err;
}

}  // namespace
