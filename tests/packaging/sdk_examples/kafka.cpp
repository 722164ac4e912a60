// example: sdk_examples/kafka.cpp
#include <jobhost/jobhost.h>
#include <jobhost/kafka.h>  // not in jobhost.h: link jobhost::kafka (brings librdkafka)

#include <chrono>
#include <string>
#include <utility>

using namespace std::chrono_literals;
using Count = std::pair<std::string, int64_t>;

// Word counts from the records of topic --in (one word per record) into topic --out,
// exactly once for read_committed readers: each subtask's records of a checkpoint
// interval are one Kafka transaction, committed when the checkpoint completes.
class KafkaWordCounter : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override { c.checkpointInterval(std::chrono::seconds(1)); }
  void build(jobhost::StreamEnvironment& env) override {
    const std::string brokers = env.args().get("--brokers", "localhost:9092");
    auto source = jobhost::KafkaSource<std::string>::builder()
                      .setBootstrapServers(brokers)
                      .setTopics({env.args().get("--in", "words")})
                      .setGroupId("kafka-word-counter")  // offsets committed for monitoring
                      .setStartingOffsets(jobhost::OffsetsInitializer::earliest())
                      .build();
    // Event time from the records' Kafka timestamps; watermarks per partition, a partition
    // without records for 30 s does not hold the others back.
    auto words = env.fromSource(
        source, jobhost::WatermarkStrategy<std::string>::forBoundedOutOfOrderness(2s).withIdleness(30s), "Kafka Source");
    words.uid("kafka-source");  // its offsets are restored by uid
    auto counts = words.map([](const std::string& w) { return Count{w, 1}; })
                      .keyBy([](const Count& c) { return c.first; })
                      .sum<1>();
    counts.uid("counts");
    auto sink = jobhost::KafkaSink<Count>::builder()
                    .setBootstrapServers(brokers)
                    .setTopic(env.args().get("--out", "counts"))
                    .setKeySerializer([](const Count& c) { return c.first; })
                    .setValueSerializer([](const Count& c) { return std::to_string(c.second); })
                    .setDeliveryGuarantee(jobhost::DeliveryGuarantee::kExactlyOnce)
                    .setTransactionalIdPrefix("kafka-word-counter")  // one per job
                    .build();
    counts.sinkTo(sink, "Kafka Sink").uid("kafka-sink");
  }
};
JOBHOST_JOB(KafkaWordCounter, "Word counts from one Kafka topic into another, exactly once", "hashmap")
