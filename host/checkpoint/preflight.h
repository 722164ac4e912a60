// host/checkpoint/preflight.h — checks that a snapshot fits the selected job class and
// backend before any state file is opened.
//
// Reads only `_metadata` (already parsed), the class's plan and the effective
// configuration, plus the sizes of the files the metadata references (checked by
// jobhost/state/snapshot_file.h). Every problem is collected (not only the first) and the
// report offers concrete fixes. A storage that cannot answer is not a problem of the
// snapshot: PreflightReport::unavailable says so.
//
// Thread-safety: pure function.
#pragma once

#include <string>
#include <vector>

#include "jobhost/state/checkpoint_metadata.h"
#include "jobhost/state/checkpoint_storage.h"
#include "runtime/stage_graph.h"

namespace jobhost::host {

struct PreflightInput {
  const state::CheckpointMetadata* metadata = nullptr;
  state::CheckpointStorage* storage = nullptr;  // paths in metadata are relative to it
  std::string snapshotPath;                     // as the user should type it
  std::vector<OperatorInfo> operators;          // of the selected class's plan
  std::string selectedClass;
  std::string pluginPath;
  std::string pluginDigest;
  std::vector<std::string> pluginClasses;       // classes the plugin exports
  state::BackendType backend = state::BackendType::kHashMap;
  bool incremental = false;
  int maxParallelism = 128;
  int parallelism = 1;
  bool allowNonRestoredState = false;
};

struct PreflightFinding {
  enum Severity { kError, kWarning, kNote } severity;
  std::string check;    // "backend", "class", "operator", "max-parallelism", "state", "source", "plugin", "files"
  std::string message;
};

struct PreflightReport {
  std::vector<PreflightFinding> findings;
  std::vector<std::string> fixes;  // most likely first
  /// Not OK when the storage could not answer whether a referenced file is intact (the
  /// first such error: Unavailable, IOError, ...). The report then decides nothing about
  /// those files: try again later (`jobhost run` waits, `jobhost check` exits 4).
  state::Status unavailable;
  bool compatible() const;
  /// Multi-line text for people.
  std::string format(const std::string& snapshotPath) const;
};

PreflightReport runPreflight(const PreflightInput& in);

}  // namespace jobhost::host
