// Old snapshots restore forever (issue 6, item 5): every committed snapshot under
// tests/compat/v<N>/ (see tests/compat/README.md) passes `jobhost check` and restores
// into the class that wrote it, with exactly the counts it held.
//
// Each snapshot was written by a word count over plugins/wordcount/data/words.txt; its
// file source position is a byte offset X into that file (somewhere in the middle: the
// input was throttled). The restore reads R = words.txt + extra, where extra holds every
// word of words.txt once more plus words the snapshot never saw. The source resumes at X
// in R, so a correct restore ends with count(w) = count in words.txt + count in extra for
// every word — and prints fewer records than R has words (the first X bytes come from the
// snapshot's state, not from re-reading). A restore that lost the state, or the source
// position, gets different counts.
//
// The unaligned checkpoints of v2/ also hold in-flight records (read before the snapshot's
// source position but not yet counted): a restore that dropped them would count less.
//
// The committed files are never modified: each test restores from a copy in a temp dir.
#include <cctype>
#include <map>
#include <set>
#include <sstream>

#include "cli_fixture.h"

using namespace e2e;

namespace {

const fs::path kCompatRoot = fs::path(JOBHOST_COMPAT_DIR).parent_path();  // tests/compat

struct Snapshot {
  std::string dir;        // under tests/compat/, e.g. "v1/hashmap-keygroups"
  std::string writer;     // the class that wrote it
  std::string handle;     // what `inspect` must show
  std::vector<std::string> restoreAs;  // extra ways to restore it: "-c Class [-D ...]"
  std::vector<std::string> flags;      // flags for the writer's restore (and the other ways)
  int repeat = 1;  // the writer read words.txt (or events.txt: eventsInput) this many times over
};

void PrintTo(const Snapshot& s, std::ostream* os) { *os << s.dir; }

const std::vector<Snapshot> kSnapshots = {
    {"v1/hashmap-keygroups", "WordCount", "KeyGroupsStateHandle", {}, {}},
    {"v1/rocksdb-full", "WordCountIncremental", "KeyGroupsStateHandle", {"WordCount"}, {"-D", "state.backend.incremental=false"}},
    {"v1/rocksdb-incremental", "WordCountIncremental", "IncrementalRemoteKeyedStateHandle", {}, {}},
    {"v1/savepoint-canonical", "WordCountIncremental", "KeyGroupsStateHandle", {"WordCount"}, {}},
    // Event time (issue 14; written 2026-12-01): open windows, window timers, the watermark
    // generator's state, interval-join buffers and timers, at p=1 and p=2.
    {"v1/windowed-hashmap-p1", "WindowedWordCount", "KeyGroupsStateHandle",
     {"WindowedWordCount -p 3 -D state.backend.type=rocksdb"}, {}},
    {"v1/windowed-rocksdb-incremental-p2", "WindowedWordCount", "IncrementalRemoteKeyedStateHandle", {},
     {"-p", "2", "-D", "state.backend.type=rocksdb", "-D", "state.backend.incremental=true"}},
    {"v1/windowed-savepoint-canonical-p2", "WindowedWordCount", "KeyGroupsStateHandle",
     {"WindowedWordCount -p 1 -D state.backend.type=hashmap"}, {"-p", "2", "-D", "state.backend.type=rocksdb"}},
    {"v1/join-hashmap-p2", "OrderPaymentJoin", "KeyGroupsStateHandle",
     {"OrderPaymentJoin -p 1 -D state.backend.type=rocksdb"}, {"-p", "2"}},
    {"v1/join-rocksdb-full-p1", "OrderPaymentJoin", "KeyGroupsStateHandle", {"OrderPaymentJoin -p 2"},
     {"-D", "state.backend.type=rocksdb"}},
    // Hashmap incremental checkpoints (issue 16; written 2026-12-02): key-group files in
    // shared/ referenced across checkpoints; restored by the writer, rescaled, and into rocksdb.
    {"v1/hashmap-incremental-p1", "WordCount", "IncrementalKeyGroupsStateHandle", {"WordCountIncremental"},
     {"-D", "state.backend.incremental=true"}},
    {"v1/windowed-hashmap-incremental-p2", "WindowedWordCount", "IncrementalKeyGroupsStateHandle",
     {"WindowedWordCount -p 1 -D state.backend.type=rocksdb", "WindowedWordCount -p 3"},
     {"-p", "2", "-D", "state.backend.incremental=true"}},
    {"v1/join-hashmap-incremental-p1", "OrderPaymentJoin", "IncrementalKeyGroupsStateHandle",
     {"OrderPaymentJoin -p 2 -D state.backend.type=rocksdb -D state.backend.incremental=true"},
     {"-D", "state.backend.incremental=true"}},
    // Broadcast state (issue 33; written 2026-12-04): WordThresholds' thresholds (operator
    // state of a keyed operator, in every subtask) with its keyed counts and timers, the
    // rules source in the middle of rules.txt; restored by the writer and rescaled.
    {"v1/broadcast-hashmap-p1", "WordThresholds", "KeyGroupsStateHandle",
     {"WordThresholds -p 3 -D state.backend.type=rocksdb"}, {}},
    {"v1/broadcast-rocksdb-incremental-p2", "WordThresholds", "IncrementalRemoteKeyedStateHandle",
     {"WordThresholds -p 1 -D state.backend.type=rocksdb -D state.backend.incremental=false"},
     {"-p", "2", "-D", "state.backend.type=rocksdb", "-D", "state.backend.incremental=true"}},
    // Unaligned checkpoints (issue 33; metadata format version 2, written 2026-12-06): the
    // in-flight records before the keyed count (InputChannelStateHandle on the keyBy
    // exchange) next to the counts; the writer read words.txt 8000 times unthrottled.
    // Restored by the writer, rescaled (the records go to the subtasks owning their key
    // groups) and into the other backend: every count must come out exact.
    {"v2/unaligned-hashmap-p1", "WordCount", "InputChannelStateHandle",
     {"WordCount -p 2", "WordCountIncremental -p 3"}, {}, 8000},
    {"v2/unaligned-rocksdb-incremental-p2", "WordCountIncremental", "InputChannelStateHandle",
     {"WordCountIncremental -p 1", "WordCountIncremental -p 3"}, {"-p", "2"}, 8000},
    // Unaligned checkpoints of an event-time job (format version 2 with the receiving
    // task's input watermark stored with the in-flight records; written 2026-12-06):
    // WindowedWordCount over events.txt read 300 times (eventsInput), window contents and
    // timers next to in-flight records; restored by the writer, rescaled, other backend.
    {"v2/unaligned-windowed-hashmap-p1", "WindowedWordCount", "InputChannelStateHandle",
     {"WindowedWordCount -p 2 -D state.backend.type=rocksdb"}, {}, 300},
    {"v2/unaligned-windowed-rocksdb-incremental-p2", "WindowedWordCount", "InputChannelStateHandle",
     {"WindowedWordCount -p 1 -D state.backend.type=rocksdb -D state.backend.incremental=false",
      "WindowedWordCount -p 3 -D state.backend.type=rocksdb -D state.backend.incremental=true"},
     {"-p", "2", "-D", "state.backend.type=rocksdb", "-D", "state.backend.incremental=true"}, 300},
    // Key-group files of format version 2, a checksum per key group and for the header
    // (written 2026-12-07): every snapshot above that holds key-group files, written again.
    {"v1-kg2/hashmap-keygroups", "WordCount", "KeyGroupsStateHandle", {}, {}},
    {"v1-kg2/rocksdb-full", "WordCountIncremental", "KeyGroupsStateHandle", {"WordCount"}, {"-D", "state.backend.incremental=false"}},
    {"v1-kg2/savepoint-canonical", "WordCountIncremental", "KeyGroupsStateHandle", {"WordCount"}, {}},
    {"v1-kg2/windowed-hashmap-p1", "WindowedWordCount", "KeyGroupsStateHandle",
     {"WindowedWordCount -p 3 -D state.backend.type=rocksdb"}, {}},
    {"v1-kg2/windowed-savepoint-canonical-p2", "WindowedWordCount", "KeyGroupsStateHandle",
     {"WindowedWordCount -p 1 -D state.backend.type=hashmap"}, {"-p", "2", "-D", "state.backend.type=rocksdb"}},
    {"v1-kg2/join-hashmap-p2", "OrderPaymentJoin", "KeyGroupsStateHandle",
     {"OrderPaymentJoin -p 1 -D state.backend.type=rocksdb"}, {"-p", "2"}},
    {"v1-kg2/join-rocksdb-full-p1", "OrderPaymentJoin", "KeyGroupsStateHandle", {"OrderPaymentJoin -p 2"},
     {"-D", "state.backend.type=rocksdb"}},
    {"v1-kg2/hashmap-incremental-p1", "WordCount", "IncrementalKeyGroupsStateHandle", {"WordCountIncremental"},
     {"-D", "state.backend.incremental=true"}},
    {"v1-kg2/windowed-hashmap-incremental-p2", "WindowedWordCount", "IncrementalKeyGroupsStateHandle",
     {"WindowedWordCount -p 1 -D state.backend.type=rocksdb", "WindowedWordCount -p 3"},
     {"-p", "2", "-D", "state.backend.incremental=true"}},
    {"v1-kg2/join-hashmap-incremental-p1", "OrderPaymentJoin", "IncrementalKeyGroupsStateHandle",
     {"OrderPaymentJoin -p 2 -D state.backend.type=rocksdb -D state.backend.incremental=true"},
     {"-D", "state.backend.incremental=true"}},
    {"v1-kg2/broadcast-hashmap-p1", "WordThresholds", "KeyGroupsStateHandle",
     {"WordThresholds -p 3 -D state.backend.type=rocksdb"}, {}},
    {"v2-kg2/unaligned-hashmap-p1", "WordCount", "InputChannelStateHandle",
     {"WordCount -p 2", "WordCountIncremental -p 3"}, {}, 8000},
    {"v2-kg2/unaligned-windowed-hashmap-p1", "WindowedWordCount", "InputChannelStateHandle",
     {"WindowedWordCount -p 2 -D state.backend.type=rocksdb"}, {}, 300},
};

const fs::path kData = fs::path(JOBHOST_WORDS).parent_path();  // plugins/wordcount/data

std::vector<std::string> splitWords(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

/// Without a "N> " subtask prefix.
std::string unprefixed(const std::string& line) {
  size_t p = line.find("> ");
  if (p != std::string::npos && p > 0 && line.find_first_not_of("0123456789") == p) return line.substr(p + 2);
  return line;
}

/// events.txt read `repeat` times, the r-th time with every timestamp 110 s * r later: the
/// input stays in order and each pass has windows of its own (as make_snapshots.sh's
/// events300, byte for byte: a snapshot's source position is an offset into it).
std::string eventsInput(int repeat) {
  const std::string events = readFile(kData / "events.txt");
  std::string out;
  for (int r = 0; r < repeat; ++r) {
    std::istringstream in(events);
    for (std::string line; std::getline(in, line);) {
      size_t sp = line.find(' ');
      out += std::to_string(std::stoll(line.substr(0, sp)) + 110000LL * r) + line.substr(sp) + "\n";
    }
  }
  return out;
}

/// What WindowedWordCount prints for eventsInput(repeat): "(<end>,<word>,<count>)" per 10 s
/// window.
std::set<std::string> windowedReference(int repeat) {
  std::map<std::pair<long long, std::string>, int> c;
  std::istringstream in(eventsInput(repeat));
  for (std::string line; std::getline(in, line);) {
    auto f = splitWords(line);
    long long ts = std::stoll(f.at(0));
    for (size_t i = 1; i < f.size(); ++i) ++c[{ts - ts % 10000 + 10000, f[i]}];
  }
  std::set<std::string> out;
  for (const auto& [k, n] : c) out.insert("(" + std::to_string(k.first) + "," + k.second + "," + std::to_string(n) + ")");
  return out;
}

/// What OrderPaymentJoin prints for orders.txt and payments.txt, with multiplicity.
std::multiset<std::string> joinReference() {
  auto rows = [](const fs::path& p) {
    std::vector<std::vector<std::string>> out;
    std::istringstream in(readFile(p));
    for (std::string line; std::getline(in, line);) out.push_back(splitWords(line));
    return out;
  };
  std::multiset<std::string> out;
  for (const auto& o : rows(kData / "orders.txt"))
    for (const auto& p : rows(kData / "payments.txt")) {
      long long d = std::stoll(p[0]) - std::stoll(o[0]);
      if (o[1] == p[1] && d >= 0 && d <= 5000) out.insert("(" + o[1] + "," + o[2] + "," + p[2] + ")");
    }
  return out;
}

class Compat : public Cli, public ::testing::WithParamInterface<Snapshot> {
 protected:
  /// A copy of the snapshot; returns the path to pass to -s (the chk-<n> directory for a
  /// committed job directory).
  fs::path copy(const Snapshot& s) {
    fs::path dst = tmp / "snapshot";
    fs::copy(kCompatRoot / s.dir, dst, fs::copy_options::recursive);
    if (fs::exists(dst / "_metadata")) return dst;
    for (const auto& job : fs::directory_iterator(dst)) {
      auto c = completed(job.path());
      if (!c.empty()) return c.back();
    }
    ADD_FAILURE() << "no snapshot in " << s.dir;
    return dst;
  }
  /// R = what the writer read (words.txt `repeat` times) + extra (see the file comment).
  fs::path restoreInput(int repeat) {
    const std::string words = readFile(kWords);
    std::string all;
    for (int i = 0; i < repeat; ++i) all += words;
    std::string extra = words + "compat forever\nold snapshots restore forever\n";
    fs::path p = tmp / "restore-input.txt";
    writeFile(p, all + extra);
    return p;
  }
  /// An event-time snapshot restored into `classAndFlags` over the bundled inputs: every
  /// line it prints is one of the uninterrupted run's (a window whose records were partly
  /// in the snapshot has its full count, a join finds the buffered side), it prints
  /// something, and less than the whole (what fired before the snapshot is not redone).
  void restoresEventTime(const fs::path& snapshot, const std::vector<std::string>& classAndFlags, bool join,
                         int repeat, const std::string& what) {
    std::vector<std::string> args = {"run", "-s", snapshot.string()};
    args.insert(args.end(), classAndFlags.begin(), classAndFlags.end());
    for (auto& f : ckFlags("100ms")) args.push_back(f);
    args.push_back(kPlugin);
    if (join) {
      args.insert(args.end(), {"--orders", (kData / "orders.txt").string(), "--payments", (kData / "payments.txt").string()});
    } else if (repeat == 1) {
      args.insert(args.end(), {"--input", (kData / "events.txt").string()});
    } else {
      fs::path in = tmp / "events-repeated.txt";
      writeFile(in, eventsInput(repeat));
      args.insert(args.end(), {"--input", in.string()});
    }
    Result r = cli(args, std::chrono::seconds(60));
    ASSERT_EQ(r.exitCode, 0) << what << ":\n" << r.err;
    std::multiset<std::string> got;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) got.insert(unprefixed(line));
    ASSERT_FALSE(got.empty()) << what << ": nothing printed\n" << r.err;
    if (join) {
      auto all = joinReference();
      for (const auto& l : std::set<std::string>(got.begin(), got.end()))
        EXPECT_LE(got.count(l), all.count(l)) << what << ": " << l << " is not (that often) in the join";
      EXPECT_LT(got.size(), all.size()) << what << ": everything was joined again; the snapshot was not used";
    } else {
      auto all = windowedReference(repeat);
      for (const auto& l : got) EXPECT_TRUE(all.count(l)) << what << ": " << l << " is not an uninterrupted run's result";
      EXPECT_LT(got.size(), all.size()) << what << ": every window was computed again; the snapshot was not used";
    }
  }
  /// A WordThresholds snapshot restored into `classAndFlags` with words.txt and a rules
  /// file whose every threshold now says 1 in the same number of bytes: the rules source
  /// resumes after the part it had read, so the result must be rules.txt's first K rules
  /// (from the broadcast state) and threshold 1 for the rest, for some K >= 1, over the
  /// counts of the whole of words.txt (the part read before came from the keyed state).
  void restoresBroadcast(const fs::path& snapshot, const std::vector<std::string>& classAndFlags,
                         const std::string& what) {
    std::vector<std::pair<std::string, long>> rules;
    std::string changed;
    std::istringstream in(readFile(kData / "rules.txt"));
    for (std::string line; std::getline(in, line);) {
      auto f = splitWords(line);
      rules.push_back({f.at(0), std::stol(f.at(1))});
      changed += f[0] + " " + std::string(f[1].size() - 1, '0') + "1\n";
    }
    fs::path rulesFile = tmp / "rules-changed.txt";
    writeFile(rulesFile, changed);
    std::vector<std::string> args = {"run", "-s", snapshot.string()};
    args.insert(args.end(), classAndFlags.begin(), classAndFlags.end());
    for (auto& f : ckFlags("100ms")) args.push_back(f);
    args.insert(args.end(), {kPlugin, "--input", kWords, "--rules", rulesFile.string()});
    Result r = cli(args, std::chrono::seconds(60));
    ASSERT_EQ(r.exitCode, 0) << what << ":\n" << r.err;
    std::multiset<std::string> got;
    std::istringstream out(r.out);
    for (std::string line; std::getline(out, line);) got.insert(unprefixed(line));
    std::map<std::string, long> counts;
    for (auto w : splitWords(readFile(kWords))) {
      for (char& c : w) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      ++counts[w];
    }
    int restored = -1;
    for (size_t k = 0; k <= rules.size() && restored < 0; ++k) {
      std::map<std::string, long> rule;
      for (size_t i = 0; i < rules.size(); ++i) {
        long t = i < k ? rules[i].second : 1;
        if (t == 0) rule.erase(rules[i].first);
        else rule[rules[i].first] = t;
      }
      std::multiset<std::string> expected;
      for (const auto& [w, t] : rule)
        if (counts[w] >= t) expected.insert("(" + w + "," + std::to_string(counts[w]) + "," + std::to_string(t) + ")");
      if (got == expected) restored = static_cast<int>(k);
    }
    EXPECT_GE(restored, 1) << what << ": the output is not the restored rules' and the rest's:\n" << r.out;
  }
  void restoresExactly(const fs::path& snapshot, const std::vector<std::string>& classAndFlags, int repeat,
                       const std::string& what) {
    fs::path in = restoreInput(repeat);
    std::vector<std::string> args = {"run", "-s", snapshot.string()};
    args.insert(args.end(), classAndFlags.begin(), classAndFlags.end());
    for (auto& f : ckFlags("100ms")) args.push_back(f);
    args.insert(args.end(), {kPlugin, "--input", in.string()});
    Result r = cli(args, std::chrono::seconds(60));
    ASSERT_EQ(r.exitCode, 0) << what << ":\n" << r.err;
    const std::string text = readFile(in);
    EXPECT_EQ(finalCounts(r.out), expectedCounts(text)) << what << ": restored counts differ\n" << r.err;
    size_t records = std::count(r.out.begin(), r.out.end(), '\n');
    size_t words = 0;
    for (const auto& [w, n] : expectedCounts(text)) words += static_cast<size_t>(n);
    EXPECT_LT(records, words) << what << ": every word was re-read; the snapshot's source position was not restored";
    EXPECT_GT(records, 0u) << what;
  }
};

TEST_P(Compat, PassesTheCheckAndRestoresIntoItsWriterWithEveryCount) {
  const Snapshot& s = GetParam();
  fs::path snap = copy(s);
  auto before = treeChecksums(tmp / "snapshot");
  Result inspect = cli({"inspect", "--json", snap.string()});
  ASSERT_EQ(inspect.exitCode, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("\"handle\":\"" + s.handle + "\""), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("\"jobClass\":\"" + s.writer + "\""), std::string::npos) << inspect.out;
  const std::string version = s.dir.substr(1, s.dir.find_first_not_of("0123456789", 1) - 1);  // "v1-kg2/..." -> "1"
  EXPECT_NE(inspect.out.find("\"formatVersion\":" + version + ","), std::string::npos) << inspect.out;

  std::vector<std::string> writer = {"-c", s.writer};
  writer.insert(writer.end(), s.flags.begin(), s.flags.end());
  std::vector<std::string> check = {"check", "-s", snap.string()};
  check.insert(check.end(), writer.begin(), writer.end());
  check.push_back(kPlugin);
  const bool eventTime = s.writer == "WindowedWordCount" || s.writer == "OrderPaymentJoin";
  const bool broadcast = s.writer == "WordThresholds";
  if (broadcast) {  // inspect reads the broadcast state without the plugin: 5 of rules.txt's 9 rules
    EXPECT_NE(inspect.out.find("\"broadcastStates\":[{\"name\":\"thresholds\",\"keySerializer\":\"string v1\","
                               "\"valueSerializer\":\"i64 v1\",\"entries\":5}]"),
              std::string::npos)
        << inspect.out;
  }
  if (s.handle == "InputChannelStateHandle") {
    // inspect shows the input watermark stored with the in-flight records: a number for
    // the event-time job's, null for the word counts' (no watermark had reached them).
    const bool some = inspect.out.find("\"inputWatermark\":1") != std::string::npos;
    EXPECT_EQ(some, eventTime) << inspect.out;
    EXPECT_EQ(inspect.out.find("\"inputWatermark\":null") == std::string::npos, eventTime) << inspect.out;
  }
  if (eventTime) {
    if (s.writer == "WindowedWordCount") check.insert(check.end(), {"--input", "x"});
    else check.insert(check.end(), {"--orders", "x", "--payments", "y"});
  }
  if (broadcast) check.insert(check.end(), {"--input", "x", "--rules", "y"});
  Result c = cli(check);
  EXPECT_EQ(c.exitCode, 0) << c.err;
  if (broadcast) {
    restoresBroadcast(snap, writer, s.dir + " into " + s.writer);
    for (const auto& other : s.restoreAs) {
      std::vector<std::string> cf = {"-c"};
      for (const auto& w : splitWords(other)) cf.push_back(w);
      restoresBroadcast(snap, cf, s.dir + " into " + other);
    }
  } else if (eventTime) {
    const bool join = s.writer == "OrderPaymentJoin";
    restoresEventTime(snap, writer, join, s.repeat, s.dir + " into " + s.writer);
    for (const auto& other : s.restoreAs) {
      std::vector<std::string> cf = {"-c"};
      for (const auto& w : splitWords(other)) cf.push_back(w);
      restoresEventTime(snap, cf, join, s.repeat, s.dir + " into " + other);
    }
  } else {
    restoresExactly(snap, writer, s.repeat, s.dir + " into " + s.writer);
    for (const auto& other : s.restoreAs) {
      std::vector<std::string> cf = {"-c"};
      for (const auto& w : splitWords(other)) cf.push_back(w);
      restoresExactly(snap, cf, s.repeat, s.dir + " into " + other);
    }
  }
  EXPECT_EQ(treeChecksums(tmp / "snapshot"), before) << "a restore must not modify its snapshot";
}

INSTANTIATE_TEST_SUITE_P(Committed, Compat, ::testing::ValuesIn(kSnapshots), [](const auto& info) {
  std::string n = info.param.dir;
  for (auto& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

/// Every snapshot directory committed under tests/compat/v*/ is listed in kSnapshots, so
/// that a snapshot added for a new format version cannot be forgotten.
TEST(CompatList, EveryCommittedSnapshotIsTested) {
  std::set<std::string> listed;
  for (const auto& s : kSnapshots) listed.insert(s.dir);
  // Kafka sources' and sinks' snapshots (issue 32) restore against a Kafka cluster: they
  // are tested with the mock cluster by Kafka.CommittedSnapshotsRestore (e2e/kafka_test.cc).
  for (const char* k : {"v1/kafka-hashmap-p1", "v1/kafka-exactly-once-p2"}) listed.insert(k);
  for (const auto& v : fs::directory_iterator(kCompatRoot)) {
    if (!v.is_directory()) continue;
    for (const auto& s : fs::directory_iterator(v.path())) {
      if (!s.is_directory()) continue;
      EXPECT_TRUE(listed.count(v.path().filename().string() + "/" + s.path().filename().string()))
          << s.path() << " is committed but not in kSnapshots of tests/e2e/compat_test.cc";
    }
  }
}

}  // namespace
