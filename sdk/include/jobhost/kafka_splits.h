// jobhost/kafka_splits.h — what KafkaSource (jobhost/kafka.h) keeps in checkpoints: the
// partitions a subtask reads with their next offsets, the subscription they came from, and
// which subtask owns a partition. No librdkafka here: the host reads these positions too
// (`jobhost inspect`, `jobhost state`, the restore check) without loading any plugin.
//
// A subtask's position (its operator state, one per source subtask):
//   "jhkafka" u8(format 1) u8(flags: 1 = initial discovery done)
//   bytes(subscription text) varint(n) n × split
//   split: bytes(topic) varint(partition) i64(next offset) i64(stopping offset)
//          i64(highest record timestamp seen, kNoTimestamp if none)
// Offsets are Kafka's: the next record to read. kEarliestOffset (-2) stands for "the
// earliest offset the partition still has" (a partition discovered while running is read
// from there, as in Flink); every other starting point is resolved to a number before
// the first checkpoint can record it. A stopping offset of kNoStoppingOffset means
// unbounded.
//
// Ownership (as Flink's KafkaSourceEnumerator.getSplitOwner, so a partition goes to the
// same subtask index as in Flink): the topic's Java String.hashCode() × 31, masked to
// 31 bits, modulo the parallelism is the subtask of partition 0; partition p goes to the
// p-th subtask after it, round-robin.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <algorithm>
#include <cstdint>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/errors.h"
#include "jobhost/operator.h"
#include "jobhost/serializer.h"

namespace jobhost {

inline constexpr int64_t kEarliestOffset = -2;      // Kafka's OFFSET_BEGINNING
inline constexpr int64_t kNoStoppingOffset = INT64_MIN;

/// One partition of a KafkaSource subtask.
struct KafkaSplit {
  std::string topic;
  int32_t partition = 0;
  int64_t offset = kEarliestOffset;           // the next offset to read
  int64_t stoppingOffset = kNoStoppingOffset;  // bounded: read up to (excluding) this offset
  int64_t maxTimestamp = kNoTimestamp;         // its watermark generator's progress
  bool finished() const { return stoppingOffset != kNoStoppingOffset && offset >= 0 && offset >= stoppingOffset; }
};

/// What a KafkaSource reads: a list of topics or a pattern that whole topic names match
/// (ECMAScript regular expression, as std::regex; Flink's topic pattern also matches the
/// whole name). Its text form, recorded in every position and in the plan
/// (PlanNode::subscription): "topics:a,b" or "pattern:<regex>".
class KafkaSubscription {
 public:
  static KafkaSubscription topics(std::vector<std::string> names) {
    KafkaSubscription s;
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    s.topics_ = std::move(names);
    return s;
  }
  static KafkaSubscription pattern(std::string regex) {
    KafkaSubscription s;
    s.isPattern_ = true;
    s.pattern_ = std::move(regex);
    s.compile();
    return s;
  }
  /// Parses a text form; throws SerializationError for anything else.
  static KafkaSubscription parse(std::string_view text) {
    if (text.rfind("pattern:", 0) == 0) {
      try {
        return pattern(std::string(text.substr(8)));
      } catch (const JobArgumentError& e) {
        throw SerializationError(e.what());
      }
    }
    if (text.rfind("topics:", 0) != 0) throw SerializationError("not a Kafka subscription: '" + std::string(text) + "'");
    std::vector<std::string> names;
    std::string_view rest = text.substr(7);
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      names.emplace_back(rest.substr(0, comma));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    return topics(std::move(names));
  }

  bool isPattern() const { return isPattern_; }
  const std::vector<std::string>& topicList() const { return topics_; }
  const std::string& patternText() const { return pattern_; }
  std::string text() const {
    if (isPattern_) return "pattern:" + pattern_;
    std::string s = "topics:";
    for (size_t i = 0; i < topics_.size(); ++i) s += (i ? "," : "") + topics_[i];
    return s;
  }
  /// For people: "topics a, b" or "topics matching /x.*/".
  std::string describe() const {
    if (isPattern_) return "topics matching /" + pattern_ + "/";
    std::string s = topics_.size() == 1 ? "topic " : "topics ";
    for (size_t i = 0; i < topics_.size(); ++i) s += (i ? ", " : "") + topics_[i];
    return s;
  }
  bool matches(std::string_view topic) const {
    if (!isPattern_) return std::binary_search(topics_.begin(), topics_.end(), topic);
    return std::regex_match(topic.begin(), topic.end(), regex_);
  }

 private:
  void compile() {
    try {
      regex_ = std::regex(pattern_, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw JobArgumentError("the Kafka topic pattern '" + pattern_ + "' is not a valid regular expression: " + e.what());
    }
  }
  bool isPattern_ = false;
  std::vector<std::string> topics_;  // sorted, unique
  std::string pattern_;
  std::regex regex_;
};

/// The position of one KafkaSource subtask (its operator state).
struct KafkaSourcePosition {
  static constexpr std::string_view kMagic = "jhkafka";
  static constexpr uint8_t kFormat = 1;

  bool initialDiscoveryDone = false;
  std::string subscription;  // KafkaSubscription::text() of the writer
  std::vector<KafkaSplit> splits;

  /// Whether `bytes` is a KafkaSource position (any format version).
  static bool is(std::string_view bytes) { return bytes.substr(0, kMagic.size()) == kMagic; }

  std::string encode() const {
    std::string out;
    ByteWriter w(out);
    w.writeRaw(kMagic.data(), kMagic.size());
    w.writeU8(kFormat);
    w.writeU8(initialDiscoveryDone ? 1 : 0);
    w.writeBytes(subscription);
    w.writeVarint(splits.size());
    for (const auto& s : splits) {
      w.writeBytes(s.topic);
      w.writeVarint(static_cast<uint64_t>(s.partition));
      w.writeI64(s.offset);
      w.writeI64(s.stoppingOffset);
      w.writeI64(s.maxTimestamp);
    }
    return out;
  }
  /// Throws SerializationError naming what is wrong.
  static KafkaSourcePosition decode(std::string_view bytes) {
    if (!is(bytes))
      throw SerializationError("the saved position is not a Kafka source's (was it written by another kind of source?)");
    ByteReader r(bytes.substr(kMagic.size()));
    if (uint8_t f = r.readU8(); f != kFormat)
      throw SerializationError("the Kafka source position has format " + std::to_string(f) + ", this SDK reads format " +
                               std::to_string(kFormat));
    KafkaSourcePosition p;
    p.initialDiscoveryDone = (r.readU8() & 1) != 0;
    p.subscription = std::string(r.readBytes());
    uint64_t n = r.readVarint();
    if (n > r.remaining()) throw SerializationError("the Kafka source position is truncated");
    for (; n > 0; --n) {
      KafkaSplit s;
      s.topic = std::string(r.readBytes());
      uint64_t partition = r.readVarint();
      if (partition > INT32_MAX) throw SerializationError("a partition number in the Kafka source position is out of range");
      s.partition = static_cast<int32_t>(partition);
      s.offset = r.readI64();
      s.stoppingOffset = r.readI64();
      s.maxTimestamp = r.readI64();
      p.splits.push_back(std::move(s));
    }
    if (!r.atEnd()) throw SerializationError("the Kafka source position has trailing bytes");
    return p;
  }
};

/// Java's String.hashCode() of an ASCII or UTF-8 topic name (Kafka topic names are
/// ASCII: letters, digits, '.', '_', '-').
inline int32_t javaStringHash(std::string_view s) {
  uint32_t h = 0;
  for (unsigned char c : s) h = 31 * h + c;
  return static_cast<int32_t>(h);
}

/// The subtask (0-based) of `parallelism` that reads `partition` of `topic`.
inline int kafkaPartitionOwner(std::string_view topic, int32_t partition, int parallelism) {
  const uint32_t start =
      (static_cast<uint32_t>(javaStringHash(topic)) * 31u & 0x7fffffffu) % static_cast<uint32_t>(parallelism);
  return static_cast<int>((start + static_cast<uint32_t>(partition)) % static_cast<uint32_t>(parallelism));
}

/// "earliest", "-" (unbounded) or the number, for tables.
inline std::string kafkaOffsetText(int64_t offset) {
  if (offset == kEarliestOffset) return "earliest";
  if (offset == kNoStoppingOffset) return "-";
  return std::to_string(offset);
}

/// The topics some position of `positions` (every subtask's) holds offsets for that
/// `now` does not subscribe to, sorted; positions that are not a Kafka source's are
/// skipped. Throws SerializationError for a damaged one.
inline std::vector<std::string> kafkaTopicsNotSubscribed(const std::vector<std::string_view>& positions,
                                                         const KafkaSubscription& now) {
  std::set<std::string> out;
  for (auto bytes : positions) {
    if (!KafkaSourcePosition::is(bytes)) continue;
    for (const auto& s : KafkaSourcePosition::decode(bytes).splits)
      if (!now.matches(s.topic)) out.insert(s.topic);
  }
  return {out.begin(), out.end()};
}

}  // namespace jobhost
