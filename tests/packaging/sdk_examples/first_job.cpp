// example: sdk_examples/first_job.cpp
#include <jobhost/jobhost.h>

#include <chrono>
#include <sstream>
#include <string>
#include <utility>

using namespace std::chrono_literals;
using WordAndCount = std::pair<std::string, int64_t>;

/// Counts the words of a file: jobhost run -c WordCounter my_jobs.so --input words.txt
class WordCounter : public jobhost::Job {
 public:
  // Optional. Settings of this class; a configuration file and -D override them.
  void configure(jobhost::JobConfig& c) override {
    c.checkpointInterval(1s);
    c.fixedDelayRestart(/*attempts=*/3, /*delay=*/2s);
  }

  // Required. Defines the dataflow; it runs after build() returns.
  void build(jobhost::StreamEnvironment& env) override {
    auto input = env.args().get("--input");  // the job's own arguments
    if (!input) throw jobhost::JobArgumentError("usage: --input FILE");

    env.readTextFile(*input)
        .uid("lines")  // the read position is checkpointed under this uid
        .flatMap<WordAndCount>([](const std::string& line, jobhost::Collector<WordAndCount>& out) {
          std::istringstream words(line);
          for (std::string w; words >> w;) out.collect({w, 1});
        })
        .keyBy([](const WordAndCount& wc) { return wc.first; })
        .sum<1>()
        .uid("counts")  // the running sums are keyed state under this uid
        .print();       // (word,count)
  }
};
JOBHOST_JOB(WordCounter, "Counts the words of --input FILE", "hashmap")
