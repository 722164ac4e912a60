// End-to-end tests of event time (issue 14) through the real binary and the example
// plugin's WindowedWordCount and OrderPaymentJoin: results on shuffled input against a
// reference computed here, late lines, kill -9 and restore, rescaling and the other
// backend from a savepoint with pending windows and timers, stop with and without
// --drain, what inspect and the restore check say about window state.
#include <random>
#include <regex>
#include <set>

#include "cli_fixture.h"

using namespace e2e;

namespace {

struct Line {
  int64_t ts;
  std::vector<std::string> words;
};

/// `n` lines "<ts> <word> [<word>]", timestamps `step` apart shuffled by up to `jitter`.
std::vector<Line> makeLines(int n, int64_t step, int64_t jitter, uint32_t seed, int vocabulary = 23) {
  std::mt19937 rng(seed);
  std::vector<Line> out;
  for (int i = 0; i < n; ++i) {
    Line l;
    l.ts = 1'700'000'000'000 + i * step + (jitter ? static_cast<int64_t>(rng() % (2 * jitter + 1)) - jitter : 0);
    int words = 1 + static_cast<int>(rng() % 2);
    for (int w = 0; w < words; ++w) l.words.push_back("w" + std::to_string(rng() % static_cast<uint32_t>(vocabulary)));
    out.push_back(l);
  }
  return out;
}

std::string textOf(const std::vector<Line>& lines) {
  std::string s;
  for (const auto& l : lines) {
    s += std::to_string(l.ts);
    for (const auto& w : l.words) s += " " + w;
    s += "\n";
  }
  return s;
}

/// "(<window end>,<word>,<count>)" per 10 s window and word.
std::multiset<std::string> referenceCounts(const std::vector<Line>& lines, int64_t window = 10000) {
  std::map<std::pair<int64_t, std::string>, int64_t> c;
  for (const auto& l : lines)
    for (const auto& w : l.words) ++c[{l.ts - l.ts % window + window, w}];
  std::multiset<std::string> out;
  for (const auto& [k, n] : c) out.insert("(" + std::to_string(k.first) + "," + k.second + "," + std::to_string(n) + ")");
  return out;
}

struct Output {
  std::multiset<std::string> windows;  // "(end,word,count)" without the subtask prefix
  std::multiset<std::string> late;     // the original lines
};

Output parse(const std::string& out) {
  Output o;
  static const std::regex prefix("^[0-9]+> ");
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("late> ", 0) == 0) {
      o.late.insert(line.substr(6));
      continue;
    }
    o.windows.insert(std::regex_replace(line, prefix, ""));
  }
  return o;
}

std::set<std::string> distinct(const std::multiset<std::string>& s) { return {s.begin(), s.end()}; }

class EventTime : public Cli {
 protected:
  fs::path writeLines(const std::string& name, const std::vector<Line>& lines) {
    fs::path p = tmp / name;
    writeFile(p, textOf(lines));
    return p;
  }
  std::vector<std::string> runArgs(const std::string& cls, int p, const std::string& backend,
                                   std::vector<std::string> jobArgs, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"run", "-c", cls, "-p", std::to_string(p), "-D", "state.backend.type=" + backend};
    for (auto& f : ckFlags()) a.push_back(f);
    a.insert(a.end(), extra.begin(), extra.end());
    a.push_back(kPlugin);
    a.insert(a.end(), jobArgs.begin(), jobArgs.end());
    return a;
  }
  /// The id of the one job started in this test (its checkpoint directory's name).
  std::string jobId() {
    auto dirs = jobDirs();
    return dirs.size() == 1 ? dirs.front().filename().string() : "";
  }
  /// Waits until `p` has printed at least `lines` lines to `out`.
  bool waitForOutput(Process& p, const fs::path& out, size_t lines) {
    for (int i = 0; i < 3000 && p.running(); ++i) {
      std::string s = readFile(out);
      if (static_cast<size_t>(std::count(s.begin(), s.end(), '\n')) >= lines) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
};

struct Case {
  const char* backend;
  int parallelism;
};
class EventTimeCases : public EventTime, public ::testing::WithParamInterface<Case> {};
std::string caseName(const ::testing::TestParamInfo<Case>& p) {
  return std::string(p.param.backend) + "_p" + std::to_string(p.param.parallelism);
}

TEST_P(EventTimeCases, WindowedWordCountOnShuffledInputEqualsAReference) {
  auto lines = makeLines(6000, 37, 1500, 1);  // jitter 1.5 s < the default out-of-orderness of 2 s
  fs::path in = writeLines("in.txt", lines);
  Result r = cli(runArgs("WindowedWordCount", GetParam().parallelism, GetParam().backend, {"--input", in.string()}));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Output o = parse(r.out);
  EXPECT_EQ(o.windows, referenceCounts(lines));
  EXPECT_TRUE(o.late.empty()) << *o.late.begin();
  if (GetParam().parallelism > 1) {
    EXPECT_NE(r.out.find("2> ("), std::string::npos) << "results from both subtasks";
  }
}

TEST_P(EventTimeCases, KillNineMidWindowAndRestoreGivesEveryWindowWithItsValue) {
  auto lines = makeLines(16000, 9, 700, 2);
  fs::path in = writeLines("in.txt", lines);
  std::string out1;
  {
    Process p(jobhost(runArgs("WindowedWordCount", GetParam().parallelism, GetParam().backend,
                              {"--input", in.string(), "--rate", "3000"})),
              tmp / "o1", tmp / "e1");
    ASSERT_TRUE(waitForCheckpoint(p, 3)) << readFile(tmp / "e1");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::random_device()() % 300));
    p.signal(SIGKILL);
    Result r = p.wait();
    ASSERT_EQ(r.exitCode, 128 + SIGKILL) << "the job ended before it could be killed: " << r.err;
    out1 = r.out;
  }
  std::vector<std::string> restore = runArgs("WindowedWordCount", GetParam().parallelism, GetParam().backend,
                                             {"--input", in.string()});
  restore.insert(restore.begin() + 1, {"-s", jobDirs().at(0).string()});
  Result r2 = cli(restore);
  ASSERT_EQ(r2.exitCode, 0) << r2.err;
  Output a = parse(out1), b = parse(r2.out);
  std::multiset<std::string> all = a.windows;
  all.insert(b.windows.begin(), b.windows.end());
  auto expected = referenceCounts(lines);
  // Every window with its value; a window that fired after the last checkpoint is printed
  // again by the restored run (the print sink is at-least-once), never with another value.
  EXPECT_EQ(distinct(all), distinct(expected));
  EXPECT_FALSE(a.windows.empty()) << "nothing fired before the kill: the test did not test a restore mid-stream";
  EXPECT_TRUE(a.late.empty() && b.late.empty()) << "a replayed line was judged late";
}

INSTANTIATE_TEST_SUITE_P(Backends, EventTimeCases,
                         ::testing::Values(Case{"hashmap", 1}, Case{"hashmap", 2}, Case{"rocksdb", 1},
                                           Case{"rocksdb", 2}),
                         caseName);

TEST_F(EventTime, ALineTooLateForItsWindowIsPrintedAsLateAndNotCounted) {
  std::vector<Line> lines;
  for (int i = 0; i < 10; ++i) lines.push_back({1'700'000'001'000 + i * 100, {"a"}});
  lines.push_back({1'700'000'025'000, {"b"}});  // the watermark passes the first window's end
  for (int i = 0; i < 8; ++i) lines.push_back({1'700'000'025'000, {"pad"}});
  lines.push_back({1'700'000'003'000, {"late", "a"}});
  fs::path in = writeLines("in.txt", lines);
  Result r = cli(runArgs("WindowedWordCount", 2, "hashmap", {"--input", in.string(), "--rate", "40"},
                         {"-D", "pipeline.auto-watermark-interval=20ms"}));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Output o = parse(r.out);
  EXPECT_EQ(o.late, (std::multiset<std::string>{"1700000003000 late a"}));
  EXPECT_EQ(o.windows, (std::multiset<std::string>{"(1700000010000,a,10)", "(1700000030000,b,1)",
                                                    "(1700000030000,pad,8)"}));
}

TEST_F(EventTime, StopWithoutDrainAdvancesNoWatermarkAndTheRestoredJobFiresTheRestOnce) {
  // One line per 10 s window: a window fires when the next-but-one line's watermark passes
  // it. Stopped with a savepoint, the job leaves its last windows pending; restored at
  // another parallelism and on the other backend, it emits exactly the windows not
  // emitted before: each window once.
  std::vector<Line> lines;
  for (int i = 0; i < 300; ++i) lines.push_back({1'700'000'000'000 + i * 10000 + 5000, {"w"}});
  fs::path in = writeLines("in.txt", lines);
  fs::path out1 = tmp / "o1";
  Process p(jobhost(runArgs("WindowedWordCount", 2, "rocksdb", {"--input", in.string(), "--rate", "40"})), out1,
            tmp / "e1");
  ASSERT_TRUE(waitForOutput(p, out1, 5)) << readFile(tmp / "e1");
  Result st = cli({"stop", "--savepoint-path", (tmp / "sp").string(), jobId()});
  ASSERT_EQ(st.exitCode, 0) << st.out << st.err;
  EXPECT_NE(st.out.find("Suspending job"), std::string::npos) << st.out;
  Result e = p.wait(std::chrono::seconds(60));
  std::string sp = st.out.substr(st.out.find("Path: ") + 6);
  sp = sp.substr(0, sp.find('\n'));
  std::vector<std::string> restore = runArgs("WindowedWordCount", 3, "hashmap", {"--input", in.string()});
  restore.insert(restore.begin() + 1, {"-s", sp});
  Result r2 = cli(restore);
  ASSERT_EQ(r2.exitCode, 0) << r2.err;
  Output a = parse(e.out), b = parse(r2.out);
  std::multiset<std::string> all = a.windows;
  all.insert(b.windows.begin(), b.windows.end());
  EXPECT_EQ(all, referenceCounts(lines)) << "stopped after " << a.windows.size() << " windows";
  EXPECT_TRUE(a.late.empty() && b.late.empty());
}

TEST_F(EventTime, StopWithDrainFiresEveryWindowOfTheLinesReadSoFar) {
  // As above, with --drain: the windows of every line read before the stop fire before the
  // savepoint. The maximum watermark of the drain is not in the watermark generator's
  // state, so a job restored from it goes on from the watermark before the drain: the
  // rest of the lines fire their own windows, and together they are every window once.
  std::vector<Line> lines;
  for (int i = 0; i < 300; ++i) lines.push_back({1'700'000'000'000 + i * 10000 + 5000, {"w"}});
  fs::path in = writeLines("in.txt", lines);
  fs::path out1 = tmp / "o1";
  Process p(jobhost(runArgs("WindowedWordCount", 2, "hashmap", {"--input", in.string(), "--rate", "40"})), out1,
            tmp / "e1");
  ASSERT_TRUE(waitForOutput(p, out1, 5)) << readFile(tmp / "e1");
  Result st = cli({"stop", "--drain", "--savepoint-path", (tmp / "sp").string(), jobId()});
  ASSERT_EQ(st.exitCode, 0) << st.out << st.err;
  EXPECT_NE(st.out.find("Draining job"), std::string::npos) << st.out;
  Result e = p.wait(std::chrono::seconds(60));
  std::string sp = st.out.substr(st.out.find("Path: ") + 6);
  sp = sp.substr(0, sp.find('\n'));
  Output a = parse(e.out);
  // The drained windows are the first N, one per line read, with none held back.
  const size_t n = a.windows.size();
  ASSERT_GT(n, 5u);
  std::multiset<std::string> firstN;
  for (size_t i = 0; i < n; ++i) firstN.insert("(" + std::to_string(lines[i].ts - 5000 + 10000) + ",w,1)");
  EXPECT_EQ(a.windows, firstN);
  std::vector<std::string> restore = runArgs("WindowedWordCount", 2, "hashmap", {"--input", in.string()});
  restore.insert(restore.begin() + 1, {"-s", sp});
  Result r2 = cli(restore);
  ASSERT_EQ(r2.exitCode, 0) << r2.err;
  Output b = parse(r2.out);
  EXPECT_TRUE(b.late.empty()) << "a job restored from a drained savepoint is not at the end of time: "
                              << *b.late.begin();
  std::multiset<std::string> all = a.windows;
  all.insert(b.windows.begin(), b.windows.end());
  EXPECT_EQ(all, referenceCounts(lines));
}

TEST_F(EventTime, InspectListsWindowStateAndTimersAndTheCheckNamesAChangedWindowAssigner) {
  auto lines = makeLines(30000, 3, 100, 3);
  fs::path in = writeLines("in.txt", lines);
  Process p(jobhost(runArgs("WindowedWordCount", 2, "rocksdb", {"--input", in.string(), "--rate", "3000"})),
            tmp / "o", tmp / "e");
  ASSERT_TRUE(waitForCheckpoint(p, 2)) << readFile(tmp / "e");
  p.signal(SIGTERM);
  p.wait(std::chrono::seconds(60));
  fs::path chk = completed(jobDirs().at(0)).back();
  Result i = cli({"inspect", chk.string()});
  ASSERT_EQ(i.exitCode, 0) << i.err;
  for (const char* s : {"state window-contents: MapState, key string v1, map key "
                        "TimeWindow<TumblingEventTimeWindows(size=10000ms offset=0ms)> v1, value i64 v1",
                        "state _timer_state/event_user-timers: MapState, key string v1, map key "
                        "Timer<TimeWindow<TumblingEventTimeWindows(size=10000ms offset=0ms)>> v1, value Void v1",
                        "Operator 'lines-timestamps' (Timestamps/Watermarks)"})
    EXPECT_NE(i.out.find(s), std::string::npos) << s << "\n" << i.out;
  auto before = treeChecksums(chk.parent_path());
  Result same = cli({"check", "-s", chk.string(), "-c", "WindowedWordCount", kPlugin, "--input", in.string()});
  EXPECT_EQ(same.exitCode, 0) << same.out << same.err;
  Result changed =
      cli({"check", "-s", chk.string(), "-c", "WindowedWordCount", kPlugin, "--input", in.string(), "--window", "5s"});
  EXPECT_EQ(changed.exitCode, 3) << changed.out << changed.err;
  EXPECT_NE(changed.err.find("operator 'window-counts': its windows were written by TumblingEventTimeWindows(size=10000ms "
                             "offset=0ms), WindowedWordCount now assigns TumblingEventTimeWindows(size=5000ms offset=0ms)"),
            std::string::npos)
      << changed.err;
  EXPECT_NE(changed.err.find("1 problem"), std::string::npos) << "one error for the operator, not one per state\n"
                                                               << changed.err;
  Result run = cli({"run", "-s", chk.string(), "-c", "WindowedWordCount", kPlugin, "--input", in.string(), "--window",
                    "5s"});
  EXPECT_EQ(run.exitCode, 3) << run.err;
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(treeChecksums(chk.parent_path()), before) << "a refused restore changes nothing";
  // The timers and windows decode with the job's serializers.
  Result dump = cli({"state", "dump", chk.string(), "--operator", "window-counts", "--state",
                     "_timer_state/event_user-timers", "--limit", "1", "--plugin", kPlugin, "-c", "WindowedWordCount",
                     "--", "--input", in.string()});
  ASSERT_EQ(dump.exitCode, 0) << dump.err;
  EXPECT_TRUE(std::regex_search(dump.out, std::regex("@[0-9]+9999 TimeWindow\\{start=[0-9]+0000, end=[0-9]+0000\\}")))
      << dump.out;
}

/// Orders and payments, and the reference join: a payment 0 to 5 s after its order.
struct Orders {
  std::string orders, payments;
  std::multiset<std::string> expected;
};
Orders makeOrders(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  struct Ev {
    int64_t ts;
    std::string line;
  };
  std::vector<Ev> os, ps;
  Orders o;
  for (int i = 0; i < n; ++i) {
    int64_t t = 1'700'000'000'000 + i * 50 + static_cast<int64_t>(rng() % 400);
    std::string id = "o" + std::to_string(i % (n / 3 + 1));  // ids repeat: several orders per id
    std::string amount = std::to_string(rng() % 1000) + "." + std::to_string(rng() % 100);
    os.push_back({t, std::to_string(t) + " " + id + " " + amount});
    int payments = static_cast<int>(rng() % 3);
    for (int k = 0; k < payments; ++k) {
      int64_t pt = t + static_cast<int64_t>(rng() % 7000) - 1000;  // some before, some after 5 s
      std::string method = rng() % 2 ? "card" : "cash";
      ps.push_back({pt, std::to_string(pt) + " " + id + " " + method});
    }
  }
  auto sorted = [](std::vector<Ev> v) {
    std::stable_sort(v.begin(), v.end(), [](const Ev& a, const Ev& b) { return a.ts < b.ts; });
    std::string s;
    for (const auto& e : v) s += e.line + "\n";
    return s;
  };
  // Reference: every (order, payment) of one id with 0 <= payment - order <= 5000.
  auto fields = [](const std::string& l) {
    std::istringstream in(l);
    std::string a, b, c;
    in >> a >> b >> c;
    return std::make_tuple(std::stoll(a), b, c);
  };
  for (const auto& oe : os)
    for (const auto& pe : ps) {
      auto [ot, oid, amount] = fields(oe.line);
      auto [pt, pid, method] = fields(pe.line);
      if (oid == pid && pt - ot >= 0 && pt - ot <= 5000) o.expected.insert("(" + oid + "," + amount + "," + method + ")");
    }
  o.orders = sorted(os);
  o.payments = sorted(ps);
  return o;
}

TEST_P(EventTimeCases, OrderPaymentJoinEqualsAnIndependentlyComputedIntervalJoin) {
  Orders o = makeOrders(1500, 4);
  writeFile(tmp / "orders.txt", o.orders);
  writeFile(tmp / "payments.txt", o.payments);
  Result r = cli(runArgs("OrderPaymentJoin", GetParam().parallelism, GetParam().backend,
                         {"--orders", (tmp / "orders.txt").string(), "--payments", (tmp / "payments.txt").string()}));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  ASSERT_GT(o.expected.size(), 100u);
  EXPECT_EQ(parse(r.out).windows, o.expected);
}

TEST_F(EventTime, EachCheckpointRecordsTheBarrierAlignmentOfItsTwoInputTasks) {
  // OrderPaymentJoin at p=2: each join subtask has two input channels (one per input, from
  // the two sources), so it aligns every barrier.
  Orders o = makeOrders(3000, 5);
  writeFile(tmp / "orders.txt", o.orders);
  writeFile(tmp / "payments.txt", o.payments);
  Process p(jobhost(runArgs("OrderPaymentJoin", 2, "hashmap",
                            {"--orders", (tmp / "orders.txt").string(), "--payments", (tmp / "payments.txt").string(),
                             "--rate", "500"},
                            {"-D", "state.checkpoints.num-retained=50", "-D", "execution.checkpointing.interval=100ms"})),
            tmp / "o", tmp / "e");
  ASSERT_TRUE(waitForCheckpoint(p, 5)) << readFile(tmp / "e");
  p.signal(SIGTERM);
  p.wait(std::chrono::seconds(60));
  Result h = cli({"checkpoints", jobDirs().at(0).string()});
  ASSERT_EQ(h.exitCode, 0) << h.err;
  ASSERT_NE(h.out.find("ALIGNMENT"), std::string::npos) << h.out;
  // Some checkpoint took measurable alignment ("-" would mean none was measured).
  EXPECT_TRUE(std::regex_search(h.out, std::regex("COMPLETED .* [0-9.]+ (us|ms) "))) << h.out;
}

// Issue 34: a timestamp is all digits, or the line is refused with its text. "1.7e+12"
// used to read as 1 ms (its leading digits), silently putting the line in 1970's window.
TEST_F(EventTime, ALineWhoseTimestampIsNotAllDigitsFailsTheJobNamingTheLine) {
  for (const std::string bad : {"1.7e+12 word", "-5 word", "1767225600000ms word", "99999999999999999999 word"}) {
    SCOPED_TRACE(bad);
    writeFile(tmp / "bad.txt", "1767225600000 a\n" + bad + "\n1767225601000 b\n");
    Result r = cli({"run", "-c", "WindowedWordCount", "-D", "restart-strategy.type=none", kPlugin, "--input",
                    (tmp / "bad.txt").string()});
    EXPECT_EQ(r.exitCode, 1) << r.err;
    EXPECT_NE(r.err.find("input line '" + bad + "' does not start with a timestamp in epoch milliseconds (digits only"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out.find("(1"), std::string::npos) << "no window may fire from a refused input:\n" << r.out;
  }
  // Leading spaces and a tab after the digits are fine.
  writeFile(tmp / "good.txt", "  1767225600000\ta\n1767225601000 a\n");
  Result ok = cli({"run", "-c", "WindowedWordCount", kPlugin, "--input", (tmp / "good.txt").string()});
  EXPECT_EQ(ok.exitCode, 0) << ok.err;
  EXPECT_EQ(ok.out, "(1767225610000,a,2)\n");
}

TEST_F(EventTime, AJobWithoutItsInputFileIsOneClearError) {
  Result r = cli({"run", "-c", "OrderPaymentJoin", kPlugin, "--orders", (tmp / "none.txt").string()});
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("cannot read input file"), std::string::npos) << r.err;
  Result w = cli({"run", "-c", "WindowedWordCount", kPlugin, "--input", kWords, "--window", "ten"});
  EXPECT_EQ(w.exitCode, 2) << w.err;
  EXPECT_NE(w.err.find("--window must be a duration such as 500ms, 10s"), std::string::npos) << w.err;
}

}  // namespace
