// The example plugin's event-time class on Kafka timestamps (issue 32).
//
// KafkaWindowedWordCount reads lines from Kafka (--kafka-bootstrap HOST:PORT --topic T,
// and the other arguments of kafka_io.h) and counts each word per tumbling event-time
// window (--window, default 10s) of the records' Kafka timestamps. Watermarks are made per
// partition — the highest timestamp seen minus --out-of-orderness (default 2s) — and
// combined over the partitions; --idleness D leaves a partition without records for D out
// until it has records again. It prints (or writes, see output.h)
// "(<window end millis>,<word>,<count>)" per fired window and word. A bounded run
// (--kafka-bounded) ends with every window fired.
#include <jobhost/jobhost.h>
#include <jobhost/kafka.h>

#include "kafka_io.h"
#include "output.h"
#include "words.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

using namespace std::chrono_literals;

namespace {

struct CountWords : jobhost::AggregateFunction<std::pair<std::string, int64_t>, int64_t, int64_t> {
  int64_t createAccumulator() const override { return 0; }
  int64_t add(const std::pair<std::string, int64_t>& v, int64_t acc) const override { return acc + v.second; }
  int64_t getResult(const int64_t& acc) const override { return acc; }
  int64_t merge(int64_t a, const int64_t& b) const override { return a + b; }
};

using WindowCount = std::tuple<int64_t, std::string, int64_t>;  // (window end, word, count)

struct WithWindowEnd : jobhost::ProcessWindowFunction<int64_t, WindowCount, std::string> {
  void process(const std::string& word, Context& ctx, const std::vector<int64_t>& counts,
               jobhost::Collector<WindowCount>& out) override {
    out.collect({ctx.window().end, word, counts.front()});
  }
};

class KafkaWindowedWordCount : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override {
    c.checkpointInterval(1s);
    c.fixedDelayRestart(3, 2s);
  }
  void build(jobhost::StreamEnvironment& env) override {
    const auto& args = env.args();
    if (!args.get("--kafka-bootstrap"))
      throw jobhost::JobArgumentError("KafkaWindowedWordCount reads Kafka: give --kafka-bootstrap HOST:PORT --topic T");
    auto strategy = jobhost::WatermarkStrategy<std::string>::forBoundedOutOfOrderness(args.getDuration("--out-of-orderness", 2s));
    if (args.get("--idleness")) strategy = strategy.withIdleness(args.getDuration("--idleness", 0ms));
    auto windows = jobhost::TumblingEventTimeWindows::of(args.getDuration("--window", 10s));
    auto counts = examples::kafkaLines(env, &strategy)
                      .flatMap<std::pair<std::string, int64_t>>(examples::tokenize)
                      .name("Tokenizer")
                      .keyBy([](const std::pair<std::string, int64_t>& p) { return p.first; })
                      .window(windows)
                      .aggregate(CountWords{}, WithWindowEnd{});
    counts.uid("window-counts");
    examples::writeOutput(env, counts);
  }
};

}  // namespace

JOBHOST_JOB(KafkaWindowedWordCount, "Word counts per 10 s window of Kafka record timestamps, watermarks per partition",
            "hashmap")
