// WordCountToPostgres: word counts upserted exactly once into a PostgreSQL table (issue
// 15), through jobhost::PostgresSink (jobhost/postgres.h; this plugin links libpq).
//
//   jobhost run -c WordCountToPostgres libwordcount_jobs.so --postgres "host=/tmp/pg dbname=app"
//       --table word_counts --input words.txt [--rate 200]          (one command line)
//
// The table needs a word column with a primary key (or unique index) and a count column:
//   CREATE TABLE word_counts (word text PRIMARY KEY, count bigint NOT NULL);
// After each completed checkpoint it holds every word seen up to that checkpoint's
// position with its count then — at the end of a bounded input, the input's word counts.
// The input is WordCount's (words.h: --input FILE or DIR, --rate R, or a socket).
// `--job-name NAME` names the job in its prepared transactions (default: the table name).
// `--append` appends every update as a row (word, n) instead, into a table without key:
// each (word, n) exactly once, which the tests' oracle also checks (an upsert's final
// table would hide an update written twice).
#include <jobhost/jobhost.h>
#include <jobhost/postgres.h>

#include <chrono>
#include <string>
#include <vector>

#include "words.h"

using namespace std::chrono_literals;
using examples::WordCountRecord;

/// WordCount upserting (word, count) into --table through --postgres.
class WordCountToPostgres : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override {
    c.checkpointInterval(1s);
    c.fixedDelayRestart(3, 2s);
  }
  void build(jobhost::StreamEnvironment& env) override {
    const auto& args = env.args();
    auto conninfo = args.get("--postgres");
    auto table = args.get("--table");
    if (!conninfo || !table)
      throw jobhost::JobArgumentError(
          "WordCountToPostgres needs --postgres \"<libpq connection string>\" and --table NAME, a table with "
          "(word text PRIMARY KEY, count bigint); e.g. --postgres \"host=/tmp/pg dbname=app\" --table word_counts");
    auto counts = examples::lines(env)
                      .flatMap<WordCountRecord>(examples::tokenize)
                      .name("Tokenizer")
                      .keyBy([](const WordCountRecord& r) { return r.first; })
                      .sum<1>();
    counts.uid("counts");
    jobhost::PostgresSink<WordCountRecord> sink(*conninfo, *table, {"word", "count"}, [](const WordCountRecord& r) {
      return std::vector<std::string>{r.first, std::to_string(r.second)};
    });
    if (!args.has("--append")) sink.upsertOn({"word"});
    if (auto name = args.get("--job-name")) sink.withJobName(*name);
    counts.sinkTo(sink, "PostgreSQL Sink").uid("postgres");
  }
};
JOBHOST_JOB(WordCountToPostgres, "Word counts upserted exactly once into PostgreSQL (--postgres, --table)", "hashmap")
