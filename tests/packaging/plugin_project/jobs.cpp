// An out-of-tree plugin, built by the packaging test against the installed package: two
// word counts with the count per word in keyed state, one per backend.
//
// Job arguments: --input FILE (required), --output-file FILE (a text file, at-least-once;
// default: stdout), --rate N
// (lines per second; 0 = as fast as possible).
#include <jobhost/jobhost.h>

#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>

using namespace std::chrono_literals;

namespace {

using WordCountRecord = std::pair<std::string, int64_t>;

/// Per word: the running count in a ValueState, emitted as (word,count).
class CountWords : public jobhost::KeyedProcessFunction<std::string, std::string, WordCountRecord> {
 public:
  void processElement(const std::string& word, Context&, jobhost::Collector<WordCountRecord>& out) override {
    int64_t n = count_.value().value_or(0) + 1;
    count_.update(n);
    out.collect({word, n});
  }

 private:
  jobhost::ValueState<int64_t> count_{*this, "count"};
};

void buildWordCount(jobhost::StreamEnvironment& env) {
  const auto& args = env.args();
  auto input = args.get("--input");
  if (!input) throw jobhost::JobArgumentError("--input FILE is required");
  auto lines = env.readTextFile(*input, static_cast<double>(args.getInt("--rate", 0)));
  lines.uid("lines");  // the file position is restored into the source with this uid
  auto words = lines.flatMap<std::string>([](const std::string& line, jobhost::Collector<std::string>& out) {
    std::istringstream in(line);
    for (std::string w; in >> w;) out.collect(w);
  });
  auto counts = words.keyBy([](const std::string& w) { return w; }).process<CountWords>();
  counts.uid("counts");
  if (auto path = args.get("--output-file")) counts.writeAsText(*path);
  else counts.print();
}

}  // namespace

/// Counts on the heap (hashmap backend, full checkpoints).
class HeapWordCount : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override {
    c.checkpointInterval(1s);
  }
  void build(jobhost::StreamEnvironment& env) override { buildWordCount(env); }
};
JOBHOST_JOB(HeapWordCount, "Word count, hashmap backend", "hashmap")

/// The same counts in RocksDB with incremental checkpoints.
class RocksWordCount : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override {
    c.checkpointInterval(1s);
  }
  void build(jobhost::StreamEnvironment& env) override { buildWordCount(env); }
};
JOBHOST_JOB_INCREMENTAL(RocksWordCount, "Word count, rocksdb backend, incremental checkpoints", "rocksdb", 1)
