// `jobhost run` and `jobhost check`: load the plugin, select the class, layer the
// configuration, resolve and preflight the -s snapshot once, then hand the job to its
// supervisor (job_supervisor.h) behind the control endpoint.
#include "job_runner.h"

#include <spdlog/spdlog.h>

#include <iostream>
#include <memory>

#include "checkpoint/checkpoint_coordinator.h"
#include "checkpoint/preflight.h"
#include "control/control_server.h"
#include "job_setup.h"
#include "job_supervisor.h"
#include "runtime/restart_strategy.h"
#include "signal_handling.h"
#include "supervisor_control.h"

namespace jobhost::host {

int runJob(const RunOptions& o) {
  JobSetup setup;
  // Pinned: every attempt loads the bytes read now (plugin_loader.h, "Pinning").
  PluginOpenOptions pluginOptions;
  pluginOptions.pin = true;
  if (int rc = setupJob(o, &setup, pluginOptions); rc != 0) return rc;
  for (const auto& w : setup.config.suspiciousKeys()) spdlog::warn("{}", w);
  auto restart = createRestartStrategy(setup.config);

  // Restore preflight: only _metadata and the plan, before anything starts. The snapshot
  // is resolved here, once: every attempt that restores it restores this very one.
  std::optional<ResolvedSnapshot> initial;
  if (o.fromSnapshot) {
    auto snapshot = resolveSnapshot(*o.fromSnapshot);
    if (!snapshot.ok()) {
      std::cerr << "error: cannot restore from " << *o.fromSnapshot << ": " << snapshot.status().message() << "\n";
      return kExitIncompatible;
    }
    if (!snapshot->note.empty()) spdlog::info("{}", snapshot->note);
    PreflightInput in;
    in.metadata = &snapshot->metadata;
    in.storage = snapshot->storage.get();
    in.snapshotPath = snapshot->directory;
    in.operators = setup.operators;
    in.selectedClass = setup.className;
    in.pluginPath = o.pluginPath;
    in.pluginDigest = setup.plugin->contentDigest();
    for (const auto& c : setup.plugin->classes()) in.pluginClasses.push_back(c.name);
    in.backend = setup.backend;
    in.incremental = setup.incremental;
    in.maxParallelism = setup.maxParallelism;
    in.parallelism = setup.parallelism;
    in.allowNonRestoredState = o.allowNonRestoredState;
    PreflightReport report = runPreflight(in);
    if (!report.compatible()) {
      std::cerr << report.format(snapshot->directory);
      return kExitIncompatible;
    }
    if (o.dryRun) {
      std::cout << report.format(snapshot->directory);
      return kExitOk;
    }
    for (const auto& f : report.findings) spdlog::warn("restore check [{}]: {}", f.check, f.message);
    initial = std::move(*snapshot);
  } else if (o.dryRun) {
    std::cout << "nothing to check: no snapshot given (-s)\n";
    return kExitOk;
  }

  JobSupervisor supervisor(o, setup, std::move(restart), std::move(initial));
  if (int rc = supervisor.prepare(); rc != 0) return rc;
  SupervisorControl control(supervisor, setup);
  setSignalTarget(&control);
  std::unique_ptr<ControlServer> server;
  {
    auto started = ControlServer::start(control, supervisor.jobId());
    if (started.ok()) server = std::move(*started);
    else spdlog::warn("control endpoint unavailable ({}); list/savepoint/cancel cannot reach this job",
                      started.status().message());
  }
  int exitCode = supervisor.run();
  server.reset();  // the socket goes before the process does
  setSignalTarget(nullptr);
  return exitCode;
}

}  // namespace jobhost::host
