#include "checkpoint/preflight.h"

#include <algorithm>
#include <set>

#include "config/units.h"
#include "jobhost/state/snapshot_file.h"
#include "runtime/state_assignment.h"

namespace jobhost::host {

using state::BackendType;

namespace {
std::string describeWriterBackend(const state::CheckpointMetadata& m) {
  return m.backend + (m.incremental ? ", incremental" : m.backend == "rocksdb" ? ", full" : "");
}
}  // namespace

bool PreflightReport::compatible() const {
  for (const auto& f : findings)
    if (f.severity == PreflightFinding::kError) return false;
  return true;
}

PreflightReport runPreflight(const PreflightInput& in) {
  PreflightReport r;
  const auto& m = *in.metadata;
  auto add = [&](PreflightFinding::Severity s, const char* check, std::string msg) {
    r.findings.push_back({s, check, std::move(msg)});
  };
  const std::string runBackend = state::backendTypeName(in.backend);
  const std::string runBackendText =
      runBackend + (in.incremental ? ", incremental" : in.backend == BackendType::kRocksDb ? ", full" : "");
  bool backendProblem = false;

  // (a) handle types vs the effective backend, (c) uid mapping, (e) state descriptors:
  // reported from the restore mapping that JobExecution::prepare() restores.
  const StateAssignment assignment = assignState(m, in.operators, in.allowNonRestoredState, in.selectedClass);
  for (const auto& op : assignment.operators) {
    switch (op.action) {
      case StateAssignment::Action::kError:
        add(PreflightFinding::kError, "operator", op.reason);
        continue;
      case StateAssignment::Action::kSkip:
        if (op.droppedState) add(PreflightFinding::kNote, "operator", op.reason);
        continue;
      case StateAssignment::Action::kRestoreSourcePosition:
        for (const auto& n : op.notes) add(PreflightFinding::kNote, "source", n);
        continue;
      case StateAssignment::Action::kRestoreChannelState:
        continue;  // in-flight records: read from _metadata itself, no file to check
      case StateAssignment::Action::kRestoreKeyedState:
        for (const auto& n : op.notes) add(PreflightFinding::kNote, "operator", n);
        break;
    }
    const state::OperatorSnapshot& snap = *op.snapshot;
    bool incrementalHandle = std::any_of(snap.subtasks.begin(), snap.subtasks.end(), [](const auto& s) {
      return std::holds_alternative<state::IncrementalStateHandle>(s.keyed);
    });
    if (in.backend == BackendType::kHashMap && incrementalHandle) {
      backendProblem = true;
      add(PreflightFinding::kError, "backend",
          "operator '" + snap.uid + "': the snapshot holds IncrementalRemoteKeyedStateHandle (written by the rocksdb "
          "backend with incremental checkpoints), but " + in.selectedClass + " runs with the " + runBackendText +
              " backend, which restores only KeyGroupsStateHandle");
    }
    for (const auto& st : op.states) {
      if (st.fate == StateAssignment::StateFate::kError)
        add(PreflightFinding::kError, "state", st.reason);
      else if (st.fate == StateAssignment::StateFate::kKeptNotRead)
        add(PreflightFinding::kWarning, "state",
            "operator '" + snap.uid + "': state '" + st.descriptor->name + "' (" +
                describeStateDescriptor(*st.descriptor) + ") is not declared by " + in.selectedClass +
                "; kept, not read: it is restored and carried forward in every later checkpoint, and a version of " +
                in.selectedClass + " that declares it again reads it");
    }
  }
  // (d) max parallelism.
  if (m.maxParallelism != in.maxParallelism) {
    add(PreflightFinding::kError, "max-parallelism",
        "the snapshot has " + std::to_string(m.maxParallelism) + " key groups (max parallelism), this run uses " +
            std::to_string(in.maxParallelism) + "; keys would move to other key groups");
    r.fixes.push_back("add -D pipeline.max-parallelism=" + std::to_string(m.maxParallelism));
  }
  if (in.parallelism > m.maxParallelism)
    add(PreflightFinding::kError, "max-parallelism",
        "parallelism " + std::to_string(in.parallelism) + " exceeds the snapshot's max parallelism " +
            std::to_string(m.maxParallelism) + "; use -p " + std::to_string(m.maxParallelism) + " or less");
  // (g) files.
  std::set<std::string> checked;
  for (const auto& assigned : assignment.operators) {
    if (assigned.action != StateAssignment::Action::kRestoreKeyedState) continue;  // its files are not read
    const state::OperatorSnapshot& op = *assigned.snapshot;
    for (const auto& sub : op.subtasks) {
      for (const auto& use : state::fileUses(sub.keyed)) {
        const state::FileRef& f = use.file;
        const uint64_t by = use.createdByCheckpoint ? use.createdByCheckpoint : m.checkpointId;
        if (!checked.insert(f.path).second) continue;
        std::string origin = by != m.checkpointId ? " (first written by checkpoint " + std::to_string(by) + ")" : "";
        // Whether the file is intact is decided in one place (jobhost/state/snapshot_file.h):
        // only a complete answer of the storage can make it an error of the snapshot.
        state::Status s = state::checkSnapshotFile(*in.storage, f);
        if (s.isCorruption()) {
          add(PreflightFinding::kError, "files", s.message() + "; referenced by operator '" + op.uid + "'" + origin);
        } else if (!s.ok() && r.unavailable.ok()) {
          r.unavailable = s;  // nothing is concluded about the snapshot
        }
      }
    }
  }
  // (f) plugin digest.
  if (!m.pluginDigest.empty() && !in.pluginDigest.empty() && m.pluginDigest != in.pluginDigest)
    add(PreflightFinding::kNote, "plugin",
        "the plugin file differs from the one that wrote the snapshot (" + m.pluginFile + " digest " + m.pluginDigest +
            ", now " + in.pluginDigest + "); fine if you rebuilt it on purpose");
  // (b) the class, reported first when anything else is wrong.
  bool otherErrors = !r.compatible();
  if (!m.jobClass.empty() && m.jobClass != in.selectedClass) {
    bool pluginHas = std::find(in.pluginClasses.begin(), in.pluginClasses.end(), m.jobClass) != in.pluginClasses.end();
    std::string msg = "the snapshot was written by class " + m.jobClass + " (" + m.pluginFile + ", backend " +
                      describeWriterBackend(m) + "); you selected " + in.selectedClass + " (backend " + runBackendText + ")";
    if (otherErrors) {
      r.findings.insert(r.findings.begin(), {PreflightFinding::kError, "class", "most likely cause: " + msg});
      if (pluginHas)
        r.fixes.insert(r.fixes.begin(), shellCommand({"jobhost", "run", "-s", in.snapshotPath, "-c", m.jobClass, in.pluginPath}) +
                                            "   (the class that wrote this snapshot; this plugin has it)");
    } else {
      add(PreflightFinding::kWarning, "class", msg + "; restoring anyway (a renamed class or a new version is fine)");
    }
  }
  if (backendProblem) {
    r.fixes.push_back("keep " + in.selectedClass + " but add -D state.backend.type=rocksdb -D state.backend.incremental=true");
    r.fixes.push_back("jobhost convert " + shellQuote(in.snapshotPath) +
                      " <out-dir>, then restore from <out-dir>: the canonical format restores into any backend");
  }
  if (!in.allowNonRestoredState)
    for (const auto& f : r.findings)
      if (f.check == "operator" && f.severity == PreflightFinding::kError) {
        r.fixes.push_back("add --allow-non-restored-state (-n) to drop the state of operators the job no longer has");
        break;
      }
  return r;
}

std::string PreflightReport::format(const std::string& snapshotPath) const {
  std::string out;
  int errors = 0;
  for (const auto& f : findings) errors += f.severity == PreflightFinding::kError;
  if (errors)
    out += "Cannot restore " + snapshotPath + ": " + std::to_string(errors) + " problem" + (errors > 1 ? "s" : "") + "\n";
  else
    out += "Snapshot " + snapshotPath + " is compatible\n";
  for (const auto& f : findings) {
    const char* tag = f.severity == PreflightFinding::kError ? "error  " : f.severity == PreflightFinding::kWarning ? "warning" : "note   ";
    out += "  " + std::string(tag) + " [" + f.check + "] " + f.message + "\n";
  }
  if (!fixes.empty() && errors) {
    out += "Fixes, most likely first:\n";
    for (size_t i = 0; i < fixes.size(); ++i) out += "  " + std::to_string(i + 1) + ". " + fixes[i] + "\n";
  }
  return out;
}

}  // namespace jobhost::host
