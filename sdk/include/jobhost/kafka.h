// jobhost/kafka.h — Kafka in and out: KafkaSource<T>, whose per-partition offsets live in
// checkpoints, and KafkaSink<T>, which commits with them. As Flink's Kafka connector.
//
//   auto source = jobhost::KafkaSource<std::string>::builder()
//                     .setBootstrapServers("broker:9092")
//                     .setTopics({"words"})
//                     .setGroupId("wordcount")                       // offsets committed for monitoring
//                     .setStartingOffsets(jobhost::OffsetsInitializer::earliest())
//                     .build();
//   auto lines = env.fromSource(source, jobhost::WatermarkStrategy<std::string>::forBoundedOutOfOrderness(2s)
//                                           .withIdleness(30s), "Kafka Source");
//   lines.uid("kafka-source");
//   ...
//   counts.sinkTo(jobhost::KafkaSink<Count>::builder()
//                     .setBootstrapServers("broker:9092")
//                     .setTopic("counts")
//                     .setKeySerializer([](const Count& c) { return c.first; })
//                     .setValueSerializer([](const Count& c) { return std::to_string(c.second); })
//                     .setDeliveryGuarantee(jobhost::DeliveryGuarantee::kExactlyOnce)
//                     .setTransactionalIdPrefix("wordcount-counts")
//                     .build(),
//                 "Kafka Sink").uid("kafka-sink");
//
// Not part of jobhost.h: a plugin that includes this header links librdkafka (Debian:
// librdkafka-dev) — in CMake, target_link_libraries(<plugin> PRIVATE jobhost::kafka)
// (find_package(jobhost REQUIRED COMPONENTS kafka) out of tree).
//
// THE SOURCE. Each source subtask reads the partitions it owns (jobhost/kafka_splits.h:
// the same owner as Flink's, from the topic's hash and the partition number), with its own
// librdkafka consumer assigned to them (no consumer-group rebalancing: the job decides who
// reads what). Its position in every checkpoint and savepoint is, per partition, the next
// offset to read; restored at another parallelism, every subtask gets every former
// subtask's position and keeps the partitions it now owns, so none is read twice or
// skipped. Partitions are discovered again every `partition.discovery.interval.ms`
// (default 5 min; unbounded sources only): a new one (a new partition, a new topic matching
// a pattern, or a topic added to the class before a restore) is read from its earliest
// offset, as in Flink. Starting offsets (OffsetsInitializer): earliest (default), latest,
// the group's committed offsets (with a reset strategy for partitions without one), or
// the first offset at a timestamp — resolved to numbers when a partition is first
// assigned, so a checkpoint never records "latest". Bounded (setBounded): each partition
// stops at the offset its stopping initializer gives when it is assigned (latest: the end
// of the partition at the start), recorded in the checkpoint too; the source ends when all
// of them are read. Offsets are committed to Kafka (group.id) when a checkpoint completes,
// for monitoring only (commit.offsets.on.checkpoint, default true with a group.id): a
// restore reads the checkpoint's offsets, never the committed ones.
//
// Event time: each record's timestamp is the Kafka record's (CreateTime or LogAppendTime)
// unless the WatermarkStrategy has a timestamp assigner. Watermarks are generated per
// partition and combined (the smallest over the partitions that are neither idle nor
// finished, as Flink's per-split watermarks): a partition without records for the
// strategy's idleness is left out until it has records again; a subtask with no partition
// to read is idle. When the last active partitions go idle together, the subtask first
// emits the lowest of their watermarks (what it would have emitted had the partitions
// without a timestamp gone idle a moment earlier), then marks itself idle.
// Without withIdleness, one empty partition holds the watermark back
// (as in Flink). Each partition's highest timestamp is in the checkpoint.
//
// Bad input: a record the deserializer rejects (it throws) fails the task, naming the
// topic, partition and offset — or, with skipUndeserializableRecords(), is skipped,
// logged and counted. An unknown topic, brokers that cannot be reached within the start-up
// timeout (default 30 s), or a missing permission is one error naming it; later outages
// are waited out by librdkafka (a warning names them).
//
// THE SINK (DeliveryGuarantee):
//  - kNone: records are sent as they come; a failure or restore may lose or repeat some.
//  - kAtLeastOnce (default): the idempotent producer; at every checkpoint barrier the
//    sink waits until every record sent before it is acknowledged (a delivery error fails
//    the task), so a completed checkpoint implies its records are in Kafka; a restore
//    repeats what came after it.
//  - kExactlyOnce: Kafka transactions on the SDK's two-phase commit (sinks.h). Each
//    subtask writes the records between two barriers in one transaction of its own
//    producer, whose transactional.id is "<prefix>-<subtask>-<n>": n starts at the
//    restored checkpoint's id + 1 (1 without state) and counts transactions, so it is the
//    id of the checkpoint that commits it unless checkpoints were skipped. At the barrier
//    the producer is flushed (pre-commit), and when the checkpoint is complete the
//    transaction is committed. Readers with isolation.level=read_committed see each record
//    once, about one checkpoint interval after it. On a restore, every transaction a
//    former run may have left open after the restored checkpoint is aborted — the ids
//    after it are opened again with InitProducerId (which on a broker aborts what is open
//    under that id and fences its producer: a zombie of the old run can no longer write or
//    commit) for every former subtask index this subtask now answers for, until an id
//    comes back with epoch 0 (never used), as Flink's probing. transaction.timeout.ms must
//    exceed the checkpoint interval (checked at the start).
//    librdkafka cannot resume another producer's transaction (Flink's Java client does it
//    through reflection), so a transaction that was pre-committed but whose commit a crash
//    interrupted cannot be committed by the restored job. The sink therefore also keeps each
//    pre-committed transaction's records in the checkpoint until it is committed; after a
//    restore it opens the transaction's id (completing or aborting it), reads back with
//    read_committed whether its first record is visible, and if not writes the records
//    again in a new transaction. Checkpoints hold up to one interval of each subtask's
//    output because of this.
//    What was not verified here: librdkafka's mock cluster writes no commit or abort
//    markers and ignores read_committed, so the tests check the order of the transactional
//    calls, the aborts on restore and the fencing, not what read_committed readers see.
//
// Thread-safety: one source or sink object per subtask, used by its task thread; the
// librdkafka handles run threads of their own.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "jobhost/detail/kafka_client.h"
#include "jobhost/detail/named_op.h"
#include "jobhost/errors.h"
#include "jobhost/format.h"
#include "jobhost/kafka_splits.h"
#include "jobhost/operator.h"
#include "jobhost/serializer.h"
#include "jobhost/sinks.h"
#include "jobhost/stream.h"
#include "jobhost/time.h"

namespace jobhost {

// ===================================================================================
// Offsets
// ===================================================================================

/// Where a KafkaSource starts reading a partition (setStartingOffsets) or, bounded,
/// stops (setBounded). As Flink's OffsetsInitializer.
class OffsetsInitializer {
 public:
  enum class Kind { kEarliest, kLatest, kCommitted, kTimestamp, kSpecific };
  /// For committedOffsets(): what a partition the group never committed for does.
  enum class ResetStrategy { kNone, kEarliest, kLatest };
  using Offsets = std::map<std::pair<std::string, int32_t>, int64_t>;

  static OffsetsInitializer earliest() { return OffsetsInitializer(Kind::kEarliest); }
  static OffsetsInitializer latest() { return OffsetsInitializer(Kind::kLatest); }
  /// The group's committed offsets (setGroupId); a partition without one fails the start
  /// (kNone) or starts at its earliest or latest offset.
  static OffsetsInitializer committedOffsets(ResetStrategy reset = ResetStrategy::kNone) {
    OffsetsInitializer o(Kind::kCommitted);
    o.reset_ = reset;
    return o;
  }
  /// The first record whose timestamp is >= `millis`; the end of a partition without one.
  static OffsetsInitializer timestamp(int64_t millis) {
    OffsetsInitializer o(Kind::kTimestamp);
    o.timestamp_ = millis;
    return o;
  }
  /// Given offsets per (topic, partition); a partition not given: its earliest offset as a
  /// starting point, its latest as a stopping point.
  static OffsetsInitializer offsets(Offsets offsets) {
    OffsetsInitializer o(Kind::kSpecific);
    o.offsets_ = std::move(offsets);
    return o;
  }

  Kind kind() const { return kind_; }
  ResetStrategy reset() const { return reset_; }
  int64_t timestampMillis() const { return timestamp_; }
  const Offsets& specific() const { return offsets_; }
  std::string describe() const {
    switch (kind_) {
      case Kind::kEarliest: return "earliest";
      case Kind::kLatest: return "latest";
      case Kind::kCommitted:
        return std::string("committed (reset: ") +
               (reset_ == ResetStrategy::kNone ? "none" : reset_ == ResetStrategy::kEarliest ? "earliest" : "latest") + ")";
      case Kind::kTimestamp: return "timestamp " + std::to_string(timestamp_);
      case Kind::kSpecific: return "given offsets";
    }
    return "?";
  }

 private:
  explicit OffsetsInitializer(Kind k) : kind_(k) {}
  Kind kind_;
  ResetStrategy reset_ = ResetStrategy::kNone;
  int64_t timestamp_ = 0;
  Offsets offsets_;
};

/// One record as read from Kafka, for a deserializer. Valid during the call only.
class KafkaRecord {
 public:
  explicit KafkaRecord(const rd_kafka_message_t* m) : m_(m) {}
  std::string_view topic() const { return rd_kafka_topic_name(m_->rkt); }
  int32_t partition() const { return m_->partition; }
  int64_t offset() const { return m_->offset; }
  /// Milliseconds since the epoch (CreateTime or LogAppendTime); kNoTimestamp if none.
  int64_t timestamp() const {
    rd_kafka_timestamp_type_t type;
    int64_t ts = rd_kafka_message_timestamp(m_, &type);
    return type == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE || ts < 0 ? kNoTimestamp : ts;
  }
  /// nullopt for a null key (value), an empty view for an empty one.
  std::optional<std::string_view> key() const {
    if (m_->key == nullptr) return std::nullopt;
    return std::string_view(static_cast<const char*>(m_->key), m_->key_len);
  }
  std::optional<std::string_view> value() const {
    if (m_->payload == nullptr) return std::nullopt;
    return std::string_view(static_cast<const char*>(m_->payload), m_->len);
  }
  /// The last header named `name`: nullopt when there is none; a null value is an
  /// optional holding nullopt.
  std::optional<std::optional<std::string_view>> header(const std::string& name) const {
    rd_kafka_headers_t* hdrs = nullptr;
    if (rd_kafka_message_headers(m_, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR) return std::nullopt;
    const void* v = nullptr;
    size_t n = 0;
    if (rd_kafka_header_get_last(hdrs, name.c_str(), &v, &n) != RD_KAFKA_RESP_ERR_NO_ERROR) return std::nullopt;
    if (v == nullptr) return std::optional<std::string_view>();
    return std::optional<std::string_view>(std::string_view(static_cast<const char*>(v), n));
  }
  /// "words[3]@1234".
  std::string where() const {
    return std::string(topic()) + "[" + std::to_string(partition()) + "]@" + std::to_string(offset());
  }

 private:
  const rd_kafka_message_t* m_;
};

template <class T>
using KafkaDeserializer = std::function<void(const KafkaRecord&, Collector<T>&)>;

namespace detail {

/// Everything a KafkaSource was built with (shared by its copies and subtasks).
struct KafkaSourceSettings {
  std::string bootstrap;
  std::optional<KafkaSubscription> subscription;
  std::map<std::string, std::string> properties;  // librdkafka's, passed through
  std::string groupId;
  OffsetsInitializer starting = OffsetsInitializer::earliest();
  std::optional<OffsetsInitializer> stopping;  // set: bounded
  std::chrono::milliseconds discoveryInterval{std::chrono::minutes(5)};
  bool commitOffsets = true;
  bool skipUndeserializable = false;
  std::chrono::milliseconds startupTimeout{std::chrono::seconds(30)};
};

/// The librdkafka side of one KafkaSource subtask: which partitions it owns, their
/// offsets, the consumer assigned to them, discovery and offset commits. Template-free;
/// KafkaSourceOp<T> deserializes and emits.
class KafkaPartitionReader {
 public:
  struct Split : KafkaSplit {
    bool assigned = false;  // in the consumer's assignment
    bool carried = false;   // restored, but its partition is not in the metadata: kept, not read
    uint64_t records = 0;   // records since the last watermark emission
    std::chrono::steady_clock::time_point lastActivity{};
    bool idle = false;
  };

  explicit KafkaPartitionReader(std::shared_ptr<const KafkaSourceSettings> settings) : s_(std::move(settings)) {}
  ~KafkaPartitionReader() { close(); }
  KafkaPartitionReader(const KafkaPartitionReader&) = delete;
  KafkaPartitionReader& operator=(const KafkaPartitionReader&) = delete;

  /// Before open(): one former subtask's position (several after a change of parallelism).
  void restore(std::string_view position) {
    if (position.empty()) return;
    KafkaSourcePosition p = KafkaSourcePosition::decode(position);
    restored_ = true;
    initialDone_ = initialDone_ || p.initialDiscoveryDone;
    for (auto& s : p.splits) {
      auto key = std::make_pair(s.topic, s.partition);
      auto it = restoredSplits_.find(key);
      // A partition is in one subtask's position only; keep the furthest if not.
      if (it == restoredSplits_.end() || it->second.offset < s.offset) restoredSplits_[key] = std::move(s);
    }
  }

  /// Creates the consumer, finds this subtask's partitions and assigns them. Throws with
  /// one clear message if the brokers cannot be reached within the start-up timeout, a
  /// topic is unknown or not readable.
  void open(int subtask, int parallelism, std::string label, std::function<bool()> cancelled) {
    subtask_ = subtask;
    parallelism_ = parallelism;
    label_ = std::move(label);
    cancelled_ = std::move(cancelled);
    auto props = s_->properties;
    props["bootstrap.servers"] = s_->bootstrap;
    // A consumer group is needed for assign(); without one of the job's, a private name
    // whose offsets are never committed.
    props["group.id"] = s_->groupId.empty() ? "jobhost-" + label_ : s_->groupId;
    props["enable.auto.commit"] = "false";
    props["enable.auto.offset.store"] = "false";
    props["enable.partition.eof"] = "true";
    if (!props.count("auto.offset.reset")) props["auto.offset.reset"] = "earliest";
    if (!props.count("client.id")) props["client.id"] = "jobhost-source-" + std::to_string(subtask);
    events_ = std::make_unique<KafkaClientEvents>(label_, props.count("debug") > 0);
    rk_ = makeKafkaClient(RD_KAFKA_CONSUMER, props, events_.get(), label_, [](rd_kafka_conf_t* conf) {
      rd_kafka_conf_set_offset_commit_cb(conf, &KafkaPartitionReader::onCommitted);
    });
    rd_kafka_poll_set_consumer(rk_.get());
    queue_ = rd_kafka_queue_get_consumer(rk_.get());
    // Restored partitions this subtask owns now and still subscribes to; the rest belongs
    // to other subtasks or is dropped (the restore check named dropped topics).
    for (auto& [key, split] : restoredSplits_) {
      if (!s_->subscription->matches(split.topic)) {
        std::fprintf(stderr, "%s: not reading %s[%d] any more (saved offset %s): %s is no longer subscribed (%s)\n",
                     label_.c_str(), split.topic.c_str(), split.partition, kafkaOffsetText(split.offset).c_str(),
                     split.topic.c_str(), s_->subscription->describe().c_str());
        continue;
      }
      if (kafkaPartitionOwner(split.topic, split.partition, parallelism_) != subtask_) continue;
      Split sp;
      static_cast<KafkaSplit&>(sp) = split;
      addSplit(std::move(sp));
    }
    restoredSplits_.clear();
    discover(/*initial=*/true);
  }

  void close() {
    if (queue_) rd_kafka_queue_destroy(queue_);
    queue_ = nullptr;
    if (rk_) rd_kafka_consumer_close(rk_.get());
    rk_.reset();
  }

  /// Up to `max` messages (owned by the caller: rd_kafka_message_destroy), waiting up to
  /// `wait` for the first. Discovers partitions when that is due.
  size_t fetch(std::vector<rd_kafka_message_t*>& out, size_t max, std::chrono::milliseconds wait) {
    maybeDiscover();
    out.clear();
    rd_kafka_message_t* first = rd_kafka_consumer_poll(rk_.get(), static_cast<int>(wait.count()));
    if (first == nullptr) return 0;
    out.push_back(first);
    if (max > 1) {
      out.resize(max);
      ssize_t n = rd_kafka_consume_batch_queue(queue_, 0, out.data() + 1, max - 1);
      out.resize(1 + static_cast<size_t>(std::max<ssize_t>(n, 0)));
    }
    return out.size();
  }

  /// The split of a message's partition, or null (not assigned to this subtask).
  Split* splitOf(const rd_kafka_message_t* m) {
    if (m->rkt == lastRkt_ && m->partition == lastPartition_) return &splits_[lastIndex_];
    auto it = index_.find({rd_kafka_topic_name(m->rkt), m->partition});
    if (it == index_.end()) return nullptr;
    lastRkt_ = m->rkt;
    lastPartition_ = m->partition;
    lastIndex_ = it->second;
    return &splits_[it->second];
  }

  /// A message that is no record: end of partition (a bounded split may be done) or an
  /// error, which throws unless librdkafka retries it by itself.
  void onEvent(const rd_kafka_message_t* m) {
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      Split* s = m->rkt ? splitOf(m) : nullptr;
      if (s == nullptr) return;
      // The position after control records (transaction markers) of the partition.
      if (m->offset > s->offset) s->offset = m->offset;
      if (s->stoppingOffset != kNoStoppingOffset && s->offset >= s->stoppingOffset) finish(*s);
      return;
    }
    std::string where = m->rkt ? std::string(rd_kafka_topic_name(m->rkt)) + "[" + std::to_string(m->partition) + "]" : "";
    std::string what = rd_kafka_message_errstr(m);
    if (isAuthorizationError(m->err))
      throw std::runtime_error(label_ + ": not authorized to read " + (where.empty() ? "from Kafka" : where) + ": " +
                               what + " (" + rd_kafka_err2name(m->err) + "); grant the job's principal READ on the "
                               "topic and DESCRIBE, or fix the sasl.* properties");
    if (m->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || m->err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
        m->err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION)
      throw std::runtime_error(label_ + ": " + (where.empty() ? "a partition" : where) +
                               " no longer exists on the brokers " + s_->bootstrap + " (" + what + ")");
    if (rd_kafka_fatal_error(rk_.get(), nullptr, 0) != RD_KAFKA_RESP_ERR_NO_ERROR)
      throw std::runtime_error(label_ + ": the Kafka consumer failed: " + what);
    // Anything else is a broker or network condition librdkafka retries by itself.
    warnOnce("Kafka consumer: " + (where.empty() ? std::string() : where + ": ") + what);
  }

  /// A record was read up to `offset` (and emitted); a bounded split may be done.
  void advance(Split& s, int64_t offset) {
    s.offset = offset + 1;
    if (s.stoppingOffset != kNoStoppingOffset && s.offset >= s.stoppingOffset) finish(s);
  }
  void finish(Split& s) {
    if (!s.assigned) return;
    s.assigned = false;
    auto l = newPartitionList(1);
    rd_kafka_topic_partition_list_add(l.get(), s.topic.c_str(), s.partition);
    if (KafkaError e{rd_kafka_incremental_unassign(rk_.get(), l.get())})
      throw std::runtime_error(label_ + ": cannot stop reading " + s.topic + "[" + std::to_string(s.partition) +
                               "]: " + rd_kafka_error_string(e.get()));
    ++finished_;
  }

  /// Bounded, and every split read to its stopping offset.
  bool allFinished() const {
    if (!s_->stopping) return false;
    for (const auto& s : splits_)
      if (!s.carried && !s.finished()) return false;
    return true;
  }

  std::vector<Split>& splits() { return splits_; }
  const std::string& label() const { return label_; }

  std::string snapshot() const {
    KafkaSourcePosition p;
    p.initialDiscoveryDone = initialDone_;
    p.subscription = s_->subscription->text();
    for (const auto& s : splits_) p.splits.push_back(s);
    return p.encode();
  }

  // --- Offsets committed to Kafka when a checkpoint completes (monitoring only).
  void rememberForCommit(uint64_t checkpointId) {
    if (!commits()) return;
    auto& offsets = pendingCommits_[checkpointId];
    for (const auto& s : splits_)
      if (s.offset >= 0) offsets.emplace_back(s.topic, s.partition, s.offset);
  }
  void commitCheckpoint(uint64_t checkpointId) {
    if (!commits()) return;
    auto it = pendingCommits_.find(checkpointId);
    if (it != pendingCommits_.end() && !it->second.empty()) {
      auto l = newPartitionList(it->second.size());
      for (const auto& [topic, partition, offset] : it->second)
        rd_kafka_topic_partition_list_add(l.get(), topic.c_str(), partition)->offset = offset;
      rd_kafka_resp_err_t err = rd_kafka_commit(rk_.get(), l.get(), 1);
      if (err) warnOnce("cannot commit offsets to Kafka (monitoring only): " + kafkaErrorText(err));
    }
    pendingCommits_.erase(pendingCommits_.begin(), pendingCommits_.upper_bound(checkpointId));
  }
  void forget(uint64_t checkpointId) { pendingCommits_.erase(checkpointId); }

 private:
  bool commits() const { return s_->commitOffsets && !s_->groupId.empty(); }

  static void onCommitted(rd_kafka_t* rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t*, void*) {
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR || err == RD_KAFKA_RESP_ERR__NO_OFFSET) return;
    auto* events = static_cast<KafkaClientEvents*>(rd_kafka_opaque(rk));
    (void)events;
    std::fprintf(stderr, "%s: committing offsets to Kafka failed (monitoring only, the job goes on): %s\n",
                 rd_kafka_name(rk), kafkaErrorText(err).c_str());
  }

  void warnOnce(const std::string& what) {
    if (what == lastWarning_) return;
    lastWarning_ = what;
    std::fprintf(stderr, "%s: %s\n", label_.c_str(), what.c_str());
  }

  void addSplit(Split s) {
    index_[{s.topic, s.partition}] = splits_.size();
    s.lastActivity = std::chrono::steady_clock::now();
    splits_.push_back(std::move(s));
    lastRkt_ = nullptr;
  }

  void maybeDiscover() {
    if (s_->stopping || s_->discoveryInterval.count() <= 0) return;
    if (std::chrono::steady_clock::now() < nextDiscovery_) return;
    discover(/*initial=*/false);
  }

  /// Metadata; on the first call waits for the brokers up to the start-up timeout.
  std::vector<KafkaTopicMetadata> metadata(bool initial) {
    const std::vector<std::string>* topics = s_->subscription->isPattern() ? nullptr : &s_->subscription->topicList();
    std::vector<KafkaTopicMetadata> md;
    auto start = std::chrono::steady_clock::now();
    // At the start each request waits longer than the one before, up to 2 s: a request
    // blocks for its whole wait while no broker answers, and the job's cancellation is
    // looked at only between two (it used to take 5 s to see a Ctrl-C or SIGTERM).
    auto longest = std::chrono::milliseconds(250);
    bool saidWaiting = false;
    for (;;) {
      auto left = s_->startupTimeout - std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
      auto wait = initial ? std::clamp(left, std::chrono::milliseconds(100), longest) : std::chrono::milliseconds(5000);
      longest = std::min(longest * 2, std::chrono::milliseconds(2000));
      const auto asked = std::chrono::steady_clock::now();
      rd_kafka_resp_err_t err = fetchKafkaMetadata(rk_.get(), topics, wait, &md);
      // At the start, a topic the brokers answer for with a passing error (no leader yet)
      // is asked for again; an unknown or forbidden one is reported by discover().
      bool transient = false;
      for (const auto& t : md)
        transient |= t.err && t.err != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART && !isAuthorizationError(t.err);
      if (!err && !(initial && transient && std::chrono::steady_clock::now() - start < s_->startupTimeout)) return md;
      if (!err) {
        if (cancelled_ && cancelled_()) throw std::runtime_error(label_ + ": cancelled while waiting for a topic's leader");
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        continue;
      }
      if (!initial) {
        warnOnce("cannot look for new partitions (will try again in " +
                 std::to_string(s_->discoveryInterval.count()) + " ms): " + kafkaErrorText(err));
        return {};
      }
      if (isAuthorizationError(events_->lastErrorCode()) || isAuthorizationError(err) ||
          std::chrono::steady_clock::now() - start >= s_->startupTimeout || (cancelled_ && cancelled_()))
        throw std::runtime_error(unreachableBrokersText(
            label_, s_->bootstrap,
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start), err,
            *events_));
      // Said once, so that a job waiting for its brokers does not look hung.
      if (!saidWaiting) warnOnce("the Kafka brokers " + s_->bootstrap + " do not answer yet (" + kafkaErrorText(err) +
               "); waiting for them up to " + std::to_string(s_->startupTimeout.count()) +
               " ms (client.startup.timeout.ms)");
      saidWaiting = true;
      // A request that failed at once is not repeated at once.
      const auto spent = std::chrono::steady_clock::now() - asked;
      if (spent < wait) std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(wait - spent, std::chrono::milliseconds(250)));
    }
  }

  /// Finds the partitions of the subscription this subtask owns and assigns the new ones.
  void discover(bool initial) {
    nextDiscovery_ = std::chrono::steady_clock::now() + s_->discoveryInterval;
    std::vector<KafkaTopicMetadata> md = metadata(initial);
    if (md.empty() && !initial) return;
    std::set<std::pair<std::string, int32_t>> present;
    std::vector<Split> fresh;
    for (const auto& t : md) {
      if (t.err) {
        std::string what = "topic '" + t.name + "': " + kafkaErrorText(t.err);
        if (isAuthorizationError(t.err)) {
          if (initial)
            throw std::runtime_error(label_ + ": not authorized to read topic '" + t.name + "' on " + s_->bootstrap +
                                     " (" + rd_kafka_err2name(t.err) + "); grant the job's principal DESCRIBE and "
                                     "READ on it, or fix the sasl.* properties");
        } else if (initial && !s_->subscription->isPattern()) {
          throw std::runtime_error(label_ + ": topic '" + t.name + "' does not exist on the Kafka brokers " +
                                   s_->bootstrap + " (" + rd_kafka_err2name(t.err) +
                                   "); create it, or fix the topic name (the source reads " +
                                   s_->subscription->describe() + ")");
        }
        warnOnce(what);
        continue;
      }
      if (s_->subscription->isPattern() && (!s_->subscription->matches(t.name) || t.name.rfind("__", 0) == 0)) continue;
      for (int32_t p = 0; p < t.partitions; ++p) {
        present.insert({t.name, p});
        if (kafkaPartitionOwner(t.name, p, parallelism_) != subtask_ || index_.count({t.name, p})) continue;
        Split s;
        s.topic = t.name;
        s.partition = p;
        fresh.push_back(std::move(s));
      }
    }
    if (s_->subscription->isPattern() && initial && present.empty())
      std::fprintf(stderr, "%s: no topic matches /%s/ yet on %s; looking again every %lld ms\n", label_.c_str(),
                   s_->subscription->patternText().c_str(), s_->bootstrap.c_str(),
                   static_cast<long long>(s_->discoveryInterval.count()));
    // New partitions: the starting offsets at the job's first start, the earliest offset
    // for partitions that appeared later (Flink's rule); bounded: their stopping offsets.
    if (!fresh.empty()) {
      if (!resolve(fresh, initialDone_ ? OffsetsInitializer::earliest() : s_->starting, /*stopping=*/false, initial))
        return;  // not now: looked for again at the next discovery
      if (s_->stopping && !resolve(fresh, *s_->stopping, /*stopping=*/true, initial)) return;
      if (!initial || restored_)
        for (const auto& s : fresh)
          std::fprintf(stderr, "%s: reading new partition %s[%d] from offset %s\n", label_.c_str(), s.topic.c_str(),
                       s.partition, kafkaOffsetText(s.offset).c_str());
      for (auto& s : fresh) addSplit(std::move(s));
    }
    initialDone_ = true;
    // Assign what is not yet (new splits; restored ones on the first call).
    auto l = newPartitionList(splits_.size());
    for (auto& s : splits_) {
      if (s.assigned || s.finished()) continue;
      if (!present.count({s.topic, s.partition})) {
        if (initial && !s.carried) {
          s.carried = true;
          std::fprintf(stderr, "%s: %s[%d] is not on the brokers (any more): its saved offset %s is kept, not read\n",
                       label_.c_str(), s.topic.c_str(), s.partition, kafkaOffsetText(s.offset).c_str());
        }
        continue;
      }
      s.carried = false;
      rd_kafka_topic_partition_list_add(l.get(), s.topic.c_str(), s.partition)->offset =
          s.offset == kEarliestOffset ? RD_KAFKA_OFFSET_BEGINNING : s.offset;
      s.assigned = true;
    }
    if (l->cnt > 0) {
      if (KafkaError e{rd_kafka_incremental_assign(rk_.get(), l.get())})
        throw std::runtime_error(label_ + ": cannot assign partitions: " + rd_kafka_error_string(e.get()));
    }
  }

  /// Sets the starting (or stopping) offsets of `splits` from `init`. False if the
  /// brokers did not answer (only when not `initial`: then it throws).
  bool resolve(std::vector<Split>& splits, const OffsetsInitializer& init, bool stopping, bool initial) {
    using Kind = OffsetsInitializer::Kind;
    auto set = [&](Split& s, int64_t v) { (stopping ? s.stoppingOffset : s.offset) = v; };
    auto fail = [&](const std::string& what) -> bool {
      if (initial) throw std::runtime_error(label_ + ": " + what);
      warnOnce(what + " (will try again)");
      return false;
    };
    // Each request waits up to 5 s, repeated up to the start-up timeout: the job's
    // cancellation is looked at between two.
    const int timeoutMs = static_cast<int>(std::clamp<int64_t>(s_->startupTimeout.count(), 1000, 5000));
    // A request that fails with a passing error (a leader moving, a time-out) is repeated,
    // with backoff, up to the start-up timeout.
    const auto deadline = std::chrono::steady_clock::now() + s_->startupTimeout;
    auto retry = [&](auto request) {
      rd_kafka_resp_err_t err;
      for (int attempt = 0;; ++attempt) {
        err = request();
        if (!err || !isRetriableError(err) || std::chrono::steady_clock::now() >= deadline || (cancelled_ && cancelled_()))
          return err;
        std::this_thread::sleep_for(std::chrono::milliseconds(50 << std::min(attempt, 4)));
      }
    };
    auto watermarks = [&](Split& s, int64_t* low, int64_t* high) -> bool {
      rd_kafka_resp_err_t err = retry([&] {
        return rd_kafka_query_watermark_offsets(rk_.get(), s.topic.c_str(), s.partition, low, high, timeoutMs);
      });
      if (err) return fail("cannot read the offsets of " + s.topic + "[" + std::to_string(s.partition) + "]: " + kafkaErrorText(err));
      return true;
    };
    switch (init.kind()) {
      case Kind::kEarliest:
        for (auto& s : splits) {
          if (!stopping) {
            set(s, kEarliestOffset);
            continue;
          }
          int64_t lo = 0, hi = 0;
          if (!watermarks(s, &lo, &hi)) return false;
          set(s, lo);
        }
        return true;
      case Kind::kLatest:
        for (auto& s : splits) {
          int64_t lo = 0, hi = 0;
          if (!watermarks(s, &lo, &hi)) return false;
          set(s, hi);
        }
        return true;
      case Kind::kSpecific:
        for (auto& s : splits) {
          auto it = init.specific().find({s.topic, s.partition});
          if (it != init.specific().end()) {
            set(s, it->second);
          } else if (stopping) {
            int64_t lo = 0, hi = 0;
            if (!watermarks(s, &lo, &hi)) return false;
            set(s, hi);
          } else {
            set(s, kEarliestOffset);
          }
        }
        return true;
      case Kind::kTimestamp: {
        auto l = newPartitionList(splits.size());
        for (auto& s : splits) rd_kafka_topic_partition_list_add(l.get(), s.topic.c_str(), s.partition)->offset = init.timestampMillis();
        rd_kafka_resp_err_t err = retry([&] { return rd_kafka_offsets_for_times(rk_.get(), l.get(), timeoutMs); });
        if (err) return fail("cannot look up the offsets at timestamp " + std::to_string(init.timestampMillis()) + ": " + kafkaErrorText(err));
        for (int i = 0; i < l->cnt; ++i) {
          Split& s = splits[static_cast<size_t>(i)];
          if (l->elems[i].err) return fail("cannot look up the offset at timestamp " + std::to_string(init.timestampMillis()) + " of " + s.topic + "[" + std::to_string(s.partition) + "]: " + kafkaErrorText(l->elems[i].err));
          int64_t off = l->elems[i].offset;
          if (off < 0) {  // no record at or after the timestamp: the end of the partition
            int64_t lo = 0, hi = 0;
            if (!watermarks(s, &lo, &hi)) return false;
            off = hi;
          }
          set(s, off);
        }
        return true;
      }
      case Kind::kCommitted: {
        if (s_->groupId.empty())
          throw JobArgumentError(label_ + ": committed offsets need the consumer group: call setGroupId()");
        auto l = newPartitionList(splits.size());
        for (auto& s : splits) rd_kafka_topic_partition_list_add(l.get(), s.topic.c_str(), s.partition);
        rd_kafka_resp_err_t err = retry([&] { return rd_kafka_committed(rk_.get(), l.get(), timeoutMs); });
        if (err) return fail("cannot read the committed offsets of group '" + s_->groupId + "': " + kafkaErrorText(err));
        for (int i = 0; i < l->cnt; ++i) {
          Split& s = splits[static_cast<size_t>(i)];
          int64_t off = l->elems[i].offset;
          if (l->elems[i].err == RD_KAFKA_RESP_ERR_NO_ERROR && off >= 0) {
            set(s, off);
            continue;
          }
          switch (init.reset()) {
            case OffsetsInitializer::ResetStrategy::kNone:
              throw std::runtime_error(label_ + ": group '" + s_->groupId + "' has no committed offset for " + s.topic +
                                       "[" + std::to_string(s.partition) +
                                       "]; start with another OffsetsInitializer, or committedOffsets(ResetStrategy::kEarliest)");
            case OffsetsInitializer::ResetStrategy::kEarliest:
              if (!stopping) {
                set(s, kEarliestOffset);
                break;
              }
              [[fallthrough]];
            case OffsetsInitializer::ResetStrategy::kLatest: {
              int64_t lo = 0, hi = 0;
              if (!watermarks(s, &lo, &hi)) return false;
              set(s, init.reset() == OffsetsInitializer::ResetStrategy::kLatest ? hi : lo);
              break;
            }
          }
        }
        return true;
      }
    }
    return true;
  }

  std::shared_ptr<const KafkaSourceSettings> s_;
  int subtask_ = 0, parallelism_ = 1;
  std::string label_;
  std::function<bool()> cancelled_;
  std::unique_ptr<KafkaClientEvents> events_;  // before rk_: librdkafka's threads use it until rk_ is destroyed
  KafkaHandle rk_;
  rd_kafka_queue_t* queue_ = nullptr;
  bool restored_ = false;
  bool initialDone_ = false;
  std::map<std::pair<std::string, int32_t>, KafkaSplit> restoredSplits_;
  std::vector<Split> splits_;
  std::map<std::pair<std::string, int32_t>, size_t> index_;
  const rd_kafka_topic_t* lastRkt_ = nullptr;
  int32_t lastPartition_ = -1;
  size_t lastIndex_ = 0;
  size_t finished_ = 0;
  std::chrono::steady_clock::time_point nextDiscovery_{};
  std::map<uint64_t, std::vector<std::tuple<std::string, int32_t, int64_t>>> pendingCommits_;
  std::string lastWarning_;
};

/// The plan's source operator of a KafkaSource (see the file comment).
template <class T>
class KafkaSourceOp : public SourceOperator {
 public:
  KafkaSourceOp(std::shared_ptr<const KafkaSourceSettings> settings, KafkaDeserializer<T> deserializer,
                std::optional<WatermarkStrategy<T>> strategy, void* down)
      : reader_(settings), settings_(std::move(settings)), deserializer_(std::move(deserializer)),
        strategy_(std::move(strategy)), down_(static_cast<Collector<T>*>(down)) {}

  void open(OperatorContext& ctx) override {
    ctx_ = &ctx;
    name_ = ctx.operatorName();
    slot_ = ctx.activeOperatorSlot();
    const std::string label = "Kafka source '" + ctx.uid() + "' (" + std::to_string(ctx.subtaskIndex() + 1) + "/" +
                              std::to_string(ctx.parallelism()) + ")";
    reader_.open(ctx.subtaskIndex(), ctx.parallelism(), label, [&ctx] { return ctx.cancelled(); });
  }

  PollStatus poll() override {
    if (slot_) slot_->store(name_.c_str(), std::memory_order_relaxed);
    if (!started_) {
      started_ = true;
      emitRestoredWatermark();
    }
    if (reader_.allFinished()) return PollStatus::kEnd;
    size_t n = reader_.fetch(batch_, kBatch, std::chrono::milliseconds(50));
    size_t records = 0;
    try {
      for (size_t i = 0; i < n; ++i) records += handle(batch_[i]);
    } catch (...) {
      for (size_t i = 0; i < n; ++i) rd_kafka_message_destroy(batch_[i]);
      batch_.clear();
      throw;
    }
    for (size_t i = 0; i < n; ++i) rd_kafka_message_destroy(batch_[i]);
    batch_.clear();
    if (reader_.allFinished()) return PollStatus::kEnd;
    return records == 0 ? PollStatus::kIdle : PollStatus::kMore;
  }

  void close() override {
    if (skipped_ > 0)
      std::fprintf(stderr, "%s: skipped %llu record(s) the deserializer rejected\n", reader_.label().c_str(),
                   static_cast<unsigned long long>(skipped_));
    reader_.close();
  }
  std::string snapshotState() override { return reader_.snapshot(); }
  void restoreState(std::string_view s) override { reader_.restore(s); }
  void beforeSnapshot(uint64_t checkpointId) override { reader_.rememberForCommit(checkpointId); }
  void notifyCheckpointComplete(uint64_t checkpointId) override { reader_.commitCheckpoint(checkpointId); }
  void notifyCheckpointAborted(uint64_t checkpointId) override { reader_.forget(checkpointId); }

  // Watermarks (only with a strategy: the node is then a watermark assigner).
  void onWatermark(int64_t watermark) override {
    if (!strategy_ || watermark != kMaxWatermark || emitted_ == kMaxWatermark) return;
    emitted_ = kMaxWatermark;  // the end of the input or a drain passes through
    ctx_->emitWatermark(kMaxWatermark);
  }
  void onPeriodicEmit() override {
    if (!strategy_) return;
    emitRestoredWatermark();
    const auto now = std::chrono::steady_clock::now();
    const int64_t idleness = strategy_->idlenessMs();
    bool anyActive = false, holdBack = false;
    int64_t combined = kMaxWatermark, justIdle = kMaxWatermark;
    for (auto& s : reader_.splits()) {
      if (s.carried || s.finished()) continue;
      const int64_t own = s.maxTimestamp == kNoTimestamp
                              ? kMinWatermark
                              : saturatingAdd(s.maxTimestamp, -strategy_->outOfOrdernessMs() - 1);
      if (s.records > 0) {
        s.records = 0;
        s.lastActivity = now;
        s.idle = false;
      } else if (idleness > 0 && !s.idle && now - s.lastActivity >= std::chrono::milliseconds(idleness)) {
        s.idle = true;
        if (s.maxTimestamp != kNoTimestamp) justIdle = std::min(justIdle, own);
      }
      if (s.idle) continue;
      anyActive = true;
      if (s.maxTimestamp == kNoTimestamp) holdBack = true;  // nothing read yet: no watermark for it
      else combined = std::min(combined, own);
    }
    if (!anyActive) {
      // Every partition idle, or none to read: downstream does not wait for this subtask.
      // First what the partitions that went idle in this very call had earned (the lowest
      // of them): as if the ones without a timestamp, which held it back, had gone idle a
      // moment earlier. Otherwise it goes idle with them. (Issue 32: partition 0 had records
      // up to 25000 while an empty partition 1 held the watermark back; both reached the
      // idleness timeout in one call and no window ever fired.) Partitions idle since
      // earlier calls count no more: their watermark was part of what was emitted then.
      if (justIdle != kMaxWatermark) emit(justIdle);
      if (!idle_) ctx_->markIdle();
      idle_ = true;
      return;
    }
    idle_ = false;
    if (!holdBack) emit(combined);
  }

 private:
  static constexpr size_t kBatch = 512;

  /// Collects what the deserializer emits for one record.
  class Buffer : public Collector<T> {
   public:
    void collect(const T& v) override { values.push_back(v); }
    std::vector<T> values;
  };

  /// One message; returns the records it emitted.
  size_t handle(rd_kafka_message_t* m) {
    if (m->err) {
      reader_.onEvent(m);
      return 0;
    }
    auto* split = reader_.splitOf(m);
    if (split == nullptr || !split->assigned || m->offset < split->offset) return 0;  // not (or no longer) ours
    if (split->stoppingOffset != kNoStoppingOffset && m->offset >= split->stoppingOffset) {
      reader_.finish(*split);
      return 0;
    }
    KafkaRecord record(m);
    buffer_.values.clear();
    try {
      deserializer_(record, buffer_);
    } catch (...) {
      std::string why = describeCurrentException();
      if (!settings_->skipUndeserializable)
        throw UserCodeError(name_, reader_.label() + ": cannot deserialize the record at topic " +
                                       std::string(record.topic()) + ", partition " + std::to_string(record.partition()) +
                                       ", offset " + std::to_string(record.offset()) + ": " + why +
                                       " (skipUndeserializableRecords() skips such records)");
      ++skipped_;
      if (skipped_ <= 10 || skipped_ % 1000 == 0)
        std::fprintf(stderr, "%s: skipped the record at %s (%llu skipped so far): %s\n", reader_.label().c_str(),
                     record.where().c_str(), static_cast<unsigned long long>(skipped_), why.c_str());
      reader_.advance(*split, m->offset);
      return 0;
    }
    int64_t ts = record.timestamp();
    for (const T& v : buffer_.values) {
      int64_t t = strategy_ ? callUser(name_, [&] { return strategy_->timestampOf(v, ts); }) : ts;
      if (t != kNoTimestamp && t > split->maxTimestamp) split->maxTimestamp = t;
      ctx_->setCurrentTimestamp(t);
      down_->collect(v);
    }
    ++split->records;
    reader_.advance(*split, m->offset);
    return buffer_.values.size();
  }

  void emit(int64_t wm) {
    if (wm <= emitted_) return;
    emitted_ = wm;
    ctx_->emitWatermark(wm);
  }
  /// A restored job goes on from the watermark its partitions had (every partition with a
  /// timestamp; none held back by one without).
  void emitRestoredWatermark() {
    if (!strategy_ || restoredWatermarkDone_) return;
    restoredWatermarkDone_ = true;
    int64_t combined = kMaxWatermark;
    bool any = false;
    for (const auto& s : reader_.splits()) {
      if (s.carried || s.finished()) continue;
      if (s.maxTimestamp == kNoTimestamp) return;
      combined = std::min(combined, saturatingAdd(s.maxTimestamp, -strategy_->outOfOrdernessMs() - 1));
      any = true;
    }
    if (any) emit(combined);
  }

  KafkaPartitionReader reader_;
  std::shared_ptr<const KafkaSourceSettings> settings_;
  KafkaDeserializer<T> deserializer_;
  std::optional<WatermarkStrategy<T>> strategy_;
  Collector<T>* down_;
  OperatorContext* ctx_ = nullptr;
  std::string name_;
  std::atomic<const char*>* slot_ = nullptr;
  std::vector<rd_kafka_message_t*> batch_;
  Buffer buffer_;
  uint64_t skipped_ = 0;
  int64_t emitted_ = kMinWatermark;
  bool idle_ = false;
  bool started_ = false;
  bool restoredWatermarkDone_ = false;
};

}  // namespace detail

template <class T>
class KafkaSourceBuilder;

/// A Kafka source of records T (see the file comment). Made by KafkaSource<T>::builder();
/// added with env.fromSource(source, [strategy,] name). Give it a uid: its offsets are
/// restored by uid.
template <class T>
class KafkaSource {
 public:
  using ElementType = T;
  static KafkaSourceBuilder<T> builder();

  const detail::KafkaSourceSettings& settings() const { return *settings_; }

  /// The plan node (StreamEnvironment::fromSource).
  PlanNode planNode(const WatermarkStrategy<T>* strategy, bool /*planOnly*/) const {
    PlanNode n;
    n.kind = NodeKind::kSource;
    n.parallelSource = true;
    n.checkpointListener = true;
    n.subscription = settings_->subscription->text();
    std::optional<WatermarkStrategy<T>> wm;
    if (strategy) wm = *strategy;
    n.watermarkAssigner = wm.has_value();
    auto settings = settings_;
    auto deserializer = deserializer_;
    n.create = [settings, deserializer, wm](void* down) -> std::unique_ptr<Operator> {
      return std::make_unique<detail::KafkaSourceOp<T>>(settings, deserializer, wm, down);
    };
    return n;
  }

 private:
  friend class KafkaSourceBuilder<T>;
  KafkaSource(std::shared_ptr<const detail::KafkaSourceSettings> s, KafkaDeserializer<T> d)
      : settings_(std::move(s)), deserializer_(std::move(d)) {}
  std::shared_ptr<const detail::KafkaSourceSettings> settings_;
  KafkaDeserializer<T> deserializer_;
};

/// Builds a KafkaSource<T>; build() checks the settings (JobArgumentError).
template <class T>
class KafkaSourceBuilder {
 public:
  KafkaSourceBuilder& setBootstrapServers(std::string servers) {
    s_.bootstrap = std::move(servers);
    return *this;
  }
  KafkaSourceBuilder& setTopics(std::vector<std::string> topics) {
    s_.subscription = KafkaSubscription::topics(std::move(topics));
    return *this;
  }
  /// Topics whose whole name matches `regex` (ECMAScript), found again at every discovery.
  KafkaSourceBuilder& setTopicPattern(std::string regex) {
    s_.subscription = KafkaSubscription::pattern(std::move(regex));
    return *this;
  }
  /// The consumer group offsets are committed for (monitoring) and read by committedOffsets().
  KafkaSourceBuilder& setGroupId(std::string group) {
    s_.groupId = std::move(group);
    return *this;
  }
  KafkaSourceBuilder& setStartingOffsets(OffsetsInitializer starting) {
    s_.starting = std::move(starting);
    return *this;
  }
  /// Bounded: each partition ends at the offset `stopping` gives when it is assigned.
  KafkaSourceBuilder& setBounded(OffsetsInitializer stopping) {
    s_.stopping = std::move(stopping);
    return *this;
  }
  /// A librdkafka consumer property (any of librdkafka's CONFIGURATION.md), or one of the
  /// source's own: partition.discovery.interval.ms (default 300000; <= 0: never),
  /// commit.offsets.on.checkpoint (default true), client.startup.timeout.ms (default 30000).
  KafkaSourceBuilder& setProperty(const std::string& key, const std::string& value) {
    auto ms = [&]() -> int64_t {
      try {
        size_t used = 0;
        int64_t v = std::stoll(value, &used);
        if (used != value.size()) throw std::invalid_argument("trailing");
        return v;
      } catch (const std::exception&) {
        throw JobArgumentError("KafkaSource: " + key + " must be a number of milliseconds, got '" + value + "'");
      }
    };
    if (key == "partition.discovery.interval.ms") s_.discoveryInterval = std::chrono::milliseconds(ms());
    else if (key == "client.startup.timeout.ms") s_.startupTimeout = std::chrono::milliseconds(std::max<int64_t>(ms(), 1));
    else if (key == "commit.offsets.on.checkpoint") {
      if (value != "true" && value != "false")
        throw JobArgumentError("KafkaSource: commit.offsets.on.checkpoint must be true or false, got '" + value + "'");
      s_.commitOffsets = value == "true";
    } else if (key == "group.id") s_.groupId = value;
    else if (key == "bootstrap.servers") s_.bootstrap = value;
    else s_.properties[key] = value;
    return *this;
  }
  /// A record the deserializer rejects is skipped, logged and counted instead of failing
  /// the task.
  KafkaSourceBuilder& skipUndeserializableRecords(bool skip = true) {
    s_.skipUndeserializable = skip;
    return *this;
  }
  /// f(const KafkaRecord&) -> T, or f(const KafkaRecord&, Collector<T>&) for zero or more
  /// records. Throwing rejects the record (see skipUndeserializableRecords).
  template <class F>
  KafkaSourceBuilder& setDeserializer(F f) {
    if constexpr (std::is_invocable_v<F, const KafkaRecord&, Collector<T>&>) {
      d_ = [f](const KafkaRecord& r, Collector<T>& out) { f(r, out); };
    } else {
      static_assert(std::is_invocable_r_v<T, F, const KafkaRecord&>,
                    "a Kafka deserializer is f(const KafkaRecord&) -> T or f(const KafkaRecord&, Collector<T>&)");
      d_ = [f](const KafkaRecord& r, Collector<T>& out) { out.collect(f(r)); };
    }
    return *this;
  }
  /// f(std::string_view value) -> T; records with a null value (tombstones) are skipped.
  template <class F>
  KafkaSourceBuilder& setValueOnlyDeserializer(F f) {
    static_assert(std::is_invocable_r_v<T, F, std::string_view>, "a value deserializer is f(std::string_view) -> T");
    d_ = [f](const KafkaRecord& r, Collector<T>& out) {
      if (auto v = r.value()) out.collect(f(*v));
    };
    return *this;
  }

  KafkaSource<T> build() const {
    if (s_.bootstrap.empty()) throw JobArgumentError("KafkaSource needs the bootstrap servers: setBootstrapServers(\"host:9092\")");
    if (!s_.subscription) throw JobArgumentError("KafkaSource needs topics: setTopics({...}) or setTopicPattern(\"...\")");
    if (!s_.subscription->isPattern() && s_.subscription->topicList().empty())
      throw JobArgumentError("KafkaSource: setTopics() was given no topic");
    for (const auto& t : s_.subscription->topicList())
      if (t.empty() || t.find(',') != std::string::npos)
        throw JobArgumentError("KafkaSource: '" + t + "' is not a topic name");
    if (s_.starting.kind() == OffsetsInitializer::Kind::kCommitted && s_.groupId.empty())
      throw JobArgumentError("KafkaSource: committedOffsets() needs setGroupId()");
    KafkaDeserializer<T> d = d_;
    if (!d) {
      if constexpr (std::is_same_v<T, std::string>) {
        d = [](const KafkaRecord& r, Collector<T>& out) {
          if (auto v = r.value()) out.collect(std::string(*v));
        };
      } else {
        throw JobArgumentError("KafkaSource<" + Serializer<T>::id() +
                               "> needs a deserializer: setDeserializer() or setValueOnlyDeserializer()");
      }
    }
    return KafkaSource<T>(std::make_shared<const detail::KafkaSourceSettings>(s_), d);
  }

 private:
  detail::KafkaSourceSettings s_;
  KafkaDeserializer<T> d_;
};

template <class T>
KafkaSourceBuilder<T> KafkaSource<T>::builder() {
  return {};
}

// ===================================================================================
// The sink
// ===================================================================================

enum class DeliveryGuarantee { kNone, kAtLeastOnce, kExactlyOnce };

inline const char* deliveryGuaranteeName(DeliveryGuarantee g) {
  switch (g) {
    case DeliveryGuarantee::kNone: return "none";
    case DeliveryGuarantee::kAtLeastOnce: return "at-least-once";
    case DeliveryGuarantee::kExactlyOnce: return "exactly-once";
  }
  return "?";
}

/// What a KafkaSink writes for one element.
struct KafkaProducerRecord {
  std::string topic;                  // empty: the sink's topic (setTopic)
  std::optional<int32_t> partition;   // nullopt: librdkafka's partitioner (by key)
  std::optional<std::string> key;
  std::optional<std::string> value;
  int64_t timestamp = kNoTimestamp;   // kNoTimestamp: the element's event timestamp, else the send time
  std::vector<std::pair<std::string, std::optional<std::string>>> headers;
};

/// A record of a transaction, as delivered (its partition), kept until the transaction is
/// known to be committed.
struct KafkaCarriedRecord {
  std::string topic;
  int32_t partition = -1;
  std::optional<std::string> key, value;
  int64_t timestamp = kNoTimestamp;
  std::vector<std::pair<std::string, std::optional<std::string>>> headers;
};

/// One transaction of a KafkaSink. Not transactional (kNone, kAtLeastOnce): empty.
struct KafkaTransaction {
  std::string transactionalId;
  /// Where its first record landed (offset -1: it wrote nothing), read back after a restore.
  std::string firstTopic;
  int32_t firstPartition = -1;
  int64_t firstOffset = -1;
  std::vector<KafkaCarriedRecord> records;
};

template <>
struct Serializer<KafkaTransaction> {
  static std::string id() { return "KafkaTransaction"; }
  static uint32_t version() { return 1; }
  using Headers = std::vector<std::pair<std::string, std::optional<std::string>>>;
  static void write(ByteWriter& w, const KafkaTransaction& t) {
    w.writeBytes(t.transactionalId);
    w.writeBytes(t.firstTopic);
    w.writeI64(t.firstPartition);
    w.writeI64(t.firstOffset);
    w.writeVarint(t.records.size());
    for (const auto& r : t.records) {
      w.writeBytes(r.topic);
      w.writeI64(r.partition);
      Serializer<std::optional<std::string>>::write(w, r.key);
      Serializer<std::optional<std::string>>::write(w, r.value);
      w.writeI64(r.timestamp);
      Serializer<Headers>::write(w, r.headers);
    }
  }
  static KafkaTransaction read(ByteReader& r) {
    KafkaTransaction t;
    t.transactionalId = std::string(r.readBytes());
    t.firstTopic = std::string(r.readBytes());
    t.firstPartition = static_cast<int32_t>(r.readI64());
    t.firstOffset = r.readI64();
    uint64_t n = r.readVarint();
    if (n > r.remaining()) throw SerializationError("a Kafka transaction in the sink's state is truncated");
    for (; n > 0; --n) {
      KafkaCarriedRecord c;
      c.topic = std::string(r.readBytes());
      c.partition = static_cast<int32_t>(r.readI64());
      c.key = Serializer<std::optional<std::string>>::read(r);
      c.value = Serializer<std::optional<std::string>>::read(r);
      c.timestamp = r.readI64();
      c.headers = Serializer<Headers>::read(r);
      t.records.push_back(std::move(c));
    }
    return t;
  }
};

namespace detail {

struct KafkaSinkSettings {
  std::string bootstrap;
  std::string topic;
  std::map<std::string, std::string> properties;
  DeliveryGuarantee guarantee = DeliveryGuarantee::kAtLeastOnce;
  std::string transactionalIdPrefix;
};

/// The record-type-free part of KafkaSink: producers, transactions, recovery.
class KafkaSinkWriter {
 public:
  explicit KafkaSinkWriter(std::shared_ptr<const KafkaSinkSettings> s) : s_(std::move(s)) {}
  KafkaSinkWriter(const KafkaSinkWriter& o) : s_(o.s_) {}  // an unopened copy per subtask
  KafkaSinkWriter& operator=(const KafkaSinkWriter&) = delete;
  ~KafkaSinkWriter() { close(); }

  DeliveryGuarantee guarantee() const { return s_->guarantee; }
  const std::string& label() const { return label_; }
  bool exactlyOnce() const { return s_->guarantee == DeliveryGuarantee::kExactlyOnce; }

  void open(OperatorContext& ctx) {
    ctx_ = &ctx;
    subtask_ = ctx.subtaskIndex();
    parallelism_ = ctx.parallelism();
    label_ = "Kafka sink '" + ctx.uid() + "' (" + std::to_string(subtask_ + 1) + "/" + std::to_string(parallelism_) + ")";
    if (exactlyOnce()) {
      const int64_t interval = ctx.checkpointIntervalMs();
      if (interval <= 0)
        throw JobArgumentError(label_ + ": exactly-once needs checkpoints (its transactions commit when one completes): "
                               "set execution.checkpointing.interval, or use DeliveryGuarantee::kAtLeastOnce");
      int64_t timeout = 60000;  // librdkafka's default transaction.timeout.ms
      if (auto it = s_->properties.find("transaction.timeout.ms"); it != s_->properties.end()) {
        try {
          timeout = std::stoll(it->second);
        } catch (const std::exception&) {
          throw JobArgumentError(label_ + ": transaction.timeout.ms must be a number of milliseconds, got '" + it->second + "'");
        }
      }
      if (timeout <= interval)
        throw JobArgumentError(label_ + ": transaction.timeout.ms (" + std::to_string(timeout) +
                               " ms) must be larger than the checkpoint interval (" + std::to_string(interval) +
                               " ms): a transaction stays open from one checkpoint barrier until the next checkpoint "
                               "completes, and Kafka aborts it after transaction.timeout.ms. Raise it (several "
                               "intervals; at most the brokers' transaction.max.timeout.ms, 15 min by default) or "
                               "checkpoint more often");
    } else {
      producer_ = newProducer("");
    }
  }

  void recoverFrom(uint64_t checkpointId, int writerParallelism) {
    recovered_ = true;
    restoredCheckpoint_ = checkpointId;
    writerParallelism_ = writerParallelism;
    nextName_ = checkpointId + 1;
  }

  /// After a restore (recoverFrom first): aborts what former runs left open under the ids
  /// after the restored checkpoint, for every former subtask index this subtask answers
  /// for (Flink's probing).
  void abortStrays() {
    if (!exactlyOnce()) return;
    abortLingering(restoredCheckpoint_ + 1, writerParallelism_);
  }

  /// A new transaction; exactly-once: a new transactional producer.
  KafkaTransaction begin() {
    if (!exactlyOnce()) return {};
    if (!recovered_) {
      // A start without state: what an earlier run with this prefix may have left open.
      recovered_ = true;
      abortLingering(1, parallelism_);
    }
    KafkaTransaction t;
    t.transactionalId = s_->transactionalIdPrefix + "-" + std::to_string(subtask_) + "-" + std::to_string(nextName_++);
    open_ = std::make_unique<Producer>();
    open_->handle = newProducer(t.transactionalId);
    open_->transactionalId = t.transactionalId;
    initTransactions(*open_);
    check(open_->handle.get(), rd_kafka_begin_transaction(open_->handle.get()), "begin transaction " + t.transactionalId);
    records_.clear();
    return t;
  }

  /// Sends one record (of transaction `txn`).
  void send(KafkaTransaction& txn, KafkaProducerRecord r, int64_t eventTimestamp) {
    throwDeliveryError();
    rd_kafka_t* rk = exactlyOnce() ? open_->handle.get() : producer_.get();
    if (r.topic.empty()) r.topic = s_->topic;
    if (r.timestamp == kNoTimestamp) r.timestamp = eventTimestamp;
    size_t index = 0;
    if (exactlyOnce()) {
      index = records_.size();
      KafkaCarriedRecord c;
      c.topic = r.topic;
      c.partition = r.partition.value_or(-1);
      c.key = r.key;
      c.value = r.value;
      c.timestamp = r.timestamp;
      c.headers = r.headers;
      records_.push_back(std::move(c));
    }
    produce(rk, r.topic, r.partition.value_or(RD_KAFKA_PARTITION_UA), r.key, r.value, r.timestamp, r.headers,
            exactlyOnce() ? reinterpret_cast<void*>(index + 1) : nullptr);
    (void)txn;
    if (++sinceServe_ >= 1024) {
      sinceServe_ = 0;
      rd_kafka_poll(rk, 0);
    }
  }

  /// At a barrier: waits until every record sent is acknowledged (at-least-once and
  /// exactly-once); exactly-once keeps the transaction's records and its producer for the
  /// commit.
  void preCommit(KafkaTransaction& txn, uint64_t checkpointId) {
    if (s_->guarantee == DeliveryGuarantee::kNone) {
      // No wait at checkpoints; at the end of the input everything is sent (as Flink's).
      if (checkpointId == TwoPhaseCommitSink<int, KafkaTransaction>::kEndOfInput) flush(producer_.get(), "the last records");
      else rd_kafka_poll(producer_.get(), 0);
      throwDeliveryError();
      return;
    }
    if (!exactlyOnce()) {
      flush(producer_.get(), "the records before checkpoint " + std::to_string(checkpointId));
      return;
    }
    flush(open_->handle.get(), "transaction " + txn.transactionalId);
    txn.records = std::move(records_);
    records_.clear();
    txn.firstTopic = firstTopic_;
    txn.firstPartition = firstPartition_;
    txn.firstOffset = firstOffset_;
    firstOffset_ = -1;
    firstTopic_.clear();
    firstPartition_ = -1;
    if (verbose())  // one line per checkpoint and subtask: only with the property debug set
      std::fprintf(stderr, "%s: pre-committed transaction %s for checkpoint %llu (%zu records)\n", label_.c_str(),
                   txn.transactionalId.c_str(), static_cast<unsigned long long>(checkpointId), txn.records.size());
    pending_[txn.transactionalId] = std::move(open_);
  }

  /// Commits `txn`: its live producer's transaction, or, after a restore, as the file
  /// comment describes (read back, and written again if it was not committed).
  void commit(const KafkaTransaction& txn) {
    if (!exactlyOnce() || txn.transactionalId.empty()) return;
    auto it = pending_.find(txn.transactionalId);
    if (it == pending_.end()) {
      recoverAndCommit(txn);
      return;
    }
    std::unique_ptr<Producer> p = std::move(it->second);
    pending_.erase(it);
    if (!commitTransaction(*p)) {
      // Kafka aborted it (an abortable error, or it timed out): write its records again.
      std::fprintf(stderr, "%s: transaction %s could not be committed; writing its %zu records again\n", label_.c_str(),
                   txn.transactionalId.c_str(), txn.records.size());
      rewrite(*p, txn);
    }
    if (verbose()) std::fprintf(stderr, "%s: committed transaction %s\n", label_.c_str(), txn.transactionalId.c_str());
  }

  void abort(const KafkaTransaction& txn) {
    if (!exactlyOnce() || txn.transactionalId.empty()) return;
    std::unique_ptr<Producer> p;
    if (open_ && open_->transactionalId == txn.transactionalId) p = std::move(open_);
    else if (auto it = pending_.find(txn.transactionalId); it != pending_.end()) {
      p = std::move(it->second);
      pending_.erase(it);
    }
    if (!p) return;
    KafkaError e{rd_kafka_abort_transaction(p->handle.get(), 30000)};
    (void)e;  // the broker aborts it anyway when it times out, or the next run's probe does
  }

  void close() {
    // Not transactional: what is still queued goes out (a job that ends cleanly; cancelled,
    // briefly: a restore repeats it anyway).
    if (producer_) rd_kafka_flush(producer_.get(), ctx_ && ctx_->cancelled() ? 1000 : 30000);
    producer_.reset();
    open_.reset();
    pending_.clear();
  }

 private:
  bool verbose() const { return s_->properties.count("debug") > 0; }

  /// A transactional producer and the id it was made for.
  struct Producer {
    KafkaHandle handle;
    std::string transactionalId;
  };

  /// A producer of this sink: transactional when `transactionalId` is given. A probe
  /// (`epochOut`) writes the epoch the broker gave it into *epochOut.
  KafkaHandle newProducer(const std::string& transactionalId, int16_t* epochOut = nullptr) {
    auto props = s_->properties;
    props["bootstrap.servers"] = s_->bootstrap;
    if (!transactionalId.empty()) {
      props["transactional.id"] = transactionalId;
      if (!props.count("client.id")) props["client.id"] = transactionalId;
    } else if (s_->guarantee == DeliveryGuarantee::kAtLeastOnce && !props.count("enable.idempotence")) {
      props["enable.idempotence"] = "true";  // retries neither lose nor duplicate nor reorder
    }
    const bool printLogs = props.count("debug") > 0;
    // librdkafka has no API for the producer epoch; it logs it ("GETPID: Acquired
    // PID{Id:..,Epoch:..}") under debug=eos, which a probe reads (see abortLingering).
    if (epochOut) props["debug"] = printLogs ? props["debug"] + ",eos" : "eos";
    auto events = std::make_unique<KafkaClientEvents>(label_, printLogs);
    events->owner = epochOut ? static_cast<void*>(epochOut) : static_cast<void*>(this);
    events->tag = transactionalId;
    KafkaHandle h = makeKafkaClient(RD_KAFKA_PRODUCER, props, events.get(), label_, [&](rd_kafka_conf_t* conf) {
      if (epochOut) rd_kafka_conf_set_log_cb(conf, &KafkaSinkWriter::onProbeLog);
      else rd_kafka_conf_set_dr_msg_cb(conf, &KafkaSinkWriter::onDelivery);
    });
    allEvents_.push_back(std::move(events));  // they outlive every handle (declared before them)
    return h;
  }

  static void onProbeLog(const rd_kafka_t* rk, int level, const char* fac, const char* buf) {
    auto* events = static_cast<KafkaClientEvents*>(rd_kafka_opaque(rk));
    if (std::strcmp(fac, "GETPID") == 0) {
      const char* e = std::strstr(buf, "Acquired PID{");
      const char* ep = e ? std::strstr(e, "Epoch:") : nullptr;
      if (ep) *static_cast<int16_t*>(events->owner) = static_cast<int16_t>(std::atoi(ep + 6));
    }
    if (level <= 4) KafkaClientEvents::onLog(rk, level, fac, buf);  // warnings and worse, if printed at all
  }

  static void onDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    auto* self = static_cast<KafkaSinkWriter*>(static_cast<KafkaClientEvents*>(opaque)->owner);
    if (m->err) {
      if (self->deliveryError_.empty())
        self->deliveryError_ = "topic '" + std::string(rd_kafka_topic_name(m->rkt)) + "' partition " +
                               std::to_string(m->partition) + ": " + rd_kafka_err2name(m->err) + " (" +
                               rd_kafka_err2str(m->err) + ")";
      return;
    }
    if (m->_private == nullptr) return;  // not a record of the open transaction
    size_t index = reinterpret_cast<size_t>(m->_private) - 1;
    if (index < self->records_.size()) self->records_[index].partition = m->partition;
    if (self->firstOffset_ < 0) {
      self->firstTopic_ = rd_kafka_topic_name(m->rkt);
      self->firstPartition_ = m->partition;
      self->firstOffset_ = m->offset;
    }
  }

  void produce(rd_kafka_t* rk, const std::string& topic, int32_t partition, const std::optional<std::string>& key,
               const std::optional<std::string>& value, int64_t timestamp,
               const std::vector<std::pair<std::string, std::optional<std::string>>>& headers, void* opaque) {
    for (;;) {
      rd_kafka_headers_t* hdrs = nullptr;
      if (!headers.empty()) {
        hdrs = rd_kafka_headers_new(headers.size());
        for (const auto& [name, v] : headers)
          rd_kafka_header_add(hdrs, name.data(), static_cast<ssize_t>(name.size()), v ? v->data() : nullptr,
                              v ? static_cast<ssize_t>(v->size()) : 0);
      }
      // (The RD_KAFKA_V_* macros cast their arguments without parentheses: plain variables.)
      const void* keyData = key ? static_cast<const void*>(key->data()) : nullptr;
      const size_t keySize = key ? key->size() : 0;
      void* valueData = value ? static_cast<void*>(const_cast<char*>(value->data())) : nullptr;
      const size_t valueSize = value ? value->size() : 0;
      const int64_t ts = timestamp == kNoTimestamp ? 0 : timestamp;
      const char* topicName = topic.c_str();
      rd_kafka_resp_err_t err = rd_kafka_producev(
          rk, RD_KAFKA_V_TOPIC(topicName), RD_KAFKA_V_PARTITION(partition), RD_KAFKA_V_KEY(keyData, keySize),
          RD_KAFKA_V_VALUE(valueData, valueSize), RD_KAFKA_V_TIMESTAMP(ts), RD_KAFKA_V_HEADERS(hdrs),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return;
      if (hdrs) rd_kafka_headers_destroy(hdrs);
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(rk, 50);
        throwDeliveryError();
        if (ctx_ && ctx_->cancelled()) throw std::runtime_error(label_ + ": cancelled while the send queue was full");
        continue;
      }
      std::string why = kafkaErrorText(err);
      if (err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC || err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        throw std::runtime_error(label_ + ": topic '" + topic + "' does not exist on the Kafka brokers " + s_->bootstrap +
                                 "; create it, or fix the topic name");
      if (err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION)
        throw std::runtime_error(label_ + ": topic '" + topic + "' has no partition " + std::to_string(partition));
      if (err == RD_KAFKA_RESP_ERR__FATAL || err == RD_KAFKA_RESP_ERR__STATE) {
        char buf[512] = "";
        rd_kafka_resp_err_t fatal = rd_kafka_fatal_error(rk, buf, sizeof buf);
        if (fatal) throwProducerFailure(idOf(rk), fatal, buf);
      }
      throw std::runtime_error(label_ + ": cannot send a record to topic '" + topic + "': " + why);
    }
  }

  /// Waits until the producer's queue is empty, while the job is not cancelled; a
  /// delivery error throws.
  void flush(rd_kafka_t* rk, const std::string& what) {
    for (;;) {
      rd_kafka_resp_err_t err = rd_kafka_flush(rk, 100);
      throwDeliveryError();
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return;
      if (ctx_ && ctx_->cancelled()) throw std::runtime_error(label_ + ": cancelled while flushing " + what);
      char buf[512] = "";
      if (rd_kafka_resp_err_t fatal = rd_kafka_fatal_error(rk, buf, sizeof buf)) throwProducerFailure(idOf(rk), fatal, buf);
    }
  }

  void throwDeliveryError() {
    if (deliveryError_.empty()) return;
    std::string e = deliveryError_;
    deliveryError_.clear();
    throw std::runtime_error(label_ + ": a record could not be written to " + e);
  }

  [[noreturn]] void throwProducerFailure(const std::string& id, rd_kafka_resp_err_t err, const std::string& why) {
    if (isFencing(err))
      throw std::runtime_error(label_ + ": transactional id " + id +
                               " was fenced (" + rd_kafka_err2name(err) + ": " + why +
                               "): a newer producer with this id took over — a restored run of this job, or another "
                               "job with the same transactional id prefix. This instance stops writing; if no other "
                               "run should exist, give each job its own prefix");
    if (isAuthorizationError(err))
      throw std::runtime_error(label_ + ": not authorized: " + why + " (" + rd_kafka_err2name(err) +
                               "); grant the job's principal WRITE on the topic" +
                               (exactlyOnce() ? " and WRITE/DESCRIBE on its transactional ids" : ""));
    throw std::runtime_error(label_ + ": the Kafka producer failed: " + why + " (" + rd_kafka_err2name(err) + ")");
  }

  /// The transactional id of a producer of this sink.
  static std::string idOf(rd_kafka_t* rk) {
    auto* events = static_cast<KafkaClientEvents*>(rd_kafka_opaque(rk));
    return events && !events->tag.empty() ? events->tag : std::string(rd_kafka_name(rk));
  }

  static bool isFencing(rd_kafka_resp_err_t err) {
    return err == RD_KAFKA_RESP_ERR_PRODUCER_FENCED || err == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH ||
           err == RD_KAFKA_RESP_ERR__FENCED;
  }

  /// Throws for a transactional call's error (fatal ones name the fencing).
  void check(rd_kafka_t* rk, rd_kafka_error_t* raw, const std::string& what) {
    KafkaError e{raw};
    if (!e) return;
    rd_kafka_resp_err_t code = rd_kafka_error_code(e.get());
    if (rd_kafka_error_is_fatal(e.get()) || isFencing(code)) {
      char buf[512] = "";
      rd_kafka_resp_err_t fatal = rd_kafka_fatal_error(rk, buf, sizeof buf);
      throwProducerFailure(idOf(rk), fatal ? fatal : code, fatal ? buf : rd_kafka_error_string(e.get()));
    }
    if (isAuthorizationError(code)) throwProducerFailure(idOf(rk), code, rd_kafka_error_string(e.get()));
    throw std::runtime_error(label_ + ": cannot " + what + ": " + rd_kafka_error_string(e.get()) + " (" +
                             rd_kafka_err2name(code) + ")");
  }

  /// init_transactions, retried while librdkafka calls the error retriable (a broker
  /// that is not up yet), bounded by the job being cancelled.
  void initTransactions(Producer& p) {
    for (int attempt = 0;; ++attempt) {
      rd_kafka_error_t* raw = rd_kafka_init_transactions(p.handle.get(), 30000);
      if (raw == nullptr) return;
      if (rd_kafka_error_is_retriable(raw) && attempt < 20 && !(ctx_ && ctx_->cancelled())) {
        rd_kafka_error_destroy(raw);
        std::this_thread::sleep_for(std::chrono::milliseconds(100 << std::min(attempt, 5)));
        continue;
      }
      check(p.handle.get(), raw, "initialise transactions for " + p.transactionalId);
    }
  }

  /// Commits; false if Kafka aborted the transaction (it must be written again).
  bool commitTransaction(Producer& p) {
    for (int attempt = 0;; ++attempt) {
      rd_kafka_error_t* raw = rd_kafka_commit_transaction(p.handle.get(), 60000);
      if (raw == nullptr) return true;
      KafkaError e{raw};
      if (rd_kafka_error_is_retriable(raw) && attempt < 20) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100 << std::min(attempt, 5)));
        continue;
      }
      if (rd_kafka_error_txn_requires_abort(raw)) {
        check(p.handle.get(), rd_kafka_abort_transaction(p.handle.get(), 60000), "abort transaction " + p.transactionalId);
        return false;
      }
      check(p.handle.get(), e.release(), "commit transaction " + p.transactionalId);
    }
  }

  /// Writes `txn`'s records again in a new transaction of `p` (same transactional id) and
  /// commits it.
  void rewrite(Producer& p, const KafkaTransaction& txn) {
    for (int attempt = 0;; ++attempt) {
      check(p.handle.get(), rd_kafka_begin_transaction(p.handle.get()), "begin transaction " + p.transactionalId);
      for (const auto& r : txn.records)
        produce(p.handle.get(), r.topic, r.partition >= 0 ? r.partition : RD_KAFKA_PARTITION_UA, r.key, r.value,
                r.timestamp, r.headers, nullptr);
      flush(p.handle.get(), "transaction " + p.transactionalId);
      if (commitTransaction(p)) return;
      if (attempt >= 5)
        throw std::runtime_error(label_ + ": transaction " + p.transactionalId + " was aborted by Kafka " +
                                 std::to_string(attempt + 1) + " times while writing its records again");
    }
  }

  /// A transaction of the restored checkpoint: opened again under its id (which makes the
  /// broker finish it, committing or aborting, and fences its old producer), then read
  /// back; written again if its first record is not visible to read_committed readers.
  void recoverAndCommit(const KafkaTransaction& txn) {
    Producer p;
    p.transactionalId = txn.transactionalId;
    p.handle = newProducer(txn.transactionalId);
    initTransactions(p);
    if (txn.firstOffset < 0 || txn.records.empty()) {
      std::fprintf(stderr, "%s: recovered transaction %s: it wrote nothing\n", label_.c_str(), txn.transactionalId.c_str());
      return;
    }
    bool visible = readBack(txn.firstTopic, txn.firstPartition, txn.firstOffset);
    if (visible) {
      std::fprintf(stderr, "%s: recovered transaction %s: committed before the failure\n", label_.c_str(),
                   txn.transactionalId.c_str());
      return;
    }
    std::fprintf(stderr, "%s: recovered transaction %s: not committed before the failure; writing its %zu records again\n",
                 label_.c_str(), txn.transactionalId.c_str(), txn.records.size());
    rewrite(p, txn);
  }

  /// Whether the record at `offset` of topic[partition] is visible to read_committed
  /// readers (an aborted one is skipped: the first record seen is later, or there is none).
  bool readBack(const std::string& topic, int32_t partition, int64_t offset) {
    auto props = s_->properties;
    for (const char* k : {"transactional.id", "enable.idempotence", "transaction.timeout.ms", "acks", "linger.ms",
                          "queue.buffering.max.ms", "batch.num.messages", "compression.type", "compression.codec"})
      props.erase(k);
    props["bootstrap.servers"] = s_->bootstrap;
    props["group.id"] = "jobhost-readback-" + s_->transactionalIdPrefix;
    props["isolation.level"] = "read_committed";
    props["enable.auto.commit"] = "false";
    props["enable.partition.eof"] = "true";
    props["auto.offset.reset"] = "latest";
    KafkaClientEvents events(label_, false);
    KafkaHandle c = makeKafkaClient(RD_KAFKA_CONSUMER, props, &events, label_, [](rd_kafka_conf_t*) {});
    // The record is not in the partition (its end is before it: another cluster, or the
    // log was truncated): never committed there. Deleted by retention (its start is past
    // it): nothing can tell; it is taken as committed rather than written twice.
    int64_t low = 0, high = 0;
    if (rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(c.get(), topic.c_str(), partition, &low, &high, 30000))
      throw std::runtime_error(label_ + ": cannot read back " + topic + "[" + std::to_string(partition) +
                               "] to recover a transaction: " + kafkaErrorText(err));
    if (high <= offset) return false;
    if (low > offset) {
      std::fprintf(stderr, "%s: %s[%d] no longer holds offset %lld (retention): its transaction is taken as committed\n",
                   label_.c_str(), topic.c_str(), partition, static_cast<long long>(offset));
      return true;
    }
    auto l = newPartitionList(1);
    rd_kafka_topic_partition_list_add(l.get(), topic.c_str(), partition)->offset = offset;
    if (KafkaError e{rd_kafka_incremental_assign(c.get(), l.get())})
      throw std::runtime_error(label_ + ": cannot read back " + topic + "[" + std::to_string(partition) +
                               "]: " + rd_kafka_error_string(e.get()));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (std::chrono::steady_clock::now() < deadline && !(ctx_ && ctx_->cancelled())) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(c.get(), 200);
      if (m == nullptr) continue;
      bool done = false, visible = false;
      if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        done = m->offset > offset;  // past it without seeing it: aborted
      } else if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        done = true;
        visible = m->offset == offset;
      }
      rd_kafka_message_destroy(m);
      if (done) {
        rd_kafka_consumer_close(c.get());
        return visible;
      }
    }
    throw std::runtime_error(label_ + ": cannot tell whether a transaction of the restored checkpoint was committed: "
                             "reading " + topic + "[" + std::to_string(partition) + "] at offset " +
                             std::to_string(offset) + " with read_committed gave no answer within 2 minutes (is "
                             "another transaction open on that partition?)");
  }

  /// Opens `<prefix>-<s>-<n>` for n = first, first+1, ... until one comes back with epoch
  /// 0 (never used), for s = this subtask, + parallelism, ... (while s < `writers` or an
  /// id of s was in use).
  void abortLingering(uint64_t first, int writers) {
    for (int s = subtask_;; s += parallelism_) {
      int used = 0;
      for (uint64_t n = first;; ++n) {
        std::string id = s_->transactionalIdPrefix + "-" + std::to_string(s) + "-" + std::to_string(n);
        int16_t epoch = -1;
        {
          Producer p;
          p.transactionalId = id;
          p.handle = newProducer(id, &epoch);
          initTransactions(p);
        }
        if (epoch == 0) {
          std::fprintf(stderr, "%s: transactional id %s was never used (epoch 0): nothing open after it\n",
                       label_.c_str(), id.c_str());
          break;
        }
        ++used;
        std::fprintf(stderr, "%s: aborted what was open under transactional id %s (epoch %d)\n", label_.c_str(),
                     id.c_str(), static_cast<int>(epoch));
        if (epoch < 0 && used >= 8) {
          std::fprintf(stderr, "%s: librdkafka did not report the producer epoch; stopped probing after %d ids\n",
                       label_.c_str(), used);
          break;
        }
      }
      if (used == 0 && s + parallelism_ >= writers) break;
    }
  }

  std::shared_ptr<const KafkaSinkSettings> s_;
  OperatorContext* ctx_ = nullptr;
  int subtask_ = 0, parallelism_ = 1;
  std::string label_;
  std::vector<std::unique_ptr<KafkaClientEvents>> allEvents_;  // outlive every handle (declared before them)
  KafkaHandle producer_;                                      // kNone, kAtLeastOnce
  std::unique_ptr<Producer> open_;                            // exactly-once: the current transaction's
  std::map<std::string, std::unique_ptr<Producer>> pending_;  // pre-committed, by transactional id
  std::vector<KafkaCarriedRecord> records_;                   // of the open transaction
  std::string firstTopic_;
  int32_t firstPartition_ = -1;
  int64_t firstOffset_ = -1;
  std::string deliveryError_;
  size_t sinceServe_ = 0;
  bool recovered_ = false;
  uint64_t restoredCheckpoint_ = 0;
  int writerParallelism_ = 1;
  uint64_t nextName_ = 1;
};

}  // namespace detail

template <class T>
class KafkaSinkBuilder;

/// A Kafka sink of records T (see the file comment). Made by KafkaSink<T>::builder();
/// added with stream.sinkTo(sink, name).uid(...).
template <class T>
class KafkaSink : public TwoPhaseCommitSink<T, KafkaTransaction> {
 public:
  using RecordSerializer = std::function<KafkaProducerRecord(const T&, int64_t timestamp)>;
  static KafkaSinkBuilder<T> builder();

  DeliveryGuarantee guarantee() const { return writer_.guarantee(); }

  void open(OperatorContext& ctx) override { writer_.open(ctx); }
  KafkaTransaction beginTransaction() override { return writer_.begin(); }
  void invoke(KafkaTransaction& txn, const T& value, int64_t timestamp) override {
    writer_.send(txn, serializer_(value, timestamp), timestamp);
  }
  void preCommit(KafkaTransaction& txn) override { writer_.preCommit(txn, this->kEndOfInput); }
  void preCommitForCheckpoint(KafkaTransaction& txn, uint64_t checkpointId) override {
    writer_.preCommit(txn, checkpointId);
  }
  void commit(const KafkaTransaction& txn) override { writer_.commit(txn); }
  void abort(const KafkaTransaction& txn) override { writer_.abort(txn); }
  void recoverFrom(uint64_t checkpointId, int writerParallelism) override {
    writer_.recoverFrom(checkpointId, writerParallelism);
  }
  void abortStrays(int, int, const std::vector<KafkaTransaction>&) override { writer_.abortStrays(); }
  void close() override { writer_.close(); }

 private:
  friend class KafkaSinkBuilder<T>;
  KafkaSink(std::shared_ptr<const detail::KafkaSinkSettings> s, RecordSerializer f)
      : writer_(std::move(s)), serializer_(std::move(f)) {}
  detail::KafkaSinkWriter writer_;
  RecordSerializer serializer_;
};

/// Builds a KafkaSink<T>; build() checks the settings (JobArgumentError).
template <class T>
class KafkaSinkBuilder {
 public:
  KafkaSinkBuilder& setBootstrapServers(std::string servers) {
    s_.bootstrap = std::move(servers);
    return *this;
  }
  /// The topic of records whose serializer names none.
  KafkaSinkBuilder& setTopic(std::string topic) {
    s_.topic = std::move(topic);
    return *this;
  }
  KafkaSinkBuilder& setDeliveryGuarantee(DeliveryGuarantee g) {
    s_.guarantee = g;
    return *this;
  }
  /// Exactly-once: transactional ids are "<prefix>-<subtask>-<n>". One prefix per job
  /// (and output): a restore aborts what is open under its ids.
  KafkaSinkBuilder& setTransactionalIdPrefix(std::string prefix) {
    s_.transactionalIdPrefix = std::move(prefix);
    return *this;
  }
  /// A librdkafka producer property (librdkafka's CONFIGURATION.md), e.g.
  /// transaction.timeout.ms, linger.ms, compression.type.
  KafkaSinkBuilder& setProperty(const std::string& key, const std::string& value) {
    if (key == "bootstrap.servers") s_.bootstrap = value;
    else s_.properties[key] = value;
    return *this;
  }
  /// f(const T&, int64_t eventTimestamp) -> KafkaProducerRecord: topic, partition, key,
  /// value, timestamp and headers per record.
  KafkaSinkBuilder& setRecordSerializer(std::function<KafkaProducerRecord(const T&, int64_t)> f) {
    record_ = std::move(f);
    return *this;
  }
  /// f(const T&) -> std::optional<std::string> or std::string: the record key.
  template <class F>
  KafkaSinkBuilder& setKeySerializer(F f) {
    key_ = [f](const T& v) -> std::optional<std::string> { return f(v); };
    return *this;
  }
  /// f(const T&) -> std::string: the record value. Default: the text print() shows.
  template <class F>
  KafkaSinkBuilder& setValueSerializer(F f) {
    value_ = [f](const T& v) -> std::optional<std::string> { return f(v); };
    return *this;
  }

  KafkaSink<T> build() const {
    if (s_.bootstrap.empty()) throw JobArgumentError("KafkaSink needs the bootstrap servers: setBootstrapServers(\"host:9092\")");
    if (!record_ && s_.topic.empty())
      throw JobArgumentError("KafkaSink needs a topic: setTopic(\"...\"), or a record serializer that names one");
    if (s_.guarantee == DeliveryGuarantee::kExactlyOnce) {
      if (s_.transactionalIdPrefix.empty())
        throw JobArgumentError("KafkaSink with exactly-once needs a transactional id prefix, unique to this job: "
                               "setTransactionalIdPrefix(\"...\")");
      if (s_.properties.count("transactional.id"))
        throw JobArgumentError("KafkaSink: do not set transactional.id; the sink names its transactions after "
                               "setTransactionalIdPrefix()");
    }
    typename KafkaSink<T>::RecordSerializer f = record_;
    if (!f) {
      auto key = key_;
      auto value = value_;
      if (!value) {
        if constexpr (detail::HasTextForm<T>) {
          value = [](const T& v) -> std::optional<std::string> {
            std::string s;
            appendText(s, v);
            return s;
          };
        } else {
          throw JobArgumentError("KafkaSink<" + Serializer<T>::id() + "> needs a value serializer: setValueSerializer()");
        }
      }
      f = [key, value](const T& v, int64_t) {
        KafkaProducerRecord r;
        if (key) r.key = key(v);
        r.value = value(v);
        return r;
      };
    }
    return KafkaSink<T>(std::make_shared<const detail::KafkaSinkSettings>(s_), f);
  }

 private:
  detail::KafkaSinkSettings s_;
  std::function<KafkaProducerRecord(const T&, int64_t)> record_;
  std::function<std::optional<std::string>(const T&)> key_, value_;
};

template <class T>
KafkaSinkBuilder<T> KafkaSink<T>::builder() {
  return {};
}

}  // namespace jobhost
