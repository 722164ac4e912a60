// host/ui/dashboard.h — `jobhost ui`: a web dashboard and REST API for the jobs of this
// user on this machine (README "Web dashboard").
//
// Dashboard answers requests without knowing HTTP: it routes a method and a request
// target to the running jobs (through their control endpoints, control_client.h) and to
// finished jobs found under the checkpoint directory, and returns JSON (capnp::JsonCodec,
// ui_api.capnp) or an embedded asset. serveDashboard() puts it behind kj-http.
//
// Security (Flink's CVE-2020-17518/17519 were path traversals in its REST API): no
// endpoint reads or writes a path taken from the request. A job id in a URL must be 1 to
// 32 hex digits and name exactly one job the dashboard knows (running, under the
// checkpoint directory, or seen running earlier); every path the dashboard touches comes
// from that job's own records. A savepoint goes to the job's own state.savepoints.dir;
// the request body may only choose the format. Mutating endpoints (POST) are refused
// with 403 in read-only mode; the HTTP layer refuses POSTs without a JSON content type, and
// DashboardAccess (dashboard_access.h) checks Host, Origin and the token before any of this.
//
// Thread-safety: Dashboard is thread-safe; handle() blocks on job RPCs (a savepoint takes
// as long as the snapshot) and must not be called on a thread that runs a kj event loop.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_coordinator.h"
#include "checkpoint/checkpoint_record.h"
#include "control/job_control.h"
#include "ui/http_reply.h"

namespace jobhost::host {


/// `{"status": <status>, "error": <message>}` as JSON (any message: it is escaped).
HttpReply jsonErrorReply(int status, const std::string& message);

class Dashboard {
 public:
  struct Options {
    std::string checkpointDir;  // absolute state.checkpoints.dir: finished jobs are found here
    bool readOnly = false;      // refuse savepoint and cancel
  };
  explicit Dashboard(Options options);

  /// Answers what needs no job: the embedded page and assets, and every request that is
  /// malformed (bad target, bad job id, unknown route, wrong method, read-only). nullopt:
  /// call handle().
  std::optional<HttpReply> quick(const std::string& method, const std::string& target) const;
  /// Answers any request (`target` as received: path and optional query). Blocks.
  HttpReply handle(const std::string& method, const std::string& target, const std::string& body);

  bool readOnly() const { return options_.readOnly; }
  const std::string& checkpointDir() const { return options_.checkpointDir; }

  /// `jobhost run -s <path> -c <Class> <plugin>` with shell quoting where needed.
  static std::string restoreCommand(const std::string& path, const std::string& jobClass, const std::string& plugin);

 private:
  /// What the dashboard remembers of a job it saw running (for when it has ended).
  struct Seen {
    JobStatusInfo status;
    std::map<std::string, std::string> configuration;
    std::vector<CheckpointRecord> history;
    int64_t lastSeenMs = 0;
  };
  struct Target;  // a resolved job
  struct DiskJob;

  HttpReply listJobs();
  HttpReply jobDetail(const std::string& idOrPrefix);
  HttpReply checkpoints(const std::string& idOrPrefix);
  HttpReply savepoint(const std::string& idOrPrefix, const std::string& body);
  HttpReply cancel(const std::string& idOrPrefix);
  HttpReply stateView(const std::string& idOrPrefix, uint64_t checkpointId);
  HttpReply stateEntries(const std::string& idOrPrefix, uint64_t checkpointId, const std::string& uid,
                         const std::string& stateName, uint64_t limit);
  /// Checkpoint `checkpointId` of the job, from the job's own directory; else the reply.
  std::optional<HttpReply> openCheckpoint(const std::string& idOrPrefix, uint64_t checkpointId, std::string* jobId,
                                          ResolvedSnapshot* out);

  /// The one known job `idOrPrefix` names, or the error reply (404 unknown, 400 ambiguous).
  std::optional<Target> resolve(const std::string& idOrPrefix, HttpReply* error);
  std::optional<DiskJob> diskJob(const std::string& id, const std::string& jobDir) const;
  std::vector<CheckpointRecord> diskHistory(const std::string& jobDir) const;
  void remember(const JobStatusInfo& s);
  std::optional<Seen> seen(const std::string& id) const;
  std::string jobDirOf(const std::string& id) const;

  Options options_;
  mutable std::mutex mu_;
  std::map<std::string, Seen> seen_;  // guarded by mu_
};

struct DashboardOptions {
  std::string address = "127.0.0.1";
  int port = 8081;  // 0: any free port
  std::vector<std::string> allowedHosts;  // --allowed-host (checked)
  bool auth = true;                       // false: --no-auth (loopback addresses only)
  Dashboard::Options dashboard;
};

/// `jobhost ui` as typed (host/cli/ui_command.cc): the checkpoint directory is
/// --checkpoint-dir, else state.checkpoints.dir of the configuration layers (--config /
/// $JOBHOST_CONF_DIR/config.yaml, -D), else the default; read-only is --read-only or
/// `ui.read-only: true`. --print-url prints the URL of this user's running dashboards
/// instead of starting one.
struct UiCommandOptions {
  std::string address = "127.0.0.1";
  int port = 8081;
  std::vector<std::string> allowedHosts;
  bool noAuth = false;
  bool printUrl = false;
  std::optional<std::string> checkpointDir;
  bool readOnly = false;
  std::optional<std::string> configFile;
  std::vector<std::string> defines;
};
int uiCommand(const UiCommandOptions& options);

/// Serves `options` until SIGINT or SIGTERM. Once it listens, writes a fresh token and the
/// URL into the runtime directory (dashboard_record.h) and prints
/// "Dashboard: http://<address>:<port>/?token=<token>" on stdout (no query with --no-auth).
/// Returns the exit code (2: cannot listen or no runtime directory, 130: stopped).
int serveDashboard(const DashboardOptions& options);

}  // namespace jobhost::host
