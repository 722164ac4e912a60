// End-to-end tests: the real jobhost binary, the real example plugin, real files and
// processes. Each test reads like a user session.
#include <gtest/gtest.h>

#include "cli_fixture.h"

using namespace e2e;

namespace {

TEST_F(Cli, InfoListsEveryJobClassWithItsBackend) {
  Result r = cli({"info", kPlugin});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  for (const char* cls : {"WordCount", "WordCountIncremental", "RunningAverage", "DistinctWords", "SequenceChecker"})
    EXPECT_NE(r.out.find(cls), std::string::npos) << cls;
  EXPECT_NE(r.out.find("rocksdb (incremental)"), std::string::npos);
  // The effective backend follows the configuration layers: -D beats configure().
  Result d = cli({"info", kPlugin, "-D", "state.backend.type=rocksdb", "-D", "state.backend.incremental=false"});
  ASSERT_EQ(d.exitCode, 0) << d.err;
  std::string row = d.out.substr(d.out.find("\nWordCount "), 80);
  EXPECT_NE(row.find("rocksdb (full)"), std::string::npos) << row;
}

// The binary's allocator is the one the build chose (JOBHOST_JEMALLOC), as the process's
// symbol lookup resolves malloc: a link order that let libc's malloc win would show here.
TEST_F(Cli, VersionNamesTheAllocatorTheBuildChose) {
  Result r = cli({"--version"});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out.rfind("jobhost ", 0), 0u) << r.out;
#ifdef JOBHOST_EXPECT_JEMALLOC
  EXPECT_NE(r.out.find("\nallocator: jemalloc 5."), std::string::npos) << r.out;
#else
  // glibc's, or a sanitizer's in a sanitizer build.
  EXPECT_NE(r.out.find("\nallocator: "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("jemalloc"), std::string::npos) << r.out;
#endif
}

TEST_F(Cli, WordCountOnTheBundledInputCountsEveryWord) {
  Result r = cli({"run", "-c", "WordCount", kPlugin, "--input", kWords});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(finalCounts(r.out), expectedCounts(readFile(kWords)));
  EXPECT_NE(r.out.find("(to,1)\n"), std::string::npos);
}

TEST_F(Cli, ParallelismOneAndTwoGiveTheSameFinalCountsAndTwoPrefixesSubtasks) {
  fs::path in = input(20);
  Result p1 = cli({"run", "-c", "WordCount", "-p", "1", kPlugin, "--input", in.string()});
  Result p2 = cli({"run", "-c", "WordCount", "-p", "2", kPlugin, "--input", in.string()});
  ASSERT_EQ(p1.exitCode, 0) << p1.err;
  ASSERT_EQ(p2.exitCode, 0) << p2.err;
  EXPECT_EQ(finalCounts(p1.out), expectedCounts(readFile(in)));
  EXPECT_EQ(finalCounts(p2.out), finalCounts(p1.out));
  EXPECT_EQ(p1.out.find("> ("), std::string::npos);
  EXPECT_NE(p2.out.find("1> ("), std::string::npos);
  EXPECT_NE(p2.out.find("2> ("), std::string::npos);
}

TEST_F(Cli, RocksDbIncrementalCountsLikeTheHeap) {
  fs::path in = input(10);
  std::vector<std::string> args = {"run", "-c", "WordCountIncremental", "-p", "2"};
  for (auto& f : ckFlags()) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string()});
  Result r = cli(args);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(finalCounts(r.out), expectedCounts(readFile(in)));
}

struct BadPluginCase {
  const char* name;
  std::function<std::vector<std::string>(const fs::path&)> args;
  const char* expected;
};

TEST_F(Cli, EveryBadClassOrPluginGivesOneClearLineAndExitCodeTwo) {
  writeFile(tmp / "notes.txt", "not a library");
  std::vector<BadPluginCase> cases = {
      {"misspelt class", [](const fs::path&) { return std::vector<std::string>{"run", "-c", "WordCont", kPlugin}; },
       "did you mean 'WordCount'?"},
      {"no class, several in plugin", [](const fs::path&) { return std::vector<std::string>{"run", kPlugin}; },
       "choose one with -c"},
      {"missing file",
       [](const fs::path& d) { return std::vector<std::string>{"run", "-c", "WordCount", (d / "nope.so").string()}; },
       "no such file"},
      {"not a shared library",
       [](const fs::path& d) { return std::vector<std::string>{"run", "-c", "X", (d / "notes.txt").string()}; },
       "not a shared library"},
      {"an executable", [](const fs::path&) { return std::vector<std::string>{"info", kJobhost}; }, "not a shared library"},
      {"bad config value",
       [](const fs::path&) {
         return std::vector<std::string>{"run", "-c", "WordCount", "-D", "restart-strategy.type=sometimes", kPlugin,
                                         "--input", kWords};
       },
       "restart-strategy.type"},
      {"job argument the job rejects",
       [](const fs::path&) {
         return std::vector<std::string>{"run", "-c", "WordCount", kPlugin, "--input", "/no/such/input.txt"};
       },
       "cannot read input file '/no/such/input.txt'"},
  };
  for (const auto& c : cases) {
    Result r = cli(c.args(tmp.path));
    EXPECT_EQ(r.exitCode, 2) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.name << ": " << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << c.name;
  }
}

TEST_F(Cli, TheWordErrorExhaustsFixedDelayRestartsAndKeepsTheCheckpoints) {
  fs::path in = tmp / "in.txt";
  std::string text;
  for (int i = 0; i < 1500; ++i) text += "hello world\n";
  text += "error\n";
  writeFile(in, text);
  std::vector<std::string> args = {"run", "-c", "WordCount", "-D", "restart-strategy.fixed-delay.delay=50ms"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "1000"});
  Result r = cli(args);
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_NE(r.err.find("Recovery is suppressed by FixedDelayRestartStrategy(maxAttempts=3, delay=50 ms)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("operator 'Tokenizer' (1/1): the input contained the word 'error'"), std::string::npos) << r.err;
  auto dirs = jobDirs();
  ASSERT_EQ(dirs.size(), 1u);
  EXPECT_FALSE(completed(dirs[0]).empty()) << "the retained checkpoint must survive a failed job";
  // Three restarts: the log shows attempts 1..3 failing before the final failure.
  EXPECT_NE(r.err.find("attempt 3 failed"), std::string::npos) << r.err;
}

TEST_F(Cli, KilledHeapWordCountRestoresToExactlyTheUninterruptedCounts) {
  fs::path in = input(400);
  std::string out = killAndRestore("WordCount", in, 1, 2, 137);
  EXPECT_EQ(finalCounts(out), expectedCounts(readFile(in)));
}

TEST_F(Cli, KilledHeapWordCountAtParallelismTwoRestoresExactly) {
  fs::path in = input(400);
  std::string out = killAndRestore("WordCount", in, 2, 2, 61);
  EXPECT_EQ(finalCounts(out), expectedCounts(readFile(in)));
}

TEST_F(Cli, KilledRocksDbIncrementalWordCountRestoresExactly) {
  fs::path in = input(400);
  std::string out = killAndRestore("WordCountIncremental", in, 1, 3, 29);
  EXPECT_EQ(finalCounts(out), expectedCounts(readFile(in)));
}

TEST_F(Cli, KilledRocksDbIncrementalWordCountAtParallelismTwoRestoresExactly) {
  fs::path in = input(400);
  std::string out = killAndRestore("WordCountIncremental", in, 2, 2, 83);
  EXPECT_EQ(finalCounts(out), expectedCounts(readFile(in)));
}

TEST_F(Cli, SequenceCheckerSeesNoGapOrRepeatAcrossAnInjectedFailure) {
  std::vector<std::string> args = {"run", "-c", "SequenceChecker", "-p", "2"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--keys", "8", "--per-key", "1000", "--rate", "4000", "--fail-after", "5000",
                           "--fail-marker", (tmp / "failed-once").string()});
  Result r = cli(args);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(fs::exists(tmp / "failed-once")) << "the failure was not injected";
  EXPECT_NE(r.err.find("injected failure after 5000 records"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("restoring from checkpoint"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("ALERT"), std::string::npos) << r.out.substr(r.out.find("ALERT"), 200);
  for (int k = 0; k < 8; ++k) EXPECT_NE(r.out.find("DONE key " + std::to_string(k) + " 1000"), std::string::npos) << k;
}

TEST_F(Cli, APlainMemberVariableStartsOverAfterARestoreWhileDeclaredStateContinues) {
  fs::path in = tmp / "in.txt";
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "apple\n";
  writeFile(in, text);
  std::vector<std::string> args = {"run", "-c", "MemberVariableDemo"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "1000"});
  {
    Process p(jobhost(args), tmp / "m-out.txt", tmp / "m-err.txt");
    ASSERT_TRUE(waitForCheckpoint(p, 2));
    p.signal(SIGKILL);
    p.wait();
  }
  Result r = cli({"run", "-s", jobDirs().at(0).string(), "-c", "MemberVariableDemo", kPlugin, "--input", in.string()});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  // The first record after the restore: declared state continues, the member is back at 1.
  std::string first = r.out.substr(0, r.out.find('\n'));
  EXPECT_NE(first.find(",member=1)"), std::string::npos) << first;
  EXPECT_EQ(first.find("(apple,state=1,"), std::string::npos) << "declared state was not restored: " << first;
  EXPECT_NE(r.out.find("(apple,state=3000,"), std::string::npos);
}

}  // namespace

namespace {

TEST_F(Cli, ACrashingPluginIsATaskFailureThatNamesTheSignalAndOperatorAndRestarts) {
  fs::path in = tmp / "in.txt";
  std::string text;
  for (int i = 0; i < 1500; ++i) text += "hello world\n";
  text += "crash\n";
  writeFile(in, text);
  std::vector<std::string> args = {"run", "-c", "WordCount", "-D", "restart-strategy.fixed-delay.delay=50ms"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "1000"});
  Result r = cli(args);
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_NE(r.err.find("killed by SIGABRT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("operator 'Tokenizer' (1/1)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("attempt 3 failed"), std::string::npos) << "the supervisor survives and restarts: " << r.err;
  EXPECT_NE(r.err.find("Recovery is suppressed by"), std::string::npos) << r.err;
  // The counts before the crash were checkpointed and restored on every attempt.
  EXPECT_NE(r.err.find("restoring from checkpoint"), std::string::npos) << r.err;
  auto dirs = jobDirs();
  ASSERT_EQ(dirs.size(), 1u);
  EXPECT_FALSE(completed(dirs[0]).empty());
}

}  // namespace

namespace {

/// Pids of the direct children of `pid` (the worker of a jobhost run).
std::vector<pid_t> childrenOf(pid_t pid) {
  std::vector<pid_t> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  pid_t c;
  while (in >> c) out.push_back(c);
  return out;
}

TEST_F(Cli, AWorkerKilledLikeByTheOomKillerIsRestartedFromTheLatestCheckpointAndCountsStayExact) {
  fs::path in = input(400);
  std::vector<std::string> args = {"run", "-c", "WordCountIncremental", "-D", "restart-strategy.fixed-delay.delay=100ms"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "2500"});
  Process p(jobhost(args), tmp / "oom.out", tmp / "oom.err");
  ASSERT_TRUE(waitForCheckpoint(p, 2)) << readFile(tmp / "oom.err");
  auto workers = childrenOf(p.pid());
  ASSERT_EQ(workers.size(), 1u) << "one worker process";
  kill(workers[0], SIGKILL);
  Result r = p.wait();
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.err.find("killed by SIGKILL"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("restoring from checkpoint"), std::string::npos) << r.err;
  EXPECT_EQ(finalCounts(r.out), expectedCounts(readFile(in)));
}

TEST_F(Cli, SigtermStopsAForegroundJobCleanlyKeepsItsCheckpointsAndExits130) {
  fs::path in = input(400);
  std::vector<std::string> args = {"run", "-c", "WordCount"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "1000"});
  Process p(jobhost(args), tmp / "term.out", tmp / "term.err");
  ASSERT_TRUE(waitForCheckpoint(p, 1)) << readFile(tmp / "term.err");
  p.signal(SIGTERM);
  Result r = p.wait(std::chrono::seconds(30));
  EXPECT_EQ(r.exitCode, 130) << r.err;
  EXPECT_NE(r.err.find("stopped by signal"), std::string::npos) << r.err;
  EXPECT_TRUE(childrenOf(p.pid()).empty());
  // The last line printed is a whole line: sinks were flushed, nothing was cut.
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.back(), '\n');
  auto dirs = jobDirs();
  ASSERT_EQ(dirs.size(), 1u);
  EXPECT_FALSE(completed(dirs[0]).empty()) << "RETAIN_ON_CANCELLATION is the default";
}

}  // namespace
