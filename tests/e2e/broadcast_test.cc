// Broadcast state end to end (issue 33, item 4): the example class WordThresholds, run by
// the jobhost binary, against a result the test computes on its own from the same files;
// and a checkpoint taken while the rules are still being read, restored at another
// parallelism, where the rules read before it can only come from the broadcast state.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_fixture.h"

namespace e2e {
namespace {

/// Word counts as the example's tokenizer makes them: whitespace-separated, lower-cased.
std::map<std::string, long> countWords(const std::string& text) {
  std::map<std::string, long> counts;
  std::istringstream in(text);
  for (std::string w; in >> w;) {
    for (char& c : w) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    ++counts[w];
  }
  return counts;
}

/// Rules for the first 20 words of the bundled input (in word order): even ones exactly at
/// their count in `repeat` copies of the input (reached), odd ones one above (not reached).
/// Each line is "<word> <threshold as 4 digits>", so a line keeps its length when its
/// threshold is replaced.
std::vector<std::pair<std::string, long>> makeRules(int repeat) {
  auto counts = countWords(readFile(kWords));
  std::vector<std::pair<std::string, long>> rules;
  for (const auto& [w, n] : counts) {
    if (rules.size() == 20) break;
    long threshold = n * repeat + (rules.size() % 2 ? 1 : 0);
    rules.push_back({w, threshold});
  }
  return rules;
}

std::string rulesText(const std::vector<std::pair<std::string, long>>& rules, const char* fixed = nullptr) {
  std::string out;
  char t[16];
  for (const auto& [w, n] : rules) {
    std::snprintf(t, sizeof t, "%04ld", n);
    out += w + " " + (fixed ? fixed : t) + "\n";
  }
  return out;
}

/// What WordThresholds must print: (word,count,threshold) per word at or over its rule.
std::multiset<std::string> expectedAlerts(const std::string& words,
                                          const std::vector<std::pair<std::string, long>>& rules) {
  auto counts = countWords(words);
  std::multiset<std::string> out;
  for (const auto& [w, t] : rules)
    if (counts[w] >= t) out.insert("(" + w + "," + std::to_string(counts[w]) + "," + std::to_string(t) + ")");
  return out;
}

/// Output lines without print()'s "N> " subtask prefix.
std::multiset<std::string> alertsIn(const std::string& out) {
  std::multiset<std::string> lines;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) {
    auto gt = l.find("> ");
    if (gt != std::string::npos && l.front() != '(') l = l.substr(gt + 2);
    if (!l.empty()) lines.insert(l);
  }
  return lines;
}

class Broadcast : public Cli {};

TEST_F(Broadcast, WordThresholdsPrintsTheWordsThatReachTheirRulesAtEveryParallelism) {
  const auto rules = makeRules(3);
  writeFile(tmp / "rules.txt", rulesText(rules));
  const auto expected = expectedAlerts(readFile(input(3)), rules);
  ASSERT_EQ(expected.size(), 10u) << "every other rule is reached";
  for (int p : {1, 2}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    Result r = cli({"run", "-c", "WordThresholds", "-p", std::to_string(p), kPlugin, "--input", input(3).string(),
                    "--rules", (tmp / "rules.txt").string()});
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_EQ(alertsIn(r.out), expected);
  }
}

TEST_F(Broadcast, RulesReadBeforeACheckpointComeBackFromItsBroadcastStateAtAnotherParallelism) {
  // Rules at 5 per second (4 s for 20), words for about as long; the job is stopped about
  // a second in, with some rules read. The restore gets a rules file in which every
  // threshold says 0001 (always reached) in the same number of bytes: it resumes after the
  // part read before the checkpoint, so its result must be the original rules' for the
  // first K words and threshold 1 for the others, with K >= 1 — the first K rules can only
  // have come back from the broadcast state, into every subtask, at another parallelism.
  const int repeat = 400;
  const auto rules = makeRules(repeat);
  const fs::path original = tmp / "rules.txt", changed = tmp / "rules-changed.txt";
  writeFile(original, rulesText(rules));
  writeFile(changed, rulesText(rules, "0001"));
  ASSERT_EQ(readFile(original).size(), readFile(changed).size());
  const std::string words = readFile(input(repeat));
  for (auto [from, to] : {std::pair{2, 1}, std::pair{1, 3}}) {
    SCOPED_TRACE("p=" + std::to_string(from) + " -> p=" + std::to_string(to));
    fs::remove_all(ckdir());
    std::vector<std::string> args = {"run", "-c", "WordThresholds", "-p", std::to_string(from)};
    for (auto& f : ckFlags("100ms")) args.push_back(f);
    args.insert(args.end(), {kPlugin, "--input", input(repeat).string(), "--rate", "1500", "--rules",
                             original.string(), "--rules-rate", "5"});
    Process p(jobhost(args), tmp / "first.out", tmp / "first.err");
    // A checkpoint at least a second after the first one, when rules have been read (not
    // a count of checkpoints: on a loaded machine fewer are taken while the sources run).
    ASSERT_TRUE(waitForCheckpoint(p, 1, std::chrono::seconds(60))) << readFile(tmp / "first.err");
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    ASSERT_TRUE(waitForCheckpoint(p, latestCheckpointNumber() + 1, std::chrono::seconds(60)))
        << readFile(tmp / "first.err");
    p.signal(SIGTERM);
    Result first = p.wait(std::chrono::seconds(60));
    ASSERT_EQ(first.exitCode, 130) << first.err;
    EXPECT_EQ(readFile(tmp / "first.out"), "") << "nothing is printed before the end of the input";
    auto dirs = jobDirs();
    ASSERT_EQ(dirs.size(), 1u);
    auto chk = completed(dirs.front());
    ASSERT_FALSE(chk.empty());

    std::vector<std::string> restore = {"run", "-c", "WordThresholds", "-p", std::to_string(to), "-s",
                                        chk.back().string()};
    for (auto& f : ckFlags("100ms")) restore.push_back(f);
    restore.insert(restore.end(),
                   {kPlugin, "--input", input(repeat).string(), "--rules", changed.string()});
    Result second = cli(restore);
    ASSERT_EQ(second.exitCode, 0) << second.err;
    const auto got = alertsIn(second.out);
    int restoredRules = -1;
    for (size_t k = 0; k <= rules.size() && restoredRules < 0; ++k) {
      auto mixed = rules;
      for (size_t i = k; i < mixed.size(); ++i) mixed[i].second = 1;
      if (got == expectedAlerts(words, mixed)) restoredRules = static_cast<int>(k);
    }
    EXPECT_GE(restoredRules, 1) << "the output is no prefix of the rules restored and the rest read again: "
                                << testing::PrintToString(got) << " (restored from " << chk.back() << ")";
  }
}

}  // namespace
}  // namespace e2e
