// `jobhost ui`: the web dashboard and REST API (host/ui/, README "Web dashboard").
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <unistd.h>

#include "jobhost/state/s3_storage.h"
#include "cli/table.h"
#include "config/configuration.h"
#include "control/control_server.h"
#include "config/configuration_layers.h"
#include "exit_codes.h"
#include "ui/dashboard.h"
#include "ui/dashboard_record.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {
/// As `jobhost run` (job_setup.cc): $JOBHOST_HOME/checkpoints, ~/.jobhost/checkpoints.
std::string defaultCheckpointDir() {
  if (const char* h = std::getenv("JOBHOST_HOME")) return (fs::path(h) / "checkpoints").string();
  if (const char* h = std::getenv("HOME")) return (fs::path(h) / ".jobhost" / "checkpoints").string();
  std::error_code ec;  // TMPDIR missing or not a directory: /tmp, as the library would without TMPDIR
  fs::path tmp = fs::temp_directory_path(ec);
  return ((ec ? fs::path("/tmp") : tmp) / "jobhost-checkpoints").string();
}
/// `jobhost ui --print-url`: the URL of each running dashboard of this user (the URL
/// alone for one, a table for several). Records of dashboards that were killed are removed.
int printUrl() {
  auto dir = ensureRuntimeDir();
  if (!dir.ok()) {
    std::cerr << "error: " << dir.status().message() << "\n";
    return kExitUsage;
  }
  DashboardRecords found = findDashboardRecords(*dir);
  for (const auto& p : found.problems) std::cerr << "warning: " << p << "\n";
  for (const auto& r : found.stale) unlink(r.path.c_str());
  if (found.running.empty()) {
    std::cerr << "error: no dashboard of yours is running";
    if (!found.stale.empty())
      std::cerr << ": the one on port " << found.stale.back().port << " (pid " << found.stale.back().pid
                << ") is gone without cleaning up — its record " << found.stale.back().path << " is removed";
    else
      std::cerr << " (no record in " << *dir << ")";
    std::cerr << "; start one with `jobhost ui`\n";
    return kExitUsage;
  }
  if (found.running.size() == 1) {
    std::cout << found.running.front().url << "\n";
    return kExitOk;
  }
  Table t({"PID", "PORT", "URL"});
  for (const auto& r : found.running) t.add({std::to_string(r.pid), std::to_string(r.port), r.url});
  std::cout << t.render();
  return kExitOk;
}

}  // namespace

int uiCommand(const UiCommandOptions& o) {
  if (o.printUrl) return printUrl();
  DashboardOptions d;
  d.address = o.address;
  d.port = o.port;
  d.allowedHosts = o.allowedHosts;
  d.auth = !o.noAuth;
  try {
    Configuration config;
    loadUserConfiguration(o.configFile, o.defines, std::nullopt, &config);
    std::string dir = o.checkpointDir.value_or(config.get("state.checkpoints.dir").value_or(""));
    if (state::isObjectStoreUri(dir)) {
      // Ended jobs and their checkpoints are read from the object store (the s3.* keys of
      // the configuration, or the AWS_* variables); running ones through their sockets.
      while (dir.size() > 5 && dir.back() == '/') dir.pop_back();
      auto storage = state::openStorage(dir);
      if (!storage.ok()) {
        std::cerr << "error: cannot use " << dir << " as the dashboard's checkpoint directory: "
                  << storage.status().message() << "\n";
        return kExitUsage;
      }
      d.dashboard.checkpointDir = dir;
    } else {
      fs::path root = fs::absolute(dir.empty() ? defaultCheckpointDir() : dir).lexically_normal();
      if (!root.has_filename() && root.has_parent_path() && root != root.root_path()) root = root.parent_path();
      d.dashboard.checkpointDir = root.string();
    }
    d.dashboard.readOnly = o.readOnly || (config.get("ui.read-only") && config.getBool("ui.read-only"));
  } catch (const ConfigError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  }
  if (d.address.empty()) {
    std::cerr << "error: --address must not be empty\n";
    return kExitUsage;
  }
  return serveDashboard(d);
}

}  // namespace jobhost::host
