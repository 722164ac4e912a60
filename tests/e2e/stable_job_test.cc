// A job that resumes by itself (issue 17, item 5): `jobhost run --job-id NAME --restore
// latest`, what a scheduler (a Kubernetes pod's command) runs on every start. Real
// processes, kill -9 of the whole tree, real checkpoint directories.
#include <csignal>
#include <fstream>
#include <set>
#include <sstream>

#include "cli_fixture.h"

namespace e2e {
namespace {

/// Every file under `dir` with its size, but the lock file (which records who took the
/// lock last): a failed command must leave this unchanged.
std::map<std::string, uintmax_t> listing(const fs::path& dir) {
  std::map<std::string, uintmax_t> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != ".lock") out[fs::relative(e.path(), dir).string()] = e.file_size();
  return out;
}

class StableJob : public Cli {
 protected:
  /// run --job-id `id` --restore latest `cls` on `in`, throttled, with checkpoints every 100 ms.
  std::vector<std::string> resumeArgs(const std::string& id, const std::string& cls, int p, const fs::path& in,
                                      bool throttled) {
    std::vector<std::string> a = {"run", "--job-id", id, "--restore", "latest", "-c", cls, "-p", std::to_string(p)};
    for (auto& f : ckFlags("100ms")) a.push_back(f);
    a.insert(a.end(), {kPlugin, "--input", in.string()});
    if (throttled) a.insert(a.end(), {"--rate", "1500"});
    return a;
  }
  /// Newest complete checkpoint id in the job directory (0: none).
  int newest(const std::string& id) const {
    int n = 0;
    if (!fs::exists(ckdir() / id)) return 0;
    for (const auto& c : completed(ckdir() / id)) n = std::max(n, std::stoi(c.filename().string().substr(4)));
    return n;
  }
  /// Waits until the job directory has a complete checkpoint newer than `than`.
  bool waitForNewer(Process& p, const std::string& id, int than) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < until && p.running()) {
      if (newest(id) > than) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
};

class StableJobBackends : public StableJob, public ::testing::WithParamInterface<std::tuple<std::string, int>> {};

// The floor: `jobhost run --restore latest` twice in a row after a kill -9
// continues exactly, in one stable directory, for both backends.
TEST_P(StableJobBackends, RestoreLatestAfterKillNineTwiceContinuesExactly) {
  const auto& [cls, p] = GetParam();
  fs::path in = input(2000);  // 19 s throttled: still running when killed, however loaded the machine
  std::string out;
  int restoredFrom = 0;
  for (int run = 1; run <= 2; ++run) {
    Process job(jobhost(resumeArgs("wordcount", cls, p, in, true)), tmp / ("out" + std::to_string(run)),
                tmp / ("err" + std::to_string(run)));
    ASSERT_TRUE(waitForNewer(job, "wordcount", restoredFrom + 1)) << readFile(tmp / ("err" + std::to_string(run)));
    job.signal(SIGKILL);
    Result r = job.wait();
    ASSERT_EQ(r.exitCode, 128 + SIGKILL) << "the job ended before it could be killed: " << r.err;
    if (run == 1) {
      EXPECT_NE(r.err.find("starting without state"), std::string::npos) << r.err;
    } else {
      EXPECT_NE(r.err.find("--restore latest: restoring " + (ckdir() / "wordcount" / ("chk-" + std::to_string(restoredFrom))).string()),
                std::string::npos)
          << r.err;
    }
    // RocksDB's working directory (state.local.dir/<job id>) of the killed run is still
    // there: the next run of the same id takes it over instead of failing on it.
    if (run == 2 && cls == "WordCountIncremental") {
      EXPECT_NE(r.err.find("reusing the working directory"), std::string::npos) << r.err;
    }
    out += r.out;
    restoredFrom = newest("wordcount");
    ASSERT_GT(restoredFrom, 0);
  }
  Result last = cli(resumeArgs("wordcount", cls, p, in, false));
  ASSERT_EQ(last.exitCode, 0) << last.err;
  EXPECT_NE(last.err.find("restoring " + (ckdir() / "wordcount" / ("chk-" + std::to_string(restoredFrom))).string()),
            std::string::npos)
      << last.err;
  out += last.out;
  EXPECT_EQ(finalCounts(out), expectedCounts(readFile(in)));
  // One directory for all three runs, named by the job id.
  ASSERT_EQ(jobDirs().size(), 1u);
  EXPECT_EQ(jobDirs()[0].filename(), "wordcount");
  // The ids went on across the runs: the newest checkpoint is above the restored one.
  EXPECT_GE(newest("wordcount"), restoredFrom);
}

INSTANTIATE_TEST_SUITE_P(Backends, StableJobBackends,
                         ::testing::Values(std::make_tuple(std::string("WordCount"), 2),
                                           std::make_tuple(std::string("WordCountIncremental"), 1)),
                         [](const auto& info) { return std::get<0>(info.param) + "P" + std::to_string(std::get<1>(info.param)); });

TEST_F(StableJob, ASecondInstanceWithTheSameJobIdIsRefusedAndTheFirstRunsOn) {
  fs::path in = input(2000);  // 19 s throttled: still running when killed, however loaded the machine
  Process first(jobhost(resumeArgs("one", "WordCount", 1, in, true)), tmp / "first.out", tmp / "first.err");
  ASSERT_TRUE(waitForNewer(first, "one", 0)) << readFile(tmp / "first.err");
  Result second = cli(resumeArgs("one", "WordCount", 1, in, true));
  EXPECT_EQ(second.exitCode, 2) << second.err;
  EXPECT_NE(second.err.find("is in use by job one (WordCount"), std::string::npos) << second.err;
  int before = newest("one");
  EXPECT_TRUE(waitForNewer(first, "one", before)) << "the first instance stopped checkpointing: "
                                                   << readFile(tmp / "first.err");
  first.signal(SIGKILL);
  first.wait();
}

TEST_F(StableJob, BadCombinationsAreOneClearErrorEachAndTouchNothing) {
  fs::path in = input(2000);  // 19 s throttled: still running when killed, however loaded the machine
  {
    Process job(jobhost(resumeArgs("j", "WordCount", 1, in, true)), tmp / "j.out", tmp / "j.err");
    ASSERT_TRUE(waitForNewer(job, "j", 0)) << readFile(tmp / "j.err");
    job.signal(SIGKILL);
    job.wait();
  }
  const auto before = listing(ckdir() / "j");
  std::vector<std::string> ck = ckFlags("100ms");
  auto with = [&](std::vector<std::string> a) {
    a.insert(a.begin() + 1, ck.begin(), ck.end());
    a.insert(a.end(), {kPlugin, "--input", in.string()});
    return cli(a);
  };
  struct Case {
    std::vector<std::string> args;
    int exitCode;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"run", "--restore", "latest", "-c", "WordCount"}, 2, "--restore latest needs --job-id NAME"},
      {{"run", "--job-id", "j", "--restore", "latest", "-s", (ckdir() / "j").string(), "-c", "WordCount"},
       2,
       "-s and --restore latest exclude each other"},
      {{"run", "--job-id", "j/../k", "-c", "WordCount"}, 2, "is not a usable job id"},
      {{"run", "--job-id", "j", "--max-checkpoint-age", "1h", "-c", "WordCount"},
       2,
       "--max-checkpoint-age applies only with --restore latest"},
      {{"run", "--job-id", "j", "--restore", "newest", "-c", "WordCount"}, 2, "--restore"},
      {{"run", "--job-id", "j", "-c", "WordCount"}, 2, "already holds checkpoints"},
      {{"run", "--job-id", "j", "--restore", "latest", "--max-checkpoint-age", "1ms", "-c", "WordCount"},
       3,
       "older than --max-checkpoint-age 1 ms"},
      // The restored checkpoint is preflighted like -s: a class whose operators are not
      // the snapshot's is refused before anything starts.
      {{"run", "--job-id", "j", "--restore", "latest", "-c", "WindowedWordCount"}, 3, "chk-"},
  };
  for (const auto& c : cases) {
    Result r = with(c.args);
    std::string shown;
    for (const auto& a : c.args) shown += a + " ";
    EXPECT_EQ(r.exitCode, c.exitCode) << shown << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << shown << "\n" << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
    EXPECT_EQ(listing(ckdir() / "j"), before) << shown << " changed the job directory";
  }
}

// A newest checkpoint that cannot be restored must not take the one before it with it:
// the retained checkpoints of a job directory are trimmed to num-retained only after a
// checkpoint of the new run has completed (before: when the run took the directory
// over, before it had read the newest).
TEST_F(StableJob, ARestoreThatFailsLeavesTheOlderCheckpointsOfTheJobAsTheyWere) {
  fs::path in = input(300);
  std::vector<std::string> keepTwo = resumeArgs("damaged", "WordCount", 1, in, true);
  keepTwo.insert(keepTwo.begin() + 1, {"-D", "state.checkpoints.num-retained=2"});
  Result first = cli(keepTwo);
  ASSERT_EQ(first.exitCode, 0) << first.err;
  auto chks = completed(ckdir() / "damaged");
  ASSERT_EQ(chks.size(), 2u) << first.err;
  // Damage the newest: every key-group file garbled, same size.
  int garbled = 0;
  for (const auto& e : fs::recursive_directory_iterator(chks.back()))
    if (e.is_regular_file() && e.path().extension() == ".kg") {
      std::string bytes(static_cast<size_t>(e.file_size()), '\x5a');
      std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << bytes;
      ++garbled;
    }
  ASSERT_GT(garbled, 0) << "no key-group file in " << chks.back();
  auto before = listing(ckdir() / "damaged");
  // num-retained 1 (the default) this time.
  Result r = cli(resumeArgs("damaged", "WordCount", 1, in, false));
  EXPECT_EQ(r.exitCode, 3) << r.err;
  EXPECT_NE(r.err.find("corrupt"), std::string::npos) << r.err;
  EXPECT_EQ(listing(ckdir() / "damaged"), before) << r.err;
  // The older one is there to restore from, and restores.
  Result older = cli({"run", "-s", chks.front().string(), "-c", "WordCount", kPlugin, "--input", in.string()});
  EXPECT_EQ(older.exitCode, 0) << older.err;
}

TEST_F(StableJob, AJobIdWithoutCheckpointsYetStartsEmptyAndADryRunSaysSo) {
  fs::path in = input(1);
  std::vector<std::string> dry = resumeArgs("fresh", "WordCount", 1, in, false);
  dry.insert(dry.begin() + 1, "--dry-run");
  Result d = cli(dry);
  EXPECT_EQ(d.exitCode, 0) << d.err;
  EXPECT_NE(d.out.find("job fresh has no checkpoint yet"), std::string::npos) << d.out << d.err;
  Result r = cli(resumeArgs("fresh", "WordCount", 1, in, false));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.err.find("starting without state"), std::string::npos) << r.err;
  EXPECT_EQ(finalCounts(r.out), expectedCounts(readFile(in)));
}

}  // namespace
}  // namespace e2e
