// `jobhost gc <checkpoint-dir>/<jobId> [--dry-run]`: removes what a crash left in a job's
// checkpoint directory — chk-<n> directories that never got their _metadata, shared
// files no complete checkpoint references, temporary files of unfinished uploads. It
// takes the directory's lock first, so it refuses a directory a running job (or another
// gc) holds, and it decides nothing itself: the directory's SnapshotRegistry says what is
// garbage. Never removes a file a complete checkpoint references.
#include <filesystem>
#include <iostream>

#include "checkpoint/job_directory_lock.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "config/units.h"
#include "job_runner.h"
#include "jobhost/state/checkpoint_layout.h"
#include "jobhost/state/snapshot_registry.h"

namespace jobhost::host {

namespace fs = std::filesystem;

int gcCommand(const std::string& jobDirArg, bool dryRun) {
  std::error_code ec;
  fs::path jobDir = fs::weakly_canonical(fs::absolute(jobDirArg), ec);
  if (ec || !fs::is_directory(jobDir)) {
    std::cerr << "error: '" << jobDirArg << "' is not a directory; pass <state.checkpoints.dir>/<jobId>\n";
    return kExitUsage;
  }
  if (fs::exists(jobDir / state::kMetadataFileName)) {
    std::cerr << "error: '" << jobDirArg
              << "' is a single snapshot; pass the job directory that holds chk-<n>/ and shared/ (to delete a "
                 "snapshot: jobhost savepoint -d)\n";
    return kExitUsage;
  }
  bool looksLikeJobDir = fs::exists(jobDir / state::kSharedDirName);
  for (const auto& e : fs::directory_iterator(jobDir, ec))
    looksLikeJobDir |= state::parseCheckpointDirName(e.path().filename().string()).has_value();
  if (!looksLikeJobDir) {
    std::cerr << "error: '" << jobDirArg << "' is not a job's checkpoint directory (no chk-<n>/ or shared/ in it); "
              << "pass <state.checkpoints.dir>/<jobId>\n";
    return kExitUsage;
  }
  auto lock = JobDirectoryLock::acquire(jobDir.string(), {static_cast<int>(::getpid()), "", "", "gc"});
  if (!lock.ok()) {
    std::cerr << "error: nothing was removed: " << lock.status().message() << "\n";
    return kExitUsage;
  }
  auto storage = state::openStorage(jobDir.string());
  if (!storage.ok()) {
    std::cerr << "error: " << storage.status().message() << "\n";
    return kExitUsage;
  }
  auto registry = state::SnapshotRegistry::load(std::move(*storage));
  if (!registry.ok()) {
    std::cerr << "error: cannot read the checkpoints in " << jobDir.string() << ": " << registry.status().message()
              << " — nothing was removed\n";
    return kExitJobFailed;
  }
  std::vector<std::string> kept;
  auto garbage = registry->findGarbage(&kept);
  if (!garbage.ok()) {
    std::cerr << "error: cannot list " << jobDir.string() << ": " << garbage.status().message()
              << " — nothing was removed\n";
    return kExitJobFailed;
  }
  for (const auto& k : kept) std::cout << "kept " << k << "\n";
  if (garbage->empty()) {
    std::cout << "nothing to remove in " << jobDir.string() << " (" << registry->checkpointIds().size()
              << " complete checkpoints)\n";
    return kExitOk;
  }
  std::vector<state::RemovedFile> removed;
  state::Status s;
  if (dryRun) removed = *garbage;
  else s = registry->collect(*garbage, &removed);
  Table t({"SIZE", "WHY", "PATH"});
  uint64_t bytes = 0;
  for (const auto& r : removed) {
    bytes += r.size;
    t.add({formatBytes(r.size), r.reason, registry->storage().describe(r.path)});
  }
  std::cout << t.render();
  std::cout << (dryRun ? "would remove " : "removed ") << removed.size() << (removed.size() == 1 ? " file" : " files")
            << " (" << formatBytes(bytes) << ") from " << jobDir.string()
            << (dryRun ? "; run without --dry-run to remove them" : "") << "\n";
  if (!s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return kExitJobFailed;
  }
  return kExitOk;
}

}  // namespace jobhost::host
