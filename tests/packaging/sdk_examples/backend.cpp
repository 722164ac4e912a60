// example: sdk_examples/backend.cpp
#include <jobhost/jobhost.h>

#include <chrono>
#include <cstdint>

/// Large state: kept in RocksDB, checkpointed incrementally (only new SST files).
class EventsPerAccount : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override {
    c.checkpointInterval(std::chrono::seconds(10));
    c.set("state.checkpoints.num-retained", "3");  // any key of the configuration table
  }
  void build(jobhost::StreamEnvironment& env) override {
    auto events = static_cast<uint64_t>(env.args().getInt("--events", 1000));
    auto accounts = static_cast<uint64_t>(env.args().getInt("--accounts", 100));
    env.fromGenerator<int64_t>(events, [accounts](uint64_t i) { return static_cast<int64_t>(i % accounts); })
        .uid("events")
        .map([](int64_t account) { return std::pair<int64_t, int64_t>{account, 1}; })
        .keyBy([](const std::pair<int64_t, int64_t>& e) { return e.first; })
        .sum<1>()
        .uid("events-per-account")
        .print();
  }
};
// The backend is declared here, once: `jobhost info` shows it without loading the plugin,
// the host runs the class on it, and the restore check compares a snapshot against it.
JOBHOST_JOB_INCREMENTAL(EventsPerAccount, "Events per account (rocksdb, incremental)", "rocksdb", 1)
