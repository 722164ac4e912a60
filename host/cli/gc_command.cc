// `jobhost gc <checkpoint-dir>/<jobId>`: removes what a crash left behind — chk-<n>
// directories that never got their _metadata, and shared files no complete checkpoint
// references. Never removes a referenced file; refuses a directory a running job uses.
#include <climits>
#include <filesystem>
#include <iostream>

#include "checkpoint/checkpoint_coordinator.h"
#include "cli/commands.h"
#include "control/control_client.h"
#include "job_runner.h"

namespace jobhost::host {

namespace fs = std::filesystem;

int gcCommand(const std::string& jobDirArg) {
  std::error_code ec;
  fs::path jobDir = fs::weakly_canonical(fs::absolute(jobDirArg), ec);
  if (ec || !fs::is_directory(jobDir)) {
    std::cerr << "error: '" << jobDirArg << "' is not a directory; pass <state.checkpoints.dir>/<jobId>\n";
    return kExitUsage;
  }
  if (fs::exists(jobDir / state::kMetadataFileName)) {
    std::cerr << "error: '" << jobDirArg << "' is a single snapshot; pass the job directory that holds chk-<n>/ and shared/\n";
    return kExitUsage;
  }
  std::vector<std::string> stale;
  for (const auto& job : discoverJobs(&stale)) {
    if (!job.status.checkpointDir.empty() && fs::weakly_canonical(job.status.checkpointDir, ec) == jobDir) {
      std::cerr << "error: job " << job.jobId << " (" << job.status.jobClass << ") is running and writes to "
                << jobDir.string() << "; stop it first (jobhost cancel " << job.jobId << ")\n";
      return kExitUsage;
    }
  }
  auto storage = state::openStorage(jobDir.string());
  if (!storage.ok()) {
    std::cerr << "error: " << storage.status().message() << "\n";
    return kExitUsage;
  }
  CoordinatorOptions options;
  options.numRetained = INT_MAX;  // gc keeps every complete checkpoint
  options.storageRootDescription = jobDir.string();
  CheckpointCoordinator coordinator(options, std::move(*storage), {}, 1);
  auto removed = coordinator.recover();
  if (!removed.ok()) {
    std::cerr << "error: " << removed.status().message() << " — nothing was removed\n";
    return kExitIncompatible;
  }
  for (const auto& r : *removed) std::cout << "removed " << r << "\n";
  std::cout << (removed->empty() ? "nothing to remove in " : "cleaned ") << jobDir.string() << "\n";
  return kExitOk;
}

}  // namespace jobhost::host
