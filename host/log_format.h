// host/log_format.h — how jobhost's log lines look on stderr: `--log-format text` (the
// default: "2026-12-04 10:00:00.123 INFO  message") or `--log-format json`, one JSON object
// per line for log collectors (Fluent Bit, Vector, Loki's promtail, Elastic's filebeat):
//
//   {"time":"2026-12-04T10:00:00.123Z","level":"info","job_id":"wordcount","attempt":2,
//    "message":"completed checkpoint 7 ...","fields":{"process":"worker","pid":41,"thread":43,"logger":"jobhost"}}
//
// `job_id` and `attempt` are those of the job the process runs (null until known: a
// supervisor learns its job id once the job directory is locked); `time` is UTC. The
// supervisor passes its format to its worker processes, so every line of a job has the
// same shape. Lines that are not log records (a command's own output on stdout, an error
// printed before logging is set up) are not affected.
//
// Thread-safety: configureLogging() once at start; setLogJob() from any thread.
#pragma once

#include <memory>
#include <string>

#include <spdlog/formatter.h>

namespace jobhost::host {

enum class LogFormat { kText, kJson };

/// "text" or "json"; nullopt-like false for anything else.
bool parseLogFormat(const std::string& name, LogFormat* out);

/// Sets the default logger's format; `process` names the process in JSON ("supervisor",
/// "worker", "cli").
void configureLogging(LogFormat format, const std::string& process);
LogFormat currentLogFormat();

/// The job and attempt the following log lines belong to (attempt 0: none yet).
void setLogJob(const std::string& jobId, int attempt);

/// The JSON formatter itself (for tests).
std::unique_ptr<spdlog::formatter> newJsonLogFormatter(const std::string& process);

}  // namespace jobhost::host
