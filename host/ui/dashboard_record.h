// host/ui/dashboard_record.h — the file a running `jobhost ui` leaves in the per-user
// runtime directory (control_server.h: `$XDG_RUNTIME_DIR/jobhost` or `/tmp/jobhost-<uid>`,
// 0700, owned by us): `dashboard-<pid>`, mode 0600, with its pid, its process start time,
// its port and the URL with the token. `jobhost ui --print-url` reads it.
//
// Written to a temporary name opened with O_CREAT|O_EXCL|O_NOFOLLOW (mode 0600) and
// renamed into place; removed by the dashboard when it stops. A record whose pid is not
// running any more, or runs another process (its start time differs), is stale: a killed
// dashboard. Reading refuses anything but a regular file owned by us.
//
// Thread-safety: plain functions; no shared state.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "jobhost/state/status.h"

namespace jobhost::host {

struct DashboardRecord {
  pid_t pid = 0;
  unsigned long long startTicks = 0;  // /proc/<pid>/stat field 22: tells a reused pid apart
  int port = 0;
  std::string url;   // with ?token=... unless --no-auth
  std::string path;  // where the record is (set by the readers)
};

/// The start time of `pid` (/proc/<pid>/stat), or 0 if it is not running (or a zombie).
unsigned long long processStartTicks(pid_t pid);

/// Writes `record` as `<dir>/dashboard-<record.pid>` (0600). Returns its path.
state::Result<std::string> writeDashboardRecord(const std::string& dir, const DashboardRecord& record);

struct DashboardRecords {
  std::vector<DashboardRecord> running;  // oldest first
  std::vector<DashboardRecord> stale;    // their processes are gone
  std::vector<std::string> problems;     // files that are not ours or cannot be read, and why
};
/// The records in `dir` (a checked runtime directory), sorted into running and stale.
DashboardRecords findDashboardRecords(const std::string& dir);

}  // namespace jobhost::host
