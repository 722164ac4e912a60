// `jobhost convert <snapshot> <out-dir>`: rewrites any snapshot — rocksdb incremental
// included — into the canonical key-group format, which both backends restore. The source
// snapshot is only read (through state::OperatorStateReader, as `jobhost state` reads
// it); the output is a self-contained savepoint directory.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>

#include "jobhost/state/s3_storage.h"
#include "config/units.h"
#include "checkpoint/checkpoint_coordinator.h"
#include "cli/commands.h"
#include "exit_codes.h"
#include "jobhost/state/checkpoint_layout.h"
#include "jobhost/state/key_group_format.h"
#include "jobhost/state/snapshot_entries.h"

namespace jobhost::host {

namespace fs = std::filesystem;

int convertCommand(const std::string& from, const std::string& outDir) {
  auto src = resolveSnapshot(from);
  if (!src.ok()) {
    std::cerr << "error: cannot convert " << from << ": " << src.status().message() << "\n";
    return exitCodeForSnapshotError(src.status());
  }
  std::error_code ec;
  const bool objectStore = state::isObjectStoreUri(outDir);
  fs::path out = objectStore ? fs::path(outDir) : fs::absolute(outDir, ec);
  if (!objectStore) {
    // Not inside a snapshot or a job's checkpoint directory: a subsumed checkpoint, gc,
    // `savepoint -d` or DELETE_ON_CANCELLATION would delete the savepoint with it. (A
    // job directory here: one with a completed chk-<n>; a shared/ alone says too little.)
    for (fs::path p = out.lexically_normal().parent_path(); !p.empty(); p = p.parent_path()) {
      std::error_code lec;
      const bool snapshot = fs::exists(p / state::kMetadataFileName, lec);
      if (snapshot || state::holdsCompletedCheckpoint(p)) {
        std::cerr << "error: " << out.string() << " is inside " << p.string()
                  << (snapshot ? ", a snapshot" : ", a job's checkpoint directory")
                  << ", whose files a job, jobhost gc or savepoint -d deletes; choose a directory outside it "
                     "(e.g. under state.savepoints.dir)\n";
        return kExitUsage;
      }
      if (p == p.root_path()) break;
    }
    if (fs::exists(out, ec) && !fs::is_empty(out, ec)) {
      std::cerr << "error: " << out.string() << " already exists and is not empty; choose a new directory\n";
      return kExitUsage;
    }
    fs::create_directories(out, ec);
    if (ec) {
      std::cerr << "error: cannot create " << out.string() << ": " << ec.message() << "\n";
      return kExitUsage;
    }
  }
  auto storage = state::openStorage(out.string());
  if (!storage.ok()) {
    std::cerr << "error: " << storage.status().message() << "\n";
    return kExitUsage;
  }
  if (objectStore) {  // an object store has no directories: "exists" means "has objects"
    std::vector<state::FileEntry> existing;
    state::Status s = (*storage)->list("", &existing);
    if (!s.ok() || !existing.empty()) {
      std::cerr << "error: " << out.string()
                << (s.ok() ? " already holds objects; choose a new prefix" : ": " + s.message()) << "\n";
      return kExitUsage;
    }
  }
  const state::CheckpointMetadata& m = src->metadata;
  state::CheckpointMetadata converted = m;
  converted.kind = state::SnapshotKind::kSavepoint;
  converted.format = state::SnapshotFormat::kCanonical;
  converted.incremental = false;
  converted.stats = {};
  auto fail = [&](const state::Status& why) {
    std::cerr << "error: cannot convert " << src->directory << ": " << why.message() << "\n";
    if (objectStore) (*storage)->removeAll("").ignoreError();
    else fs::remove_all(out, ec);
    return exitCodeForSnapshotError(why);
  };
  size_t done = 0, total = 0;
  for (const auto& op : m.operators) total += op.subtasks.size();
  for (auto& op : converted.operators) {
    // The entries come from the one reader of snapshots (every handle type, streamed key
    // group by key group: memory does not grow with the state) into key-group files.
    std::unique_ptr<state::OperatorStateReader> reader;
    for (auto& sub : op.subtasks) {
      ++done;
      if (sub.keyed.index() == 0) continue;
      if (!reader) {
        auto r = state::OperatorStateReader::open(*src->storage, *m.findOperator(op.uid), m.maxParallelism);
        if (!r.ok()) return fail(r.status());
        reader = std::move(*r);
      }
      state::KeyGroupRange range = state::handleRange(sub.keyed);
      auto writer = state::KeyGroupWriter::create(**storage, op.uid + "-" + std::to_string(sub.index) + ".kg",
                                                  op.states, range);
      if (!writer.ok()) return fail(writer.status());
      for (int kg = range.start; kg <= range.end; ++kg) {
        state::Status s = (*writer)->beginKeyGroup(kg);
        if (s.ok()) s = reader->readKeyGroup(kg, [&](const state::LogicalEntry& e) {
          return (*writer)->add(e.state, e.key, e.userKey, e.value);
        });
        if (!s.ok()) return fail(s);
      }
      auto handle = (*writer)->finish();
      if (!handle.ok()) return fail(handle.status());
      sub.keyed = std::move(*handle);
      std::cerr << "converted operator '" << op.uid << "' subtask " << sub.index << " (" << done << "/" << total << ")\n";
    }
  }
  for (const auto& f : converted.referencedFiles()) converted.stats.totalBytes += f.size;
  converted.stats.newBytes = converted.stats.totalBytes;
  auto bytes = state::serializeMetadata(converted, "");
  if (!bytes.ok()) return fail(bytes.status());
  if (auto s = (*storage)->put(state::kMetadataFileName, *bytes); !s.ok()) return fail(s);
  std::cout << "Converted " << src->directory << " into a canonical savepoint: " << out.string() << "\n"
            << "Restore it into either backend with: jobhost run -s " << shellQuote(out.string())
            << " -c <Class> <plugin.so>\n";
  return kExitOk;
}

}  // namespace jobhost::host
