// jobhost-test-kafka — librdkafka's mock Kafka cluster for the tests (issue 32), and two
// small clients the tests need that kcat does not offer.
//
//   jobhost-test-kafka [--brokers N] [--topic NAME:PARTITIONS]... [--debug]
//     Starts a mock cluster (rdkafka_mock.h: real Kafka protocol on 127.0.0.1, ephemeral
//     ports, for as long as this process lives), creates the topics, prints
//     "BOOTSTRAP=127.0.0.1:port[,...]" on stdout and then answers commands read from stdin,
//     one a line, with "ok" or "error: ..." on stdout:
//       topic NAME PARTITIONS        create a topic
//       errors API CODE [CODE...]    the next requests of API (a name as Kafka's
//                                    protocol has it — Produce, Fetch, Metadata,
//                                    InitProducerId, EndTxn, ... — or its number) fail
//                                    with these errors, one request each (names as
//                                    librdkafka's: NOT_LEADER_FOR_PARTITION, or numbers)
//       topic-error NAME CODE        every request for topic NAME fails with CODE
//                                    (NO_ERROR clears it)
//       broker-down ID / broker-up ID
//       quit
//     It ends at "quit" or when stdin closes. --debug prints the mock's request log
//     (librdkafka debug=mock) on stderr.
//   jobhost-test-kafka produce --bootstrap B --topic T [--partition P]
//     Produces one record per stdin line "<timestamp millis> <value>" (value: the rest of
//     the line), with that record timestamp (kcat 1.7 cannot set one), and waits until
//     all are acknowledged.
//   jobhost-test-kafka committed --bootstrap B --group G --topic T --partitions N
//     Prints "T[p] OFFSET" for each partition: the group's committed offset (-1001: none).
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "jobhost-test-kafka: %s\n", what.c_str());
  std::exit(2);
}

rd_kafka_t* newClient(rd_kafka_type_t type, const std::map<std::string, std::string>& props) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  for (const auto& [k, v] : props)
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) die(k + ": " + err);
  rd_kafka_t* rk = rd_kafka_new(type, conf, err, sizeof err);
  if (rk == nullptr) die(err);
  return rk;
}

/// Kafka's protocol names of the requests the mock answers.
int16_t apiKey(const std::string& name) {
  static const std::map<std::string, int16_t> keys = {
      {"Produce", 0},          {"Fetch", 1},           {"ListOffsets", 2},       {"Metadata", 3},
      {"OffsetCommit", 8},     {"OffsetFetch", 9},     {"FindCoordinator", 10},  {"JoinGroup", 11},
      {"Heartbeat", 12},       {"LeaveGroup", 13},     {"SyncGroup", 14},        {"ApiVersion", 18},
      {"InitProducerId", 22},  {"AddPartitionsToTxn", 24}, {"AddOffsetsToTxn", 25}, {"EndTxn", 26},
      {"TxnOffsetCommit", 28}};
  auto it = keys.find(name);
  if (it != keys.end()) return it->second;
  try {
    return static_cast<int16_t>(std::stoi(name));
  } catch (const std::exception&) {
    throw std::runtime_error("unknown API '" + name + "'");
  }
}

rd_kafka_resp_err_t errorCode(const std::string& name) {
  const rd_kafka_err_desc* descs = nullptr;
  size_t n = 0;
  rd_kafka_get_err_descs(&descs, &n);
  for (size_t i = 0; i < n; ++i)
    if (descs[i].name && name == descs[i].name) return descs[i].code;
  try {
    return static_cast<rd_kafka_resp_err_t>(std::stoi(name));
  } catch (const std::exception&) {
    throw std::runtime_error("unknown error '" + name + "'");
  }
}

int serve(int argc, char** argv) {
  int brokers = 1;
  bool debug = false;
  std::vector<std::pair<std::string, int>> topics;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--brokers" && i + 1 < argc) brokers = std::atoi(argv[++i]);
    else if (a == "--debug") debug = true;
    else if (a == "--topic" && i + 1 < argc) {
      std::string t = argv[++i];
      auto colon = t.rfind(':');
      if (colon == std::string::npos) die("--topic takes NAME:PARTITIONS");
      topics.emplace_back(t.substr(0, colon), std::atoi(t.c_str() + colon + 1));
    } else {
      die("unknown argument " + a);
    }
  }
  std::map<std::string, std::string> props;
  // The client only hosts the cluster: no "no bootstrap.servers" warning.
  if (debug) props["debug"] = "mock";
  else props["log_level"] = "3";
  rd_kafka_t* rk = newClient(RD_KAFKA_PRODUCER, props);
  rd_kafka_mock_cluster_t* m = rd_kafka_mock_cluster_new(rk, brokers);
  if (m == nullptr) die("cannot start a mock cluster");
  for (const auto& [name, partitions] : topics)
    if (rd_kafka_resp_err_t e = rd_kafka_mock_topic_create(m, name.c_str(), partitions, 1))
      die("cannot create topic " + name + ": " + rd_kafka_err2str(e));
  std::cout << "BOOTSTRAP=" << rd_kafka_mock_cluster_bootstraps(m) << std::endl;
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    try {
      if (cmd.empty()) continue;
      if (cmd == "quit") break;
      if (cmd == "topic") {
        std::string name;
        int partitions = 0;
        if (!(in >> name >> partitions)) throw std::runtime_error("usage: topic NAME PARTITIONS");
        if (rd_kafka_resp_err_t e = rd_kafka_mock_topic_create(m, name.c_str(), partitions, 1))
          throw std::runtime_error(rd_kafka_err2str(e));
      } else if (cmd == "errors") {
        std::string api;
        in >> api;
        std::vector<rd_kafka_resp_err_t> codes;
        for (std::string c; in >> c;) codes.push_back(errorCode(c));
        if (api.empty() || codes.empty()) throw std::runtime_error("usage: errors API CODE [CODE...]");
        rd_kafka_mock_push_request_errors_array(m, apiKey(api), codes.size(), codes.data());
      } else if (cmd == "topic-error") {
        std::string name, code;
        if (!(in >> name >> code)) throw std::runtime_error("usage: topic-error NAME CODE");
        rd_kafka_mock_topic_set_error(m, name.c_str(), errorCode(code));
      } else if (cmd == "broker-down" || cmd == "broker-up") {
        int id = 0;
        if (!(in >> id)) throw std::runtime_error("usage: " + cmd + " ID");
        rd_kafka_resp_err_t e = cmd == "broker-down" ? rd_kafka_mock_broker_set_down(m, id) : rd_kafka_mock_broker_set_up(m, id);
        if (e) throw std::runtime_error(rd_kafka_err2str(e));
      } else {
        throw std::runtime_error("unknown command '" + cmd + "'");
      }
      std::cout << "ok" << std::endl;
    } catch (const std::exception& e) {
      std::cout << "error: " << e.what() << std::endl;
    }
  }
  rd_kafka_mock_cluster_destroy(m);
  rd_kafka_destroy(rk);
  return 0;
}

std::map<std::string, std::string> options(int argc, char** argv, int first) {
  std::map<std::string, std::string> o;
  for (int i = first; i + 1 < argc; i += 2) o[argv[i]] = argv[i + 1];
  return o;
}

int produce(int argc, char** argv) {
  auto o = options(argc, argv, 2);
  if (!o.count("--bootstrap") || !o.count("--topic")) die("produce --bootstrap B --topic T [--partition P]");
  int32_t partition = o.count("--partition") ? std::atoi(o["--partition"].c_str()) : RD_KAFKA_PARTITION_UA;
  rd_kafka_t* rk = newClient(RD_KAFKA_PRODUCER, {{"bootstrap.servers", o["--bootstrap"]}, {"enable.idempotence", "true"}});
  size_t n = 0;
  for (std::string line; std::getline(std::cin, line);) {
    auto space = line.find(' ');
    if (space == std::string::npos) die("produce: lines are '<timestamp millis> <value>', got '" + line + "'");
    int64_t ts = std::stoll(line.substr(0, space));
    std::string value = line.substr(space + 1);
    const char* topic = o["--topic"].c_str();
    void* data = value.data();
    size_t size = value.size();
    for (;;) {
      rd_kafka_resp_err_t e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
                                                RD_KAFKA_V_VALUE(data, size), RD_KAFKA_V_TIMESTAMP(ts),
                                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
      if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(rk, 100);
        continue;
      }
      if (e) die(std::string("produce: ") + rd_kafka_err2str(e));
      break;
    }
    ++n;
  }
  if (rd_kafka_flush(rk, 30000) != RD_KAFKA_RESP_ERR_NO_ERROR) die("produce: not every record was acknowledged");
  rd_kafka_destroy(rk);
  std::fprintf(stderr, "produced %zu records\n", n);
  return 0;
}

int committed(int argc, char** argv) {
  auto o = options(argc, argv, 2);
  if (!o.count("--bootstrap") || !o.count("--group") || !o.count("--topic") || !o.count("--partitions"))
    die("committed --bootstrap B --group G --topic T --partitions N");
  rd_kafka_t* rk = newClient(RD_KAFKA_CONSUMER, {{"bootstrap.servers", o["--bootstrap"]}, {"group.id", o["--group"]}});
  int n = std::atoi(o["--partitions"].c_str());
  rd_kafka_topic_partition_list_t* l = rd_kafka_topic_partition_list_new(n);
  for (int p = 0; p < n; ++p) rd_kafka_topic_partition_list_add(l, o["--topic"].c_str(), p);
  if (rd_kafka_resp_err_t e = rd_kafka_committed(rk, l, 10000)) die(std::string("committed: ") + rd_kafka_err2str(e));
  for (int i = 0; i < l->cnt; ++i)
    std::printf("%s[%d] %lld\n", l->elems[i].topic, l->elems[i].partition, static_cast<long long>(l->elems[i].offset));
  rd_kafka_topic_partition_list_destroy(l);
  rd_kafka_destroy(rk);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "produce") return produce(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "committed") return committed(argc, argv);
  return serve(argc, argv);
}
