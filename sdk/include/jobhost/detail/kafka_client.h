// jobhost/detail/kafka_client.h — the librdkafka plumbing of KafkaSource and KafkaSink
// (internal; include jobhost/kafka.h): handles, configuration with clear errors,
// metadata, and what librdkafka reports on its own threads.
//
// librdkafka logs through log_cb on its own threads; by default these handles print
// nothing (a broker that is down would fill the log with one line per reconnect):
// errors are kept (ClientEvents) and named in the error the source or sink throws.
// The property `debug` (e.g. debug=eos,fetch) prints librdkafka's lines on stderr.
//
// Thread-safety: ClientEvents is shared with librdkafka's threads (its own lock);
// everything else is used by one task thread.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#if __has_include(<librdkafka/rdkafka.h>)
#include <librdkafka/rdkafka.h>
#else
#error "jobhost/kafka.h needs librdkafka: install librdkafka-dev (Debian) and link it (CMake: target_link_libraries(<plugin> PRIVATE jobhost::kafka))"
#endif

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "jobhost/errors.h"

namespace jobhost::detail {

struct KafkaHandleDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
using KafkaHandle = std::unique_ptr<rd_kafka_t, KafkaHandleDeleter>;

struct KafkaPartitionListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* l) const { rd_kafka_topic_partition_list_destroy(l); }
};
using KafkaPartitionList = std::unique_ptr<rd_kafka_topic_partition_list_t, KafkaPartitionListDeleter>;
inline KafkaPartitionList newPartitionList(size_t n = 8) {
  return KafkaPartitionList(rd_kafka_topic_partition_list_new(static_cast<int>(n)));
}

struct KafkaErrorDeleter {
  void operator()(rd_kafka_error_t* e) const { rd_kafka_error_destroy(e); }
};
using KafkaError = std::unique_ptr<rd_kafka_error_t, KafkaErrorDeleter>;

/// "UNKNOWN_TOPIC_OR_PART (Broker: Unknown topic or partition)".
inline std::string kafkaErrorText(rd_kafka_resp_err_t err) {
  return std::string(rd_kafka_err2name(err)) + " (" + rd_kafka_err2str(err) + ")";
}

/// Whether a broker answer means the client lacks a permission.
inline bool isAuthorizationError(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED || err == RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED ||
         err == RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED ||
         err == RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED || err == RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED ||
         err == RD_KAFKA_RESP_ERR__AUTHENTICATION;
}

/// Whether a request that failed with `err` is worth repeating (a leader moving, a
/// coordinator loading, a time-out, a lost connection).
inline bool isRetriableError(rd_kafka_resp_err_t err) {
  switch (err) {
    case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
    case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
    case RD_KAFKA_RESP_ERR_NOT_COORDINATOR:
    case RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS:
    case RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:
    case RD_KAFKA_RESP_ERR_FENCED_LEADER_EPOCH:
    case RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH:
    case RD_KAFKA_RESP_ERR_OFFSET_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_REPLICA_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR__WAIT_COORD:
    case RD_KAFKA_RESP_ERR__IN_PROGRESS:
      return true;
    default:
      return false;
  }
}

/// What librdkafka reported on its threads (error_cb, log_cb), for messages.
class KafkaClientEvents {
 public:
  KafkaClientEvents(std::string label, bool printLogs) : label_(std::move(label)), printLogs_(printLogs) {}
  /// The last error librdkafka reported (a broker down, authentication failed), "" if none.
  std::string lastError() const {
    std::lock_guard lock(mu_);
    return lastError_;
  }
  rd_kafka_resp_err_t lastErrorCode() const {
    std::lock_guard lock(mu_);
    return lastCode_;
  }
  void clear() {
    std::lock_guard lock(mu_);
    lastError_.clear();
    lastCode_ = RD_KAFKA_RESP_ERR_NO_ERROR;
  }

  /// What the client belongs to, for callbacks that need more (a sink's delivery reports).
  void* owner = nullptr;
  /// What the client is for, in messages (a producer's transactional id).
  std::string tag;

  static void onError(rd_kafka_t*, int err, const char* reason, void* opaque) {
    auto* self = static_cast<KafkaClientEvents*>(opaque);
    std::lock_guard lock(self->mu_);
    self->lastCode_ = static_cast<rd_kafka_resp_err_t>(err);
    self->lastError_ = reason ? reason : rd_kafka_err2str(static_cast<rd_kafka_resp_err_t>(err));
  }
  static void onLog(const rd_kafka_t* rk, int level, const char* fac, const char* buf) {
    auto* self = static_cast<KafkaClientEvents*>(rd_kafka_opaque(rk));
    if (self == nullptr) return;
    if (level <= 3) {  // LOG_ERR: e.g. "Connect to ipv4#127.0.0.1:9092 failed: Connection refused"
      std::lock_guard lock(self->mu_);
      self->lastError_ = buf;
    }
    if (self->printLogs_)
      std::fprintf(stderr, "%s: librdkafka[%s] %d %s: %s\n", self->label_.c_str(), rd_kafka_name(rk), level, fac, buf);
  }

 private:
  std::string label_;
  bool printLogs_;
  mutable std::mutex mu_;
  std::string lastError_;  // guarded by mu_
  rd_kafka_resp_err_t lastCode_ = RD_KAFKA_RESP_ERR_NO_ERROR;  // guarded by mu_
};

/// A librdkafka client of `type` with `properties` (librdkafka's names). Throws
/// JobArgumentError naming a property librdkafka rejects, `who` being the source or sink
/// for messages. `events` must outlive the handle; `configure` may set callbacks.
template <class Configure>
KafkaHandle makeKafkaClient(rd_kafka_type_t type, const std::map<std::string, std::string>& properties,
                            KafkaClientEvents* events, const std::string& who, Configure&& configure) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  for (const auto& [key, value] : properties) {
    if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      throw JobArgumentError(who + ": the Kafka property " + key + "=" + value + " is not accepted: " + err);
    }
  }
  rd_kafka_conf_set_opaque(conf, events);
  rd_kafka_conf_set_error_cb(conf, &KafkaClientEvents::onError);
  rd_kafka_conf_set_log_cb(conf, &KafkaClientEvents::onLog);
  configure(conf);
  rd_kafka_t* rk = rd_kafka_new(type, conf, err, sizeof err);
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    // Not a JobArgumentError (final, exit 2): rd_kafka_new also fails for passing reasons
    // (no thread or descriptor left, a certificate file being replaced), and the exactly-
    // once sink creates a producer at every checkpoint. A task failure: the restart
    // strategy decides.
    throw std::runtime_error(who + ": cannot create a Kafka client: " + err);
  }
  return KafkaHandle(rk);
}

/// One topic as the brokers describe it.
struct KafkaTopicMetadata {
  std::string name;
  int partitions = 0;
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
};

/// Metadata of `topics` (each asked for by name: an unknown or forbidden topic comes back
/// with its error), or of every topic the client may see when `topics` is null. Returns a
/// request-level error (brokers unreachable: RD_KAFKA_RESP_ERR__TRANSPORT, __TIMED_OUT).
inline rd_kafka_resp_err_t fetchKafkaMetadata(rd_kafka_t* rk, const std::vector<std::string>* topics,
                                              std::chrono::milliseconds timeout, std::vector<KafkaTopicMetadata>* out) {
  out->clear();
  auto collect = [&](const rd_kafka_metadata_t* md, const char* only) {
    for (int i = 0; i < md->topic_cnt; ++i) {
      const auto& t = md->topics[i];
      if (only && std::string_view(t.topic) != only) continue;
      KafkaTopicMetadata m;
      m.name = t.topic;
      m.partitions = t.partition_cnt;
      m.err = t.err;
      out->push_back(std::move(m));
    }
  };
  const int ms = static_cast<int>(timeout.count());
  if (topics == nullptr) {
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 1, nullptr, &md, ms);
    if (err) return err;
    collect(md, nullptr);
    rd_kafka_metadata_destroy(md);
    return RD_KAFKA_RESP_ERR_NO_ERROR;
  }
  for (const auto& name : *topics) {
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, name.c_str(), nullptr);
    if (rkt == nullptr) return rd_kafka_last_error();
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, ms);
    rd_kafka_topic_destroy(rkt);
    if (err) return err;
    size_t before = out->size();
    collect(md, name.c_str());
    rd_kafka_metadata_destroy(md);
    if (out->size() == before) out->push_back({name, 0, RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART});
  }
  return RD_KAFKA_RESP_ERR_NO_ERROR;
}

/// The message of a start-up failure to reach the brokers: names them, what librdkafka
/// last reported, and what to check.
inline std::string unreachableBrokersText(const std::string& who, const std::string& bootstrap,
                                          std::chrono::milliseconds waited, rd_kafka_resp_err_t err,
                                          const KafkaClientEvents& events) {
  std::string last = events.lastError();
  std::string why = last.empty() ? kafkaErrorText(err) : last;
  if (isAuthorizationError(events.lastErrorCode()))
    return who + ": the Kafka brokers " + bootstrap + " refused the client's credentials: " + why +
           "; check the security.protocol and sasl.* properties";
  return who + ": cannot reach the Kafka brokers " + bootstrap + " (waited " + std::to_string(waited.count()) +
         " ms): " + why + "; check bootstrap.servers and that the brokers run and are reachable from this host";
}

}  // namespace jobhost::detail
