// example: sdk_examples/broadcast.cpp
#include <jobhost/jobhost.h>

#include <limits>
#include <sstream>
#include <string>
#include <utility>

using Reading = std::pair<std::string, double>;  // (sensor, value)
using Limit = std::pair<std::string, double>;    // (sensor, highest value allowed)

const jobhost::BroadcastStateDescriptor<std::string, double> kLimits{"limits"};

std::pair<std::string, double> sensorAndValue(const std::string& line) {
  std::istringstream in(line);
  std::pair<std::string, double> p;
  in >> p.first >> p.second;
  return p;
}

/// Keeps each sensor's highest reading; once both inputs have ended, reports the sensors
/// above their limit. Every subtask gets every limit, whichever sensors it owns.
class OverLimit : public jobhost::KeyedBroadcastProcessFunction<std::string, Reading, Limit, std::string> {
 public:
  void processElement(const Reading& r, ReadOnlyContext& ctx, jobhost::Collector<std::string>&) override {
    if (!highest_.value() || r.second > *highest_.value()) highest_.update(r.second);
    ctx.timerService().registerEventTimeTimer(std::numeric_limits<int64_t>::max() - 1);  // the end of input
  }
  void processBroadcastElement(const Limit& l, Context& ctx, jobhost::Collector<std::string>&) override {
    ctx.getBroadcastState(kLimits).put(l.first, l.second);  // the same in every subtask
  }
  void onTimer(int64_t, OnTimerContext& ctx, jobhost::Collector<std::string>& out) override {
    auto limit = ctx.getBroadcastState(kLimits).get(ctx.currentKey());  // read-only here
    if (limit && *highest_.value() > *limit)
      out.collect(ctx.currentKey() + " over its limit: " + std::to_string(*highest_.value()));
  }

 private:
  jobhost::ValueState<double> highest_{*this, "highest"};
};

class SensorLimits : public jobhost::Job {
 public:
  void build(jobhost::StreamEnvironment& env) override {
    auto limits = env.readTextFile(env.args().get("--limits").value()).uid("limits").map(sensorAndValue);
    env.readTextFile(env.args().get("--input").value())
        .uid("readings")
        .map(sensorAndValue)
        .keyBy([](const Reading& r) { return r.first; })
        .connect(limits.broadcast(kLimits))
        .process<OverLimit>()
        .uid("over-limit")
        .print();
  }
};
JOBHOST_JOB(SensorLimits, "Sensors whose highest reading is over the limit broadcast to every subtask", "hashmap")
