// Unit tests of jobhost/kafka_splits.h (issue 32): the Kafka source's checkpointed
// position format, the partition owner (Flink's), and the subscription's text form.
#include "jobhost/kafka_splits.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

namespace jobhost {
namespace {

KafkaSourcePosition samplePosition() {
  KafkaSourcePosition p;
  p.initialDiscoveryDone = true;
  p.subscription = "topics:orders,words";
  p.splits.push_back({"words", 0, 17, kNoStoppingOffset, 1767225600000});
  p.splits.push_back({"words", 7, kEarliestOffset, kNoStoppingOffset, kNoTimestamp});
  p.splits.push_back({"orders", 2, 5, 9, 42});
  return p;
}

TEST(KafkaSplits, APositionDecodesToWhatWasEncoded) {
  KafkaSourcePosition p = samplePosition();
  std::string bytes = p.encode();
  ASSERT_TRUE(KafkaSourcePosition::is(bytes));
  KafkaSourcePosition q = KafkaSourcePosition::decode(bytes);
  EXPECT_TRUE(q.initialDiscoveryDone);
  EXPECT_EQ(q.subscription, p.subscription);
  ASSERT_EQ(q.splits.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(q.splits[i].topic, p.splits[i].topic);
    EXPECT_EQ(q.splits[i].partition, p.splits[i].partition);
    EXPECT_EQ(q.splits[i].offset, p.splits[i].offset);
    EXPECT_EQ(q.splits[i].stoppingOffset, p.splits[i].stoppingOffset);
    EXPECT_EQ(q.splits[i].maxTimestamp, p.splits[i].maxTimestamp);
  }
  EXPECT_FALSE(q.splits[0].finished());
  EXPECT_FALSE(q.splits[2].finished());
  q.splits[2].offset = 9;
  EXPECT_TRUE(q.splits[2].finished());
}

TEST(KafkaSplits, ADamagedOrForeignPositionIsASerializationErrorSayingWhat) {
  std::string bytes = samplePosition().encode();
  auto message = [](const std::string& b) {
    try {
      KafkaSourcePosition::decode(b);
    } catch (const SerializationError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(bytes.substr(0, bytes.size() - 4)).find("truncated"), std::string::npos);
  EXPECT_NE(message(bytes + "x").find("trailing bytes"), std::string::npos);
  std::string newer = bytes;
  newer[7] = 2;  // the format byte after "jhkafka"
  EXPECT_NE(message(newer).find("has format 2, this SDK reads format 1"), std::string::npos);
  EXPECT_NE(message(std::string(8, '\x01')).find("not a Kafka source's"), std::string::npos);
  EXPECT_FALSE(KafkaSourcePosition::is(std::string(8, '\x01')));
}

TEST(KafkaSplits, PartitionsGoToTheSubtaskFlinkGivesThem) {
  // Java: "words".hashCode() == 113318569, "test".hashCode() == 3556498, and a name whose
  // hash is negative; owners as KafkaSourceEnumerator.getSplitOwner computes them.
  EXPECT_EQ(javaStringHash("words"), 113318569);
  EXPECT_EQ(javaStringHash("test"), 3556498);
  EXPECT_EQ(javaStringHash("orders-2026"), -1815790870);
  const std::map<std::string, std::vector<int>> atThree = {
      {"words", {2, 0, 1, 2, 0, 1, 2, 0}}, {"test", {1, 2, 0, 1, 2, 0, 1, 2}}, {"orders-2026", {2, 0, 1, 2, 0, 1, 2, 0}}};
  for (const auto& [topic, owners] : atThree)
    for (int p = 0; p < 8; ++p) EXPECT_EQ(kafkaPartitionOwner(topic, p, 3), owners[static_cast<size_t>(p)]) << topic << p;
}

TEST(KafkaSplits, EveryPartitionHasExactlyOneOwnerAtEveryParallelism) {
  for (int parallelism = 1; parallelism <= 7; ++parallelism) {
    std::map<int, int> perSubtask;
    for (const char* topic : {"a", "words", "orders-2026"})
      for (int p = 0; p < 16; ++p) {
        int owner = kafkaPartitionOwner(topic, p, parallelism);
        ASSERT_GE(owner, 0);
        ASSERT_LT(owner, parallelism);
        ++perSubtask[owner];
      }
    // Round-robin per topic: no subtask gets more than its share plus one per topic.
    for (const auto& [s, n] : perSubtask) EXPECT_LE(n, 3 * (16 / parallelism + 1)) << parallelism;
    EXPECT_EQ(perSubtask.size(), static_cast<size_t>(std::min(parallelism, 16)));
  }
}

TEST(KafkaSplits, SubscriptionsHaveOneTextFormAndMatchWholeTopicNames) {
  auto topics = KafkaSubscription::topics({"words", "orders", "words"});
  EXPECT_EQ(topics.text(), "topics:orders,words");
  EXPECT_EQ(KafkaSubscription::parse(topics.text()).text(), topics.text());
  EXPECT_TRUE(topics.matches("words"));
  EXPECT_FALSE(topics.matches("word"));
  auto pattern = KafkaSubscription::pattern("in-.*");
  EXPECT_EQ(KafkaSubscription::parse(pattern.text()).text(), "pattern:in-.*");
  EXPECT_TRUE(pattern.matches("in-a"));
  EXPECT_FALSE(pattern.matches("xin-a"));  // the whole name, as Flink's topic pattern
  EXPECT_EQ(pattern.describe(), "topics matching /in-.*/");
  EXPECT_THROW(KafkaSubscription::pattern("in-("), JobArgumentError);
  EXPECT_THROW(KafkaSubscription::parse("regex:x"), SerializationError);
}

TEST(KafkaSplits, TopicsNoLongerSubscribedAreListedOnce) {
  KafkaSourcePosition a = samplePosition(), b = samplePosition();
  b.splits = {{"legacy", 0, 3, kNoStoppingOffset, kNoTimestamp}};
  std::string ea = a.encode(), eb = b.encode(), file(8, '\x01');
  auto dropped = kafkaTopicsNotSubscribed({ea, eb, file}, KafkaSubscription::topics({"words"}));
  EXPECT_EQ(dropped, (std::vector<std::string>{"legacy", "orders"}));
  EXPECT_TRUE(kafkaTopicsNotSubscribed({ea}, KafkaSubscription::pattern(".*")).empty());
}

}  // namespace
}  // namespace jobhost
