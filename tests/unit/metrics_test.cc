// Unit tests for the metrics of issue 31: per-second task numbers from cumulative counters
// (host/metrics/task_rates.h), the Prometheus exposition (metrics/prometheus_text.h), the
// /readyz decision (ui/health_server.h) and the JSON log formatter (log_format.h).
#include <gtest/gtest.h>
#include <spdlog/details/log_msg.h>

#include "log_format.h"
#include "metrics/prometheus_text.h"
#include "metrics/task_rates.h"
#include "ui/health_server.h"

namespace jobhost::host {
namespace {

TaskMetricsSample task(const std::string& name, uint64_t in, uint64_t out, uint64_t idleMs, uint64_t bpMs) {
  TaskMetricsSample t;
  t.name = name;
  t.recordsIn = in;
  t.recordsOut = out;
  t.idleNanos = idleMs * 1000000;
  t.backPressuredNanos = bpMs * 1000000;
  return t;
}

TEST(TaskRates, RatesAndTimeSharesSpanTheSamplesOfTheWindow) {
  TaskRates rates(std::chrono::milliseconds(5000));
  auto first = rates.add(0, {task("a", 0, 0, 0, 0)});
  EXPECT_EQ(first[0].recordsInPerSecond, 0);  // one sample: no rate yet
  rates.add(1000, {task("a", 100, 50, 500, 100)});
  auto r = rates.add(2000, {task("a", 300, 150, 1000, 300)});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_DOUBLE_EQ(r[0].recordsInPerSecond, 150);
  EXPECT_DOUBLE_EQ(r[0].recordsOutPerSecond, 75);
  EXPECT_DOUBLE_EQ(r[0].idleTimeMsPerSecond, 500);
  EXPECT_DOUBLE_EQ(r[0].backPressuredTimeMsPerSecond, 150);
  EXPECT_DOUBLE_EQ(r[0].busyTimeMsPerSecond, 350);
  EXPECT_EQ(r[0].recordsIn, 300u);
}

TEST(TaskRates, OldSamplesLeaveTheWindow) {
  TaskRates rates(std::chrono::milliseconds(2000));
  rates.add(0, {task("a", 0, 0, 0, 0)});
  rates.add(1000, {task("a", 1000, 0, 0, 0)});  // a burst, then 10/s
  rates.add(2000, {task("a", 1010, 0, 0, 0)});
  rates.add(3000, {task("a", 1020, 0, 0, 0)});
  auto r = rates.add(4000, {task("a", 1030, 0, 0, 0)});
  EXPECT_DOUBLE_EQ(r[0].recordsInPerSecond, 10);
}

TEST(TaskRates, ANewAttemptStartsOver) {
  TaskRates rates;
  rates.add(0, {task("a", 0, 0, 0, 0)});
  rates.add(1000, {task("a", 5000, 0, 0, 0)});
  auto r = rates.add(2000, {task("a", 10, 0, 0, 0)});  // counters went down: a new worker
  EXPECT_EQ(r[0].recordsInPerSecond, 0);
  r = rates.add(3000, {task("a", 110, 0, 0, 0)});
  EXPECT_DOUBLE_EQ(r[0].recordsInPerSecond, 100);
}

JobStatusInfo runningJob() {
  JobStatusInfo s;
  s.jobId = "wordcount";
  s.jobClass = "Word\"Count";
  s.state = JobState::kRunning;
  s.startedMs = 1000;
  s.runningSinceMs = 2000;
  TaskStatusInfo t;
  t.name = "Source: a -> b";
  t.recordsIn = 7;
  t.busyTimeMsPerSecond = 250;
  t.inputWatermark = 1500;
  t.backends.push_back({"counts", "rocksdb", 12});
  s.tasks.push_back(t);
  return s;
}

TEST(PrometheusText, FamiliesHaveHelpAndTypeAndLabelsAreEscaped) {
  std::string text = prometheusText(runningJob(), 11000);
  EXPECT_NE(text.find("# TYPE jobhost_task_num_records_in_total counter\n"), std::string::npos) << text;
  EXPECT_NE(text.find("jobhost_task_num_records_in_total{job_id=\"wordcount\",job_name=\"Word\\\"Count\",task_name=\"Source: "
                      "a -> b\",subtask_index=\"0\"} 7\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("jobhost_task_busy_time_seconds_per_second{"), std::string::npos);
  EXPECT_NE(text.find("} 0.25\n"), std::string::npos) << text;
  EXPECT_NE(text.find("jobhost_task_current_input_watermark_seconds{"), std::string::npos);
  EXPECT_NE(text.find("} 1.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("jobhost_job_uptime_seconds{job_id=\"wordcount\",job_name=\"Word\\\"Count\"} 10\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("operator_name=\"counts\",backend=\"rocksdb\"} 12\n"), std::string::npos) << text;
  // No checkpoint yet: no last-checkpoint figures, restore timestamp -1.
  EXPECT_EQ(text.find("jobhost_job_last_checkpoint_duration_seconds"), std::string::npos);
  EXPECT_NE(text.find("jobhost_job_last_checkpoint_restore_timestamp_seconds{job_id=\"wordcount\",job_name=\"Word\\\"Count\"} -1\n"),
            std::string::npos);
  // Every sample line belongs to the family declared before it.
  std::istringstream in(text);
  std::string line, family;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
    } else if (line[0] != '#') {
      EXPECT_EQ(line.rfind(family, 0), 0u) << line;
    }
  }
}

TEST(Readiness, RunningWithAFreshCheckpointIsReadyAndAStaleOneIsNot) {
  JobStatusInfo s = runningJob();
  const auto age = std::chrono::milliseconds(60000);
  EXPECT_EQ(readinessReply(s, age, 2000 + 59000).status, 200);  // the attempt's first minute
  HttpReply stale = readinessReply(s, age, 2000 + 61000);
  EXPECT_EQ(stale.status, 503);
  EXPECT_NE(stale.body.find("no checkpoint completed"), std::string::npos) << stale.body;
  s.lastCheckpointCompletedMs = 60000;
  s.lastCheckpointId = 4;
  EXPECT_EQ(readinessReply(s, age, 100000).status, 200);
  s.storeUnavailableSinceMs = 90000;
  HttpReply down = readinessReply(s, age, 130000);
  EXPECT_EQ(down.status, 503);
  EXPECT_NE(down.body.find("checkpoint (4) completed"), std::string::npos) << down.body;
  EXPECT_NE(down.body.find("store has been unavailable"), std::string::npos) << down.body;
  EXPECT_EQ(readinessReply(s, std::chrono::milliseconds(0), 10000000).status, 200);  // checkpoints off
  s.state = JobState::kRestarting;
  EXPECT_EQ(readinessReply(s, age, 100000).status, 503);
}

TEST(JsonLogFormat, OneObjectPerLineWithEscapedMessage) {
  setLogJob("job-1", 3);
  auto f = newJsonLogFormatter("worker");
  spdlog::details::log_msg msg("jobhost", spdlog::level::warn, "a \"quoted\"\nline\twith \x01 control");
  spdlog::memory_buf_t out;
  f->format(msg, out);
  std::string line(out.data(), out.size());
  setLogJob("", 0);
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
  EXPECT_NE(line.find("\"level\":\"warning\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"job_id\":\"job-1\",\"attempt\":3"), std::string::npos) << line;
  EXPECT_NE(line.find("\"message\":\"a \\\"quoted\\\"\\nline\\twith \\u0001 control\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"fields\":{\"process\":\"worker\""), std::string::npos) << line;
}

}  // namespace
}  // namespace jobhost::host
