// keygroup_fuzz.cc — libFuzzer target for readKeyGroups(), the key-group file reader
// (hashmap snapshots, rocksdb full snapshots, canonical savepoints).
//
// A restore reads key-group files named by `_metadata`; both can be damaged, so the
// reader must return Corruption (naming the file) for any bytes and any offsets — never
// crash or read out of range. The fuzz input carries the handle as well as the file:
//
//   input := u8 rangeStart  u8 nGroups  u8 wantedStart  u8 wantedEnd
//            u32le offset * nGroups                          -- the handle's offsets
//            file bytes                                      -- the .kg file itself
//
// handle.range = [rangeStart, rangeStart + nGroups - 1], handle.file.size = the file's
// length; the file is served from an in-memory CheckpointStorage. Seeds
// (tests/fuzz/corpus/keygroup/) are real .kg files from checkpoints and a canonical
// savepoint, with their real offsets, made by tests/fuzz/make_keygroup_seed.py.
//
// Invariants checked beyond "no crash": every entry has a known state index and a key
// group in handle.range ∩ wanted, groups come in order, and an error carries a message.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/key_group_format.h"

namespace {

using namespace jobhost::state;

/// Read-only storage with one file in memory.
class MemoryStorage final : public CheckpointStorage {
 public:
  MemoryStorage(std::string path, std::string_view bytes) : path_(std::move(path)), bytes_(bytes) {}

  Result<std::unique_ptr<WritableFile>> create(const std::string&) override { return readOnly(); }
  Status putFile(const std::string&, const std::string&) override { return readOnly(); }
  Status put(const std::string&, std::string_view) override { return readOnly(); }
  Result<std::unique_ptr<ReadableFile>> open(const std::string& path) override {
    if (path != path_) return Status::NotFound("no file " + path);
    return std::unique_ptr<ReadableFile>(new File(bytes_));
  }
  Status get(const std::string& path, std::string* out) override {
    if (path != path_) return Status::NotFound("no file " + path);
    out->assign(bytes_);
    return Status::OK();
  }
  Status getToLocalFile(const std::string&, const std::string&) override { return readOnly(); }
  Result<uint64_t> fileSize(const std::string& path) override {
    if (path != path_) return Status::NotFound("no file " + path);
    return static_cast<uint64_t>(bytes_.size());
  }
  bool exists(const std::string& path) override { return path == path_; }
  Status list(const std::string&, std::vector<FileEntry>* out) override {
    *out = {{path_, bytes_.size()}};
    return Status::OK();
  }
  Status listTemporary(const std::string&, std::vector<FileEntry>* out) override {
    out->clear();
    return Status::OK();
  }
  Status remove(const std::string&) override { return readOnly(); }
  Status removeTemporary(const std::string&) override { return readOnly(); }
  Status removeAll(const std::string&) override { return readOnly(); }
  std::string describe(const std::string& path) const override { return "mem:///" + path; }
  std::string rootUri() const override { return "mem:///"; }

 private:
  class File final : public ReadableFile {
   public:
    explicit File(std::string_view bytes) : bytes_(bytes) {}
    uint64_t size() const override { return bytes_.size(); }
    Status read(uint64_t offset, size_t n, std::string* out) const override {
      if (offset > bytes_.size() || n > bytes_.size() - offset) return Status::Corruption("truncated read");
      // A copy of exactly the bytes asked for, so ASan sees any overrun past them.
      out->assign(bytes_.substr(static_cast<size_t>(offset), n));
      return Status::OK();
    }

   private:
    std::string_view bytes_;
  };
  static Status readOnly() { return Status::PermissionDenied("read-only fuzz storage"); }

  std::string path_;
  std::string_view bytes_;
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "keygroup_fuzz invariant violated: %s\n", what);
  std::abort();
}

volatile unsigned g_sink = 0;

uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const int rangeStart = data[0], nGroups = data[1], wantedStart = data[2], wantedEnd = data[3];
  size_t pos = 4;
  if (size - pos < size_t(nGroups) * 4) return 0;
  KeyGroupsStateHandle handle;
  handle.range = {rangeStart, rangeStart + nGroups - 1};
  for (int i = 0; i < nGroups; ++i, pos += 4) handle.offsets.push_back(le32(data + pos));
  // A view of libFuzzer's exactly-sized buffer: a read past the file's end is caught.
  const std::string_view file(reinterpret_cast<const char*>(data + pos), size - pos);
  handle.file = {"job-1/chk-7/counts-0.kg", file.size()};
  MemoryStorage storage(handle.file.path, file);

  const KeyGroupRange wanted{wantedStart, wantedEnd};
  const KeyGroupRange expected = handle.range.intersect(wanted);
  std::vector<std::string> names;
  int lastGroup = -1;
  Status s = readKeyGroups(storage, handle, wanted, &names, [&](const KeyGroupEntry& e) -> Status {
    if (e.stateIndex < 0 || static_cast<size_t>(e.stateIndex) >= names.size()) fail("entry for an unknown state");
    if (!expected.contains(e.keyGroup)) fail("entry outside handle.range and wanted");
    if (e.keyGroup < lastGroup) fail("key groups out of order");
    lastGroup = e.keyGroup;
    // Touch every byte handed out: the views must point into live memory.
    unsigned sum = 0;
    for (std::string_view v : {e.key, e.userKey, e.value})
      for (char c : v) sum += static_cast<unsigned char>(c);
    g_sink = sum;
    return Status::OK();
  });
  if (!s.ok() && s.message().empty()) fail("error without a message");
  return 0;
}
