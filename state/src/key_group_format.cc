// Key-group file format: see jobhost/state/key_group_format.h.
#include "jobhost/state/key_group_format.h"

#include <algorithm>
#include <cstring>
#include <system_error>
#include <utility>

#include "jobhost/serializer.h"
#include "jobhost/state/snapshot_file.h"

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

namespace jobhost::state {
namespace {
constexpr char kKeyGroupMagic[4] = {'J', 'H', 'K', 'G'};

void putU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t getU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
}  // namespace

struct KeyGroupWriter::GroupHash {
  XXH3_state_t state;
};

KeyGroupWriter::KeyGroupWriter() : groupHash_(std::make_unique<GroupHash>()) {
  buf_.cap = kBufferBytes;
  buf_.data.reset(new char[kBufferBytes]);
}

void KeyGroupWriter::hashPending() {
  if (!inGroup_) return;
  if (buf_.used > hashFrom_) XXH3_64bits_update(&groupHash_->state, buf_.data.get() + hashFrom_, buf_.used - hashFrom_);
  hashFrom_ = buf_.used;
}

Status KeyGroupWriter::endGroup() {
  const char end = 0;  // varint(0): the group's end
  if (Status s = append({&end, 1}); !s.ok()) return s;
  hashPending();
  char sum[8];
  putU64(sum, XXH3_64bits_digest(&groupHash_->state));
  inGroup_ = false;  // the checksum is not part of what it sums
  return append({sum, 8});
}

Result<std::unique_ptr<KeyGroupWriter>> KeyGroupWriter::create(
    CheckpointStorage& storage, const std::string& path, const std::vector<StateDescriptorInfo>& states,
    KeyGroupRange range) {
  auto file = storage.create(path);
  if (!file.ok()) return file.status();
  std::unique_ptr<KeyGroupWriter> w(new KeyGroupWriter());
  w->file_ = std::move(*file);
  w->path_ = path;
  w->range_ = range;
  w->next_ = range.start;
  std::string header;
  ByteWriter bw(header);
  bw.writeRaw(kKeyGroupMagic, 4);
  bw.writeFixed<uint32_t>(kKeyGroupFormatVersion);
  bw.writeVarint(states.size());
  for (const auto& s : states) {
    bw.writeBytes(s.name);
    bw.writeU8(static_cast<uint8_t>(s.kind));
    w->kinds_.push_back(s.kind);
  }
  char sum[8];
  putU64(sum, XXH3_64bits(header.data(), header.size()));
  header.append(sum, 8);
  if (Status s = w->append(header); !s.ok()) return s;
  return w;
}

Status KeyGroupWriter::append(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t n = std::min(bytes.size(), buf_.cap - buf_.used);
    std::memcpy(buf_.data.get() + buf_.used, bytes.data(), n);
    buf_.used += n;
    bytes.remove_prefix(n);
    if (Status s = flushIfLarge(false); !s.ok()) return s;
  }
  return Status::OK();
}

Status KeyGroupWriter::flushIfLarge(bool force) {
  if (!force) return buf_.used < kFlushThreshold ? Status::OK() : handOver();
  if (Status s = closePipe(); !s.ok()) return s;  // every earlier buffer written, in order
  return writeHere();
}

Status KeyGroupWriter::writeHere() {
  hashPending();
  hashFrom_ = 0;  // the next bytes of the group start the emptied buffer
  if (buf_.used == 0) return Status::OK();
  Status s = file_->append(buf_.bytes());
  written_ += buf_.used;
  buf_.used = 0;
  return s;
}

Status KeyGroupWriter::handOver() {
  if (!pipe_ && !synchronous_) {
    pipe_ = std::make_unique<Pipe>();
    try {
      pipe_->pending.data.reset(new char[kBufferBytes]);
      pipe_->pending.cap = kBufferBytes;
      pipe_->thread = std::thread([this] { runPipe(); });
    } catch (const std::system_error&) {  // no thread to be had (EAGAIN): write on this one
      pipe_.reset();
      synchronous_ = true;
    }
  }
  if (synchronous_) return writeHere();
  hashPending();
  hashFrom_ = 0;
  Pipe& p = *pipe_;
  std::unique_lock<std::mutex> lock(p.mu);
  p.cv.wait(lock, [&] { return !p.hasPending; });
  if (!p.status.ok()) return p.status;
  written_ += buf_.used;
  std::swap(p.pending, buf_);  // buf_ gets the buffer the thread has written back
  buf_.used = 0;
  p.hasPending = true;
  p.cv.notify_all();
  return Status::OK();
}

void KeyGroupWriter::runPipe() {
  Pipe& p = *pipe_;
  Buffer mine;  // swapped with p.pending, under the lock, for each buffer handed over
  mine.data.reset(new char[kBufferBytes]);
  mine.cap = kBufferBytes;
  std::unique_lock<std::mutex> lock(p.mu);
  for (;;) {
    p.cv.wait(lock, [&] { return p.hasPending || p.closing; });
    if (!p.hasPending) return;  // closing, nothing left
    std::swap(mine, p.pending);
    p.pending.used = 0;
    p.hasPending = false;
    const bool failed = !p.status.ok();
    p.cv.notify_all();
    lock.unlock();
    Status s = failed ? Status::OK() : file_->append(mine.bytes());  // after a failure: drop the rest
    lock.lock();
    if (!s.ok() && p.status.ok()) p.status = std::move(s);
  }
}

Status KeyGroupWriter::closePipe() {
  if (!pipe_) return Status::OK();
  {
    std::lock_guard<std::mutex> lock(pipe_->mu);
    pipe_->closing = true;
    pipe_->cv.notify_all();
  }
  pipe_->thread.join();
  Status s = std::move(pipe_->status);
  pipe_.reset();
  return s;
}

KeyGroupWriter::~KeyGroupWriter() {
  if (!pipe_) return;
  {  // unfinished (aborted or failed): the file is discarded, so what waits is not written
    std::lock_guard<std::mutex> lock(pipe_->mu);
    pipe_->pending.used = 0;
    pipe_->hasPending = false;
  }
  (void)closePipe();
}

Status KeyGroupWriter::beginKeyGroup(int keyGroup) {
  if (keyGroup != next_ || !range_.contains(keyGroup))
    return Status::InvalidArgument("key group " + std::to_string(keyGroup) + " written out of order (expected " +
                                   std::to_string(next_) + ")");
  if (inGroup_)
    if (Status s = endGroup(); !s.ok()) return s;  // the previous group's end and checksum
  offsets_.push_back(written_ + buf_.used);
  XXH3_64bits_reset(&groupHash_->state);
  hashFrom_ = buf_.used;
  inGroup_ = true;
  ++next_;
  return Status::OK();
}

Status KeyGroupWriter::addSlow(int stateIndex, std::string_view key, std::string_view userKey,
                               std::string_view value) {
  if (!inGroup_ || stateIndex < 0 || static_cast<size_t>(stateIndex) >= kinds_.size())
    return Status::InvalidArgument("entry for state " + std::to_string(stateIndex) + " outside a key group");
  if (key.size() + userKey.size() + value.size() <= kSmallEntry) {  // small, but the buffer was full
    if (Status s = flushIfLarge(false); !s.ok()) return s;
    return add(stateIndex, key, userKey, value);
  }
  // A large entry: encoded as ByteWriter does, then copied in (possibly over several buffers).
  std::string entry;
  ByteWriter bw(entry);
  bw.writeVarint(static_cast<uint64_t>(stateIndex) + 1);
  bw.writeBytes(key);
  if (kinds_[static_cast<size_t>(stateIndex)] == StateKind::kMap) bw.writeBytes(userKey);
  bw.writeBytes(value);
  return append(entry);
}

Result<KeyGroupsStateHandle> KeyGroupWriter::finish() {
  while (next_ <= range_.end) {
    Status s = beginKeyGroup(next_);
    if (!s.ok()) return s;
  }
  if (inGroup_)
    if (Status s = endGroup(); !s.ok()) return s;
  if (Status s = flushIfLarge(true); !s.ok()) return s;
  if (Status s = file_->close(); !s.ok()) return s;
  KeyGroupsStateHandle h;
  h.file = {path_, written_};
  h.range = range_;
  h.offsets = std::move(offsets_);
  return h;
}

namespace {

// Reads the byte range [begin, end) of a file front to back in bounded chunks, as
// ByteReader reads a string: the same operations, positions relative to begin and the
// same SerializationError texts (so corruption messages do not depend on chunking).
// An entry is parsed as file offsets first and handed out as views once complete, so a
// refill in the middle of an entry cannot invalidate them; the buffer keeps the bytes
// from the start of the current entry (markEntry()) and grows beyond one chunk only for
// an entry larger than that.
class ChunkedRangeReader {
 public:
  ChunkedRangeReader(const ReadableFile& file, uint64_t begin, uint64_t end)
      : file_(file), begin_(begin), end_(end), bufStart_(begin), pos_(begin), mark_(begin) {}

  /// Position relative to begin.
  uint64_t position() const { return pos_ - begin_; }
  /// Bytes left in the range.
  uint64_t remaining() const { return end_ - pos_; }

  /// Starts a new entry: bytes before the current position may be dropped.
  void markEntry() { mark_ = pos_; }

  /// Checksums (format version 2): from now on, every byte consumed goes into the sum of
  /// the current group, until groupSum().
  void startGroupSum() {
    XXH3_64bits_reset(&hash_);
    hashFrom_ = pos_;
    hashing_ = true;
  }
  /// The sum of the bytes consumed since startGroupSum().
  uint64_t groupSum() {
    hashUpTo(pos_);
    hashing_ = false;
    return XXH3_64bits_digest(&hash_);
  }
  uint64_t readU64() { return getU64(raw(8)); }

  uint64_t readVarint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = static_cast<uint8_t>(*raw(1));
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw SerializationError("malformed varint");
  }

  /// Skips a length-prefixed byte string; returns its file offset and length, to be
  /// turned into a view with view() once the entry is complete.
  std::pair<uint64_t, size_t> readBytes() {
    uint64_t n = readVarint();
    if (n > remaining())
      throw SerializationError("length " + std::to_string(n) + " exceeds the " + std::to_string(remaining()) +
                               " bytes left");
    uint64_t at = pos_;
    raw(static_cast<size_t>(n));
    return {at, static_cast<size_t>(n)};
  }

  /// A view of bytes read since markEntry(); valid until the next read.
  std::string_view view(std::pair<uint64_t, size_t> span) const {
    return std::string_view(buf_).substr(static_cast<size_t>(span.first - bufStart_), span.second);
  }

  /// The storage error that ended a refill (the reader then throws RefillFailed).
  const Status& ioError() const { return ioError_; }
  struct RefillFailed {};

 private:
  // Consumes n bytes and returns a pointer to them (valid until the next refill).
  const char* raw(size_t n) {
    if (n > remaining())
      throw SerializationError("truncated data: need " + std::to_string(n) + " bytes, " +
                               std::to_string(remaining()) + " left");
    if (pos_ + n > bufStart_ + buf_.size()) refill(pos_ + n);
    const char* p = buf_.data() + (pos_ - bufStart_);
    pos_ += n;
    return p;
  }

  // Adds the consumed bytes [hashFrom_, upTo) to the group's sum (they are in buf_).
  void hashUpTo(uint64_t upTo) {
    if (!hashing_ || upTo <= hashFrom_) return;
    XXH3_64bits_update(&hash_, buf_.data() + (hashFrom_ - bufStart_), static_cast<size_t>(upTo - hashFrom_));
    hashFrom_ = upTo;
  }

  // Makes the buffer hold [mark_, upTo) at least, reading whole chunks.
  void refill(uint64_t upTo) {
    hashUpTo(mark_);  // the bytes about to be dropped
    buf_.erase(0, static_cast<size_t>(mark_ - bufStart_));
    bufStart_ = mark_;
    uint64_t bufEnd = bufStart_ + buf_.size();
    uint64_t want = std::max<uint64_t>(kKeyGroupReadChunkSize, upTo - bufEnd);
    want = std::min(want, end_ - bufEnd);
    if (Status s = file_.read(bufEnd, static_cast<size_t>(want), &chunk_); !s.ok()) {
      ioError_ = std::move(s);
      throw RefillFailed{};
    }
    buf_.append(chunk_);
  }

  const ReadableFile& file_;
  const uint64_t begin_, end_;
  std::string buf_;        // bytes [bufStart_, bufStart_ + buf_.size()) of the file
  uint64_t bufStart_;
  uint64_t pos_;           // next byte to parse
  uint64_t mark_;          // start of the current entry: kept across refills
  std::string chunk_;      // read target, reused
  Status ioError_;
  XXH3_state_t hash_;
  uint64_t hashFrom_ = 0;  // consumed bytes before this are in hash_
  bool hashing_ = false;
};

}  // namespace

Status readKeyGroups(CheckpointStorage& storage, const KeyGroupsStateHandle& handle,
                     const KeyGroupRange& wanted, std::vector<KeyGroupFileState>* states,
                     const std::function<Status(const KeyGroupEntry&)>& fn) {
  auto file = openSnapshotFile(storage, handle.file);
  if (!file.ok()) return file.status();
  return readKeyGroups(**file, storage.describe(handle.file.path), handle, wanted, states, fn);
}

Status readKeyGroups(const ReadableFile& file, const std::string& where, const KeyGroupsStateHandle& handle,
                     const KeyGroupRange& wanted, std::vector<KeyGroupFileState>* states,
                     const std::function<Status(const KeyGroupEntry&)>& fn) {
  auto corrupt = [&](const std::string& what) {
    return Status::Corruption("key-group file " + where + " is corrupt: " + what);
  };
  if (static_cast<int>(handle.offsets.size()) != handle.range.size())
    return corrupt("metadata lists " + std::to_string(handle.offsets.size()) + " offsets for " +
                   std::to_string(handle.range.size()) + " key groups");
  uint64_t size = file.size();
  if (Status s = checkSnapshotFileSize(where, handle.file, size); !s.ok()) return s;
  KeyGroupRange r = handle.range.intersect(wanted);
  // Header.
  std::string header;
  uint64_t headerEnd = handle.offsets.empty() ? size : handle.offsets.front();
  if (headerEnd > size) return corrupt("offset beyond end of file");
  if (Status s = file.read(0, static_cast<size_t>(headerEnd), &header); !s.ok()) return s;
  std::vector<StateKind> kinds;
  uint32_t version = 0;
  try {
    ByteReader hr(header);
    if (hr.readRaw(4) != std::string_view(kKeyGroupMagic, 4)) return corrupt("bad magic");
    version = hr.readFixed<uint32_t>();
    if (version > kKeyGroupFormatVersion)
      return Status::Incompatible("key-group file " + where + " has format version " + std::to_string(version) +
                                  ", this jobhost reads up to " + std::to_string(kKeyGroupFormatVersion));
    uint64_t n = hr.readVarint();
    if (n > 100000) return corrupt("implausible state count");
    states->clear();
    for (uint64_t i = 0; i < n; ++i) {
      std::string name(hr.readBytes());
      uint8_t k = hr.readU8();
      if (k > 2) return corrupt("unknown state kind " + std::to_string(k));
      kinds.push_back(static_cast<StateKind>(k));
      states->push_back({std::move(name), kinds.back()});
    }
    if (version >= 2) {
      const size_t summed = header.size() - hr.remaining();
      if (hr.remaining() < 8) return corrupt("the header's checksum is missing");
      const uint64_t recorded = getU64(hr.readRaw(8).data());
      if (recorded != XXH3_64bits(header.data(), summed)) return corrupt("the header's checksum does not match");
    }
  } catch (const SerializationError& e) {
    return corrupt(e.what());
  }
  if (r.empty()) return Status::OK();
  // Stream the wanted groups, one contiguous byte range, in bounded chunks.
  size_t first = static_cast<size_t>(r.start - handle.range.start);
  size_t last = static_cast<size_t>(r.end - handle.range.start);
  uint64_t begin = handle.offsets[first];
  uint64_t end = last + 1 < handle.offsets.size() ? handle.offsets[last + 1] : size;
  if (begin > end || end > size) return corrupt("key-group offsets out of order");
  ChunkedRangeReader br(file, begin, end);
  try {
    for (int kg = r.start; kg <= r.end; ++kg) {
      if (br.position() != handle.offsets[static_cast<size_t>(kg - handle.range.start)] - begin)
        return corrupt("key group " + std::to_string(kg) + " does not start at its recorded offset");
      if (version >= 2) br.startGroupSum();
      for (;;) {
        br.markEntry();
        uint64_t tag = br.readVarint();
        if (tag == 0) {
          if (version >= 2 && br.groupSum() != br.readU64())
            return corrupt("the checksum of key group " + std::to_string(kg) +
                           " does not match its bytes (damaged on disk or in transfer)");
          break;
        }
        if (tag > kinds.size()) return corrupt("entry for unknown state index " + std::to_string(tag - 1));
        auto key = br.readBytes();
        std::pair<uint64_t, size_t> userKey{0, 0};
        if (kinds[tag - 1] == StateKind::kMap) userKey = br.readBytes();
        auto value = br.readBytes();
        KeyGroupEntry e{static_cast<int>(tag - 1), kg, br.view(key), {}, br.view(value)};
        if (kinds[tag - 1] == StateKind::kMap) e.userKey = br.view(userKey);
        if (Status s = fn(e); !s.ok()) return s;
      }
    }
  } catch (const SerializationError& e) {
    return corrupt(e.what());
  } catch (const ChunkedRangeReader::RefillFailed&) {
    return br.ioError();
  }
  return Status::OK();
}

Status readKeyGroups(CheckpointStorage& storage, const KeyGroupsStateHandle& handle,
                     const KeyGroupRange& wanted, std::vector<std::string>* stateNames,
                     const std::function<Status(const KeyGroupEntry&)>& fn) {
  std::vector<KeyGroupFileState> states;
  bool named = false;
  auto nameStates = [&] {
    stateNames->clear();
    for (const auto& st : states) stateNames->push_back(st.name);
    named = true;
  };
  Status s = readKeyGroups(storage, handle, wanted, &states, [&](const KeyGroupEntry& e) {
    if (!named) nameStates();  // before the first callback, as promised
    return fn(e);
  });
  if (!named) nameStates();
  return s;
}

}  // namespace jobhost::state
