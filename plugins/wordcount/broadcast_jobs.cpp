// The broadcast state pattern in the example plugin (issue 33): rules broadcast to every
// subtask of a keyed word count.
//
// WordThresholds: --input FILE of words (as WordCount, words.h) and --rules FILE of
// lines "<word> <threshold>" (a later line for a word replaces its rule; threshold 0
// removes it). Each subtask keeps every rule in the broadcast state "thresholds" and
// counts its words in keyed state; at the end of the input it prints
// "(<word>,<count>,<threshold>)" for each word that has a rule and at least that many
// occurrences. The result does not depend on whether a rule or a word arrives first:
// the counts are compared with the rules once both inputs have ended (an event-time
// timer at the end of time, which fires when the watermark of both inputs is the end of
// input). Rules that were read before a checkpoint are not read again after a restore
// (the rules source resumes at its position), so every rule in the result of a
// restored run came back from the broadcast state — at any parallelism.
// --rate N throttles the words, --rules-rate N the rules (lines per second; default: as
// fast as they can be read); --output DIR / --output-file FILE as the other examples
// (output.h). Checkpoints are taken while both sources read (a finished source ends
// them, as in Flink before FLIP-147), so a long-running rules input is what puts rules
// into a checkpoint's broadcast state.
#include <jobhost/jobhost.h>

#include "output.h"
#include "words.h"

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

namespace {

using Rule = std::pair<std::string, int64_t>;                 // (word, threshold)
using Alert = std::tuple<std::string, int64_t, int64_t>;      // (word, count, threshold)

const jobhost::BroadcastStateDescriptor<std::string, int64_t> kThresholds{"thresholds"};

/// "<word> <threshold>" -> (word, threshold); anything else is refused with the line.
Rule parseRule(const std::string& line) {
  auto space = line.find(' ');
  Rule r;
  const char* end = line.data() + line.size();
  if (space == std::string::npos || space == 0 ||
      std::from_chars(line.data() + space + 1, end, r.second).ptr != end || r.second < 0)
    throw std::runtime_error("rule line '" + line.substr(0, 80) +
                             "' is not '<word> <threshold>' (a word, one space, a count of 0 or more)");
  r.first = line.substr(0, space);
  for (char& c : r.first) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

class ApplyThresholds
    : public jobhost::KeyedBroadcastProcessFunction<std::string, examples::WordCountRecord, Rule, Alert> {
 public:
  /// The end of time: fires once both inputs have ended (their watermark is the maximum).
  static constexpr int64_t kAtTheEnd = std::numeric_limits<int64_t>::max() - 1;

  void processElement(const examples::WordCountRecord& w, ReadOnlyContext& ctx,
                      jobhost::Collector<Alert>& out) override {
    int64_t n = count_.value().value_or(0) + w.second;
    count_.update(n);
    if (n == w.second) ctx.timerService().registerEventTimeTimer(kAtTheEnd);  // the key's first word
  }
  void processBroadcastElement(const Rule& rule, Context& ctx, jobhost::Collector<Alert>& out) override {
    auto thresholds = ctx.getBroadcastState(kThresholds);
    if (rule.second == 0) thresholds.remove(rule.first);
    else thresholds.put(rule.first, rule.second);
  }
  void onTimer(int64_t, OnTimerContext& ctx, jobhost::Collector<Alert>& out) override {
    const std::string word = ctx.currentKey();
    auto threshold = ctx.getBroadcastState(kThresholds).get(word);
    const int64_t n = count_.value().value_or(0);
    if (threshold && n >= *threshold) out.collect({word, n, *threshold});
  }

 private:
  jobhost::ValueState<int64_t> count_{*this, "count"};
};

class WordThresholds : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override {
    c.checkpointInterval(std::chrono::seconds(1));
    c.fixedDelayRestart(3, std::chrono::seconds(2));
  }
  void build(jobhost::StreamEnvironment& env) override {
    auto rulesPath = env.args().get("--rules");
    if (!rulesPath) throw jobhost::JobArgumentError("--rules FILE is required (lines '<word> <threshold>')");
    auto ruleLines = env.readTextFile(*rulesPath, static_cast<double>(env.args().getInt("--rules-rate", 0)));
    ruleLines.uid("rules");
    auto rules = ruleLines.map(parseRule).name("Parse Rules").broadcast(kThresholds);
    auto alerts = examples::lines(env)
                      .flatMap<examples::WordCountRecord>(examples::tokenize)
                      .name("Tokenizer")
                      .keyBy([](const examples::WordCountRecord& w) { return w.first; })
                      .connect(rules)
                      .process<ApplyThresholds>();
    alerts.uid("thresholds").name("Apply Thresholds");
    examples::writeOutput(env, alerts);
  }
};

}  // namespace

JOBHOST_JOB(WordThresholds, "Words that reach their threshold; thresholds broadcast from --rules (broadcast state)",
            "hashmap")
