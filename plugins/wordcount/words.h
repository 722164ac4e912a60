// plugins/wordcount/words.h — the word-count examples' input and tokenizer, shared by
// the classes in wordcount_jobs.cpp and postgres_jobs.cpp.
//
// Lines come from localhost:9999 by default (`nc -lk 9999`), `--host H --port N` for
// another socket, `--input FILE` (a directory: each of its files once, in name order;
// with `--monitor 1s` also every file that appears in it later), or Kafka with
// `--kafka-bootstrap HOST:PORT --topic T` (record values are lines; kafka_io.h has the
// other --kafka-* arguments); `--rate N` throttles a file to N lines per second. Words are whitespace-separated and lower-cased; the word
// `error` makes the tokenizer throw (a task failure, handled by the restart strategy),
// the word `crash` aborts the process.
#pragma once

#include <jobhost/jobhost.h>

#include "kafka_io.h"

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>

namespace examples {

using WordCountRecord = std::pair<std::string, int64_t>;

/// The job's lines, from the source the arguments choose (uid "lines").
inline jobhost::DataStream<std::string> lines(jobhost::StreamEnvironment& env) {
  const auto& args = env.args();
  // One uid for every source: a file's read position restores into a file source, a
  // Kafka source's offsets into a Kafka source; a socket source has no position and
  // ignores it.
  if (args.get("--kafka-bootstrap") && (args.get("--topic") || args.get("--topic-pattern"))) {
    if (args.get("--input")) throw jobhost::JobArgumentError("give --input or --topic, not both");
    return kafkaLines(env);
  }
  if (auto input = args.get("--input")) {
    std::error_code ec;
    const double rate = static_cast<double>(args.getInt("--rate", 0));
    if (args.get("--monitor") || std::filesystem::is_directory(*input, ec)) {
      // A directory: every file in it once, in name order; with --monitor D, also those
      // that appear later (checked every D).
      auto s = env.readTextFiles(*input, args.getDuration("--monitor", std::chrono::milliseconds(0)), rate);
      s.uid("lines");
      return s;
    }
    auto s = env.readTextFile(*input, rate);
    s.uid("lines");
    return s;
  }
  auto s = env.socketTextStream(args.get("--host", "localhost"), static_cast<int>(args.getInt("--port", 9999)));
  s.uid("lines");
  return s;
}

/// (word, 1) for each word of `line`.
inline void tokenize(const std::string& line, jobhost::Collector<WordCountRecord>& out) {
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    if (word == "error") throw std::runtime_error("the input contained the word 'error'");
    if (word == "crash") std::abort();
    out.collect({word, 1});
    word.clear();
  };
  for (char c : line) {
    if (std::isspace(static_cast<unsigned char>(c))) flush();
    else word.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  flush();
}

}  // namespace examples
