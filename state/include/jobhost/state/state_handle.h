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
//
// File paths in handles are relative to the CheckpointStorage the snapshot was written
// to / is read from (see checkpoint_storage.h).
#pragma once

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

using KeyedStateHandle = std::variant<std::monostate, KeyGroupsStateHandle, IncrementalStateHandle>;

inline const char* handleTypeName(const KeyedStateHandle& h) {
  switch (h.index()) {
    case 1: return "KeyGroupsStateHandle";
    case 2: return "IncrementalRemoteKeyedStateHandle";
    default: return "none";
  }
}

/// Every file a handle references.
inline std::vector<FileRef> referencedFiles(const KeyedStateHandle& h) {
  std::vector<FileRef> out;
  if (auto* kg = std::get_if<KeyGroupsStateHandle>(&h)) out.push_back(kg->file);
  if (auto* inc = std::get_if<IncrementalStateHandle>(&h)) {
    for (const auto& f : inc->sharedFiles) out.push_back(f.file);
    for (const auto& f : inc->privateFiles) out.push_back(f.file);
  }
  return out;
}

}  // namespace jobhost::state
