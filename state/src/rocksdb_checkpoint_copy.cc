// A rocksdb incremental checkpoint opened read-only: see rocksdb_checkpoint_copy.h.
#include "rocksdb_checkpoint_copy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>

#include <cerrno>
#include <filesystem>
#include <set>

#include "jobhost/state/snapshot_file.h"
#include "rocksdb_backend.h"

namespace jobhost::state {

namespace fs = std::filesystem;
namespace layout = rocksdb_layout;

namespace {
constexpr size_t kCopyChunk = 1 << 20;

/// Copies an opened snapshot file to a new local file (O_EXCL: never overwrites).
Status copyToLocal(const ReadableFile& src, const std::string& where, const std::string& dest) {
  int fd = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return fromErrno("cannot create " + dest, errno);
  std::string chunk;
  Status s;
  for (uint64_t off = 0; off < src.size() && s.ok(); off += chunk.size()) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(kCopyChunk, src.size() - off));
    s = src.read(off, n, &chunk);
    for (size_t done = 0; s.ok() && done < chunk.size();) {
      ssize_t w = ::write(fd, chunk.data() + done, chunk.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) s = fromErrno("cannot write " + dest + " (copy of " + where + ")", errno);
      else done += static_cast<size_t>(w);
    }
  }
  ::close(fd);
  return s;
}
}  // namespace

Result<std::unique_ptr<RocksCheckpointCopy>> RocksCheckpointCopy::open(CheckpointStorage& storage,
                                                                       const IncrementalStateHandle& h,
                                                                       const std::vector<const ReadableFile*>& files,
                                                                       const std::string& dir) {
  std::unique_ptr<RocksCheckpointCopy> c(new RocksCheckpointCopy());
  c->what_ = "rocksdb checkpoint " + std::to_string(h.checkpointId);
  if (::mkdir(dir.c_str(), 0700) != 0) return fromErrno("cannot create " + dir, errno);
  c->dir_ = dir;  // from here on the destructor removes it
  std::vector<const SharedFileRef*> refs;
  for (const auto& f : h.sharedFiles) refs.push_back(&f);
  for (const auto& f : h.privateFiles) refs.push_back(&f);
  if (refs.size() != files.size()) return Status::InvalidArgument(c->what_ + ": file count mismatch");
  std::set<std::string> seen;
  for (size_t i = 0; i < refs.size(); ++i) {
    const SharedFileRef& f = *refs[i];
    const std::string where = storage.describe(f.file.path);
    if (f.localName.empty() || f.localName == "." || f.localName == ".." ||
        f.localName.find('/') != std::string::npos || !seen.insert(f.localName).second)
      return Status::Corruption(c->what_ + ": invalid or duplicate local file name '" + f.localName + "' for " + where);
    if (Status s = checkSnapshotFileSize(where, f.file, files[i]->size()); !s.ok())
      return Status::Corruption(c->what_ + ": " + s.message());
    if (Status s = copyToLocal(*files[i], where, dir + "/" + f.localName); !s.ok()) return s;
  }
  c->stateNames_ = h.columnFamilies;
  Status s = openRocksDbReadOnly(dir, h.columnFamilies, &c->db_, &c->handles_);
  if (!s.ok()) {
    // RocksDB names the local copy; say which snapshot file that is.
    std::string msg = s.message();
    for (const auto* f : refs)
      if (msg.find("/" + f->localName) != std::string::npos)
        msg += "; the snapshot file: " + storage.describe(f->file.path);
    if (s.isNotFound()) return Status::Corruption(c->what_ + ": its files do not form a complete RocksDB instance (" + msg + ")");
    if (s.isCorruption()) return Status::Corruption(msg);
    return Status::IOError(msg);
  }
  return c;
}

RocksCheckpointCopy::~RocksCheckpointCopy() {
  closeRocksDb(db_, &handles_);
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

Status RocksCheckpointCopy::scan(size_t cf, int kg, bool isMap, const EntryFn& fn) {
  std::string lower, upper;
  layout::appendKeyGroup(&lower, kg);
  layout::appendKeyGroup(&upper, kg + 1);
  rocksdb::Slice lowerSlice(lower), upperSlice(upper);
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.iterate_lower_bound = &lowerSlice;
  if (kg + 1 <= 0xffff) ro.iterate_upper_bound = &upperSlice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, handles_.at(cf + 1)));
  const std::string& state = stateNames_.at(cf);
  for (it->Seek(lower); it->Valid(); it->Next()) {
    std::string_view k(it->key().data(), it->key().size());
    std::string_view v(it->value().data(), it->value().size());
    if (k.size() < 2 || layout::decodeKeyGroup(k) != kg)
      return Status::Corruption(what_ + ": state '" + state + "' holds a key outside key group " + std::to_string(kg));
    Status s;
    if (isMap) {
      std::string_view key, userKey;
      if (!layout::decodeMapKey(k, &key, &userKey))
        return Status::Corruption(what_ + ": state '" + state + "' holds a malformed map key");
      s = fn(key, userKey, v);
    } else {
      s = fn(k.substr(2), {}, v);
    }
    if (!s.ok()) return s;
  }
  if (!it->status().ok()) {
    const auto& rs = it->status();
    std::string msg = what_ + ": scan of state '" + state + "': rocksdb: " + rs.ToString();
    return rs.IsCorruption() ? Status::Corruption(msg) : Status::IOError(msg);
  }
  return Status::OK();
}

}  // namespace jobhost::state
