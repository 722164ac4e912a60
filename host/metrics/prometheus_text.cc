// Prometheus text exposition of a job's numbers: see prometheus_text.h.
#include "metrics/prometheus_text.h"

#include <fmt/format.h>

#include <climits>
#include <string_view>
#include <vector>

namespace jobhost::host {

namespace {

/// A label value with \, " and newlines escaped, as the format requires.
std::string escapeLabel(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

/// A float as the format writes it (shortest exact form; integers without ".0").
std::string number(double v) { return fmt::format("{}", v); }

class Exposition {
 public:
  /// One metric family: HELP, TYPE, then its samples.
  void family(const char* name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    name_ = name;
  }
  /// A sample of the current family; `labels` is the rendered {…} part without braces.
  void sample(const std::string& labels, double value) {
    out_ += name_;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += " " + number(value) + "\n";
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  std::string name_;
};

std::string labels(std::initializer_list<std::pair<const char*, std::string>> kv) {
  std::string out;
  for (const auto& [k, v] : kv) out += fmt::format("{}{}=\"{}\"", out.empty() ? "" : ",", k, escapeLabel(v));
  return out;
}

double seconds(int64_t ms) { return static_cast<double>(ms) / 1000.0; }

}  // namespace

std::string prometheusText(const JobStatusInfo& s, int64_t nowMs) {
  Exposition e;
  const std::string job = labels({{"job_id", s.jobId}, {"job_name", s.jobClass}});
  auto task = [&](const TaskStatusInfo& t) {
    return labels({{"job_id", s.jobId},
                   {"job_name", s.jobClass},
                   {"task_name", t.name},
                   {"subtask_index", std::to_string(t.subtask)}});
  };

  // --- Job (Flink: jobmanager.job) --------------------------------------------------
  e.family("jobhost_job_uptime_seconds", "gauge", "Flink: uptime. Time since the job started (all attempts).");
  e.sample(job, s.startedMs > 0 ? seconds(nowMs - s.startedMs) : 0);
  e.family("jobhost_job_running", "gauge", "1 while an attempt of the job is RUNNING, else 0.");
  e.sample(job, s.state == JobState::kRunning ? 1 : 0);
  e.family("jobhost_job_num_restarts", "gauge", "Flink: numRestarts. Restarts since the job started.");
  e.sample(job, s.restarts);
  e.family("jobhost_job_number_of_completed_checkpoints_total", "counter",
           "Flink: numberOfCompletedCheckpoints. Checkpoints (not savepoints) completed since the job started.");
  e.sample(job, static_cast<double>(s.checkpointsCompleted));
  e.family("jobhost_job_number_of_failed_checkpoints_total", "counter",
           "Flink: numberOfFailedCheckpoints. Checkpoints that failed or were declined since the job started.");
  e.sample(job, static_cast<double>(s.checkpointsFailed));
  e.family("jobhost_job_number_of_in_progress_checkpoints", "gauge",
           "Flink: numberOfInProgressCheckpoints. Checkpoints and savepoints being taken now.");
  e.sample(job, static_cast<double>(s.checkpointsInProgress));
  if (s.lastCheckpointCompletedMs > 0) {
    e.family("jobhost_job_last_checkpoint_duration_seconds", "gauge",
             "Flink: lastCheckpointDuration (in ms there). Trigger to published _metadata, of the newest completed checkpoint.");
    e.sample(job, static_cast<double>(s.lastCheckpointDurationMs) / 1000.0);
    e.family("jobhost_job_last_checkpoint_size_bytes", "gauge",
             "Flink: lastCheckpointSize. Bytes the newest completed checkpoint wrote itself (incremental: only what changed).");
    e.sample(job, static_cast<double>(s.lastCheckpointSizeBytes));
    e.family("jobhost_job_last_checkpoint_full_size_bytes", "gauge",
             "Flink: lastCheckpointFullSize. Bytes of every file the newest completed checkpoint references.");
    e.sample(job, static_cast<double>(s.lastCheckpointFullSizeBytes));
    e.family("jobhost_job_last_checkpoint_completion_timestamp_seconds", "gauge",
             "When the newest completed checkpoint completed (Unix time); /readyz compares its age with "
             "health.readiness.max-checkpoint-age.");
    e.sample(job, seconds(s.lastCheckpointCompletedMs));
    e.family("jobhost_job_last_completed_checkpoint_id", "gauge",
             "Flink: lastCompletedCheckpointId. The id of the newest completed checkpoint.");
    e.sample(job, static_cast<double>(s.lastCheckpointId));
  }
  e.family("jobhost_job_last_checkpoint_restore_timestamp_seconds", "gauge",
           "Flink: lastCheckpointRestoreTimestamp (ms there). When an attempt last restored a checkpoint or savepoint "
           "(Unix time); -1 if none did.");
  e.sample(job, s.lastRestoreMs > 0 ? seconds(s.lastRestoreMs) : -1);
  e.family("jobhost_job_checkpoint_store_unavailable_since_timestamp_seconds", "gauge",
           "Since when the checkpoint store has been unavailable (Unix time; checkpoints are declined meanwhile); 0 while "
           "it is available.");
  e.sample(job, s.storeUnavailableSinceMs > 0 ? seconds(s.storeUnavailableSinceMs) : 0);
  e.family("jobhost_job_num_records_in_per_second", "gauge",
           "Records received across exchanges per second by all tasks, over the last 5 s.");
  e.sample(job, s.recordsInPerSecond);
  e.family("jobhost_job_num_records_out_per_second", "gauge",
           "Records sent across exchanges per second by all tasks, over the last 5 s.");
  e.sample(job, s.recordsOutPerSecond);

  // --- Tasks (Flink: taskmanager.job.task) ------------------------------------------
  if (!s.tasks.empty()) {
    e.family("jobhost_task_num_records_in_total", "counter",
             "Flink: numRecordsIn. Records the task received across an exchange, in this attempt.");
    for (const auto& t : s.tasks) e.sample(task(t), static_cast<double>(t.recordsIn));
    e.family("jobhost_task_num_records_out_total", "counter",
             "Flink: numRecordsOut. Records the task sent across an exchange, in this attempt.");
    for (const auto& t : s.tasks) e.sample(task(t), static_cast<double>(t.recordsOut));
    e.family("jobhost_task_num_records_in_per_second", "gauge", "Flink: numRecordsInPerSecond, over the last 5 s.");
    for (const auto& t : s.tasks) e.sample(task(t), t.recordsInPerSecond);
    e.family("jobhost_task_num_records_out_per_second", "gauge", "Flink: numRecordsOutPerSecond, over the last 5 s.");
    for (const auto& t : s.tasks) e.sample(task(t), t.recordsOutPerSecond);
    e.family("jobhost_task_busy_time_seconds_per_second", "gauge",
             "Flink: busyTimeMsPerSecond / 1000. Share of the last 5 s the task was neither idle nor back-pressured.");
    for (const auto& t : s.tasks) e.sample(task(t), t.busyTimeMsPerSecond / 1000.0);
    e.family("jobhost_task_back_pressured_time_seconds_per_second", "gauge",
             "Flink: backPressuredTimeMsPerSecond / 1000. Share of the last 5 s the task waited for room downstream.");
    for (const auto& t : s.tasks) e.sample(task(t), t.backPressuredTimeMsPerSecond / 1000.0);
    e.family("jobhost_task_idle_time_seconds_per_second", "gauge",
             "Flink: idleTimeMsPerSecond / 1000. Share of the last 5 s the task waited for input.");
    for (const auto& t : s.tasks) e.sample(task(t), t.idleTimeMsPerSecond / 1000.0);
    bool anyWatermark = false;
    for (const auto& t : s.tasks) anyWatermark = anyWatermark || t.inputWatermark != INT64_MIN;
    if (anyWatermark) {
      e.family("jobhost_task_current_input_watermark_seconds", "gauge",
               "Flink: currentInputWatermark (ms there). The task's event-time input watermark (Unix time); "
               "absent for a task without one yet.");
      for (const auto& t : s.tasks)
        if (t.inputWatermark != INT64_MIN && t.inputWatermark != INT64_MAX) e.sample(task(t), seconds(t.inputWatermark));
    }
    bool anyBackend = false;
    for (const auto& t : s.tasks) anyBackend = anyBackend || !t.backends.empty();
    if (anyBackend) {
      // --- Operators (Flink: taskmanager.job.task.operator) -------------------------
      e.family("jobhost_operator_state_entries", "gauge",
               "Keys in the operator's keyed state backend for this subtask (RocksDB: its estimate), as of the restore "
               "or the subtask's last checkpoint.");
      for (const auto& t : s.tasks)
        for (const auto& b : t.backends)
          e.sample(labels({{"job_id", s.jobId},
                           {"job_name", s.jobClass},
                           {"task_name", t.name},
                           {"subtask_index", std::to_string(t.subtask)},
                           {"operator_name", b.operatorUid},
                           {"backend", b.backend}}),
                   static_cast<double>(b.entries));
    }
  }
  return e.take();
}

}  // namespace jobhost::host
