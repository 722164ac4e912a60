#include "checkpoint/preflight.h"

#include <map>
#include <set>

namespace jobhost::host {

using state::BackendType;

namespace {
std::string describeWriterBackend(const state::CheckpointMetadata& m) {
  return m.backend + (m.backend == "rocksdb" ? (m.incremental ? ", incremental" : ", full") : "");
}
std::string descriptorText(const StateDescriptorInfo& d) {
  std::string s = std::string(stateKindName(d.kind)) + "<";
  if (d.kind == StateKind::kMap) s += d.userKeySerializer + " v" + std::to_string(d.userKeySerializerVersion) + ", ";
  s += d.valueSerializer + " v" + std::to_string(d.valueSerializerVersion) + ">";
  return s + " keyed by " + d.keySerializer + " v" + std::to_string(d.keySerializerVersion);
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
  const std::string runBackendText = runBackend + (in.backend == BackendType::kRocksDb ? (in.incremental ? ", incremental" : ", full") : "");
  bool backendProblem = false;

  std::map<std::string, const OperatorInfo*> planOps;
  for (const auto& op : in.operators) planOps[op.uid] = &op;

  // (a) handle types vs the effective backend, (c) uid mapping, (e) state descriptors.
  for (const auto& op : m.operators) {
    std::set<std::string> handleTypes;
    for (const auto& sub : op.subtasks)
      if (sub.keyed.index() != 0) handleTypes.insert(state::handleTypeName(sub.keyed));
    bool hasState = !handleTypes.empty() || std::any_of(op.subtasks.begin(), op.subtasks.end(),
                                                       [](const auto& s) { return !s.operatorState.empty(); });
    auto it = planOps.find(op.uid);
    if (it == planOps.end()) {
      if (!hasState) continue;
      std::string known;
      for (const auto& p : in.operators) known += (known.empty() ? "" : ", ") + ("'" + p.uid + "'");
      if (in.allowNonRestoredState)
        add(PreflightFinding::kNote, "operator",
            "state of operator uid '" + op.uid + "' (" + op.name + ") is skipped: --allow-non-restored-state is set");
      else
        add(PreflightFinding::kError, "operator",
            "operator uid '" + op.uid + "' (" + op.name + ") has state in the snapshot but no operator of " +
                in.selectedClass + " has that uid (its stateful operators: " + (known.empty() ? "none" : known) + ")");
      continue;
    }
    if (in.backend == BackendType::kHashMap && handleTypes.count("IncrementalRemoteKeyedStateHandle")) {
      backendProblem = true;
      add(PreflightFinding::kError, "backend",
          "operator '" + op.uid + "': the snapshot holds IncrementalRemoteKeyedStateHandle (written by the rocksdb "
          "backend with incremental checkpoints), but " + in.selectedClass + " runs with the " + runBackendText +
              " backend, which restores only KeyGroupsStateHandle");
    }
    if (!op.keyed) continue;
    for (const auto& saved : op.states) {
      const StateDescriptorInfo* now = nullptr;
      for (const auto& d : it->second->states)
        if (d.name == saved.name) now = &d;
      if (!now) {
        add(PreflightFinding::kWarning, "state",
            "operator '" + op.uid + "': state '" + saved.name + "' (" + descriptorText(saved) +
                ") is not declared by " + in.selectedClass + "; it is restored but never read");
        continue;
      }
      if (now->kind != saved.kind)
        add(PreflightFinding::kError, "state",
            "operator '" + op.uid + "': state '" + saved.name + "' is a " + stateKindName(saved.kind) +
                " in the snapshot but " + in.selectedClass + " declares a " + stateKindName(now->kind));
      else if (now->valueSerializer != saved.valueSerializer || now->valueSerializerVersion != saved.valueSerializerVersion ||
               now->keySerializer != saved.keySerializer || now->keySerializerVersion != saved.keySerializerVersion ||
               now->userKeySerializer != saved.userKeySerializer ||
               now->userKeySerializerVersion != saved.userKeySerializerVersion)
        add(PreflightFinding::kError, "state",
            "operator '" + op.uid + "': state '" + saved.name + "' was written as " + descriptorText(saved) +
                ", " + in.selectedClass + " declares " + descriptorText(*now));
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
  for (const auto& op : m.operators)
    for (const auto& sub : op.subtasks) {
      std::vector<std::pair<state::FileRef, uint64_t>> files;  // file, created by
      if (auto* kg = std::get_if<state::KeyGroupsStateHandle>(&sub.keyed)) files.push_back({kg->file, m.checkpointId});
      if (auto* inc = std::get_if<state::IncrementalStateHandle>(&sub.keyed)) {
        for (const auto& f : inc->sharedFiles) files.push_back({f.file, f.createdByCheckpoint});
        for (const auto& f : inc->privateFiles) files.push_back({f.file, f.createdByCheckpoint});
      }
      for (const auto& [f, by] : files) {
        if (!checked.insert(f.path).second) continue;
        auto size = in.storage->fileSize(f.path);
        std::string origin = by != m.checkpointId ? " (first written by checkpoint " + std::to_string(by) + ")" : "";
        if (!size.ok())
          add(PreflightFinding::kError, "files",
              "missing file " + in.storage->describe(f.path) + origin + ", referenced by operator '" + op.uid + "'");
        else if (*size != f.size)
          add(PreflightFinding::kError, "files",
              "file " + in.storage->describe(f.path) + origin + " has " + std::to_string(*size) + " bytes, the metadata records " +
                  std::to_string(f.size) + " (truncated or replaced)");
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
        r.fixes.insert(r.fixes.begin(), "jobhost run -s " + in.snapshotPath + " -c " + m.jobClass + " " + in.pluginPath +
                                            "   (the class that wrote this snapshot; this plugin has it)");
    } else {
      add(PreflightFinding::kWarning, "class", msg + "; restoring anyway (a renamed class or a new version is fine)");
    }
  }
  if (backendProblem) {
    r.fixes.push_back("keep " + in.selectedClass + " but add -D state.backend.type=rocksdb -D state.backend.incremental=true");
    r.fixes.push_back("jobhost convert " + in.snapshotPath +
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
