// example: sdk_examples/fan_out.cpp
#include <jobhost/jobhost.h>

#include <sstream>
#include <string>
#include <utility>

using WordAndCount = std::pair<std::string, int64_t>;

/// One stream, three readers: every word is counted, counted again per first letter,
/// and long words are also printed as they come.
class WordsThreeWays : public jobhost::Job {
 public:
  void build(jobhost::StreamEnvironment& env) override {
    auto words = env.readTextFile(env.args().get("--input").value())
                     .uid("lines")
                     .flatMap<std::string>([](const std::string& line, jobhost::Collector<std::string>& out) {
                       std::istringstream in(line);
                       for (std::string w; in >> w;) out.collect(w);
                     });
    words.map([](const std::string& w) { return WordAndCount{w, 1}; })
        .keyBy([](const WordAndCount& wc) { return wc.first; })
        .sum<1>()
        .uid("per-word")
        .print();  // (word,count)
    words.map([](const std::string& w) { return WordAndCount{w.substr(0, 1) + "*", 1}; })
        .keyBy([](const WordAndCount& wc) { return wc.first; })
        .sum<1>()
        .uid("per-letter")
        .print();  // (t*,count)
    words.filter([](const std::string& w) { return w.size() > 4; }).map([](const std::string& w) {
      return "long: " + w;
    }).print();
  }
};
JOBHOST_JOB(WordsThreeWays, "Counts words and first letters, prints long words", "hashmap")
