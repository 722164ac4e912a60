// host/metrics/prometheus_text.h — a running job's numbers (JobStatusInfo, the same the
// dashboard shows) in Prometheus' text exposition format 0.0.4, for `jobhost run
// --health-port`'s /metrics.
//
// Names: Flink's metric name where Flink has one, written as Prometheus asks (what
// `promtool check metrics` enforces): snake_case, base units (seconds, bytes), counters
// ending in _total, under jobhost_job_ (Flink's jobmanager.job scope), jobhost_task_
// (taskmanager.job.task) and jobhost_operator_ (taskmanager.job.task.operator). Each HELP
// names the Flink metric. So Flink's numRecordsIn is jobhost_task_num_records_in_total,
// busyTimeMsPerSecond is jobhost_task_busy_time_seconds_per_second (its value / 1000),
// lastCheckpointDuration (ms) is jobhost_job_last_checkpoint_duration_seconds. Labels as
// Flink's reporter sets them: job_id, job_name (the class), task_name, subtask_index,
// operator_name (the operator uid).
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <string>

#include "control/job_control.h"

namespace jobhost::host {

/// The exposition of `s` at `nowMs` (epoch ms, for the uptime).
std::string prometheusText(const JobStatusInfo& s, int64_t nowMs);

/// The content type of that text.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace jobhost::host
