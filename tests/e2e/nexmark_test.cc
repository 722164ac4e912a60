// End-to-end tests of the Nexmark example classes (issue 14, item 8): each query through
// the real binary, at p=1 and p=2, on both backends, against results computed here by
// straightforward loops over the same generated events (nexmark.h's generator; none of
// the job's code). Also: a job killed mid-run and restored prints every result with its
// value, and a restore with other generator arguments is refused.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "cli_fixture.h"
#include "nexmark.h"

using namespace e2e;

namespace {

constexpr int64_t kWindow = 10'000;
constexpr int64_t kSlide = 2'000;

std::string row(std::initializer_list<std::string> fields) {
  std::string s = "(";
  for (const auto& f : fields) s += (s.size() > 1 ? "," : "") + f;
  return s + ")";
}
std::string str(int64_t v) { return std::to_string(v); }

std::vector<nexmark::Event> generate(uint64_t events, uint64_t seed, int64_t rate) {
  nexmark::GeneratorConfig c;
  c.maxEvents = events;
  c.seed = seed;
  c.firstEventRate = static_cast<double>(rate);
  nexmark::Generator g(c);
  std::vector<nexmark::Event> out(events);
  for (auto& e : out) g.next(e);
  return out;
}

/// Q5: per sliding window (10 s every 2 s) the auctions with the most bids.
std::vector<std::string> expectedQ5(const std::vector<nexmark::Event>& events) {
  std::map<int64_t, std::map<int64_t, int64_t>> bidsByEnd;  // window end -> auction -> bids
  for (const auto& e : events) {
    if (e.type != nexmark::EventType::kBid) continue;
    const int64_t ts = e.bid.dateTime;
    for (int64_t start = ts - ((ts % kSlide) + kSlide) % kSlide; start > ts - kWindow; start -= kSlide)
      ++bidsByEnd[start + kWindow][e.bid.auction];
  }
  std::vector<std::string> out;
  for (const auto& [end, counts] : bidsByEnd) {
    int64_t most = 0;
    for (const auto& [auction, n] : counts) most = std::max(most, n);
    for (const auto& [auction, n] : counts)
      if (n == most) out.push_back(row({str(end), str(auction), str(n)}));
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Q7: per tumbling 10 s window the bids with the highest price.
std::vector<std::string> expectedQ7(const std::vector<nexmark::Event>& events) {
  std::map<int64_t, std::vector<const nexmark::Bid*>> best;  // window end -> bids at the top price
  for (const auto& e : events) {
    if (e.type != nexmark::EventType::kBid) continue;
    auto& top = best[e.bid.dateTime - e.bid.dateTime % kWindow + kWindow];
    if (top.empty() || e.bid.price > top.front()->price) top.assign(1, &e.bid);
    else if (e.bid.price == top.front()->price) top.push_back(&e.bid);
  }
  std::vector<std::string> out;
  for (const auto& [end, bids] : best)
    for (const auto* b : bids) out.push_back(row({str(end), str(b->auction), str(b->price), str(b->bidder), str(b->dateTime)}));
  std::sort(out.begin(), out.end());
  return out;
}

/// Q8: persons who sold something in the tumbling 10 s window they registered in.
std::vector<std::string> expectedQ8(const std::vector<nexmark::Event>& events) {
  std::set<std::pair<int64_t, int64_t>> sold;  // (window start, seller)
  for (const auto& e : events)
    if (e.type == nexmark::EventType::kAuction) sold.insert({e.auction.dateTime - e.auction.dateTime % kWindow, e.auction.seller});
  std::vector<std::string> out;
  for (const auto& e : events) {
    if (e.type != nexmark::EventType::kPerson) continue;
    const int64_t start = e.person.dateTime - e.person.dateTime % kWindow;
    if (sold.count({start, e.person.id})) out.push_back(row({str(e.person.id), e.person.name, str(start)}));
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// The printed lines without their "N> " prefix, sorted.
std::vector<std::string> resultLines(const std::string& output) {
  std::vector<std::string> out;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    size_t open = line.find('(');
    if (open == std::string::npos) continue;
    out.push_back(line.substr(open));
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct QueryCase {
  std::string cls;
  std::function<std::vector<std::string>(const std::vector<nexmark::Event>&)> expected;
};
const std::vector<QueryCase> kQueries = {
    {"NexmarkQ5", expectedQ5}, {"NexmarkQ7", expectedQ7}, {"NexmarkQ8", expectedQ8}};

class Nexmark : public Cli {};

// 60 000 events at 2 000 events/s of event time: 30 s, three tumbling windows with bids and
// nineteen sliding ones.
TEST_F(Nexmark, EveryQueryOnEveryBackendAtParallelismOneAndTwoPrintsTheIndependentlyComputedResults) {
  const uint64_t events = 60'000;
  const int64_t rate = 2'000;
  const auto input = generate(events, 7, rate);
  for (const auto& q : kQueries) {
    const auto expected = q.expected(input);
    ASSERT_FALSE(expected.empty()) << q.cls;
    for (const char* backend : {"hashmap", "rocksdb"}) {
      for (int p : {1, 2}) {
        SCOPED_TRACE(q.cls + " on " + backend + " at p=" + std::to_string(p));
        std::vector<std::string> args = {"run", "-c", q.cls, "-p", std::to_string(p), "-D",
                                         std::string("state.backend.type=") + backend};
        for (auto& f : ckFlags()) args.push_back(f);
        args.insert(args.end(), {kPlugin, "--events", str(events), "--seed", "7", "--rate", str(rate)});
        Result r = cli(args);
        ASSERT_EQ(r.exitCode, 0) << r.err;
        EXPECT_EQ(resultLines(r.out), expected);
        if (p == 2) {
          EXPECT_NE(r.out.find("> ("), std::string::npos) << "p=2 prefixes every line with its subtask";
        }
      }
    }
  }
}

/// A positive integer from the environment, else `fallback`.
uint64_t envCount(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::stoull(v) : fallback;
}

/// Keeps one core busy while it lives: a job under a CPU hog, as on a loaded machine.
class CpuHog {
 public:
  CpuHog() : thread_([this] {
      volatile uint64_t x = 0;
      while (!stop_.load(std::memory_order_relaxed)) x = x * 6364136223846793005ULL + 1;
    }) {}
  ~CpuHog() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Issue 35: NexmarkQ5 on RocksDB printed a window twice in about 1 of 25 runs: a
// checkpoint triggered during the source's last poll was declined, counted as a failed
// checkpoint, failed the attempt (tolerable-failed-checkpoints = 0) and the restart
// replayed lines into the at-least-once print sink. Every query on both backends, p=1
// and p=2, with and without a CPU hog, a checkpoint every 20 ms (so one is often in
// flight when the input ends): the same lines as the loops each time, and no restart.
// JOBHOST_NEXMARK_REPS=N repeats the whole set, JOBHOST_NEXMARK_EVENTS, _RATE and
// _INTERVAL_MS change its size (tests/chaos/nexmark_determinism.sh).
TEST_F(Nexmark, RepeatedRunsUnderLoadWithCheckpointsRacingTheEndOfInputAlwaysPrintTheLoopsResults) {
  const uint64_t reps = envCount("JOBHOST_NEXMARK_REPS", 1);
  const uint64_t events = envCount("JOBHOST_NEXMARK_EVENTS", 40'000);
  const auto rate = static_cast<int64_t>(envCount("JOBHOST_NEXMARK_RATE", 4'000));
  const std::string interval = std::to_string(envCount("JOBHOST_NEXMARK_INTERVAL_MS", 20)) + "ms";
  const auto input = generate(events, 13, rate);
  std::map<std::string, std::vector<std::string>> expected;
  for (const auto& q : kQueries) expected[q.cls] = q.expected(input);
  int runs = 0, failed = 0;
  for (uint64_t rep = 0; rep < reps; ++rep) {
    for (const auto& q : kQueries) {
      for (const char* backend : {"hashmap", "rocksdb"}) {
        const int p = (runs % 2) + 1;
        const bool hog = (runs / 2) % 2 == 1;
        ++runs;
        SCOPED_TRACE(q.cls + " on " + backend + " at p=" + std::to_string(p) + (hog ? " under a CPU hog" : "") +
                     ", repetition " + std::to_string(rep + 1));
        std::optional<CpuHog> busy;
        if (hog) busy.emplace();
        TempDir dir;
        Result r = cli({"run", "-c", q.cls, "-p", std::to_string(p), "-D", std::string("state.backend.type=") + backend,
                        "-D", "state.checkpoints.dir=" + (dir / "ck").string(), "-D",
                        "execution.checkpointing.interval=" + interval, kPlugin, "--events", str(events), "--seed", "13",
                        "--rate", str(rate)});
        EXPECT_EQ(r.exitCode, 0) << r.err;
        EXPECT_EQ(r.err.find("restarting"), std::string::npos) << "the job restarted:\n" << r.err;
        const bool same = resultLines(r.out) == expected[q.cls];
        EXPECT_TRUE(same) << "the printed results differ from the loop's";
        if (!same || r.exitCode != 0) ++failed;
      }
    }
  }
  std::printf("[ nexmark  ] %d runs, %d differed from the loops\n", runs, failed);
}

TEST_F(Nexmark, TheSameSeedGivesTheSameResultsAndAnotherSeedOthers) {
  auto runQ7 = [&](const char* seed) {
    Result r = cli({"run", "-c", "NexmarkQ7", kPlugin, "--events", "30000", "--seed", seed, "--rate", "1000"});
    EXPECT_EQ(r.exitCode, 0) << r.err;
    return resultLines(r.out);
  };
  auto a = runQ7("3"), b = runQ7("3"), c = runQ7("4");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a, expectedQ7(generate(30'000, 3, 1'000)));
}

// Throttled to 20 000 events/s of wall time: the run lasts about 5 s and is killed after
// its second checkpoint, mid-window. The restored run continues from the checkpointed
// source position, window contents and timers: every expected result appears with its
// value, and nothing else (the print sink may repeat lines printed after the checkpoint).
TEST_F(Nexmark, AKilledQueryRestoredFromItsCheckpointPrintsEveryResultWithItsValue) {
  const uint64_t events = 100'000;
  for (const auto& [q, backend, p] : {std::tuple{kQueries[0], "hashmap", 2}, std::tuple{kQueries[2], "rocksdb", 2}}) {
    SCOPED_TRACE(q.cls + " on " + backend);
    TempDir dir;
    const std::string ck = (dir / "ck").string();
    std::vector<std::string> common = {"-c", q.cls, "-p", std::to_string(p), "-D",
                                       std::string("state.backend.type=") + backend, "-D",
                                       "state.checkpoints.dir=" + ck, "-D", "execution.checkpointing.interval=200ms"};
    std::vector<std::string> gen = {kPlugin, "--events", str(events), "--seed", "11", "--rate", "20000"};
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), common.begin(), common.end());
    args.insert(args.end(), gen.begin(), gen.end());
    args.push_back("--throttle");
    std::string out1;
    {
      Process proc(jobhost(args), dir / "out1.txt", dir / "err1.txt");
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      auto checkpoints = [&] {
        int n = 0;
        if (!fs::exists(ck)) return 0;
        for (const auto& job : fs::directory_iterator(ck))
          for (const auto& e : fs::directory_iterator(job.path()))
            if (e.path().filename().string().rfind("chk-", 0) == 0 && fs::exists(e.path() / "_metadata"))
              n = std::max(n, std::stoi(e.path().filename().string().substr(4)));
        return n;
      };
      while (checkpoints() < 2 && proc.running() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      proc.signal(SIGKILL);
      Result r = proc.wait();
      ASSERT_EQ(r.exitCode, 128 + SIGKILL) << "the job ended before it could be killed: " << r.err;
      out1 = r.out;
    }
    std::vector<fs::path> jobs;
    for (const auto& e : fs::directory_iterator(ck)) jobs.push_back(e.path());
    ASSERT_EQ(jobs.size(), 1u);
    std::vector<std::string> restore = {"run", "-s", jobs[0].string()};
    restore.insert(restore.end(), common.begin(), common.end());
    restore.insert(restore.end(), gen.begin(), gen.end());
    Result r2 = cli(restore);
    ASSERT_EQ(r2.exitCode, 0) << r2.err;
    EXPECT_NE(r2.err.find("using the latest complete checkpoint"), std::string::npos) << r2.err;
    auto all = resultLines(out1 + r2.out);
    std::vector<std::string> distinct = all;
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    EXPECT_EQ(distinct, q.expected(generate(events, 11, 20'000)));
  }
}

// A bounded query with the exactly-once file sink ends with a final checkpoint, after the
// end of its input and the maximum watermark; a restore from it must commit nothing more.
// Its barrier used to be taken between the timers the maximum watermark fires (as a
// checkpoint's may be): the snapshot kept the timers not fired yet, their results were
// committed at the end of the job, and a restore fired and committed them again — nearly
// every Q8 result twice. Unaligned checkpoints are on: the final one must be aligned too.
TEST_F(Nexmark, AFinishedQueryRestoredFromItsFinalCheckpointCommitsNothingTwice) {
  for (const std::string backend : {"hashmap", "rocksdb"}) {
    SCOPED_TRACE(backend);
    TempDir dir;
    const fs::path out = dir / "out";
    std::vector<std::string> args = {"run", "-c", "NexmarkQ8", "-p", "2", "-D", "state.backend.type=" + backend, "-D",
                                     "state.checkpoints.dir=" + (dir / "ck").string(), "-D",
                                     "execution.checkpointing.interval=200ms", "-D",
                                     "execution.checkpointing.unaligned=true", kPlugin, "--events", "300000", "--seed",
                                     "5", "--output", out.string()};
    auto committed = [&] {
      std::string all;
      for (const auto& e : fs::recursive_directory_iterator(out))
        if (e.path().filename().string().rfind("part-", 0) == 0) all += readFile(e.path());
      return resultLines(all);
    };
    Result r1 = cli(args);
    ASSERT_EQ(r1.exitCode, 0) << r1.err;
    const auto first = committed();
    EXPECT_EQ(first, expectedQ8(generate(300'000, 5, 10'000)));
    std::vector<fs::path> jobs;
    for (const auto& e : fs::directory_iterator(dir / "ck")) jobs.push_back(e.path());
    ASSERT_EQ(jobs.size(), 1u);
    args.insert(args.begin() + 1, {"-s", jobs[0].string()});
    Result r2 = cli(args);
    ASSERT_EQ(r2.exitCode, 0) << r2.err;
    EXPECT_EQ(committed(), first) << "the restored run committed results again";
  }
}

TEST_F(Nexmark, ARestoreWithAnotherSeedIsRefusedNamingBothGeneratorArguments) {
  fs::path chk;
  {
    std::vector<std::string> args = {"run", "-c", "NexmarkQ7"};
    for (auto& f : ckFlags("100ms")) args.push_back(f);
    args.insert(args.end(), {kPlugin, "--events", "0", "--seed", "5", "--rate", "10000", "--throttle"});
    Process p(jobhost(args), tmp / "seed.out", tmp / "seed.err");
    ASSERT_TRUE(waitForCheckpoint(p, 1)) << readFile(tmp / "seed.err");
    p.signal(SIGTERM);
    Result r = p.wait();
    EXPECT_EQ(r.exitCode, 130) << r.err;
    ASSERT_EQ(jobDirs().size(), 1u);
    chk = completed(jobDirs()[0]).back();
  }
  Result r = cli({"run", "-s", chk.string(), "-c", "NexmarkQ7", "-D", "restart-strategy.type=none", kPlugin,
                  "--events", "0", "--seed", "6", "--rate", "10000"});
  EXPECT_NE(r.exitCode, 0) << r.err;
  EXPECT_NE(r.err.find("generated with --seed 5 --rate 10000"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("this run has --seed 6 --rate 10000"), std::string::npos) << r.err;
}

}  // namespace
