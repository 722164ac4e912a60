// `jobhost inspect` and `jobhost checkpoints`: snapshot metadata and checkpoint history for
// people (and JSON for tools).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "jobhost/state/s3_storage.h"
#include "checkpoint/checkpoint_coordinator.h"
#include "cli/commands.h"
#include "cli/row_output.h"
#include "cli/source_positions.h"
#include "cli/table.h"
#include "config/units.h"
#include "exit_codes.h"
#include "jobhost/kafka_splits.h"
#include "jobhost/serializer.h"
#include "jobhost/state/checkpoint_layout.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {

/// Checkpoint ids (other than its own) whose files a snapshot still references.
std::set<uint64_t> dependencies(const state::CheckpointMetadata& m) {
  std::set<uint64_t> deps;
  for (const auto& op : m.operators)
    for (const auto& sub : op.subtasks)
      for (const auto& f : state::fileUses(sub.keyed))
        if (f.shared && f.createdByCheckpoint != m.checkpointId) deps.insert(f.createdByCheckpoint);
  return deps;
}

std::string kindText(const state::CheckpointMetadata& m) {
  std::string k = m.kind == state::SnapshotKind::kSavepoint ? "savepoint" : "checkpoint";
  if (m.format == state::SnapshotFormat::kCanonical) return k + " (canonical)";
  if (m.incremental) return k + " (incremental)";
  return k + " (full)";
}

/// An unaligned checkpoint's in-flight records of one subtask: buffers, bytes, records
/// (records: -1 if a buffer does not parse).
struct InFlight {
  size_t buffers = 0;
  uint64_t bytes = 0;
  int64_t records = 0;
};
InFlight inFlightOf(const state::SubtaskSnapshot& sub) {
  InFlight f;
  f.buffers = sub.inputChannels.size();
  f.bytes = sub.inFlightBytes();
  for (const auto& b : sub.inputChannels) {
    try {
      ByteReader r(b.data);
      while (!r.atEnd()) {
        r.readFixed<uint16_t>();
        r.readI64();
        r.readBytes();
        r.readBytes();
        if (f.records >= 0) ++f.records;
      }
    } catch (const std::exception&) {
      f.records = -1;
    }
  }
  return f;
}

/// The handle column: the keyed handle, or the channel state's for an exchange.
std::string handleText(const state::SubtaskSnapshot& sub) {
  if (sub.keyed.index() == 0 && !sub.inputChannels.empty()) return "InputChannelStateHandle";
  return state::handleTypeName(sub.keyed);
}

std::string joinIds(const std::set<uint64_t>& ids) {
  std::string s;
  for (auto id : ids) s += (s.empty() ? "" : ", ") + std::to_string(id);
  return s.empty() ? "-" : s;
}

}  // namespace

int inspectCommand(const std::string& path, bool json) {
  auto r = resolveSnapshot(path);
  if (!r.ok()) {
    std::cerr << "error: " << r.status().message() << "\n";
    return exitCodeForSnapshotError(r.status());
  }
  // A job directory whose newest chk-<n> cannot be read: say which one was shown instead.
  if (r->skippedNewer) std::cerr << "warning: " << r->note << "\n";
  const auto& m = r->metadata;
  auto deps = dependencies(m);
  // Kafka sources' offsets per partition (a damaged position is a damaged snapshot).
  std::map<std::string, std::pair<std::string, std::vector<SourcePartitionRow>>> kafka;  // uid -> (subscription, rows)
  for (const auto& op : m.operators) {
    if (!holdsKafkaOffsets(op)) continue;
    auto& [subscription, rows] = kafka[op.uid];
    if (state::Status s = kafkaPartitions(op, &rows, &subscription); !s.ok()) {
      std::cerr << "error: " << r->directory << ": " << s.message() << "\n";
      return kExitIncompatible;
    }
  }
  std::map<std::string, std::vector<BroadcastStateRow>> broadcast;  // uid -> its broadcast states
  for (const auto& op : m.operators) {
    std::vector<BroadcastStateRow> rows;
    if (state::Status s = broadcastStates(op, &rows); !s.ok()) {
      std::cerr << "error: " << r->directory << ": " << s.message() << "\n";
      return kExitIncompatible;
    }
    if (!rows.empty()) broadcast[op.uid] = std::move(rows);
  }
  if (json) {
    std::ostringstream o;
    o << "{\"path\":" << jsonString(r->directory) << ",\"formatVersion\":" << m.formatVersion
      << ",\"jobId\":" << jsonString(m.jobId) << ",\"checkpointId\":" << m.checkpointId
      << ",\"kind\":" << jsonString(m.kind == state::SnapshotKind::kSavepoint ? "savepoint" : "checkpoint")
      << ",\"format\":" << jsonString(m.format == state::SnapshotFormat::kCanonical ? "canonical" : "native")
      << ",\"timestampMs\":" << m.timestampMs << ",\"jobClass\":" << jsonString(m.jobClass)
      << ",\"pluginFile\":" << jsonString(m.pluginFile) << ",\"pluginDigest\":" << jsonString(m.pluginDigest)
      << ",\"sdkVersion\":" << jsonString(m.sdkVersion) << ",\"backend\":" << jsonString(m.backend)
      << ",\"incremental\":" << (m.incremental ? "true" : "false") << ",\"maxParallelism\":" << m.maxParallelism
      << ",\"parallelism\":" << m.parallelism << ",\"dependsOn\":[";
    bool first = true;
    for (auto d : deps) o << (first ? "" : ",") << d, first = false;
    o << "],\"operators\":[";
    for (size_t i = 0; i < m.operators.size(); ++i) {
      const auto& op = m.operators[i];
      o << (i ? "," : "") << "{\"uid\":" << jsonString(op.uid) << ",\"name\":" << jsonString(op.name)
        << ",\"parallelism\":" << op.parallelism << ",\"states\":[";
      for (size_t j = 0; j < op.states.size(); ++j) {
        const auto& d = op.states[j];
        o << (j ? "," : "") << "{\"name\":" << jsonString(d.name) << ",\"kind\":" << jsonString(stateKindName(d.kind))
          << ",\"keySerializer\":" << jsonString(d.keySerializer) << ",\"valueSerializer\":" << jsonString(d.valueSerializer)
          << ",\"valueSerializerVersion\":" << d.valueSerializerVersion << "}";
      }
      o << "],\"subtasks\":[";
      for (size_t j = 0; j < op.subtasks.size(); ++j) {
        const auto& sub = op.subtasks[j];
        o << (j ? "," : "") << "{\"index\":" << sub.index << ",\"handle\":" << jsonString(handleText(sub));
        if (!sub.inputChannels.empty()) {
          InFlight f = inFlightOf(sub);
          o << ",\"inFlight\":{\"buffers\":" << f.buffers << ",\"bytes\":" << f.bytes << ",\"records\":";
          if (f.records < 0) o << "null";
          else o << f.records;
          // The receiving task's input watermark when it snapshotted (epoch ms; null: none
          // had reached it): the restored records are processed at it, before new input.
          o << ",\"inputWatermark\":";
          if (sub.inputWatermark == INT64_MIN) o << "null";
          else o << sub.inputWatermark;
          o << "}";
        }
        state::KeyGroupRange range = state::handleRange(sub.keyed);
        if (sub.keyed.index()) o << ",\"keyGroups\":[" << range.start << "," << range.end << "]";
        o << ",\"files\":[";
        auto files = state::referencedFiles(sub.keyed);
        for (size_t k = 0; k < files.size(); ++k)
          o << (k ? "," : "") << "{\"path\":" << jsonString(r->storage->describe(files[k].path))
            << ",\"size\":" << files[k].size << "}";
        o << "]}";
      }
      o << "]";
      if (auto b = broadcast.find(op.uid); b != broadcast.end()) {
        o << ",\"broadcastStates\":[";
        for (size_t j = 0; j < b->second.size(); ++j) {
          const auto& x = b->second[j];
          o << (j ? "," : "") << "{\"name\":" << jsonString(x.name) << ",\"keySerializer\":" << jsonString(x.keySerializer)
            << ",\"valueSerializer\":" << jsonString(x.valueSerializer) << ",\"entries\":" << x.entries << "}";
        }
        o << "]";
      }
      if (auto k = kafka.find(op.uid); k != kafka.end()) {
        // A Kafka source: the next offset per partition (null with "earliest": true for a
        // partition not read yet that starts at its earliest offset).
        o << ",\"kafkaSubscription\":" << jsonString(k->second.first) << ",\"kafkaOffsets\":[";
        for (size_t j = 0; j < k->second.second.size(); ++j) {
          const auto& row = k->second.second[j];
          o << (j ? "," : "") << "{\"subtask\":" << row.subtask << ",\"topic\":" << jsonString(row.topic)
            << ",\"partition\":" << row.partition << ",\"offset\":";
          if (row.offset == kEarliestOffset) o << "null,\"earliest\":true";
          else o << row.offset;
          o << ",\"stoppingOffset\":";
          if (row.stoppingOffset == kNoStoppingOffset) o << "null";
          else o << row.stoppingOffset;
          o << "}";
        }
        o << "]";
      }
      o << "}";
    }
    o << "]}";
    std::cout << o.str() << "\n";
    return kExitOk;
  }
  std::cout << "Snapshot     " << r->directory << "\n"
            << "Kind         " << kindText(m) << ", id " << m.checkpointId << ", metadata format v" << m.formatVersion << "\n"
            << "Written by   " << m.jobClass << " (" << m.pluginFile << ", digest " << m.pluginDigest << ", SDK "
            << m.sdkVersion << ")\n"
            << "Job          " << m.jobId << ", parallelism " << m.parallelism << "\n"
            << "Backend      " << m.backend << (m.incremental ? " (incremental)" : m.backend == "rocksdb" ? " (full)" : "")
            << ", max parallelism " << m.maxParallelism << "\n"
            << "Depends on   " << (deps.empty() ? "nothing else (self-contained)" : "files of checkpoints " + joinIds(deps))
            << "\n\n";
  for (const auto& op : m.operators) {
    std::cout << "Operator '" << op.uid << "' (" << op.name << "), parallelism " << op.parallelism << "\n";
    for (const auto& d : op.states) {
      std::cout << "  state " << d.name << ": " << stateKindName(d.kind) << ", key " << d.keySerializer << " v"
                << d.keySerializerVersion;
      if (d.kind == StateKind::kMap)
        std::cout << ", map key " << d.userKeySerializer << " v" << d.userKeySerializerVersion;
      std::cout << ", value " << d.valueSerializer << " v" << d.valueSerializerVersion << "\n";
    }
    if (auto b = broadcast.find(op.uid); b != broadcast.end())
      for (const auto& x : b->second)
        std::cout << "  broadcast state " << x.name << ": " << x.keySerializer << " -> " << x.valueSerializer << ", "
                  << x.entries << (x.entries == 1 ? " entry" : " entries") << " (the same in every subtask)\n";
    Table t({"  SUBTASK", "HANDLE", "KEY GROUPS", "FILES", "BYTES"});
    for (const auto& sub : op.subtasks) {
      state::KeyGroupRange range = state::handleRange(sub.keyed);
      auto files = state::referencedFiles(sub.keyed);
      uint64_t bytes = 0;
      for (const auto& f : files) bytes += f.size;
      bytes += sub.inFlightBytes();
      t.add({"  " + std::to_string(sub.index), handleText(sub),
             sub.keyed.index() ? std::to_string(range.start) + "-" + std::to_string(range.end) : "-",
             std::to_string(files.size()), formatBytes(bytes)});
    }
    std::cout << t.render();
    for (const auto& sub : op.subtasks) {
      if (sub.inputChannels.empty()) continue;
      InFlight f = inFlightOf(sub);
      std::cout << "    subtask " << sub.index << ": "
                << (f.records < 0 ? std::string("damaged in-flight records") : std::to_string(f.records) + " in-flight records")
                << " in " << f.buffers << (f.buffers == 1 ? " buffer" : " buffers") << " (" << formatBytes(f.bytes)
                << ", unaligned checkpoint; stored in _metadata, processed first on restore"
                << (sub.inputWatermark == INT64_MIN ? std::string(", before any watermark")
                                                    : ", at input watermark " + std::to_string(sub.inputWatermark))
                << ")\n";
    }
    for (const auto& sub : op.subtasks)
      for (const auto& f : state::referencedFiles(sub.keyed))
        std::cout << "    " << r->storage->describe(f.path) << "  (" << formatBytes(f.size) << ")\n";
    if (auto k = kafka.find(op.uid); k != kafka.end()) {
      const auto& rows = k->second.second;
      bool bounded = std::any_of(rows.begin(), rows.end(), [](const auto& x) { return x.stoppingOffset != kNoStoppingOffset; });
      std::cout << "  Kafka offsets (" << (k->second.first.empty() ? "no subscription recorded" : k->second.first)
                << "; the next offset to read per partition):\n";
      std::vector<std::string> header = {"  SUBTASK", "TOPIC", "PARTITION", "NEXT OFFSET"};
      if (bounded) header.push_back("STOPS AT");
      Table kt(header);
      for (const auto& x : rows) {
        std::vector<std::string> row = {"  " + std::to_string(x.subtask), x.topic, std::to_string(x.partition),
                                        offsetText(x.offset)};
        if (bounded) row.push_back(offsetText(x.stoppingOffset));
        kt.add(row);
      }
      std::cout << (rows.empty() ? std::string("  (no partition)\n") : kt.render());
    }
    std::cout << "\n";
  }
  return kExitOk;
}

int checkpointsCommand(const std::string& jobDirArg) {
  std::error_code ec;
  std::string jobDir = jobDirArg;
  bool objectStore = state::isObjectStoreUri(jobDir);
  while (objectStore && !jobDir.empty() && jobDir.back() == '/') jobDir.pop_back();
  // On an object store: chk-<n> "directories" and their _metadata from one listing.
  std::map<uint64_t, bool> listed;  // id -> has _metadata
  if (objectStore) {
    auto storage = state::openStorage(jobDir);
    std::vector<state::FileEntry> files;
    state::Status s = storage.ok() ? (*storage)->list("", &files) : storage.status();
    if (!s.ok()) {
      std::cerr << "error: cannot list " << jobDir << ": " << s.message() << "\n";
      return s.isInvalidArgument() ? kExitUsage : kExitJobFailed;
    }
    for (const auto& f : files) {
      size_t slash = f.path.find('/');
      if (slash == std::string::npos) continue;
      if (auto id = state::parseCheckpointDirName(f.path.substr(0, slash))) {
        listed[*id] |= f.path.substr(slash + 1) == state::kMetadataFileName;
      }
    }
  }
  if (!objectStore && !fs::is_directory(jobDir, ec)) {
    std::cerr << "error: '" << jobDir << "' is not a directory; pass <state.checkpoints.dir>/<jobId>\n";
    return kExitUsage;
  }
  std::vector<std::pair<uint64_t, fs::path>> chks;
  if (objectStore) {
    for (const auto& [id, complete] : listed) chks.emplace_back(id, fs::path(jobDir) / state::checkpointDirName(id));
  } else {
    for (const auto& e : fs::directory_iterator(jobDir, ec)) {
      auto id = state::parseCheckpointDirName(e.path().filename().string());
      if (id && e.is_directory()) chks.emplace_back(*id, e.path());
    }
  }
  std::sort(chks.begin(), chks.end());
  if (chks.empty() && !objectStore) {
    // One level too high (state.checkpoints.dir itself): its subdirectories are jobs.
    std::vector<std::string> jobs;
    for (fs::directory_iterator it(jobDir, ec), end; !ec && it != end; it.increment(ec))
      if (state::holdsCompletedCheckpoint(it->path())) jobs.push_back(it->path().filename().string());
    std::sort(jobs.begin(), jobs.end());
    if (!jobs.empty()) {
      std::cerr << "error: " << fs::absolute(jobDir).string() << " holds the checkpoint directories of "
                << jobs.size() << (jobs.size() == 1 ? " job" : " jobs") << ", not checkpoints: pass one of them, e.g. "
                << shellCommand({"jobhost", "checkpoints", (fs::absolute(jobDir) / jobs.front()).string()}) << "\n";
      return kExitUsage;
    }
  }
  if (chks.empty()) {
    std::cout << "no checkpoints in " << (objectStore ? jobDir : fs::absolute(jobDir).string()) << "\n";
    return kExitOk;
  }
  Table t({"ID", "STATUS", "KIND", "TIME", "NEW", "TOTAL", "ALIGNMENT", "DEPENDS ON", "PATH (pass to -s)"});
  for (const auto& [id, p] : chks) {
    fs::path abs = objectStore ? p : fs::absolute(p);
    if (objectStore ? !listed[id] : !fs::exists(abs / state::kMetadataFileName)) {
      t.add({std::to_string(id), "INCOMPLETE", "-", "-", "-", "-", "-", "-", abs.string()});
      continue;
    }
    auto r = resolveSnapshot(abs.string());
    if (!r.ok()) {
      t.add({std::to_string(id), "UNREADABLE", "-", "-", "-", "-", "-", "-", abs.string()});
      continue;
    }
    const auto& m = r->metadata;
    char when[32] = "-";
    std::time_t secs = static_cast<std::time_t>(m.timestampMs / 1000);
    std::tm tm{};
    localtime_r(&secs, &tm);
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    // "-": no task aligned barriers (every task has one input channel, or an older writer).
    char aligned[32] = "-";
    if (m.stats.alignmentMicros >= 1000)
      std::snprintf(aligned, sizeof aligned, "%.1f ms", static_cast<double>(m.stats.alignmentMicros) / 1000.0);
    else if (m.stats.alignmentMicros > 0)
      std::snprintf(aligned, sizeof aligned, "%llu us", static_cast<unsigned long long>(m.stats.alignmentMicros));
    t.add({std::to_string(id), "COMPLETED", kindText(m), when, formatBytes(m.stats.newBytes),
           formatBytes(m.stats.totalBytes), aligned, joinIds(dependencies(m)), abs.string()});
  }
  std::cout << t.render();
  return kExitOk;
}

}  // namespace jobhost::host
