// `jobhost gc <checkpoint-dir>/<jobId> [--dry-run]`: removes what a crash left in a job's
// checkpoint directory — chk-<n> directories that never got their _metadata, shared
// files no complete checkpoint references, temporary files of unfinished uploads. It
// takes the directory's lock first, so it refuses a directory a running job (or another
// gc) holds, and it decides nothing itself: the directory's SnapshotRegistry says what is
// garbage. Never removes a file a complete checkpoint references.
//
// It also removes the local working directories (state.local.dir) of jobs that no longer
// run: the job's own lock on its working directory says whether it runs
// (job_work_directory.h), so a running job's directory is never touched.
#include <filesystem>
#include <iostream>

#include "jobhost/state/s3_storage.h"
#include "checkpoint/job_directory_lock.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "config/units.h"
#include "config/configuration.h"
#include "config/configuration_layers.h"
#include "exit_codes.h"
#include "job_work_directory.h"
#include "jobhost/state/checkpoint_layout.h"
#include "jobhost/state/snapshot_registry.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {

/// The working directories of jobs that no longer run, under the configured
/// state.local.dir: listed, and removed unless dryRun. The exit code.
int collectWorkDirectories(const GcOptions& o) {
  std::string root;
  try {
    Configuration config;
    loadUserConfiguration(o.configFile, o.defines, std::nullopt, &config);
    std::string local = config.get("state.local.dir").value_or("");
    root = local.empty() ? defaultWorkRoot() : fs::absolute(local).lexically_normal().string();
  } catch (const ConfigError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  }
  auto stale = findStaleWorkDirectories(root);
  if (stale.empty()) {
    std::cout << "no working directories of ended jobs in " << root << "\n";
    return kExitOk;
  }
  Table t({"SIZE", "WHY", "PATH"});
  uint64_t bytes = 0;
  size_t removed = 0;
  int rc = kExitOk;
  for (const auto& d : stale) {
    if (!o.dryRun) {
      state::Status s = removeStaleWorkDirectory(d.path);
      if (!s.ok()) {
        std::cerr << "error: " << s.message() << "\n";
        rc = kExitJobFailed;
        continue;
      }
    }
    ++removed;
    bytes += d.bytes;
    t.add({formatBytes(d.bytes), "working directory of a job that no longer runs", d.path});
  }
  std::cout << t.render();
  std::cout << (o.dryRun ? "would remove " : "removed ") << removed
            << (removed == 1 ? " working directory" : " working directories") << " (" << formatBytes(bytes)
            << ") from " << root << (o.dryRun ? "; run without --dry-run to remove them" : "") << "\n";
  return rc;
}

/// The checks of collectJobDirectory() for a job directory on an object store, by listing.
int checkObjectStoreJobDirectory(const std::string& jobDir) {
  auto storage = state::openStorage(jobDir);
  if (!storage.ok()) {
    std::cerr << "error: " << storage.status().message() << "\n";
    return kExitUsage;
  }
  std::vector<state::FileEntry> files;
  if (state::Status s = (*storage)->list("", &files); !s.ok()) {
    std::cerr << "error: cannot list " << jobDir << ": " << s.message() << " — nothing was removed\n";
    return kExitJobFailed;
  }
  bool looksLikeJobDir = false;
  for (const auto& f : files) {
    if (f.path == state::kMetadataFileName) {
      std::cerr << "error: '" << jobDir
                << "' is a single snapshot; pass the job directory that holds chk-<n>/ and shared/ (to delete a "
                   "snapshot: jobhost savepoint -d)\n";
      return kExitUsage;
    }
    std::string first = f.path.substr(0, f.path.find('/'));
    looksLikeJobDir |= first == state::kSharedDirName || state::parseCheckpointDirName(first).has_value();
  }
  if (!looksLikeJobDir) {
    std::cerr << "error: '" << jobDir << "' is not a job's checkpoint directory (no chk-<n>/ or shared/ in it); "
              << "pass <state.checkpoints.dir>/<jobId>\n";
    return kExitUsage;
  }
  return kExitOk;
}

int collectJobDirectory(const std::string& jobDirArg, bool dryRun) {
  std::error_code ec;
  fs::path jobDir = state::isObjectStoreUri(jobDirArg) ? fs::path(jobDirArg) : fs::weakly_canonical(fs::absolute(jobDirArg), ec);
  if (state::isObjectStoreUri(jobDirArg)) {
    std::string trimmed = jobDirArg;
    while (!trimmed.empty() && trimmed.back() == '/') trimmed.pop_back();
    jobDir = fs::path(trimmed);
    if (int rc = checkObjectStoreJobDirectory(trimmed); rc != kExitOk) return rc;
  } else if (ec || !fs::is_directory(jobDir)) {
    std::cerr << "error: '" << jobDirArg << "' is not a directory; pass <state.checkpoints.dir>/<jobId>\n";
    return kExitUsage;
  }
  if (!state::isObjectStoreUri(jobDirArg)) {
    if (fs::exists(jobDir / state::kMetadataFileName)) {
      std::cerr << "error: '" << jobDirArg
                << "' is a single snapshot; pass the job directory that holds chk-<n>/ and shared/ (to delete a "
                   "snapshot: jobhost savepoint -d)\n";
      return kExitUsage;
    }
    if (!state::looksLikeJobDirectory(jobDir)) {
      std::cerr << "error: '" << jobDirArg << "' is not a job's checkpoint directory (no chk-<n>/ or shared/ in it); "
                << "pass <state.checkpoints.dir>/<jobId>\n";
      return kExitUsage;
    }
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

}  // namespace

int gcCommand(const GcOptions& o) {
  if (o.jobDir && state::isObjectStoreUri(*o.jobDir)) {
    try {  // the s3.* keys of the configuration (endpoint, keys) for the job directory
      Configuration config;
      loadUserConfiguration(o.configFile, o.defines, std::nullopt, &config);
    } catch (const ConfigError& e) {
      std::cerr << "error: " << e.what() << "\n";
      return kExitUsage;
    }
  }
  int rc = o.jobDir ? collectJobDirectory(*o.jobDir, o.dryRun) : kExitOk;
  if (rc == kExitUsage) return rc;  // a wrong argument: nothing else is touched either
  int work = collectWorkDirectories(o);
  return rc != kExitOk ? rc : work;
}

}  // namespace jobhost::host
