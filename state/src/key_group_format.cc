// Key-group file format: see jobhost/state/key_group_format.h.
#include "jobhost/state/key_group_format.h"

#include "jobhost/serializer.h"

namespace jobhost::state {
namespace {
constexpr char kMagic[4] = {'J', 'H', 'K', 'G'};
constexpr size_t kFlushThreshold = 1 << 20;
}  // namespace

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
  ByteWriter bw(w->buffer_);
  bw.writeRaw(kMagic, 4);
  bw.writeFixed<uint32_t>(kKeyGroupFormatVersion);
  bw.writeVarint(states.size());
  for (const auto& s : states) {
    bw.writeBytes(s.name);
    bw.writeU8(static_cast<uint8_t>(s.kind));
    w->kinds_.push_back(s.kind);
  }
  return w;
}

Status KeyGroupWriter::flushIfLarge(bool force) {
  if (buffer_.empty() || (!force && buffer_.size() < kFlushThreshold)) return Status::OK();
  Status s = file_->append(buffer_);
  written_ += buffer_.size();
  buffer_.clear();
  return s;
}

Status KeyGroupWriter::beginKeyGroup(int keyGroup) {
  if (keyGroup != next_ || !range_.contains(keyGroup))
    return Status::InvalidArgument("key group " + std::to_string(keyGroup) + " written out of order (expected " +
                                   std::to_string(next_) + ")");
  ByteWriter bw(buffer_);
  if (inGroup_) bw.writeVarint(0);
  offsets_.push_back(written_ + buffer_.size());
  inGroup_ = true;
  ++next_;
  return flushIfLarge(false);
}

Status KeyGroupWriter::add(int stateIndex, std::string_view key, std::string_view userKey,
                           std::string_view value) {
  if (!inGroup_ || stateIndex < 0 || static_cast<size_t>(stateIndex) >= kinds_.size())
    return Status::InvalidArgument("entry for state " + std::to_string(stateIndex) + " outside a key group");
  ByteWriter bw(buffer_);
  bw.writeVarint(static_cast<uint64_t>(stateIndex) + 1);
  bw.writeBytes(key);
  if (kinds_[static_cast<size_t>(stateIndex)] == StateKind::kMap) bw.writeBytes(userKey);
  bw.writeBytes(value);
  return flushIfLarge(false);
}

Result<KeyGroupsStateHandle> KeyGroupWriter::finish() {
  while (next_ <= range_.end) {
    Status s = beginKeyGroup(next_);
    if (!s.ok()) return s;
  }
  if (inGroup_) {
    ByteWriter bw(buffer_);
    bw.writeVarint(0);
    inGroup_ = false;
  }
  if (Status s = flushIfLarge(true); !s.ok()) return s;
  if (Status s = file_->close(); !s.ok()) return s;
  KeyGroupsStateHandle h;
  h.file = {path_, written_};
  h.range = range_;
  h.offsets = std::move(offsets_);
  return h;
}

Status readKeyGroups(CheckpointStorage& storage, const KeyGroupsStateHandle& handle,
                     const KeyGroupRange& wanted, std::vector<std::string>* stateNames,
                     const std::function<Status(const KeyGroupEntry&)>& fn) {
  const std::string where = storage.describe(handle.file.path);
  auto corrupt = [&](const std::string& what) {
    return Status::Corruption("key-group file " + where + " is corrupt: " + what);
  };
  if (static_cast<int>(handle.offsets.size()) != handle.range.size())
    return corrupt("metadata lists " + std::to_string(handle.offsets.size()) + " offsets for " +
                   std::to_string(handle.range.size()) + " key groups");
  auto file = storage.open(handle.file.path);
  if (!file.ok()) return file.status();
  uint64_t size = (*file)->size();
  if (size != handle.file.size)
    return Status::Corruption("key-group file " + where + " has " + std::to_string(size) + " bytes, metadata says " +
                              std::to_string(handle.file.size) + " (truncated or replaced)");
  KeyGroupRange r = handle.range.intersect(wanted);
  // Header.
  std::string header;
  uint64_t headerEnd = handle.offsets.empty() ? size : handle.offsets.front();
  if (headerEnd > size) return corrupt("offset beyond end of file");
  if (Status s = (*file)->read(0, static_cast<size_t>(headerEnd), &header); !s.ok()) return s;
  std::vector<StateKind> kinds;
  try {
    ByteReader hr(header);
    if (hr.readRaw(4) != std::string_view(kMagic, 4)) return corrupt("bad magic");
    uint32_t version = hr.readFixed<uint32_t>();
    if (version > kKeyGroupFormatVersion)
      return Status::Incompatible("key-group file " + where + " has format version " + std::to_string(version) +
                                  ", this jobhost reads up to " + std::to_string(kKeyGroupFormatVersion));
    uint64_t n = hr.readVarint();
    if (n > 100000) return corrupt("implausible state count");
    stateNames->clear();
    for (uint64_t i = 0; i < n; ++i) {
      stateNames->emplace_back(hr.readBytes());
      uint8_t k = hr.readU8();
      if (k > 2) return corrupt("unknown state kind " + std::to_string(k));
      kinds.push_back(static_cast<StateKind>(k));
    }
  } catch (const SerializationError& e) {
    return corrupt(e.what());
  }
  if (r.empty()) return Status::OK();
  // Read the wanted groups as one contiguous byte range.
  size_t first = static_cast<size_t>(r.start - handle.range.start);
  size_t last = static_cast<size_t>(r.end - handle.range.start);
  uint64_t begin = handle.offsets[first];
  uint64_t end = last + 1 < handle.offsets.size() ? handle.offsets[last + 1] : size;
  if (begin > end || end > size) return corrupt("key-group offsets out of order");
  std::string data;
  if (Status s = (*file)->read(begin, static_cast<size_t>(end - begin), &data); !s.ok()) return s;
  try {
    ByteReader br(data);
    for (int kg = r.start; kg <= r.end; ++kg) {
      if (br.position() != handle.offsets[static_cast<size_t>(kg - handle.range.start)] - begin)
        return corrupt("key group " + std::to_string(kg) + " does not start at its recorded offset");
      for (;;) {
        uint64_t tag = br.readVarint();
        if (tag == 0) break;
        if (tag > kinds.size()) return corrupt("entry for unknown state index " + std::to_string(tag - 1));
        KeyGroupEntry e{static_cast<int>(tag - 1), kg, br.readBytes(), {}, {}};
        if (kinds[tag - 1] == StateKind::kMap) e.userKey = br.readBytes();
        e.value = br.readBytes();
        if (Status s = fn(e); !s.ok()) return s;
      }
    }
  } catch (const SerializationError& e) {
    return corrupt(e.what());
  }
  return Status::OK();
}

}  // namespace jobhost::state
