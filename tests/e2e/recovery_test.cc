// Recovery that cannot strand a job (issue 12), through the real binary: the restore
// source is decided once by the supervisor, a job directory is locked by the job that
// writes it, states the class no longer declares are carried forward, and a stop emits
// nothing after its savepoint. Each test is named after what broke.
#include <csignal>
#include <fstream>
#include <functional>
#include <set>

#include "cli_fixture.h"
#include "../support/contains.h"

using namespace e2e;

namespace {

const std::string kEvolving = JOBHOST_EVOLVING_PLUGIN;

class Recovery : public Cli {
 protected:
  void SetUp() override {
    // A private runtime directory: control sockets of these jobs only.
    if (const char* x = std::getenv("XDG_RUNTIME_DIR")) oldXdg_ = x;
    fs::create_directories(tmp / "run");
    fs::permissions(tmp / "run", fs::perms::owner_all, fs::perm_options::replace);
    setenv("XDG_RUNTIME_DIR", (tmp / "run").c_str(), 1);
  }
  void TearDown() override {
    if (oldXdg_) setenv("XDG_RUNTIME_DIR", oldXdg_->c_str(), 1);
    else unsetenv("XDG_RUNTIME_DIR");
  }

  /// `lines` lines of words, the word `error` on line `errorAt` (0: none).
  fs::path wordsWithError(const std::string& name, int lines, int errorAt) {
    std::string text;
    const char* words[] = {"alpha beta", "gamma", "beta delta", "alpha", "epsilon zeta"};
    for (int i = 1; i <= lines; ++i) text += i == errorAt ? "error\n" : std::string(words[i % 5]) + "\n";
    fs::path p = tmp / name;
    writeFile(p, text);
    return p;
  }
  static uint64_t newestCheckpoint(const fs::path& jobDir) {
    uint64_t best = 0;
    for (const auto& c : completed(jobDir)) best = std::max<uint64_t>(best, std::stoull(c.filename().string().substr(4)));
    return best;
  }
  /// The job directory that appeared since `before`, once it has a complete checkpoint.
  fs::path waitForNewJobDir(Process& p, const std::vector<fs::path>& before, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until && p.running()) {
      for (const auto& d : jobDirs())
        if (std::find(before.begin(), before.end(), d) == before.end() && !completed(d).empty()) return d;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return {};
  }
  /// Runs `args` until its first complete checkpoint, then SIGTERM; that checkpoint.
  fs::path firstCheckpoint(std::vector<std::string> args, const std::string& name) {
    auto before = jobDirs();
    Process p(jobhost(args), tmp / (name + ".out"), tmp / (name + ".err"));
    fs::path dir = waitForNewJobDir(p, before);
    EXPECT_FALSE(dir.empty()) << readFile(tmp / (name + ".err"));
    p.signal(SIGTERM);
    Result r = p.wait();
    EXPECT_EQ(r.exitCode, 130) << r.err;
    auto c = completed(dir);
    return c.empty() ? fs::path() : c.back();
  }
  /// Polls `done` while `p` runs, for at most `timeout`; true once it holds.
  static bool waitWhileRunning(Process& p, const std::function<bool()>& done,
                               std::chrono::seconds timeout = std::chrono::seconds(60)) {
    auto until = std::chrono::steady_clock::now() + timeout;
    while (p.running() && !done() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return done();
  }
  std::vector<std::string> failFast(int attempts) {
    return {"-D", "restart-strategy.type=fixed-delay", "-D",
            "restart-strategy.fixed-delay.attempts=" + std::to_string(attempts), "-D",
            "restart-strategy.fixed-delay.delay=100ms"};
  }

 private:
  std::optional<std::string> oldXdg_;
};

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Defect 1: after the claimed snapshot was deleted, the next attempt re-resolved -s and
// died with "snapshot path ... does not exist" (exit 3).
// A worker that is stopped (SIGSTOP) or hung as a whole sent nothing, and the job stayed
// RUNNING with no log line for as long as it lasted. The supervisor now kills a running
// worker silent for heartbeat.timeout and the restart strategy restarts the job from its
// latest checkpoint: the counts come out exact.
TEST_F(Recovery, AStoppedWorkerIsKilledAfterTheHeartbeatTimeoutAndTheJobRestartsExactly) {
  fs::path in = input(300);  // ~10 s at 400 lines/s: still running when stopped
  std::vector<std::string> args = {"run", "-c", "WordCount", "-D", "heartbeat.timeout=2s",
                                   "-D", "restart-strategy.type=fixed-delay",
                                   "-D", "restart-strategy.fixed-delay.attempts=2",
                                   "-D", "restart-strategy.fixed-delay.delay=100ms"};
  for (auto& f : ckFlags()) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "400"});
  Process p(jobhost(args), tmp / "hb.out", tmp / "hb.err");
  ASSERT_TRUE(waitForCheckpoint(p)) << readFile(tmp / "hb.err");
  std::vector<pid_t> workers;
  {
    std::ifstream children("/proc/" + std::to_string(p.pid()) + "/task/" + std::to_string(p.pid()) + "/children");
    pid_t c;
    while (children >> c) workers.push_back(c);
  }
  ASSERT_EQ(workers.size(), 1u) << "one worker process";
  ASSERT_EQ(kill(workers[0], SIGSTOP), 0);
  Result r = p.wait();
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "the worker process (pid " + std::to_string(workers[0]) + ") sent nothing for"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "(heartbeat.timeout 2 s): stopped or hung, so it was killed")) << r.err;
  EXPECT_TRUE(contains(r.err, "restarting")) << r.err;
  EXPECT_EQ(finalCounts(r.out), expectedCounts(readFile(in)));
}

TEST_F(Recovery, AFailoverAfterAClaimedRestoreRestoresTheJobsOwnCheckpointAndEndsAsTheRestartStrategySays) {
  fs::path in = wordsWithError("in.txt", 3000, 1500);
  fs::path chk = firstCheckpoint(std::vector<std::string>{"run", "-c", "WordCount"} + ckFlags("100ms") +
                                     std::vector<std::string>{kPlugin, "--input", in.string(), "--rate", "200"},
                                 "first");
  ASSERT_FALSE(chk.empty());
  Result r = cli(std::vector<std::string>{"run", "-s", chk.string(), "--restore-mode", "claim", "-c", "WordCount"} +
                 ckFlags("100ms") + failFast(2) + std::vector<std::string>{kPlugin, "--input", in.string(), "--rate", "500"});
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "Recovery is suppressed by FixedDelayRestartStrategy")) << r.err;
  EXPECT_FALSE(contains(r.err, "not retrying")) << r.err;
  EXPECT_FALSE(contains(r.err, "does not exist")) << r.err;
  EXPECT_TRUE(contains(r.err, "deleted the claimed snapshot " + chk.string())) << r.err;
  EXPECT_FALSE(fs::exists(chk / "_metadata"));
  // Attempts 2 and 3 restored the job's own checkpoints.
  EXPECT_TRUE(contains(r.err, "restoring from checkpoint " + ckdir().string())) << r.err;
}

// Defect 1, no-claim: the README says the snapshot may be deleted once the job's first own
// checkpoint exists; a failover afterwards must not need it.
TEST_F(Recovery, AFailoverAfterTheNoClaimSnapshotWasDeletedRestoresTheJobsOwnCheckpoint) {
  fs::path in = wordsWithError("in.txt", 4000, 2500);
  fs::path chk = firstCheckpoint(std::vector<std::string>{"run", "-c", "WordCount"} + ckFlags("100ms") +
                                     std::vector<std::string>{kPlugin, "--input", in.string(), "--rate", "200"},
                                 "first");
  ASSERT_FALSE(chk.empty());
  auto before = jobDirs();
  Process p(jobhost(std::vector<std::string>{"run", "-s", chk.string(), "-c", "WordCount"} + ckFlags("100ms") +
                    failFast(1) + std::vector<std::string>{kPlugin, "--input", in.string(), "--rate", "500"}),
            tmp / "second.out", tmp / "second.err");
  fs::path own = waitForNewJobDir(p, before);
  ASSERT_FALSE(own.empty()) << readFile(tmp / "second.err");
  fs::remove_all(chk.parent_path());  // allowed once the job has a checkpoint of its own
  Result r = p.wait();
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "Recovery is suppressed")) << r.err;
  EXPECT_FALSE(contains(r.err, "does not exist")) << r.err;
  EXPECT_TRUE(contains(r.err, "restoring from checkpoint " + own.string())) << r.err;
}

// Defect 1: every attempt re-resolved `-s <job dir>`, so a later attempt could restore a
// newer checkpoint that appeared meanwhile and was never checked.
TEST_F(Recovery, EveryAttemptRestoresTheSnapshotResolvedOnceNotANewerOneThatAppeared) {
  fs::path foreign = checkpointOf("WordCountIncremental");  // incompatible with WordCount (hashmap)
  ASSERT_FALSE(foreign.empty());
  fs::path in = wordsWithError("in.txt", 3000, 1200);
  fs::path chk = firstCheckpoint(std::vector<std::string>{"run", "-c", "WordCount"} + ckFlags("100ms") +
                                     std::vector<std::string>{kPlugin, "--input", in.string(), "--rate", "200"},
                                 "first");
  ASSERT_FALSE(chk.empty());
  fs::path jobDir = chk.parent_path();
  // Checkpointing off: the job never has checkpoints of its own, every attempt restores -s.
  Process p(jobhost(std::vector<std::string>{"run", "-s", jobDir.string(), "-c", "WordCount", "-D",
                                             "execution.checkpointing.interval=0"} +
                    failFast(1) + std::vector<std::string>{kPlugin, "--input", in.string(), "--rate", "500"}),
            tmp / "second.out", tmp / "second.err");
  waitWhileRunning(p, [&] { return !readFile(tmp / "second.out").empty(); });
  fs::copy(foreign, jobDir / "chk-999", fs::copy_options::recursive);  // newer, never preflighted
  Result r = p.wait();
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "Recovery is suppressed")) << r.err;
  EXPECT_FALSE(contains(r.err, "chk-999")) << r.err;
  // Attempt 2 restored the very snapshot attempt 1 did.
  EXPECT_TRUE(contains(r.err, "restoring from snapshot " + chk.string())) << r.err;
}

// Item 6: `-s <job dir>` had no fallback when its newest `_metadata` could not be read.
TEST_F(Recovery, ARestoreFromAJobDirectoryWhoseNewestMetadataIsUnreadableUsesTheNextOlderOneAndSaysSo) {
  fs::path in = input(400);
  auto before = jobDirs();
  Process p(jobhost(std::vector<std::string>{"run", "-c", "WordCount", "-D", "state.checkpoints.num-retained=5"} +
                    ckFlags("100ms") + std::vector<std::string>{kPlugin, "--input", in.string(), "--rate", "1000"}),
            tmp / "job.out", tmp / "job.err");
  fs::path jobDir = waitForNewJobDir(p, before);
  ASSERT_FALSE(jobDir.empty()) << readFile(tmp / "job.err");
  waitWhileRunning(p, [&] { return completed(jobDir).size() >= 2; });
  p.signal(SIGTERM);
  ASSERT_EQ(p.wait().exitCode, 130);
  auto chks = completed(jobDir);
  ASSERT_GE(chks.size(), 2u);
  uint64_t newest = newestCheckpoint(jobDir);
  fs::path damaged = jobDir / ("chk-" + std::to_string(newest));
  fs::resize_file(damaged / "_metadata", 12);
  Result r = cli({"check", "-s", jobDir.string(), "-c", "WordCount", kPlugin, "--input", in.string()});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "skipped the newer chk-" + std::to_string(newest))) << r.err;
  EXPECT_TRUE(contains(r.err, "cannot be read")) << r.err;
  EXPECT_TRUE(contains(r.err, "warning using the latest complete checkpoint")) << "a skipped checkpoint is a warning:\n" << r.err;
  Result shown = cli({"inspect", jobDir.string()});
  EXPECT_EQ(shown.exitCode, 0) << shown.err;
  EXPECT_TRUE(contains(shown.err, "warning: using the latest complete checkpoint in " + jobDir.string()))
      << "inspect showed an older checkpoint than the newest without a word:\n" << shown.err;
  EXPECT_TRUE(contains(shown.err, "skipped the newer chk-" + std::to_string(newest))) << shown.err;
  EXPECT_FALSE(contains(r.out + r.err, "using the latest complete checkpoint in " + jobDir.string() + ": chk-" +
                                           std::to_string(newest) + "\n"))
      << r.err;
  // gc keeps the shared files the damaged checkpoint may reference, and says so.
  Result gc = cli({"gc", "--dry-run", jobDir.string()});
  EXPECT_EQ(gc.exitCode, 0) << gc.err;
  EXPECT_TRUE(contains(gc.out, "cannot be read")) << gc.out;
}

// Defect 3: gc guessed "running" from control sockets answering; a job found through
// another runtime directory (or none) had its in-flight files deleted.
TEST_F(Recovery, GcSavepointDisposeAndClaimRefuseALiveJobsDirectoryNamingItWhateverItsControlSocket) {
  fs::path in = input(2000);
  auto before = jobDirs();
  // Checkpoints retained, so the one the test names is not subsumed meanwhile.
  Process p(jobhost(std::vector<std::string>{"run", "-c", "WordCountIncremental", "-D",
                                             "state.checkpoints.num-retained=1000"} +
                    ckFlags("100ms") + std::vector<std::string>{kPlugin, "--input", in.string(), "--rate", "300"}),
            tmp / "live.out", tmp / "live.err");
  fs::path jobDir = waitForNewJobDir(p, before);
  ASSERT_FALSE(jobDir.empty()) << readFile(tmp / "live.err");
  std::string pid = std::to_string(p.pid());
  fs::path elsewhere = tmp / "other-runtime";
  fs::create_directories(elsewhere);
  fs::permissions(elsewhere, fs::perms::owner_all, fs::perm_options::replace);
  Result gc = run({"/usr/bin/env", "XDG_RUNTIME_DIR=" + elsewhere.string(), kJobhost, "gc", jobDir.string()}, tmp.path);
  EXPECT_EQ(gc.exitCode, 2) << gc.out << gc.err;
  EXPECT_TRUE(contains(gc.err, "pid " + pid)) << gc.err;
  EXPECT_TRUE(contains(gc.err, "WordCountIncremental")) << gc.err;
  EXPECT_TRUE(contains(gc.err, "nothing was removed")) << gc.err;

  fs::path chk = completed(jobDir).back();
  Result dispose = cli({"savepoint", "-d", chk.string()});
  EXPECT_EQ(dispose.exitCode, 2) << dispose.out << dispose.err;
  EXPECT_TRUE(contains(dispose.err, "pid " + pid) && contains(dispose.err, "WordCountIncremental")) << dispose.err;

  Result claim = cli(std::vector<std::string>{"run", "-s", chk.string(), "--restore-mode", "claim", "-c",
                                              "WordCountIncremental"} +
                     ckFlags("100ms") + std::vector<std::string>{kPlugin, "--input", in.string()});
  EXPECT_EQ(claim.exitCode, 2) << claim.err;
  EXPECT_TRUE(contains(claim.err, "cannot claim") && contains(claim.err, "pid " + pid)) << claim.err;

  p.signal(SIGTERM);
  Result r = p.wait();
  EXPECT_EQ(r.exitCode, 130) << r.err;
  EXPECT_FALSE(completed(jobDir).empty());
  Result after = cli({"gc", jobDir.string()});
  EXPECT_EQ(after.exitCode, 0) << after.err;
  Result check = cli({"check", "-s", jobDir.string(), "-c", "WordCountIncremental", kPlugin, "--input", in.string()});
  EXPECT_EQ(check.exitCode, 0) << check.err;
}

// Defect 3: temporary files of uploads a crash interrupted were hidden from list() and
// never collected.
TEST_F(Recovery, GcCollectsWhatACrashLeftIncludingTemporaryFilesAndDryRunOnlyLists) {
  fs::path chk = checkpointOf("WordCountIncremental");
  ASSERT_FALSE(chk.empty());
  fs::path jobDir = chk.parent_path();
  auto kept = treeChecksums(jobDir);
  writeFile(jobDir / "shared" / ".000099.sst.tmp.0123456789abcdef", "half an upload");
  fs::create_directories(jobDir / "chk-99");
  writeFile(jobDir / "chk-99" / "counts-0.kg", "never completed");
  writeFile(jobDir / "shared" / "orphan.sst", "referenced by nothing");
  Result dry = cli({"gc", "--dry-run", jobDir.string()});
  ASSERT_EQ(dry.exitCode, 0) << dry.err;
  for (const char* f : {".000099.sst.tmp.0123456789abcdef", "chk-99/counts-0.kg", "orphan.sst"})
    EXPECT_TRUE(contains(dry.out, f)) << dry.out;
  EXPECT_TRUE(contains(dry.out, "would remove 3 files")) << dry.out;
  EXPECT_TRUE(fs::exists(jobDir / "shared" / ".000099.sst.tmp.0123456789abcdef"));
  Result gc = cli({"gc", jobDir.string()});
  ASSERT_EQ(gc.exitCode, 0) << gc.err;
  EXPECT_TRUE(contains(gc.out, "removed 3 files")) << gc.out;
  auto now = treeChecksums(jobDir);
  now.erase(".lock");
  kept.erase(".lock");
  EXPECT_EQ(now, kept) << "gc touched something a complete checkpoint references";
  Result again = cli({"gc", jobDir.string()});
  EXPECT_TRUE(contains(again.out, "nothing to remove")) << again.out;
}

// A worker killed by a signal could not remove its RocksDB working directory: every
// crashed attempt left a copy of the state in state.local.dir.
TEST_F(Recovery, TheSupervisorRemovesTheWorkingDirectoryOfAWorkerThatDied) {
  std::string text;
  for (int i = 1; i <= 3000; ++i) text += i == 800 ? "crash\n" : "alpha beta gamma\n";
  fs::path in = tmp / "crash.txt";
  writeFile(in, text);
  fs::path local = tmp / "local";
  fs::create_directories(local);
  Result r = cli(std::vector<std::string>{"run", "-c", "WordCountIncremental", "-D", "state.local.dir=" + local.string()} +
                 ckFlags("100ms") + failFast(1) +
                 std::vector<std::string>{kPlugin, "--input", in.string(), "--rate", "2000"});
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "SIGABRT")) << r.err;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(local)) left.push_back(e.path().filename().string());
  EXPECT_TRUE(left.empty()) << left.front() << " was left in state.local.dir";
}

// DELETE_ON_CANCELLATION removed the whole job directory, a savepoint a user took into
// it included ("no job ever deletes a savepoint").
TEST_F(Recovery, DeleteOnCancellationDeletesTheCheckpointsAndNothingElse) {
  auto before = jobDirs();
  Process p(jobhost(std::vector<std::string>{"run", "-c", "WordCount", "-D",
                                             "execution.checkpointing.externalized-checkpoint-retention=DELETE_ON_CANCELLATION"} +
                    ckFlags("100ms") + std::vector<std::string>{kPlugin, "--input", input(400).string(), "--rate", "1000"}),
            tmp / "job.out", tmp / "job.err");
  fs::path jobDir = waitForNewJobDir(p, before);
  ASSERT_FALSE(jobDir.empty()) << readFile(tmp / "job.err");
  std::string jobId = jobDir.filename().string();
  Result sp = cli({"savepoint", jobId, jobDir.string()});
  ASSERT_EQ(sp.exitCode, 0) << sp.out << sp.err;
  Result c = cli({"cancel", jobId});
  ASSERT_EQ(c.exitCode, 0) << c.out << c.err;
  Result r = p.wait();
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(completed(jobDir).empty()) << "the checkpoints are deleted";
  std::vector<fs::path> savepoints;
  for (const auto& e : fs::directory_iterator(jobDir))
    if (e.path().filename().string().rfind("savepoint-", 0) == 0) savepoints.push_back(e.path());
  ASSERT_EQ(savepoints.size(), 1u) << "the user's savepoint is not the job's to delete";
  EXPECT_TRUE(fs::exists(savepoints[0] / "_metadata"));
  EXPECT_FALSE(fs::exists(jobDir / "shared"));
  EXPECT_TRUE(contains(r.err, "it holds files that are not checkpoints")) << r.err;
}

// The supervisor fell back to the -s snapshot (or to no state at all) when the job's own
// checkpoints could not be read before a restart, silently losing their progress.
TEST_F(Recovery, AFailoverWhoseOwnCheckpointsCannotBeReadFailsTheAttemptInsteadOfStartingOver) {
  fs::path in = wordsWithError("in.txt", 6000, 3000);
  auto before = jobDirs();
  Process p(jobhost(std::vector<std::string>{"run", "-c", "WordCount", "-D", "restart-strategy.type=fixed-delay", "-D",
                                             "restart-strategy.fixed-delay.attempts=2", "-D",
                                             "restart-strategy.fixed-delay.delay=3s"} +
                    ckFlags("100ms") + std::vector<std::string>{kPlugin, "--input", in.string(), "--rate", "1500"}),
            tmp / "job.out", tmp / "job.err");
  fs::path jobDir = waitForNewJobDir(p, before);
  ASSERT_FALSE(jobDir.empty()) << readFile(tmp / "job.err");
  waitWhileRunning(p, [&] { return contains(readFile(tmp / "job.err"), "restarting in"); });
  // During the restart delay: every checkpoint of the job becomes unreadable.
  for (const auto& c : completed(jobDir)) fs::resize_file(c / "_metadata", 7);
  Result r = p.wait();
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "none of the job's checkpoints in " + jobDir.string() + " can be read")) << r.err;
  EXPECT_FALSE(contains(r.err, "attempt 2 failed: the input contained")) << "attempt 2 ran from scratch: " << r.err;
}

// Item 9: stop took the savepoint and cancelled afterwards, so records after the
// savepoint's barrier were emitted before the stop and again after the restore.
TEST_F(Recovery, StopEmitsNothingAfterItsSavepointSoARestoreNeitherLosesNorRepeatsOutput) {
  fs::path in = input(200);
  std::vector<std::string> base = std::vector<std::string>{"-c", "WordCount"} + ckFlags("100ms");
  auto before = jobDirs();
  Process p(jobhost(std::vector<std::string>{"run"} + base +
                    std::vector<std::string>{kPlugin, "--input", in.string(), "--rate", "1000"}),
            tmp / "first.out", tmp / "first.err");
  fs::path jobDir = waitForNewJobDir(p, before);
  ASSERT_FALSE(jobDir.empty()) << readFile(tmp / "first.err");
  std::string jobId = jobDir.filename().string();
  Result stop = cli({"stop", "--savepoint-path", (tmp / "sp").string(), jobId});
  ASSERT_EQ(stop.exitCode, 0) << stop.out << stop.err;
  Result first = p.wait();
  ASSERT_EQ(first.exitCode, 0) << first.err;
  auto at = stop.out.find("Path: ");
  ASSERT_NE(at, std::string::npos) << stop.out;
  std::string sp = stop.out.substr(at + 6, stop.out.find('\n', at) - at - 6);
  Result second = cli(std::vector<std::string>{"run", "-s", sp} + base +
                      std::vector<std::string>{kPlugin, "--input", in.string()});
  ASSERT_EQ(second.exitCode, 0) << second.err;
  // Every count of every word appears exactly once across both runs.
  std::map<std::string, std::multiset<long>> seen;
  for (const std::string* out : {&first.out, &second.out}) {
    std::istringstream lines(*out);
    std::string line;
    while (std::getline(lines, line)) {
      auto comma = line.rfind(',');
      if (line.size() < 4 || line.front() != '(' || comma == std::string::npos) continue;
      seen[line.substr(1, comma - 1)].insert(std::stol(line.substr(comma + 1)));
    }
  }
  auto expected = expectedCounts(readFile(in));
  ASSERT_EQ(seen.size(), expected.size());
  for (const auto& [word, counts] : seen) {
    std::multiset<long> want;
    for (long i = 1; i <= expected[word]; ++i) want.insert(i);
    EXPECT_EQ(counts, want) << "word '" << word << "': lost or repeated output around the stop";
  }
  EXPECT_FALSE(first.out.empty());
  EXPECT_FALSE(second.out.empty()) << "the stop came after the end of the input: nothing was tested";
}

// Defect 2: a state the class no longer declares was restored and snapshotted by the
// backend but left out of `_metadata`: RocksDB's next restore (the failover) failed for
// good, the heap backend turned the map into a value.
class KeptState : public Recovery, public ::testing::WithParamInterface<std::string> {};

TEST_P(KeptState, AStateTheClassNoLongerDeclaresSurvivesItsCheckpointsAndFailoversAndIsReadAgainLater) {
  std::string backend = "state.backend.type=" + GetParam();
  std::string text;
  for (int i = 1; i <= 4000; ++i) text += i == 2000 ? "error\n" : "k" + std::to_string(i % 5) + "\n";
  fs::path in = tmp / "keys.txt";
  writeFile(in, text);
  // v1 writes count and tags; stop it once a checkpoint covers printed records.
  auto before = jobDirs();
  Process v1(jobhost(std::vector<std::string>{"run", "-c", "KeyedCountsWithMap", "-D", backend} + ckFlags("100ms") +
                     std::vector<std::string>{kEvolving, "--input", in.string(), "--rate", "300"}),
             tmp / "v1.out", tmp / "v1.err");
  fs::path dir1 = waitForNewJobDir(v1, before);
  ASSERT_FALSE(dir1.empty()) << readFile(tmp / "v1.err");
  waitWhileRunning(v1, [&] { return !readFile(tmp / "v1.out").empty(); });
  uint64_t covered = newestCheckpoint(dir1) + 1;
  waitWhileRunning(v1, [&] { return newestCheckpoint(dir1) >= covered; });
  v1.signal(SIGTERM);
  ASSERT_EQ(v1.wait().exitCode, 130);
  ASSERT_GE(newestCheckpoint(dir1), covered);

  Result check = cli({"check", "-s", dir1.string(), "-c", "KeyedCountsWithoutMap", "-D", backend, kEvolving, "--input",
                      in.string()});
  ASSERT_EQ(check.exitCode, 0) << check.out << check.err;
  EXPECT_TRUE(contains(check.out, "'tags'") && contains(check.out, "kept, not read")) << check.out;

  // v2 does not declare tags; it fails over once and restores its own checkpoint.
  before = jobDirs();
  Result v2 = cli(std::vector<std::string>{"run", "-s", dir1.string(), "-c", "KeyedCountsWithoutMap", "-D", backend} +
                  ckFlags("100ms") + failFast(3) +
                  std::vector<std::string>{kEvolving, "--input", in.string(), "--rate", "1500", "--fail-once",
                                           (tmp / "failed-once").string()});
  ASSERT_EQ(v2.exitCode, 0) << v2.err;
  EXPECT_TRUE(contains(v2.err, "attempt 1 failed")) << v2.err;
  EXPECT_TRUE(contains(v2.err, "restoring from checkpoint")) << v2.err;
  fs::path dir2;
  for (const auto& d : jobDirs())
    if (std::find(before.begin(), before.end(), d) == before.end()) dir2 = d;
  ASSERT_FALSE(dir2.empty());
  Result inspect = cli({"inspect", completed(dir2).back().string()});
  EXPECT_TRUE(contains(inspect.out, "tags")) << "the kept state is in v2's metadata: " << inspect.out;

  // v1 again, from v2's checkpoint: every key it counted before still has its tags. Its
  // input goes on after the end of v2's, so it sees every key again whatever position the
  // checkpoint holds.
  fs::path longer = tmp / "keys-longer.txt";
  std::string more;
  for (int i = 0; i < 50; ++i) more += "k" + std::to_string(i % 5) + "\n";
  writeFile(longer, text + more);
  Result again = cli(std::vector<std::string>{"run", "-s", dir2.string(), "-c", "KeyedCountsWithMap", "-D", backend} +
                     std::vector<std::string>{kEvolving, "--input", longer.string()});
  ASSERT_EQ(again.exitCode, 0) << again.err;
  EXPECT_FALSE(contains(again.out, "LOST")) << again.out.substr(0, 2000);
  std::set<std::string> restoredKeys;  // keys whose first line shows a count from before
  std::set<std::string> firstSeen;
  std::istringstream lines(again.out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() < 6 || line[0] != '(') continue;
    std::string key = line.substr(1, line.find(',') - 1);
    if (!firstSeen.insert(key).second) continue;
    long count = std::stol(line.substr(line.find(',') + 1));
    if (count > 1) restoredKeys.insert(key);
  }
  EXPECT_FALSE(restoredKeys.empty()) << "no key came back from the snapshot: nothing was tested";
}

INSTANTIATE_TEST_SUITE_P(Backends, KeptState, ::testing::Values("hashmap", "rocksdb"));

}  // namespace
