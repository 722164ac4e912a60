// `jobhost ui`: the web dashboard and REST API (host/ui/, README "Web dashboard").
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "config/configuration.h"
#include "job_runner.h"
#include "ui/dashboard.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {
/// As `jobhost run` (job_setup.cc): $JOBHOST_HOME/checkpoints, ~/.jobhost/checkpoints.
std::string defaultCheckpointDir() {
  if (const char* h = std::getenv("JOBHOST_HOME")) return (fs::path(h) / "checkpoints").string();
  if (const char* h = std::getenv("HOME")) return (fs::path(h) / ".jobhost" / "checkpoints").string();
  return (fs::temp_directory_path() / "jobhost-checkpoints").string();
}
}  // namespace

int uiCommand(const UiCommandOptions& o) {
  DashboardOptions d;
  d.address = o.address;
  d.port = o.port;
  try {
    Configuration config;
    loadUserConfiguration(o.configFile, o.defines, std::nullopt, &config);
    std::string dir = o.checkpointDir.value_or(config.get("state.checkpoints.dir").value_or(""));
    fs::path root = fs::absolute(dir.empty() ? defaultCheckpointDir() : dir).lexically_normal();
    if (!root.has_filename() && root.has_parent_path() && root != root.root_path()) root = root.parent_path();
    d.dashboard.checkpointDir = root.string();
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
