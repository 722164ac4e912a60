// jobhost/state/state_handle.h — what a snapshot of one operator subtask's keyed state is.
//
// Two handle types, named as in Flink so users recognise them:
//  - KeyGroupsStateHandle: one file holding the subtask's key groups one after another
//    in the backend-independent key-group format (key_group_format.h), plus the offset
//    of each key group, so a reader can take any sub-range. Written by the hashmap
//    backend, by the rocksdb backend's full snapshots, and by canonical savepoints.
//    Both backends restore it.
//  - IncrementalRemoteKeyedStateHandle: a RocksDB native checkpoint: shared SST files
//    (possibly written by earlier checkpoints), private files (MANIFEST, CURRENT,
//    OPTIONS), and the state layout. Only the rocksdb backend restores it.
//  - IncrementalKeyGroupsStateHandle: an incremental checkpoint of the hashmap backend
//    (state.backend.incremental=true; FLIP-151's idea, which Flink never shipped): key-group
//    files in the shared directory, each written by the checkpoint that last saw its key
//    groups change, and for each file the key groups this snapshot reads from it. Both
//    backends restore it, like a KeyGroupsStateHandle split over several files.
//
// File paths in handles are relative to the CheckpointStorage the snapshot was written
// to / is read from (see checkpoint_storage.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace jobhost::state {

/// Inclusive range of key groups [start, end]; empty when end < start.
struct KeyGroupRange {
  int start = 0;
  int end = -1;
  bool empty() const { return end < start; }
  int size() const { return empty() ? 0 : end - start + 1; }
  bool contains(int kg) const { return kg >= start && kg <= end; }
  KeyGroupRange intersect(const KeyGroupRange& o) const {
    return {std::max(start, o.start), std::min(end, o.end)};
  }
  bool operator==(const KeyGroupRange&) const = default;
};

/// Key groups owned by subtask `index` of `parallelism` for `maxParallelism` key
/// groups: contiguous ranges, as Flink's KeyGroupRangeAssignment.
inline KeyGroupRange keyGroupRangeFor(int maxParallelism, int parallelism, int index) {
  int start = (index * maxParallelism + parallelism - 1) / parallelism;
  int end = ((index + 1) * maxParallelism - 1) / parallelism;
  return {start, end};
}

/// The subtask owning key group `kg`.
inline int subtaskForKeyGroup(int maxParallelism, int parallelism, int kg) {
  return kg * parallelism / maxParallelism;
}

struct FileRef {
  std::string path;
  uint64_t size = 0;
  bool operator==(const FileRef&) const = default;
};

struct KeyGroupsStateHandle {
  FileRef file;
  KeyGroupRange range;
  std::vector<uint64_t> offsets;  // one per key group in range, into file
};

struct SharedFileRef {
  std::string localName;         // name inside the RocksDB directory, e.g. "000012.sst"
  FileRef file;                  // where it is stored
  uint64_t createdByCheckpoint = 0;
};

struct IncrementalStateHandle {
  std::string backendId;  // identifies the RocksDB instance lineage
  uint64_t checkpointId = 0;
  KeyGroupRange range;
  std::vector<SharedFileRef> sharedFiles;
  std::vector<SharedFileRef> privateFiles;  // createdByCheckpoint = checkpointId
  std::vector<std::string> columnFamilies;  // state name per column family, in order
};

/// One key-group file of an IncrementalKeyGroupsStateHandle.
struct KeyGroupsFilePart {
  KeyGroupsStateHandle file;  // the file as written: its key-group range and offsets
  uint64_t createdByCheckpoint = 0;
  /// The key groups this snapshot reads from the file: ascending, disjoint runs within
  /// file.range. Its other key groups changed later (another part has them) or are empty.
  std::vector<KeyGroupRange> keyGroups;
};

struct IncrementalKeyGroupsStateHandle {
  std::string backendId;  // the heap backend instance whose files these are
  uint64_t checkpointId = 0;
  KeyGroupRange range;
  std::vector<KeyGroupsFilePart> parts;  // their keyGroups partition range (empty groups may be in none)
};

using KeyedStateHandle =
    std::variant<std::monostate, KeyGroupsStateHandle, IncrementalStateHandle, IncrementalKeyGroupsStateHandle>;

inline const char* handleTypeName(const KeyedStateHandle& h) {
  switch (h.index()) {
    case 1: return "KeyGroupsStateHandle";
    case 2: return "IncrementalRemoteKeyedStateHandle";
    case 3: return "IncrementalKeyGroupsStateHandle";
    default: return "none";
  }
}

/// The key groups a handle covers (empty for none).
inline KeyGroupRange handleRange(const KeyedStateHandle& h) {
  if (auto* kg = std::get_if<KeyGroupsStateHandle>(&h)) return kg->range;
  if (auto* inc = std::get_if<IncrementalStateHandle>(&h)) return inc->range;
  if (auto* ikg = std::get_if<IncrementalKeyGroupsStateHandle>(&h)) return ikg->range;
  return {};
}

/// A file a handle references and the checkpoint that wrote it. The owner of "which
/// files does a snapshot need, and which of them did an earlier checkpoint write"
/// (preflight, dependencies, clean-up of aborted checkpoints, statistics).
struct FileUse {
  FileRef file;
  /// 0 for the file of a KeyGroupsStateHandle: the snapshot holding the handle wrote it.
  uint64_t createdByCheckpoint = 0;
  /// In the shared directory: later checkpoints may reference it too.
  bool shared = false;
};

inline std::vector<FileUse> fileUses(const KeyedStateHandle& h) {
  std::vector<FileUse> out;
  if (auto* kg = std::get_if<KeyGroupsStateHandle>(&h)) out.push_back({kg->file, 0, false});
  if (auto* inc = std::get_if<IncrementalStateHandle>(&h)) {
    for (const auto& f : inc->sharedFiles) out.push_back({f.file, f.createdByCheckpoint, true});
    for (const auto& f : inc->privateFiles) out.push_back({f.file, f.createdByCheckpoint, false});
  }
  if (auto* ikg = std::get_if<IncrementalKeyGroupsStateHandle>(&h))
    for (const auto& p : ikg->parts) out.push_back({p.file.file, p.createdByCheckpoint, true});
  return out;
}

/// Every file a handle references.
inline std::vector<FileRef> referencedFiles(const KeyedStateHandle& h) {
  std::vector<FileRef> out;
  for (auto& u : fileUses(h)) out.push_back(std::move(u.file));
  return out;
}

/// One read a restore makes of a key-group file: the key groups `keyGroups` of `file`.
struct KeyGroupsRead {
  const KeyGroupsStateHandle* file = nullptr;
  KeyGroupRange keyGroups;
};

/// The key-group file reads that load `wanted` from a KeyGroupsStateHandle or an
/// IncrementalKeyGroupsStateHandle (none for other handles), in key-group order per file.
inline std::vector<KeyGroupsRead> keyGroupReads(const KeyedStateHandle& h, const KeyGroupRange& wanted) {
  std::vector<KeyGroupsRead> out;
  if (auto* kg = std::get_if<KeyGroupsStateHandle>(&h)) {
    KeyGroupRange r = kg->range.intersect(wanted);
    if (!r.empty()) out.push_back({kg, r});
  }
  if (auto* ikg = std::get_if<IncrementalKeyGroupsStateHandle>(&h))
    for (const auto& p : ikg->parts)
      for (const auto& run : p.keyGroups) {
        KeyGroupRange r = run.intersect(p.file.range).intersect(wanted);
        if (!r.empty()) out.push_back({&p.file, r});
      }
  return out;
}

}  // namespace jobhost::state
