// host/ui/health_server.h — `jobhost run --health-port PORT`: what a Kubernetes probe and a
// Prometheus scrape ask a running job, over plain HTTP (kj-http, http_serving.h):
//
//   GET /healthz  200 while the supervisor answers (the liveness probe; a hung supervisor
//                 times the probe out)
//   GET /readyz   200 once the job runs and its newest checkpoint is younger than
//                 health.readiness.max-checkpoint-age (an attempt that just started gets
//                 that long for its first one), else 503 saying why (the readiness probe)
//   GET /metrics  Prometheus text exposition (metrics/prometheus_text.h)
//
// Everything it serves is read-only numbers and names (no configuration values, no
// paths from the request), and every answer comes from JobControl::status(): the same
// source as the dashboard.
//
// Thread-safety: start() and the destructor from one thread; the server runs a kj event
// loop on its own thread and calls JobControl::status() there.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "control/job_control.h"
#include "jobhost/state/status.h"
#include "ui/http_reply.h"

namespace jobhost::host {

struct HealthOptions {
  std::string address = "*";  // all interfaces (a pod's probes and scrapes come from outside)
  int port = 0;               // 0: any free port (tests)
  /// /readyz: the newest checkpoint (or, before the attempt's first one, the attempt's
  /// start) must be younger than this; 0: checkpoints are off, RUNNING is enough.
  std::chrono::milliseconds maxCheckpointAge{0};
};

/// What /readyz answers for `s` at `nowMs` (epoch ms): 200 "ready", or 503 and why.
HttpReply readinessReply(const JobStatusInfo& s, std::chrono::milliseconds maxCheckpointAge, int64_t nowMs);

/// The answer to `method target` (no body is read): the three endpoints, 404, 405.
HttpReply healthReply(const std::string& method, const std::string& target, JobControl& job,
                      std::chrono::milliseconds maxCheckpointAge);

class HealthServer {
 public:
  /// Listens on address:port and serves `job` (which must outlive the server). An error
  /// (address in use, cannot be resolved) names the address.
  static state::Result<std::unique_ptr<HealthServer>> start(JobControl& job, const HealthOptions& options);
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;
  int port() const;

  struct Impl;

 private:
  explicit HealthServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace jobhost::host
