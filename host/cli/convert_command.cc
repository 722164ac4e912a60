// `jobhost convert <snapshot> <out-dir>`: rewrites any snapshot — rocksdb incremental
// included — into the canonical key-group format, which both backends restore. The source
// snapshot is only read; the output is a self-contained savepoint directory.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>
#include <random>

#include "checkpoint/checkpoint_coordinator.h"
#include "cli/commands.h"
#include "job_runner.h"

namespace jobhost::host {

namespace fs = std::filesystem;

int convertCommand(const std::string& from, const std::string& outDir) {
  auto src = resolveSnapshot(from);
  if (!src.ok()) {
    std::cerr << "error: cannot convert " << from << ": " << src.status().message() << "\n";
    return kExitIncompatible;
  }
  std::error_code ec;
  fs::path out = fs::absolute(outDir, ec);
  if (fs::exists(out, ec) && !fs::is_empty(out, ec)) {
    std::cerr << "error: " << out.string() << " already exists and is not empty; choose a new directory\n";
    return kExitUsage;
  }
  fs::create_directories(out, ec);
  if (ec) {
    std::cerr << "error: cannot create " << out.string() << ": " << ec.message() << "\n";
    return kExitUsage;
  }
  auto storage = state::openStorage(out.string());
  if (!storage.ok()) {
    std::cerr << "error: " << storage.status().message() << "\n";
    return kExitUsage;
  }
  const state::CheckpointMetadata& m = src->metadata;
  state::CheckpointMetadata converted = m;
  converted.kind = state::SnapshotKind::kSavepoint;
  converted.format = state::SnapshotFormat::kCanonical;
  converted.incremental = false;
  converted.stats = {};
  fs::path scratch = fs::temp_directory_path() / ("jobhost-convert-" + std::to_string(std::random_device{}()));
  auto fail = [&](const std::string& what) {
    std::cerr << "error: cannot convert " << src->directory << ": " << what << "\n";
    fs::remove_all(scratch, ec);
    fs::remove_all(out, ec);
    return kExitIncompatible;
  };
  size_t done = 0, total = 0;
  for (const auto& op : m.operators) total += op.subtasks.size();
  for (auto& op : converted.operators) {
    for (auto& sub : op.subtasks) {
      ++done;
      if (sub.keyed.index() == 0) continue;
      state::BackendOptions bo;
      bo.operatorUid = op.uid;
      bo.subtaskIndex = sub.index;
      bo.maxParallelism = m.maxParallelism;
      bo.range = std::holds_alternative<state::KeyGroupsStateHandle>(sub.keyed)
                     ? std::get<state::KeyGroupsStateHandle>(sub.keyed).range
                     : std::get<state::IncrementalStateHandle>(sub.keyed).range;
      bo.localDir = (scratch / (op.uid + "-" + std::to_string(sub.index))).string();
      bool incremental = std::holds_alternative<state::IncrementalStateHandle>(sub.keyed);
      auto backend = incremental ? state::createRocksDbBackend(bo) : state::createHeapBackend(bo);
      if (!backend.ok()) return fail(backend.status().message());
      state::RestoreInput in;
      in.storage = src->storage.get();
      in.handles = {sub.keyed};
      in.states = op.states;
      if (auto s = (*backend)->restore(in); !s.ok()) return fail(s.message());
      state::SnapshotRequest req;
      req.checkpointId = m.checkpointId;
      req.format = state::SnapshotFormat::kCanonical;
      req.storage = storage->get();
      req.filePrefix = op.uid + "-" + std::to_string(sub.index);
      auto async = (*backend)->snapshotSync(req);
      if (!async.ok()) return fail(async.status().message());
      auto handle = (*async)->run();
      if (!handle.ok()) return fail(handle.status().message());
      sub.keyed = std::move(*handle);
      std::cerr << "converted operator '" << op.uid << "' subtask " << sub.index << " (" << done << "/" << total << ")\n";
    }
  }
  for (const auto& f : converted.referencedFiles()) converted.stats.totalBytes += f.size;
  converted.stats.newBytes = converted.stats.totalBytes;
  auto bytes = state::serializeMetadata(converted, "");
  if (!bytes.ok()) return fail(bytes.status().message());
  if (auto s = (*storage)->put(state::kMetadataFileName, *bytes); !s.ok()) return fail(s.message());
  fs::remove_all(scratch, ec);
  std::cout << "Converted " << src->directory << " into a canonical savepoint: " << out.string() << "\n"
            << "Restore it into either backend with: jobhost run -s " << out.string() << " -c <Class> <plugin.so>\n";
  return kExitOk;
}

}  // namespace jobhost::host
