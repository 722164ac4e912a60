// plugins/wordcount/kafka_io.h — the example classes' Kafka input and output (issue 32),
// chosen with job arguments:
//
//   --kafka-bootstrap HOST:PORT   the brokers (input and output)
//   --topic T[,T2...]             input topics (or --topic-pattern REGEX: whole names)
//   --kafka-group G               consumer group: offsets committed at each checkpoint
//                                 (monitoring only; the checkpoint holds the real ones)
//   --kafka-start S               earliest (default) | latest | committed |
//                                 committed-earliest | committed-latest | <epoch millis>
//   --kafka-bounded               stop at the offsets the partitions have at the start
//   --kafka-discovery DURATION    look for new partitions this often (default 5min)
//   --kafka-timeout DURATION      how long the start waits for the brokers (default 30s)
//   --kafka-skip-bad              skip (and count) records that are not UTF-8 text,
//                                 instead of failing the task
//   --kafka-output TOPIC          write the results to TOPIC (key: the word, when there is
//                                 one; value: the text print() shows)
//   --kafka-delivery G            none | at-least-once (default) | exactly-once
//   --kafka-transactional-id-prefix P   exactly-once (default: jobhost-<output topic>)
//   --kafka-property K=V          a librdkafka property for source and sink (repeatable)
//   --kafka-source-property K=V / --kafka-sink-property K=V   for one of them
#pragma once

#include <jobhost/jobhost.h>
#include <jobhost/kafka.h>

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace examples {

/// Every "K=V" given after `flag` (the flag may repeat).
inline std::vector<std::pair<std::string, std::string>> kafkaProperties(const jobhost::JobArgs& args,
                                                                        const std::string& flag) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& kv : args.getAll(flag)) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw jobhost::JobArgumentError("job argument " + flag + " takes KEY=VALUE, got '" + kv + "'");
    out.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return out;
}

/// Whether `s` is valid UTF-8 without NUL bytes (a line of text).
inline bool isTextLine(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == 0) return false;
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

/// The lines of the Kafka topics the arguments name (values as text; a value that is not
/// UTF-8 text is rejected). `strategy`: watermarks per partition (null: none).
inline jobhost::DataStream<std::string> kafkaLines(jobhost::StreamEnvironment& env,
                                                   const jobhost::WatermarkStrategy<std::string>* strategy = nullptr) {
  using namespace std::chrono_literals;
  const auto& args = env.args();
  auto b = jobhost::KafkaSource<std::string>::builder();
  b.setBootstrapServers(args.get("--kafka-bootstrap").value());
  auto topic = args.get("--topic");
  auto pattern = args.get("--topic-pattern");
  if (topic && pattern) throw jobhost::JobArgumentError("give --topic or --topic-pattern, not both");
  if (pattern) {
    b.setTopicPattern(*pattern);
  } else if (topic) {
    std::vector<std::string> topics;
    std::string_view rest = *topic;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      if (comma != 0) topics.emplace_back(rest.substr(0, comma));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    b.setTopics(topics);
  } else {
    throw jobhost::JobArgumentError("--kafka-bootstrap needs --topic T (or --topic-pattern REGEX)");
  }
  if (auto g = args.get("--kafka-group")) b.setGroupId(*g);
  const std::string start = args.get("--kafka-start", "earliest");
  using jobhost::OffsetsInitializer;
  if (start == "earliest") b.setStartingOffsets(OffsetsInitializer::earliest());
  else if (start == "latest") b.setStartingOffsets(OffsetsInitializer::latest());
  else if (start == "committed") b.setStartingOffsets(OffsetsInitializer::committedOffsets());
  else if (start == "committed-earliest")
    b.setStartingOffsets(OffsetsInitializer::committedOffsets(OffsetsInitializer::ResetStrategy::kEarliest));
  else if (start == "committed-latest")
    b.setStartingOffsets(OffsetsInitializer::committedOffsets(OffsetsInitializer::ResetStrategy::kLatest));
  else b.setStartingOffsets(OffsetsInitializer::timestamp(args.getInt("--kafka-start", 0)));
  if (args.has("--kafka-bounded")) b.setBounded(OffsetsInitializer::latest());
  b.setProperty("partition.discovery.interval.ms",
                std::to_string(args.getDuration("--kafka-discovery", std::chrono::minutes(5)).count()));
  b.setProperty("client.startup.timeout.ms", std::to_string(args.getDuration("--kafka-timeout", 30s).count()));
  if (args.has("--kafka-skip-bad")) b.skipUndeserializableRecords();
  for (const auto& [k, v] : kafkaProperties(args, "--kafka-property")) b.setProperty(k, v);
  for (const auto& [k, v] : kafkaProperties(args, "--kafka-source-property")) b.setProperty(k, v);
  b.setValueOnlyDeserializer([](std::string_view value) {
    if (!isTextLine(value)) throw jobhost::SerializationError("the value is not a line of UTF-8 text");
    return std::string(value);
  });
  auto source = b.build();
  auto s = strategy ? env.fromSource(source, *strategy, "Kafka Source") : env.fromSource(source, "Kafka Source");
  s.uid("lines");
  return s;
}

/// The record key of a result: the word of a (word, count) pair, none otherwise.
template <class T>
std::optional<std::string> kafkaKeyOf(const T& v) {
  if constexpr (requires { requires std::is_convertible_v<decltype(v.first), std::string>; }) return std::string(v.first);
  else if constexpr (requires { std::get<1>(v); requires std::is_convertible_v<decltype(std::get<1>(v)), std::string>; })
    return std::string(std::get<1>(v));
  else return std::nullopt;
}

/// Writes `stream` to the topic of --kafka-output (see the file comment).
template <class T>
void writeKafka(jobhost::StreamEnvironment& env, jobhost::DataStream<T> stream, const std::string& topic,
                const std::string& uid) {
  const auto& args = env.args();
  auto bootstrap = args.get("--kafka-bootstrap");
  if (!bootstrap) throw jobhost::JobArgumentError("--kafka-output needs --kafka-bootstrap HOST:PORT");
  const std::string delivery = args.get("--kafka-delivery", "at-least-once");
  jobhost::DeliveryGuarantee g;
  if (delivery == "none") g = jobhost::DeliveryGuarantee::kNone;
  else if (delivery == "at-least-once") g = jobhost::DeliveryGuarantee::kAtLeastOnce;
  else if (delivery == "exactly-once") g = jobhost::DeliveryGuarantee::kExactlyOnce;
  else throw jobhost::JobArgumentError("--kafka-delivery must be none, at-least-once or exactly-once, got '" + delivery + "'");
  auto b = jobhost::KafkaSink<T>::builder();
  b.setBootstrapServers(*bootstrap)
      .setTopic(topic)
      .setDeliveryGuarantee(g)
      .setTransactionalIdPrefix(args.get("--kafka-transactional-id-prefix", "jobhost-" + topic))
      .setKeySerializer([](const T& v) { return kafkaKeyOf(v); });
  for (const auto& [k, v] : kafkaProperties(args, "--kafka-property")) b.setProperty(k, v);
  for (const auto& [k, v] : kafkaProperties(args, "--kafka-sink-property")) b.setProperty(k, v);
  stream.sinkTo(b.build(), "Kafka Sink").uid(uid);
}

}  // namespace examples
