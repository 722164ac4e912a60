// example: sdk_examples/postgres.cpp
#include <jobhost/jobhost.h>
#include <jobhost/postgres.h>  // not in jobhost.h: link jobhost::postgres (brings libpq)

#include <chrono>
#include <string>
#include <utility>
#include <vector>

using Count = std::pair<std::string, int64_t>;

// Word counts upserted exactly once into --table, a table (word text PRIMARY KEY, n bigint)
// of the server --postgres "<libpq connection string>" reaches: a word's row changes
// when the checkpoint after its records completes.
class CountsToPostgres : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override { c.checkpointInterval(std::chrono::seconds(1)); }
  void build(jobhost::StreamEnvironment& env) override {
    auto lines = env.readTextFile(env.args().get("--input").value());
    lines.uid("lines");
    auto counts = lines.map([](const std::string& w) { return Count{w, 1}; })
                      .keyBy([](const Count& c) { return c.first; })
                      .sum<1>();
    counts.uid("counts");
    jobhost::PostgresSink<Count> rows(env.args().get("--postgres").value(), env.args().get("--table").value(),
                                      {"word", "n"}, [](const Count& c) {
                                        return std::vector<std::string>{c.first, std::to_string(c.second)};
                                      });
    counts.sinkTo(rows.upsertOn({"word"}), "PostgreSQL Sink").uid("postgres");
  }
};
JOBHOST_JOB(CountsToPostgres, "Word counts, exactly once, upserted into a PostgreSQL table", "hashmap")
