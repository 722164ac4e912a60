// Unit tests of how the backends classify restore errors (state/src/restore_status.h):
// a file the snapshot references but that is gone is Corruption of the snapshot, naming
// the file (final: no restart can bring it back); a failing read or a full local disk
// keeps its I/O code (a task failure the restart strategy retries), naming the file and
// the OS reason.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/keyed_backend.h"
#include "support/fault_injection.h"
#include "../support/contains.h"

namespace jobhost::state {
namespace {

namespace fs = std::filesystem;
using testing::FaultInjectionStorage;
using testing::StorageOp;

StateDescriptorInfo countState() {
  StateDescriptorInfo d;
  d.name = "count";
  d.kind = StateKind::kValue;
  d.keySerializer = "string";
  d.keySerializerVersion = 1;
  d.valueSerializer = "i64";
  d.valueSerializerVersion = 1;
  return d;
}

enum class Writer { kHeap, kRocksDbFull, kRocksDbIncremental };

class RestoreErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() / ("jobhost-restore-errors-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    auto st = openStorage((root_ / "ckpt").string());
    ASSERT_TRUE(st.ok()) << st.status();
    storage_ = std::make_shared<FaultInjectionStorage>(std::shared_ptr<CheckpointStorage>(std::move(st).value()));
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  BackendOptions options(const std::string& dir, bool incremental) {
    BackendOptions o;
    o.operatorUid = "counts";
    o.maxParallelism = 128;
    o.range = {0, 127};
    o.incremental = incremental;
    o.localDir = (root_ / dir).string();
    return o;
  }

  /// A snapshot of 200 keys written by `writer`, as a restore gets it.
  RestoreInput snapshot(Writer writer) {
    bool rocks = writer != Writer::kHeap;
    bool incremental = writer == Writer::kRocksDbIncremental;
    auto b = rocks ? createRocksDbBackend(options("writer", incremental)) : createHeapBackend(options("writer", false));
    EXPECT_TRUE(b.ok()) << b.status();
    int s = (*b)->registerState(countState());
    for (int i = 0; i < 200; ++i) {
      (*b)->setCurrentKey(i % 128, "key-" + std::to_string(i));
      (*b)->put(s, std::string(8, static_cast<char>(i)));
    }
    SnapshotRequest req;
    req.checkpointId = 1;
    req.storage = storage_.get();
    req.exclusiveDir = "job/chk-1";
    req.sharedDir = incremental ? "job/shared" : "";
    req.filePrefix = "counts-0";
    auto async = (*b)->snapshotSync(req);
    EXPECT_TRUE(async.ok()) << async.status();
    auto handle = (*async)->run();
    EXPECT_TRUE(handle.ok()) << handle.status();
    RestoreInput in;
    in.storage = storage_.get();
    in.handles = {*handle};
    in.states = {countState()};
    return in;
  }

  /// The snapshot's first file: the key-group file, or the first shared SST.
  static std::string firstFile(const RestoreInput& in) { return referencedFiles(in.handles[0]).front().path; }

  Status restore(Writer into, const RestoreInput& in) {
    auto b = into == Writer::kHeap ? createHeapBackend(options("reader", false))
                                   : createRocksDbBackend(options("reader", into == Writer::kRocksDbIncremental));
    if (!b.ok()) return b.status();
    return (*b)->restore(in);
  }

  fs::path root_;
  std::shared_ptr<FaultInjectionStorage> storage_;
};

struct Case {
  std::string what;
  Writer writer;
  std::function<void(RestoreErrorsTest&, FaultInjectionStorage&, const std::string& file)> damage;
  Status::Code code;
  std::vector<std::string> mentions;  // "<file>": the described path of the damaged file
};

TEST_F(RestoreErrorsTest, AMissingSnapshotFileIsCorruptionAndAFailingReadOrFullDiskKeepsItsCode) {
  auto removeFile = [](RestoreErrorsTest&, FaultInjectionStorage& st, const std::string& file) {
    ASSERT_TRUE(st.remove(file).ok());
  };
  // On the file the message must name: restores download in parallel, so "the first get"
  // may be any file's.
  auto fail = [](StorageOp op, int err) {
    return [op, err](RestoreErrorsTest&, FaultInjectionStorage& st, const std::string& file) { st.failOn(op, file, err); };
  };
  const std::vector<Case> cases = {
      {"heap: the key-group file is gone", Writer::kHeap, removeFile, Status::Code::kCorruption,
       {"<file>", "does not exist", "_metadata references", "restore from another checkpoint"}},
      {"rocksdb full: the key-group file is gone", Writer::kRocksDbFull, removeFile, Status::Code::kCorruption,
       {"<file>", "does not exist"}},
      {"rocksdb incremental: a shared SST is gone", Writer::kRocksDbIncremental, removeFile,
       Status::Code::kCorruption, {"<file>", "does not exist"}},
      {"heap: reading the key-group file fails", Writer::kHeap, fail(StorageOp::kOpen, EIO), Status::Code::kUnavailable,
       {"<file>", "Input/output error"}},
      {"rocksdb incremental: downloading an SST fails", Writer::kRocksDbIncremental, fail(StorageOp::kGet, EIO),
       Status::Code::kUnavailable, {"<file>", "Input/output error"}},
      {"rocksdb incremental: the local disk is full", Writer::kRocksDbIncremental, fail(StorageOp::kGet, ENOSPC),
       Status::Code::kNoSpace, {"No space left on device"}},
      {"rocksdb incremental: the snapshot cannot be read", Writer::kRocksDbIncremental,
       fail(StorageOp::kGet, EACCES), Status::Code::kPermissionDenied, {"<file>", "Permission denied"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    TearDown();
    SetUp();
    RestoreInput in = snapshot(c.writer);
    const std::string file = firstFile(in);
    c.damage(*this, *storage_, file);
    Status s = restore(c.writer, in);
    EXPECT_EQ(s.code(), c.code) << s;
    for (std::string m : c.mentions) {
      if (auto p = m.find("<file>"); p != std::string::npos) m.replace(p, 6, storage_->describe(file));
      EXPECT_TRUE(contains(s.message(), m)) << "expected '" << m << "' in: " << s;
    }
  }
}

}  // namespace
}  // namespace jobhost::state
