// Crash consistency in the spirit of RocksDB's crash tests: kill -9 the whole jobhost
// process tree at random moments — during alignment, uploads, `_metadata` publication,
// subsumption — many times, each run restoring from the previous run's job directory.
// After every kill the latest complete checkpoint passes the restore check (every file
// it references exists with its recorded size), and the final counts equal a
// failure-free run.
#include <random>

#include "cli_fixture.h"

using namespace e2e;

namespace {

class CrashLoop : public Cli {
 protected:
  void loop(const std::string& cls, int parallelism, int kills, std::vector<std::string> flags) {
    fs::path in = input(2000);
    auto expected = expectedCounts(readFile(in));
    std::mt19937 rng(12345);  // deterministic kill times
    std::string all;
    fs::path previous;
    for (int i = 0; i <= kills; ++i) {
      bool last = i == kills;
      std::vector<std::string> args = {"run", "-c", cls, "-p", std::to_string(parallelism)};
      if (!previous.empty()) args.insert(args.end(), {"-s", previous.string()});
      for (auto& f : ckFlags("40ms")) args.push_back(f);
      args.insert(args.end(), {"-D", "state.checkpoints.num-retained=2"});
      for (auto& f : flags) args.insert(args.end(), {"-D", f});
      args.insert(args.end(), {kPlugin, "--input", in.string()});
      if (!last) args.insert(args.end(), {"--rate", "3000"});
      auto before = jobDirs();
      fs::path out = tmp / ("loop-" + std::to_string(i) + ".out"), err = tmp / ("loop-" + std::to_string(i) + ".err");
      Process p(jobhost(args), out, err);
      if (last) {
        Result r = p.wait();
        ASSERT_EQ(r.exitCode, 0) << r.err;
        all += r.out;
        break;
      }
      // Wait for this run's first checkpoint, then kill at a random moment after it.
      fs::path mine;
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (mine.empty() && std::chrono::steady_clock::now() < until && p.running()) {
        for (const auto& d : jobDirs())
          if (std::find(before.begin(), before.end(), d) == before.end() && !completed(d).empty()) mine = d;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      ASSERT_FALSE(mine.empty()) << "run " << i << " wrote no checkpoint: " << readFile(err);
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 250)(rng)));
      p.killTree();
      Result r = p.wait();
      all += r.out;
      // Invariant: the newest complete checkpoint is intact.
      Result check = cli({"check", "-s", mine.string(), "-c", cls, "-p", std::to_string(parallelism), kPlugin,
                          "--input", in.string()});
      ASSERT_EQ(check.exitCode, 0) << "after kill " << i << ": " << check.err;
      previous = mine;
    }
    EXPECT_EQ(finalCounts(all), expected);
    // What the kills left behind is cleaned by gc without touching the complete checkpoints.
    for (const auto& d : jobDirs()) {
      auto before = completed(d);
      Result gc = cli({"gc", d.string()});
      EXPECT_EQ(gc.exitCode, 0) << gc.err;
      EXPECT_EQ(completed(d), before);
      Result again = cli({"gc", d.string()});
      EXPECT_NE(again.out.find("nothing to remove"), std::string::npos) << again.out;
    }
  }
};

TEST_F(CrashLoop, HashmapSurvivesRepeatedKillNine) { loop("WordCount", 2, 8, {}); }

TEST_F(CrashLoop, RocksDbIncrementalSurvivesRepeatedKillNine) { loop("WordCountIncremental", 2, 8, {}); }

TEST_F(CrashLoop, RocksDbFullSurvivesRepeatedKillNine) {
  loop("WordCountIncremental", 1, 5, {"state.backend.incremental=false"});
}

}  // namespace
