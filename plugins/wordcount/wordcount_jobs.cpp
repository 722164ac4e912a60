// The example plugin: word counts on either backend, a keyed running average, distinct
// words with MapState, a per-key sequence checker (the exactly-once oracle of the tests)
// and a demo of what a restore does to plain member variables.
//
// Word-count jobs read lines from localhost:9999 by default (`nc -lk 9999`), or from the
// file given with `--input FILE` (a directory: each of its files once, in name order;
// with `--monitor 1s` also every file that appears in it later); `--host H --port N` choose another socket, `--rate N`
// throttles a file to N lines per second; instead of stdout, `--output DIR` writes exactly
// once through the file sink and `--output-file FILE` to a text file (see output.h). The
// word `error` makes them throw (a task failure, handled by the restart strategy); the
// word `crash` aborts the process.
#include <jobhost/jobhost.h>

#include "output.h"
#include "words.h"

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>

using namespace std::chrono_literals;
using jobhost::Collector;
using examples::WordCountRecord;

namespace {

using examples::lines;
using examples::tokenize;

template <class T>
void sink(jobhost::StreamEnvironment& env, jobhost::DataStream<T> stream) {
  examples::writeOutput(env, stream);
}

void buildWordCount(jobhost::StreamEnvironment& env) {
  auto counts = lines(env)
                    .flatMap<WordCountRecord>(tokenize)
                    .name("Tokenizer")
                    .keyBy([](const WordCountRecord& r) { return r.first; })
                    .sum<1>();
  counts.uid("counts");
  sink(env, counts);
}

}  // namespace

/// Counts words, keeping the counts on the heap.
class WordCount : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override {
    c.checkpointInterval(1s);
    c.fixedDelayRestart(3, 2s);
  }
  void build(jobhost::StreamEnvironment& env) override { buildWordCount(env); }
};
JOBHOST_JOB(WordCount, "Counts words (hashmap backend, checkpoints every second)", "hashmap")

/// The same dataflow on RocksDB with incremental checkpoints.
class WordCountIncremental : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override {
    c.checkpointInterval(1s);
    c.fixedDelayRestart(3, 2s);
  }
  void build(jobhost::StreamEnvironment& env) override { buildWordCount(env); }
};
JOBHOST_JOB_INCREMENTAL(WordCountIncremental, "Counts words (rocksdb backend, incremental checkpoints)", "rocksdb", 1)

namespace {
/// Per key: running average of the values, kept in two ValueStates.
class AverageFunction
    : public jobhost::KeyedProcessFunction<std::string, std::pair<std::string, double>, std::pair<std::string, double>> {
 public:
  void processElement(const std::pair<std::string, double>& v, Context&, Collector<OutputType>& out) override {
    int64_t n = count_.value().value_or(0) + 1;
    double s = sum_.value().value_or(0) + v.second;
    count_.update(n);
    sum_.update(s);
    out.collect({v.first, s / static_cast<double>(n)});
  }

 private:
  jobhost::ValueState<int64_t> count_{*this, "count"};
  jobhost::ValueState<double> sum_{*this, "sum"};
};
}  // namespace

/// Lines "key value": prints the running average per key.
class RunningAverage : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override { c.checkpointInterval(1s); }
  void build(jobhost::StreamEnvironment& env) override {
    auto parsed = lines(env).flatMap<std::pair<std::string, double>>(
        [](const std::string& line, Collector<std::pair<std::string, double>>& out) {
          std::istringstream in(line);
          std::string key;
          double value;
          if (in >> key >> value) out.collect({key, value});
        });
    auto avg = parsed.keyBy([](const auto& p) { return p.first; }).process<AverageFunction>();
    avg.uid("averages");
    sink(env, avg);
  }
};
JOBHOST_JOB(RunningAverage, "Running average per key of lines 'key value' (ValueState)", "hashmap")

namespace {
/// Per first letter: the distinct words seen, in a MapState; emits (letter,distinct) on
/// every new word.
class DistinctFunction
    : public jobhost::KeyedProcessFunction<std::string, std::string, std::pair<std::string, int64_t>> {
 public:
  void processElement(const std::string& word, Context& ctx, Collector<OutputType>& out) override {
    if (words_.contains(word)) return;
    words_.put(word, 1);
    int64_t n = distinct_.value().value_or(0) + 1;
    distinct_.update(n);
    out.collect({ctx.currentKey(), n});
  }

 private:
  jobhost::MapState<std::string, int64_t> words_{*this, "words"};
  jobhost::ValueState<int64_t> distinct_{*this, "distinct"};
};
}  // namespace

/// Distinct words per first letter (MapState).
class DistinctWords : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override { c.checkpointInterval(1s); }
  void build(jobhost::StreamEnvironment& env) override {
    auto words = lines(env).flatMap<std::string>([](const std::string& line, Collector<std::string>& out) {
      std::istringstream in(line);
      std::string w;
      while (in >> w) out.collect(w);
    });
    auto distinct = words.keyBy([](const std::string& w) { return w.substr(0, 1); }).process<DistinctFunction>();
    distinct.uid("distinct");
    sink(env, distinct);
  }
};
JOBHOST_JOB(DistinctWords, "Distinct words per first letter (MapState)", "hashmap")

namespace {
using SeqRecord = std::pair<int64_t, int64_t>;  // (key, sequence number)

/// Each key's values must arrive as 0, 1, 2, ...; anything else is reported as an alert.
class SequenceCheckFunction : public jobhost::KeyedProcessFunction<int64_t, SeqRecord, std::string> {
 public:
  void processElement(const SeqRecord& r, Context&, Collector<std::string>& out) override {
    int64_t expected = next_.value().value_or(0);
    if (r.second != expected)
      out.collect("ALERT key " + std::to_string(r.first) + ": expected " + std::to_string(expected) + ", got " +
                  std::to_string(r.second));
    next_.update(r.second + 1);
    if (r.second + 1 == total_) out.collect("DONE key " + std::to_string(r.first) + " " + std::to_string(r.second + 1));
  }
  int64_t total_ = 0;

 private:
  jobhost::ValueState<int64_t> next_{*this, "next"};
};
}  // namespace

/// Exactly-once oracle: `--keys K --per-key N` generated records (key, seq), throttled by
/// `--rate R` records/s; `--fail-after M` throws once after M records in the first run.
class SequenceChecker : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override {
    c.checkpointInterval(200ms);
    c.fixedDelayRestart(3, 100ms);
  }
  void build(jobhost::StreamEnvironment& env) override {
    int64_t keys = env.args().getInt("--keys", 10);
    int64_t perKey = env.args().getInt("--per-key", 1000);
    int64_t rate = env.args().getInt("--rate", 0);
    int64_t failAfter = env.args().getInt("--fail-after", -1);
    std::string marker = env.args().get("--fail-marker", "");
    if (keys <= 0 || perKey <= 0) throw jobhost::JobArgumentError("--keys and --per-key must be positive");
    auto records = env.fromGenerator<SeqRecord>(
        static_cast<uint64_t>(keys * perKey),
        [keys](uint64_t i) { return SeqRecord{static_cast<int64_t>(i) % keys, static_cast<int64_t>(i) / keys}; },
        static_cast<double>(rate));
    auto failing = records.map([failAfter, marker, n = int64_t{0}](const SeqRecord& r) mutable {
      // Fails once: the marker file records that the failure already happened.
      if (failAfter >= 0 && ++n == failAfter && !marker.empty() && std::getenv("JOBHOST_NO_FAIL") == nullptr) {
        if (FILE* f = std::fopen(marker.c_str(), "r")) {
          std::fclose(f);
        } else if (FILE* w = std::fopen(marker.c_str(), "w")) {
          std::fclose(w);
          throw std::runtime_error("injected failure after " + std::to_string(failAfter) + " records");
        }
      }
      return r;
    });
    auto checked = failing.keyBy([](const SeqRecord& r) { return r.first; })
                       .process<SequenceCheckFunction>([perKey] {
                         auto f = std::make_unique<SequenceCheckFunction>();
                         f->total_ = perKey;
                         return f;
                       });
    checked.uid("checker");
    sink(env, checked);
  }
};
JOBHOST_JOB(SequenceChecker, "Per-key sequence checker: reports gaps or repeats (exactly-once oracle)", "hashmap")

namespace {
/// Counts per key in declared state and in a plain member, to show which survives.
class MemberVsStateFunction
    : public jobhost::KeyedProcessFunction<std::string, WordCountRecord, std::string> {
 public:
  void processElement(const WordCountRecord& r, Context&, Collector<std::string>& out) override {
    ++member_;  // a plain member: not part of any snapshot
    int64_t n = state_.value().value_or(0) + 1;
    state_.update(n);
    out.collect("(" + r.first + ",state=" + std::to_string(n) + ",member=" + std::to_string(member_) + ")");
  }

 private:
  int64_t member_ = 0;
  jobhost::ValueState<int64_t> state_{*this, "count"};
};
}  // namespace

/// Shows that only declared state survives a restore: prints (word,state=N,member=M).
class MemberVariableDemo : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override { c.checkpointInterval(1s); }
  void build(jobhost::StreamEnvironment& env) override {
    auto out = lines(env)
                   .flatMap<WordCountRecord>(tokenize)
                   .keyBy([](const WordCountRecord& r) { return r.first; })
                   .process<MemberVsStateFunction>();
    out.uid("member-demo");
    sink(env, out);
  }
};
JOBHOST_JOB(MemberVariableDemo, "Prints a state counter next to a plain member counter", "hashmap")
