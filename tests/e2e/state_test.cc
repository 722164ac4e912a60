// End-to-end tests of `jobhost state ls|dump|diff` on real checkpoints written by the real
// binary: dumps against independently computed word counts, diffs of consecutive
// checkpoints, MapState and ListState, user serializers with and without the plugin, the
// same logical state across backends and parallelisms, damaged files, and that nothing
// in a snapshot changes and no temporary copy stays behind.
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "cli_fixture.h"
#include "json_reader.h"

using namespace e2e;

namespace {

const std::string kStatePlugin = JOBHOST_STATE_PLUGIN;

/// A TCP server on a free loopback port that sends `text` to its first client and keeps
/// the connection open until destroyed: a source that never ends, so a job can take
/// checkpoints after it has processed every line.
class HoldingLineServer {
 public:
  explicit HoldingLineServer(std::string text) : text_(std::move(text)) {
    fd_ = listenOnLoopback(&port_);
    thread_ = std::thread([this] {
      client_ = accept(fd_, nullptr, nullptr);
      if (client_ >= 0) ::send(client_, text_.data(), text_.size(), MSG_NOSIGNAL);
    });
  }
  ~HoldingLineServer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
    if (client_ >= 0) close(client_);
  }
  int port() const { return port_; }

 private:
  std::string text_;
  int fd_ = -1, client_ = -1, port_ = 0;
  std::thread thread_;
};

/// Splits CSV output (no quoted line breaks in these tests) into rows of fields.
std::vector<std::vector<std::string>> parseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> row;
    std::string field;
    bool quoted = false;
    for (size_t i = 0; i < line.size(); ++i) {
      char c = line[i];
      if (quoted) {
        if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') field += '"', ++i;
        else if (c == '"') quoted = false;
        else field += c;
      } else if (c == '"') {
        quoted = true;
      } else if (c == ',') {
        row.push_back(field), field.clear();
      } else {
        field += c;
      }
    }
    row.push_back(field);
    rows.push_back(row);
  }
  return rows;
}

/// "(word,12)" -> 12.
long countOf(const std::string& value) {
  auto comma = value.rfind(',');
  return std::stol(value.substr(comma + 1, value.size() - comma - 2));
}

/// One JSON object per line (`--format json`); a line that is not JSON fails the test.
std::vector<Json> jsonLines(const std::string& text) {
  std::vector<Json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto j = JsonReader(line).parse();
    EXPECT_TRUE(j && j->type == Json::kObject) << "not a JSON object: " << line;
    if (j) out.push_back(*j);
  }
  return out;
}

/// An integer as JSON writes it: a number whose literal is all digits.
bool isIntegerNumber(const Json& j) {
  return j.type == Json::kNumber && !j.s.empty() &&
         std::all_of(j.s.begin(), j.s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

int maxCheckpointId(const fs::path& jobDir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(jobDir)) {
    std::string name = e.path().filename().string();
    if (name.rfind("chk-", 0) == 0 && fs::exists(e.path() / "_metadata")) n = std::max(n, std::stoi(name.substr(4)));
  }
  return n;
}

class State : public Cli {
 protected:
  int runs_ = 0;
  fs::path tmpdir() { return tmp / "tmpdir"; }
  /// jobhost with TMPDIR pointing at a directory of the test, so leftovers show.
  Result state(std::vector<std::string> args) {
    fs::create_directories(tmpdir());
    args.insert(args.begin(), {"/usr/bin/env", "TMPDIR=" + tmpdir().string(), kJobhost, "state"});
    return run(args, tmp.path);
  }
  void expectNoTemporaryLeft() {
    EXPECT_TRUE(fs::is_empty(tmpdir())) << "a temporary copy was left in " << tmpdir();
  }

  /// Runs `cls` reading `text` from a socket that stays open, waits until every word has
  /// been counted (one output line per word), then for the checkpoint after the next one
  /// (the next one's barrier may precede the last lines; at most one checkpoint is in
  /// flight), stops the job and returns that checkpoint.
  fs::path checkpointAtEnd(const std::string& cls, int parallelism, const std::string& text,
                           std::vector<std::string> defines = {}) {
    HoldingLineServer server(text);
    auto before = jobDirs();
    std::vector<std::string> args = {"run", "-c", cls, "-p", std::to_string(parallelism), "-D",
                                     "state.checkpoints.num-retained=3"};
    for (auto& f : ckFlags("100ms")) args.push_back(f);
    for (auto& d : defines) args.insert(args.end(), {"-D", d});
    args.insert(args.end(), {kPlugin, "--host", "127.0.0.1", "--port", std::to_string(server.port())});
    const std::string name = "end-" + std::to_string(++runs_) + "-" + cls;  // a fresh file: the child truncates late
    fs::path out = tmp / (name + ".out"), err = tmp / (name + ".err");
    Process p(jobhost(args), out, err);
    size_t words = 0;
    {
      std::istringstream in(text);
      std::string w;
      while (in >> w) ++words;
    }
    auto lineCount = [&] {
      if (!fs::exists(out)) return size_t{0};
      std::string o = readFile(out);
      return static_cast<size_t>(std::count(o.begin(), o.end(), '\n'));
    };
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (lineCount() < words && p.running() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(lineCount(), words) << readFile(out) << readFile(err);
    fs::path jobDir;
    for (const auto& d : jobDirs())
      if (std::find(before.begin(), before.end(), d) == before.end()) jobDir = d;
    EXPECT_FALSE(jobDir.empty()) << readFile(err);
    if (jobDir.empty()) return {};
    int target = maxCheckpointId(jobDir) + 2;
    while (maxCheckpointId(jobDir) < target && p.running() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    p.signal(SIGTERM);
    Result r = p.wait();
    EXPECT_EQ(r.exitCode, 130) << r.err;
    fs::path chk = jobDir / ("chk-" + std::to_string(target));
    EXPECT_TRUE(fs::exists(chk / "_metadata")) << r.err;
    return chk;
  }

  /// word -> count from `state dump --operator counts --format csv`.
  std::map<std::string, long> dumpedCounts(const fs::path& snapshot) {
    Result r = state({"dump", snapshot.string(), "--operator", "counts", "--format", "csv"});
    EXPECT_EQ(r.exitCode, 0) << r.err;
    auto rows = parseCsv(r.out);
    std::map<std::string, long> counts;
    EXPECT_FALSE(rows.empty());
    if (rows.empty()) return counts;
    EXPECT_EQ(rows[0], (std::vector<std::string>{"KEY", "VALUE"}));
    for (size_t i = 1; i < rows.size(); ++i) {
      EXPECT_EQ(rows[i].size(), 2u);
      EXPECT_EQ(rows[i][1].rfind("(" + rows[i][0] + ",", 0), 0u) << rows[i][1];
      counts[rows[i][0]] = countOf(rows[i][1]);
    }
    return counts;
  }

  /// word -> count from `state dump --operator counts --format json`: each line
  /// {"key":"<word>","value":["<word>",<count>]}, the count a JSON number.
  std::map<std::string, long> jsonDumpedCounts(const fs::path& snapshot) {
    Result r = state({"dump", snapshot.string(), "--operator", "counts", "--format", "json"});
    EXPECT_EQ(r.exitCode, 0) << r.err;
    std::map<std::string, long> counts;
    for (const Json& row : jsonLines(r.out)) {
      EXPECT_EQ(row.o.size(), 2u) << r.out;
      const Json& key = row["key"];
      const Json& value = row["value"];
      EXPECT_EQ(key.type, Json::kString);
      if (value.type != Json::kArray || value.a.size() != 2) {
        ADD_FAILURE() << "the value of " << key.s << " is not a [word, count] array";
        continue;
      }
      EXPECT_EQ(value.a[0].type, Json::kString);
      EXPECT_EQ(value.a[0].s, key.s);
      EXPECT_TRUE(isIntegerNumber(value.a[1])) << key.s << ": " << value.a[1].s;
      counts[key.s] = static_cast<long>(value.a[1].n);
    }
    return counts;
  }
};

TEST_F(State, TheDumpOfACheckpointAfterTheWholeInputEqualsTheTrueWordCountsOnEveryBackend) {
  const std::string text = readFile(input(3));
  const auto expected = expectedCounts(text);
  struct Case {
    const char* name;
    std::string cls;
    int parallelism;
    std::vector<std::string> defines;
  } cases[] = {
      {"hashmap p=2", "WordCount", 2, {}},
      {"rocksdb incremental p=3", "WordCountIncremental", 3, {}},
      {"rocksdb full p=1", "WordCountIncremental", 1, {"state.backend.incremental=false"}},
      {"hashmap incremental p=2", "WordCount", 2, {"state.backend.incremental=true"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    fs::path chk = checkpointAtEnd(c.cls, c.parallelism, text, c.defines);
    if (chk.empty()) continue;
    auto sums = treeChecksums(chk.parent_path());
    EXPECT_EQ(dumpedCounts(chk), expected);
    EXPECT_EQ(jsonDumpedCounts(chk), expected) << "the JSON form: typed values (issue 34)";
    // ls: one state "reduce" with one entry per distinct word.
    Result ls = state({"ls", chk.string()});
    EXPECT_EQ(ls.exitCode, 0) << ls.err;
    EXPECT_NE(ls.out.find("counts    reduce  ValueState  string"), std::string::npos) << ls.out;
    EXPECT_NE(ls.out.find("  " + std::to_string(expected.size()) + "  "), std::string::npos) << ls.out;
    // --limit and --key.
    Result limited = state({"dump", chk.string(), "--operator", "counts", "--limit", "3", "--format", "json"});
    EXPECT_EQ(limited.exitCode, 0) << limited.err;
    EXPECT_EQ(std::count(limited.out.begin(), limited.out.end(), '\n'), 3) << limited.out;
    const auto& [word, count] = *expected.begin();
    Result one = state({"dump", chk.string(), "--operator", "counts", "--key", word});
    EXPECT_EQ(one.exitCode, 0) << one.err;
    EXPECT_EQ(one.out, "KEY" + std::string(std::max<size_t>(word.size(), 3) - 3 + 2, ' ') + "VALUE\n" + word +
                           std::string(std::max<size_t>(word.size(), 3) - word.size() + 2, ' ') + "(" + word + "," +
                           std::to_string(count) + ")\n");
    EXPECT_EQ(treeChecksums(chk.parent_path()), sums) << "reading changed the snapshot";
    expectNoTemporaryLeft();
    fs::remove_all(ckdir());
  }
}

TEST_F(State, TheDiffOfTwoConsecutiveCheckpointsListsExactlyTheWordsWhoseCountChanged) {
  std::vector<std::string> args = {"run", "-c", "WordCount", "-D", "state.checkpoints.num-retained=4"};
  for (auto& f : ckFlags("150ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", input(400).string(), "--rate", "600"});
  Process p(jobhost(args), tmp / "run.out", tmp / "run.err");
  ASSERT_TRUE(waitForCheckpoint(p, 4, std::chrono::seconds(90))) << readFile(tmp / "run.err");
  p.signal(SIGTERM);
  Result r = p.wait();
  ASSERT_EQ(r.exitCode, 130) << r.err;
  auto dirs = jobDirs();
  ASSERT_EQ(dirs.size(), 1u);
  int last = maxCheckpointId(dirs[0]);
  fs::path a = dirs[0] / ("chk-" + std::to_string(last - 1)), b = dirs[0] / ("chk-" + std::to_string(last));
  ASSERT_TRUE(fs::exists(a / "_metadata") && fs::exists(b / "_metadata"));
  auto before = dumpedCounts(a), after = dumpedCounts(b);
  std::set<std::string> expectedChanged, expectedNew;
  for (const auto& [w, n] : after) {
    if (!before.count(w)) expectedNew.insert(w);
    else if (before.at(w) != n) expectedChanged.insert(w);
  }
  for (const auto& [w, n] : before) EXPECT_TRUE(after.count(w)) << "a count disappeared: " << w;
  ASSERT_FALSE(expectedChanged.empty() && expectedNew.empty()) << "the throttled run changed nothing between checkpoints";

  Result diff = state({"diff", a.string(), b.string(), "--format", "csv"});
  EXPECT_EQ(diff.exitCode, 1) << diff.err;
  auto rows = parseCsv(diff.out);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0], (std::vector<std::string>{"CHANGE", "OPERATOR", "STATE", "KEY", "USER KEY", "A", "B"}));
  std::set<std::string> changed, added;
  for (size_t i = 1; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 7u);
    EXPECT_EQ(rows[i][1], "counts");
    const std::string& w = rows[i][3];
    if (rows[i][0] == "changed") {
      changed.insert(w);
      EXPECT_EQ(countOf(rows[i][5]), before[w]);
      EXPECT_EQ(countOf(rows[i][6]), after[w]);
    } else if (rows[i][0] == "only in B") {
      added.insert(w);
    } else {
      ADD_FAILURE() << "unexpected row: " << rows[i][0] << " " << w;
    }
  }
  EXPECT_EQ(changed, expectedChanged);
  EXPECT_EQ(added, expectedNew);
  // The JSON form: typed values, null for the side without the entry and for the user key
  // of a state that is not a MapState.
  Result json = state({"diff", a.string(), b.string(), "--format", "json"});
  EXPECT_EQ(json.exitCode, 1) << json.err;
  std::set<std::string> jsonChanged, jsonAdded;
  for (const Json& row : jsonLines(json.out)) {
    const std::string& w = row["key"].s;
    EXPECT_EQ(row["operator"].s, "counts");
    EXPECT_EQ(row["userKey"].type, Json::kNull);
    ASSERT_EQ(row["b"].type, Json::kArray) << w;
    ASSERT_EQ(row["b"].a.size(), 2u);
    EXPECT_TRUE(isIntegerNumber(row["b"].a[1])) << row["b"].a[1].s;
    EXPECT_EQ(row["b"].a[1].n, after[w]);
    if (row["change"].s == "changed") {
      jsonChanged.insert(w);
      ASSERT_EQ(row["a"].type, Json::kArray) << w;
      EXPECT_EQ(row["a"].a.at(1).n, before[w]);
    } else {
      EXPECT_EQ(row["change"].s, "only in B");
      EXPECT_EQ(row["a"].type, Json::kNull) << w;
      jsonAdded.insert(w);
    }
  }
  EXPECT_EQ(jsonChanged, expectedChanged);
  EXPECT_EQ(jsonAdded, expectedNew);
  // The README's example: jq reads the count as a number (when jq is installed; the
  // JSON checks above need no jq).
  if (std::system("command -v jq >/dev/null 2>&1") == 0) {
    const std::string w = after.begin()->first;
    Result jq = run({"/bin/sh", "-c",
                     "\"$0\" state dump \"$1\" --operator counts --key \"$2\" --format json | jq '.value[1] + 1'",
                     kJobhost, b.string(), w},
                    tmp.path);
    EXPECT_EQ(jq.exitCode, 0) << jq.err;
    EXPECT_EQ(jq.out, std::to_string(after[w] + 1) + "\n") << "jq '.value[1] + 1' on " << w;
  } else {
    std::cout << "note: jq is not installed; the README's jq example was not run (the JSON was checked without it)\n";
  }
  // The table form ends with the summary; a snapshot against itself is equal.
  Result table = state({"diff", a.string(), b.string()});
  EXPECT_EQ(table.exitCode, 1);
  EXPECT_NE(table.out.find(std::to_string(changed.size() + added.size()) + " difference"), std::string::npos) << table.out;
  Result same = state({"diff", b.string(), b.string()});
  EXPECT_EQ(same.exitCode, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("equal"), std::string::npos) << same.out;
}

TEST_F(State, TheSameLogicalStateIsEqualAcrossBackendsParallelismsAndHandleTypes) {
  const std::string text = readFile(input(2));
  fs::path heap = checkpointAtEnd("WordCount", 2, text);
  fs::path incremental = checkpointAtEnd("WordCountIncremental", 3, text);
  fs::path heapIncremental = checkpointAtEnd("WordCount", 3, text, {"state.backend.incremental=true"});
  ASSERT_FALSE(heap.empty() || incremental.empty() || heapIncremental.empty());
  fs::path canonical = tmp / "canonical", heapCanonical = tmp / "heap-canonical";
  Result conv = cli({"convert", incremental.string(), canonical.string()});
  ASSERT_EQ(conv.exitCode, 0) << conv.err;
  Result heapConv = cli({"convert", heapIncremental.string(), heapCanonical.string()});
  ASSERT_EQ(heapConv.exitCode, 0) << heapConv.err;
  for (const auto& other : {incremental, canonical, heapIncremental, heapCanonical}) {
    Result d = state({"diff", heap.string(), other.string(), "--operator", "counts"});
    EXPECT_EQ(d.exitCode, 0) << d.out << d.err;
    EXPECT_NE(d.out.find("equal: the keyed state of operator 'counts' is the same in A and B"), std::string::npos)
        << d.out;
  }
  // Different input, different state: the diff says so.
  fs::path smaller = checkpointAtEnd("WordCount", 1, readFile(input(1)));
  Result d = state({"diff", smaller.string(), incremental.string()});
  EXPECT_EQ(d.exitCode, 1) << d.out << d.err;
  EXPECT_NE(d.out.find("changed  counts    reduce"), std::string::npos) << d.out;
  expectNoTemporaryLeft();
}

TEST_F(State, MapStateDumpsAsKeyUserKeyValueAndAgreesWithTheDistinctCount) {
  fs::path chk = checkpointOf("DistinctWords");
  ASSERT_FALSE(chk.empty());
  Result words = state({"dump", chk.string(), "--operator", "distinct", "--state", "words", "--format", "csv"});
  ASSERT_EQ(words.exitCode, 0) << words.err;
  auto rows = parseCsv(words.out);
  ASSERT_GT(rows.size(), 1u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"KEY", "USER KEY", "VALUE"}));
  std::map<std::string, long> perLetter;
  std::set<std::string> inputWords;
  {
    std::istringstream in(readFile(kWords));
    std::string w;
    while (in >> w) inputWords.insert(w);
  }
  for (size_t i = 1; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 3u);
    EXPECT_EQ(rows[i][0], rows[i][1].substr(0, 1));
    EXPECT_EQ(rows[i][2], "1");
    EXPECT_TRUE(inputWords.count(rows[i][1])) << rows[i][1];
    ++perLetter[rows[i][0]];
  }
  Result distinct = state({"dump", chk.string(), "--operator", "distinct", "--state", "distinct", "--format", "csv"});
  ASSERT_EQ(distinct.exitCode, 0) << distinct.err;
  std::map<std::string, long> counted;
  auto drows = parseCsv(distinct.out);
  for (size_t i = 1; i < drows.size(); ++i) counted[drows[i][0]] = std::stol(drows[i][1]);
  EXPECT_EQ(perLetter, counted);
  // JSON: both states at once; the user key a string, the values numbers.
  Result json = state({"dump", chk.string(), "--operator", "distinct", "--format", "json"});
  ASSERT_EQ(json.exitCode, 0) << json.err;
  std::map<std::string, long> jsonPerLetter, jsonCounted;
  for (const Json& row : jsonLines(json.out)) {
    if (row["state"].s == "words") {
      EXPECT_EQ(row["userKey"].type, Json::kString);
      EXPECT_TRUE(isIntegerNumber(row["value"])) << row["value"].s;
      ++jsonPerLetter[row["key"].s];
    } else {
      EXPECT_EQ(row["state"].s, "distinct");
      EXPECT_EQ(row["userKey"].type, Json::kNull) << "a ValueState has no user key";
      EXPECT_TRUE(isIntegerNumber(row["value"])) << row["value"].s;
      jsonCounted[row["key"].s] = static_cast<long>(row["value"].n);
    }
  }
  EXPECT_EQ(jsonPerLetter, perLetter);
  EXPECT_EQ(jsonCounted, counted);
  // Without --state: both states, with a STATE column.
  Result both = state({"dump", chk.string(), "--operator", "distinct", "--limit", "5"});
  EXPECT_EQ(both.exitCode, 0) << both.err;
  EXPECT_EQ(both.out.rfind("STATE     KEY  USER KEY", 0), 0u) << both.out;
}

TEST_F(State, ListStateAndAUserSerializerAreHexWithoutThePluginAndDecodedWithIt) {
  // The state plugin's WordPositions: ListState "positions" and ValueState<WordStat>.
  std::vector<std::string> args = {"run", "-c", "WordPositions"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  fs::path in = input(300);
  args.insert(args.end(), {kStatePlugin, "--input", in.string(), "--rate", "1500"});
  Process p(jobhost(args), tmp / "pos.out", tmp / "pos.err");
  ASSERT_TRUE(waitForCheckpoint(p, 1, std::chrono::seconds(60))) << readFile(tmp / "pos.err");
  p.signal(SIGTERM);
  ASSERT_EQ(p.wait().exitCode, 130);
  auto dirs = jobDirs();
  ASSERT_EQ(dirs.size(), 1u);
  fs::path chk = completed(dirs[0]).back();

  std::vector<std::string> lines;
  {
    std::istringstream text(readFile(in));
    std::string l;
    while (std::getline(text, l)) lines.push_back(l);
  }
  Result positions = state({"dump", chk.string(), "--operator", "positions", "--state", "positions", "--format", "csv"});
  ASSERT_EQ(positions.exitCode, 0) << positions.err;
  std::map<std::string, std::vector<long>> lists;
  auto rows = parseCsv(positions.out);
  ASSERT_GT(rows.size(), 1u);
  for (size_t i = 1; i < rows.size(); ++i) {
    const std::string& list = rows[i][1];
    ASSERT_TRUE(list.size() >= 2 && list.front() == '[' && list.back() == ']') << list;
    std::istringstream items(list.substr(1, list.size() - 2));
    std::string item;
    while (std::getline(items, item, ',')) {
      long line = std::stol(item);
      ASSERT_GE(line, 1);
      ASSERT_LE(static_cast<size_t>(line), lines.size());
      EXPECT_NE((" " + lines[static_cast<size_t>(line - 1)] + " ").find(" " + rows[i][0] + " "), std::string::npos)
          << rows[i][0] << " is not on line " << line;
      lists[rows[i][0]].push_back(line);
    }
    EXPECT_TRUE(std::is_sorted(lists[rows[i][0]].begin(), lists[rows[i][0]].end())) << list;
  }

  // JSON: a ListState's value is an array of numbers.
  Result jsonPositions =
      state({"dump", chk.string(), "--operator", "positions", "--state", "positions", "--format", "json"});
  ASSERT_EQ(jsonPositions.exitCode, 0) << jsonPositions.err;
  std::map<std::string, std::vector<long>> jsonLists;
  for (const Json& row : jsonLines(jsonPositions.out)) {
    ASSERT_EQ(row["value"].type, Json::kArray) << row["key"].s;
    for (const Json& item : row["value"].a) {
      EXPECT_TRUE(isIntegerNumber(item)) << item.s;
      jsonLists[row["key"].s].push_back(static_cast<long>(item.n));
    }
  }
  EXPECT_EQ(jsonLists, lists);

  Result hex = state({"dump", chk.string(), "--operator", "positions", "--state", "stat", "--limit", "1"});
  ASSERT_EQ(hex.exitCode, 0) << hex.err;
  EXPECT_NE(hex.out.find("0x"), std::string::npos) << hex.out;
  EXPECT_NE(hex.out.find("(test.WordStat v2)"), std::string::npos) << hex.out;
  EXPECT_NE(hex.err.find("give --plugin <lib.so> -c <Class>"), std::string::npos) << hex.err;
  Result ls = state({"ls", chk.string(), "--operator", "positions"});
  EXPECT_NE(ls.out.find("test.WordStat v2"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("ListState"), std::string::npos) << ls.out;

  // Without the plugin a user type's JSON is {"hex": ..., "serializer": ...}.
  Result hexJson = state({"dump", chk.string(), "--operator", "positions", "--state", "stat", "--format", "json"});
  ASSERT_EQ(hexJson.exitCode, 0) << hexJson.err;
  auto hexRows = jsonLines(hexJson.out);
  ASSERT_EQ(hexRows.size(), lists.size());
  for (const Json& row : hexRows) {
    EXPECT_EQ(row["value"]["serializer"].s, "test.WordStat v2");
    EXPECT_FALSE(row["value"]["hex"].s.empty());
    EXPECT_EQ(row["value"]["hex"].s.find_first_not_of("0123456789abcdef"), std::string::npos) << row["value"]["hex"].s;
  }
  // With it, its text form, as a string.
  Result textJson = state({"dump", chk.string(), "--operator", "positions", "--state", "stat", "--format", "json",
                           "--plugin", kStatePlugin, "-c", "WordPositions", "--", "--input", in.string()});
  ASSERT_EQ(textJson.exitCode, 0) << textJson.err;
  for (const Json& row : jsonLines(textJson.out)) {
    const auto& list = lists[row["key"].s];
    ASSERT_FALSE(list.empty()) << row["key"].s;
    EXPECT_EQ(row["value"].type, Json::kString);
    EXPECT_EQ(row["value"].s, "WordStat{count=" + std::to_string(list.size()) + ", firstLine=" +
                                  std::to_string(list.front()) + "}");
  }

  Result decoded = state({"dump", chk.string(), "--operator", "positions", "--state", "stat", "--format", "csv",
                          "--plugin", kStatePlugin, "-c", "WordPositions", "--", "--input", in.string()});
  ASSERT_EQ(decoded.exitCode, 0) << decoded.err;
  EXPECT_EQ(decoded.err.find("hex"), std::string::npos) << decoded.err;
  auto srows = parseCsv(decoded.out);
  ASSERT_EQ(srows.size(), lists.size() + 1);
  for (size_t i = 1; i < srows.size(); ++i) {
    const auto& list = lists[srows[i][0]];
    ASSERT_FALSE(list.empty()) << srows[i][0];
    EXPECT_EQ(srows[i][1], "WordStat{count=" + std::to_string(list.size()) + ", firstLine=" +
                               std::to_string(list.front()) + "}");
  }
}

TEST_F(State, ATruncatedKeyGroupFileOrSstGivesOneErrorNamingTheFile) {
  struct Case {
    const char* name;
    std::string cls;
    std::string ext;  // the file to truncate
  } cases[] = {{"key-group file", "WordCount", ".kg"}, {"sst", "WordCountIncremental", ".sst"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    fs::remove_all(ckdir());
    fs::path chk = checkpointOf(c.cls);
    ASSERT_FALSE(chk.empty());
    fs::path victim;
    for (const auto& e : fs::recursive_directory_iterator(chk.parent_path()))
      if (e.is_regular_file() && e.path().extension() == c.ext && fs::file_size(e.path()) > 16) victim = e.path();
    ASSERT_FALSE(victim.empty());
    fs::resize_file(victim, fs::file_size(victim) / 2);
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"dump", chk.string(), "--operator", "counts"}, {"ls", chk.string()}, {"diff", chk.string(), chk.string()}}) {
      Result r = state(args);
      EXPECT_EQ(r.exitCode, 3) << args[0] << ": " << r.err;
      EXPECT_NE(r.err.find(victim.string()), std::string::npos) << args[0] << ": " << r.err;
      EXPECT_NE(r.err.find("truncated"), std::string::npos) << args[0] << ": " << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args[0] << ": " << r.err;
    }
    expectNoTemporaryLeft();
  }
}

TEST_F(State, ReadingTheCheckpointsOfARunningJobNeitherDisturbsItNorFailsOtherThanByName) {
  // Checkpoints every 50 ms, three retained: the job deletes each checkpoint (and the shared
  // files only it referenced) while the reader may be at any point of reading it; the newest
  // lives for about 150 ms, so a reader started on it can get its files open (with one
  // retained, every read of this fast machine lost the race).
  std::vector<std::string> args = {"run", "-c", "WordCountIncremental", "-p", "2", "-D",
                                   "state.checkpoints.num-retained=3"};
  for (auto& f : ckFlags("50ms")) args.push_back(f);
  // 19 s of input: the job outlives the 20 reads however slowly a loaded machine runs them.
  args.insert(args.end(), {kPlugin, "--input", input(2000).string(), "--rate", "1500"});
  Process p(jobhost(args), tmp / "live.out", tmp / "live.err");
  ASSERT_TRUE(waitForCheckpoint(p, 1, std::chrono::seconds(60))) << readFile(tmp / "live.err");
  auto dirs = jobDirs();
  ASSERT_EQ(dirs.size(), 1u);
  int read = 0, gone = 0;
  for (int i = 0; i < 20 && p.running(); ++i) {
    int n = maxCheckpointId(dirs[0]);
    fs::path chk = dirs[0] / ("chk-" + std::to_string(n));
    Result r = state({"dump", chk.string(), "--operator", "counts", "--format", "csv"});
    if (r.exitCode == 0) {
      ++read;
      EXPECT_EQ(r.out.rfind("KEY,VALUE\r\n", 0), 0u) << r.out.substr(0, 200);
    } else {
      ++gone;  // deleted before its files were opened: one error naming what is missing
      EXPECT_EQ(r.exitCode, 3) << r.err;
      EXPECT_EQ(r.err.rfind("error: cannot read ", 0), 0u) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
  }
  EXPECT_GT(read, 0) << gone << " reads found their checkpoint deleted";
  EXPECT_TRUE(p.running()) << readFile(tmp / "live.err");
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait().exitCode, 130);
  // No error-level log line from the job (a checkpoint declined because the bounded
  // source reached its end is a warning that mentions "IO error", and is not the reader's).
  std::istringstream log(readFile(tmp / "live.err"));
  for (std::string line; std::getline(log, line);) {
    std::istringstream fields(line);
    std::string date, time, level;
    fields >> date >> time >> level;
    EXPECT_NE(level, "error") << line;
    EXPECT_NE(level, "critical") << line;
  }
  expectNoTemporaryLeft();
}

TEST_F(State, ANativeRocksDbSavepointReadsAsItsCanonicalConversion) {
  std::vector<std::string> args = {"run", "-c", "WordCountIncremental", "-p", "2"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", input(400).string(), "--rate", "500"});
  Process p(jobhost(args), tmp / "native.out", tmp / "native.err");
  ASSERT_TRUE(waitForCheckpoint(p, 1, std::chrono::seconds(60))) << readFile(tmp / "native.err");
  auto dirs = jobDirs();
  ASSERT_EQ(dirs.size(), 1u);
  Result sp = cli({"savepoint", dirs[0].filename().string(), (tmp / "sp").string(), "--format", "native"});
  ASSERT_EQ(sp.exitCode, 0) << sp.out << sp.err;
  p.signal(SIGTERM);
  p.wait();
  const std::string path = sp.out.substr(sp.out.find("Path: ") + 6, sp.out.find('\n', sp.out.find("Path: ")) - sp.out.find("Path: ") - 6);
  Result inspect = cli({"inspect", path});
  EXPECT_NE(inspect.out.find("IncrementalRemoteKeyedStateHandle"), std::string::npos) << inspect.out;
  fs::path canonical = tmp / "canonical";
  Result conv = cli({"convert", path, canonical.string()});
  ASSERT_EQ(conv.exitCode, 0) << conv.err;
  Result native = state({"dump", path, "--operator", "counts", "--format", "csv"});
  Result converted = state({"dump", canonical.string(), "--operator", "counts", "--format", "csv"});
  ASSERT_EQ(native.exitCode, 0) << native.err;
  EXPECT_GT(std::count(native.out.begin(), native.out.end(), '\n'), 10);
  EXPECT_EQ(native.out, converted.out);
  Result diff = state({"diff", path, canonical.string()});
  EXPECT_EQ(diff.exitCode, 0) << diff.out << diff.err;
  expectNoTemporaryLeft();
}

TEST_F(State, BadArgumentsGiveOneClearErrorAndExitTwo) {
  fs::path chk = checkpointOf("WordCount");
  ASSERT_FALSE(chk.empty());
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"dump", chk.string(), "--operator", "nope"}, "has no operator 'nope'; operators with keyed state: counts"},
      {{"dump", chk.string(), "--operator", "counts", "--state", "x"}, "has no state 'x'; its states: reduce"},
      {{"dump", chk.string(), "--operator", "counts", "--format", "xml"}, "--format xml is unknown"},
      {{"diff", chk.string(), chk.string(), "--operator", "nope"}, "neither snapshot holds keyed state for operator 'nope'"},
      {{"dump", chk.string(), "--operator", "counts", "-c", "WordCount"}, "-c/--class need --plugin"},
  };
  for (const auto& c : cases) {
    Result r = state(c.args);
    EXPECT_EQ(r.exitCode, 2) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  Result missing = state({"ls", (tmp / "no-such-snapshot").string()});
  EXPECT_EQ(missing.exitCode, 3) << missing.err;
  EXPECT_NE(missing.err.find("no-such-snapshot"), std::string::npos) << missing.err;
}

TEST_F(State, AMissingTemporaryDirectoryOrAConversionIntoASnapshotIsOneClearError) {
  fs::path chk = checkpointOf("WordCountIncremental");
  ASSERT_FALSE(chk.empty());
  auto sums = treeChecksums(chk.parent_path());
  // Reading RocksDB state copies it into $TMPDIR: one that does not exist ended the
  // process with an uncaught filesystem_error (exit 134).
  for (const std::string& tmpdir : std::vector<std::string>{"/nonexistent", (tmp / "a-file").string()}) {
    writeFile(tmp / "a-file", "x");
    Result r = run({"/usr/bin/env", "TMPDIR=" + tmpdir, kJobhost, "state", "dump", chk.string(), "--operator", "counts"},
                   tmp.path);
    EXPECT_EQ(r.exitCode, 3) << r.err;
    EXPECT_NE(r.err.find("cannot use the temporary directory TMPDIR=" + tmpdir), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // A savepoint written inside a checkpoint (or a job's directory) goes when that goes.
  for (const fs::path& inside : {chk / "keep", chk.parent_path() / "keep"}) {
    Result conv = cli({"convert", chk.string(), inside.string()});
    EXPECT_EQ(conv.exitCode, 2) << conv.err;
    EXPECT_NE(conv.err.find(inside.string() + " is inside"), std::string::npos) << conv.err;
    EXPECT_FALSE(fs::exists(inside));
  }
  EXPECT_EQ(treeChecksums(chk.parent_path()), sums);
}

}  // namespace
