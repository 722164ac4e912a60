// jobhost/state/key_group_format.h — the backend-independent key-group file format.
//
// Used by hashmap snapshots, rocksdb full snapshots and canonical savepoints, and
// readable by both backends (so a KeyGroupsStateHandle restores anywhere).
//
//   file   := "JHKG" u32le(version=2) varint(nStates) { bytes(name) u8(kind) }*nStates
//             u64le(XXH3 of the header's bytes before it)
//             group*            -- one per key group of the handle's range, in order
//   group  := { varint(stateIndex + 1) bytes(key) [bytes(userKey) if MapState] bytes(value) }*
//             varint(0) u64le(XXH3 of the group's bytes, its varint(0) included)
//   bytes  := varint(length) raw
//
// Version 1 (written until 2026-12-07) has no checksums: a reader takes both. The
// checksums make a damaged byte a Corruption naming the file and the key group, where
// version 1 restored it as a different count (a flipped byte inside a value parses).
//
// The handle records each group's byte offset, so a reader can take any sub-range
// (rescaling) without scanning the rest.
//
// Thread-safety: a writer or reader is used by one thread. (A writer of a file past one
// buffer hands full buffers to a thread of its own that writes them while the caller
// encodes the next: see KeyGroupWriter::Pipe.)
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "jobhost/operator.h"
#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/state_handle.h"
#include "jobhost/state/status.h"

namespace jobhost::state {

inline constexpr uint32_t kKeyGroupFormatVersion = 2;
/// What ends each key group in the current version: varint(0) and the checksum (a
/// version-1 file has the varint only: counts based on this err on the small side there).
inline constexpr uint64_t kKeyGroupEndBytes = 1 + 8;

namespace detail {
/// ByteWriter::writeVarint's encoding into `p`; returns the end.
inline char* putVarint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}
/// ByteWriter::writeBytes's encoding into `p` (`s` under 128 bytes); returns the end.
inline char* putShortBytes(char* p, std::string_view s) {
  const size_t n = s.size();
  *p++ = static_cast<char>(n);
  const char* from = s.data();
  if (n >= 8 && n <= 16) {  // two fixed-size copies (possibly overlapping) instead of a call
    std::memcpy(p, from, 8);
    std::memcpy(p + n - 8, from + n - 8, 8);
  } else if (n >= 4 && n < 8) {
    std::memcpy(p, from, 4);
    std::memcpy(p + n - 4, from + n - 4, 4);
  } else if (n != 0) {
    std::memcpy(p, from, n);
  }
  return p + n;
}
}  // namespace detail

/// Streams entries into a storage file, key group by key group.
class KeyGroupWriter {
 public:
  /// `path` is created in `storage` (refused if it exists).
  static Result<std::unique_ptr<KeyGroupWriter>> create(CheckpointStorage& storage,
                                                        const std::string& path,
                                                        const std::vector<StateDescriptorInfo>& states,
                                                        KeyGroupRange range);
  /// Starts the next key group; must be called once for every key group of the range,
  /// in increasing order (empty groups included), before its entries.
  Status beginKeyGroup(int keyGroup);
  /// `userKey` is ignored unless the state is a MapState. Small entries (the common case: a
  /// key and a value of a few bytes each) are encoded here, inline, straight into the
  /// buffer; the rest, and a full buffer, go through addSlow().
  Status add(int stateIndex, std::string_view key, std::string_view userKey, std::string_view value) {
    if (inGroup_ && static_cast<size_t>(stateIndex) < kinds_.size() &&
        key.size() + userKey.size() + value.size() <= kSmallEntry && buf_.cap - buf_.used >= kSmallEncoded) {
      char* p = detail::putVarint(buf_.data.get() + buf_.used, static_cast<uint64_t>(stateIndex) + 1);
      p = detail::putShortBytes(p, key);
      if (kinds_[static_cast<size_t>(stateIndex)] == StateKind::kMap) p = detail::putShortBytes(p, userKey);
      p = detail::putShortBytes(p, value);
      buf_.used = static_cast<size_t>(p - buf_.data.get());
      return Status::OK();
    }
    return addSlow(stateIndex, key, userKey, value);
  }
  /// Ends the last group, makes the file durable and returns its handle.
  Result<KeyGroupsStateHandle> finish();
  uint64_t bytesWritten() const { return written_; }
  ~KeyGroupWriter();
  KeyGroupWriter(const KeyGroupWriter&) = delete;
  KeyGroupWriter& operator=(const KeyGroupWriter&) = delete;

 private:
  /// A small entry: key, user key and value of at most this many bytes in all (each length
  /// then fits one varint byte); encoded, it takes at most kSmallEncoded bytes.
  static constexpr size_t kSmallEntry = 64;
  static constexpr size_t kSmallEncoded = kSmallEntry + 10 + 3;
  /// A full buffer (this many bytes or more) is handed to the file; its capacity leaves
  /// room for one more small entry, so the inline path needs only one test of room.
  static constexpr size_t kFlushThreshold = size_t{1} << 20;
  static constexpr size_t kBufferBytes = kFlushThreshold + kSmallEncoded;

  /// Encoded bytes: the first `used` of `cap`.
  struct Buffer {
    std::unique_ptr<char[]> data;
    size_t cap = 0, used = 0;
    std::string_view bytes() const { return {data.get(), used}; }
  };
  /// Writes the buffers the encoding thread hands over, one at a time and in order, on a
  /// thread started at the first full buffer (files under one buffer never start it).
  /// Encoding and the write system calls (a copy into the page cache, as costly per byte as
  /// the encoding) then overlap instead of adding up. At most one buffer waits while one
  /// is written; the first write error is kept and returned by the next add() or finish().
  struct Pipe {
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    Buffer pending;          // handed over, not yet taken by the thread
    bool hasPending = false;
    bool closing = false;    // no more buffers: write what is pending and exit
    Status status;           // the first failed append
  };
  KeyGroupWriter();
  Status addSlow(int stateIndex, std::string_view key, std::string_view userKey, std::string_view value);
  /// Appends bytes to the buffer, handing full buffers to the file.
  Status append(std::string_view bytes);
  Status flushIfLarge(bool force);
  Status writeHere();  // appends the buffer to the file on this thread and empties it
  Status handOver();   // gives the buffer to the pipe (started on first use)
  Status closePipe();  // waits until every handed buffer is written; their status
  void runPipe();
  std::unique_ptr<WritableFile> file_;
  std::unique_ptr<Pipe> pipe_;
  bool synchronous_ = false;  // the pipe's thread could not be started: buffers are written here
  std::string path_;
  std::vector<StateKind> kinds_;
  KeyGroupRange range_;
  int next_ = 0;
  bool inGroup_ = false;
  /// The running checksum of the current group: bytes of buf_ from hashFrom_ on are not
  /// in it yet (hashPending() adds them, before a buffer leaves and at the group's end).
  struct GroupHash;  // key_group_format.cc
  std::unique_ptr<GroupHash> groupHash_;
  size_t hashFrom_ = 0;
  void hashPending();
  Status endGroup();
  std::vector<uint64_t> offsets_;
  Buffer buf_;
  uint64_t written_ = 0;  // bytes handed to file_
};

struct KeyGroupEntry {
  int stateIndex;       // index into the file's state list (see readKeyGroups)
  int keyGroup;
  std::string_view key;
  std::string_view userKey;  // empty unless MapState
  std::string_view value;
};

/// One state as the header of a key-group file records it.
struct KeyGroupFileState {
  std::string name;
  StateKind kind = StateKind::kValue;
};

/// The reader streams the file in chunks of this size: memory stays bounded by one chunk
/// plus the largest single entry, however large the key-group range.
inline constexpr size_t kKeyGroupReadChunkSize = 1 << 20;

/// Reads the entries of the key groups in `handle.range ∩ wanted`, in key-group order.
/// `states` receives the file's states with their kinds (index =
/// KeyGroupEntry::stateIndex) before the first callback. The views in a KeyGroupEntry
/// are valid during its callback only. Corrupt or truncated data returns Corruption
/// naming the file; an error from fn stops the read and is returned.
Status readKeyGroups(CheckpointStorage& storage, const KeyGroupsStateHandle& handle,
                     const KeyGroupRange& wanted, std::vector<KeyGroupFileState>* states,
                     const std::function<Status(const KeyGroupEntry&)>& fn);

/// The same on a file the caller opened (and keeps open: see snapshot_entries.h);
/// `where` names it in messages.
Status readKeyGroups(const ReadableFile& file, const std::string& where, const KeyGroupsStateHandle& handle,
                     const KeyGroupRange& wanted, std::vector<KeyGroupFileState>* states,
                     const std::function<Status(const KeyGroupEntry&)>& fn);

/// The same, for callers that need the state names only.
Status readKeyGroups(CheckpointStorage& storage, const KeyGroupsStateHandle& handle,
                     const KeyGroupRange& wanted, std::vector<std::string>* stateNames,
                     const std::function<Status(const KeyGroupEntry&)>& fn);

}  // namespace jobhost::state
