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
// The committed files are never modified: each test restores from a copy in a temp dir.
#include <cctype>
#include <set>

#include "cli_fixture.h"

using namespace e2e;

namespace {

const fs::path kCompatRoot = fs::path(JOBHOST_COMPAT_DIR).parent_path();  // tests/compat

struct Snapshot {
  std::string dir;        // under tests/compat/, e.g. "v1/hashmap-keygroups"
  std::string writer;     // the class that wrote it
  std::string handle;     // what `inspect` must show
  std::vector<std::string> restoreAs;  // extra ways to restore it: "-c Class [-D ...]"
  std::vector<std::string> flags;      // flags for the writer's restore
};

void PrintTo(const Snapshot& s, std::ostream* os) { *os << s.dir; }

const std::vector<Snapshot> kSnapshots = {
    {"v1/hashmap-keygroups", "WordCount", "KeyGroupsStateHandle", {}, {}},
    {"v1/rocksdb-full", "WordCountIncremental", "KeyGroupsStateHandle", {"WordCount"}, {"-D", "state.backend.incremental=false"}},
    {"v1/rocksdb-incremental", "WordCountIncremental", "IncrementalRemoteKeyedStateHandle", {}, {}},
    {"v1/savepoint-canonical", "WordCountIncremental", "KeyGroupsStateHandle", {"WordCount"}, {}},
};

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
  /// R = words.txt + extra (see the file comment).
  fs::path restoreInput() {
    const std::string words = readFile(kWords);
    std::string extra = words + "compat forever\nold snapshots restore forever\n";
    fs::path p = tmp / "restore-input.txt";
    writeFile(p, words + extra);
    return p;
  }
  void restoresExactly(const fs::path& snapshot, const std::vector<std::string>& classAndFlags, const std::string& what) {
    fs::path in = restoreInput();
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
  const std::string version = s.dir.substr(1, s.dir.find('/') - 1);  // "v1/..." -> "1"
  EXPECT_NE(inspect.out.find("\"formatVersion\":" + version + ","), std::string::npos) << inspect.out;

  std::vector<std::string> writer = {"-c", s.writer};
  writer.insert(writer.end(), s.flags.begin(), s.flags.end());
  std::vector<std::string> check = {"check", "-s", snap.string()};
  check.insert(check.end(), writer.begin(), writer.end());
  check.push_back(kPlugin);
  Result c = cli(check);
  EXPECT_EQ(c.exitCode, 0) << c.err;
  restoresExactly(snap, writer, s.dir + " into " + s.writer);
  for (const auto& cls : s.restoreAs) restoresExactly(snap, {"-c", cls}, s.dir + " into " + cls);
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
