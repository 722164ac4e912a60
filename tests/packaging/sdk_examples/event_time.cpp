// example: sdk_examples/event_time.cpp
#include <jobhost/jobhost.h>

#include <charconv>
#include <chrono>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

using namespace std::chrono_literals;
using Click = std::pair<std::string, int64_t>;  // (user, epoch millis)

// Lines "<user> <epoch millis>" with event time from the second field, at most 1 s out of
// order. A timestamp is all digits: "u1 1.7e+12" fails the job naming the line (reading
// the leading digits would put it at 1 ms).
jobhost::DataStream<Click> clicks(jobhost::StreamEnvironment& env) {
  auto lines = env.readTextFile(env.args().get("--input").value());
  lines.uid("clicks");
  auto parsed = lines.map([](const std::string& l) {
    std::istringstream in(l);
    Click c;
    std::string millis, rest;
    in >> c.first >> millis >> rest;
    if (millis.empty() || !rest.empty() || millis.find_first_not_of("0123456789") != std::string::npos ||
        std::from_chars(millis.data(), millis.data() + millis.size(), c.second).ec != std::errc())
      throw std::runtime_error("input line '" + l + "' is not '<user> <epoch millis, digits only>'");
    return c;
  });
  auto timed = parsed.assignTimestampsAndWatermarks(
      jobhost::WatermarkStrategy<Click>::forBoundedOutOfOrderness(1s).withTimestampAssigner(
          [](const Click& c) { return c.second; }));
  timed.uid("click-time");
  return timed;
}

// Sessions: a user's clicks less than 30 s apart. Late clicks go to a side output.
struct SessionSummary : jobhost::ProcessWindowFunction<Click, std::string, std::string> {
  void process(const std::string& user, Context& ctx, const std::vector<Click>& session,
               jobhost::Collector<std::string>& out) override {
    out.collect(user + " session " + std::to_string(ctx.window().start) + ".." +
                std::to_string(ctx.window().end) + ": " + std::to_string(session.size()) + " clicks");
  }
};

class Sessions : public jobhost::Job {
 public:
  void build(jobhost::StreamEnvironment& env) override {
    const jobhost::OutputTag<Click> late("late-clicks");
    auto sessions = clicks(env)
                        .keyBy([](const Click& c) { return c.first; })
                        .window(jobhost::EventTimeSessionWindows::withGap(30s))
                        .sideOutputLateData(late)
                        .process(SessionSummary{});
    sessions.uid("sessions");
    sessions.getSideOutput(late).map([](const Click& c) { return "late click of " + c.first; }).print();
    sessions.print();
  }
};
JOBHOST_JOB(Sessions, "Click sessions per user (event-time session windows)", "hashmap")

// Timers: a user who clicks and then does nothing for 60 s of event time is reported.
class Inactivity : public jobhost::KeyedProcessFunction<std::string, Click, std::string> {
  jobhost::ValueState<int64_t> deadline_{*this, "deadline"};

 public:
  void processElement(const Click& c, Context& ctx, jobhost::Collector<std::string>&) override {
    if (auto old = deadline_.value()) ctx.timerService().deleteEventTimeTimer(*old);
    deadline_.update(c.second + 60'000);
    ctx.timerService().registerEventTimeTimer(c.second + 60'000);
  }
  void onTimer(int64_t time, OnTimerContext& ctx, jobhost::Collector<std::string>& out) override {
    out.collect(ctx.currentKey() + " inactive since " + std::to_string(time - 60'000));
    deadline_.clear();
  }
};

class InactiveUsers : public jobhost::Job {
 public:
  void build(jobhost::StreamEnvironment& env) override {
    auto inactive = clicks(env).keyBy([](const Click& c) { return c.first; }).process<Inactivity>();
    inactive.uid("inactivity");
    inactive.print();
  }
};
JOBHOST_JOB(InactiveUsers, "Users inactive for 60 s of event time (timers)", "hashmap")
