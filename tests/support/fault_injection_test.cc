// Tests of the fault injection used by other tests (fault_injection.h): the faults fire
// where they are told to, surface through LocalFileStorage with the usual messages, and a
// simulated power loss keeps exactly what was made durable.
//
// Every test runs against a fresh directory under $TMPDIR (or /tmp).
#include "support/fault_injection.h"
#include "contains.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace jobhost::testing {
namespace {

namespace fs = std::filesystem;
using state::CheckpointStorage;
using state::FileEntry;
using state::FileSystem;
using state::FsWritableFile;
using state::Status;

#define ASSERT_OK(expr)                                       \
  do {                                                        \
    const ::jobhost::state::Status s_ = (expr);               \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.toString();   \
  } while (0)

std::string readLocal(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every non-directory entry under dir, relative, including hidden temporary files.
std::set<std::string> rawFiles(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory()) out.insert(fs::relative(it->path(), dir).string());
  }
  return out;
}

class FaultInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                       "/jobhost-fault-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    base_ = tmpl;
    root_ = base_ + "/root";
    fs_ = std::make_shared<FaultInjectionFileSystem>();
    reopen();
  }

  void TearDown() override {
    storage_.reset();
    std::error_code ec;
    fs::remove_all(base_, ec);
  }

  void reopen() {
    auto opened = state::openStorage(root_, fs_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    storage_ = std::move(opened).value();
  }

  // A power loss while nothing of the storage is in use, then a fresh storage object.
  void powerLoss() {
    fs_->setFilesystemActive(false);
    storage_.reset();
    ASSERT_OK(fs_->dropUnsyncedData());
    reopen();
  }

  // Writes path directly through the file system; syncs the data if syncData.
  void writeDirect(const std::string& path, const std::string& bytes, bool syncData) {
    std::unique_ptr<FsWritableFile> f;
    ASSERT_EQ(fs_->newWritableFile(path, FileSystem::CreateMode::kExclusive, &f), 0);
    ASSERT_EQ(f->append(bytes), 0);
    if (syncData) {
      ASSERT_EQ(f->sync(), 0);
    }
    ASSERT_EQ(f->close(), 0);
  }

  std::vector<FileEntry> listOrDie(const std::string& prefix) {
    std::vector<FileEntry> out;
    Status s = storage_->list(prefix, &out);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  std::string base_;
  std::string root_;
  std::shared_ptr<FaultInjectionFileSystem> fs_;
  std::unique_ptr<CheckpointStorage> storage_;
};

TEST_F(FaultInjectionTest, StorageOpenedWithAFileSystemDoesItsIoThroughIt) {
  ASSERT_OK(storage_->put("job/chk-1/_metadata", "m"));
  std::string out;
  ASSERT_OK(storage_->get("job/chk-1/_metadata", &out));
  EXPECT_EQ(out, "m");
  EXPECT_EQ(listOrDie("job").size(), 1u);
  for (FsOp op : {FsOp::kOpen, FsOp::kWrite, FsOp::kSync, FsOp::kClose, FsOp::kRename, FsOp::kSyncDir,
                  FsOp::kMkdir, FsOp::kRead, FsOp::kList, FsOp::kStat}) {
    EXPECT_GT(fs_->count(op), 0u) << fsOpName(op);
  }
  EXPECT_EQ(fs_->count(FsOp::kUnlink), 0u);
}

TEST_F(FaultInjectionTest, AnFsyncFailureMakesAPutFailAndLeavesNoVisibleFile) {
  fs_->failNth(FsOp::kSync, 1, EIO);
  Status s = storage_->put("job/chk-1/_metadata", "m");
  EXPECT_TRUE(s.isUnavailable()) << s;  // EIO: try again later (status.h)
  EXPECT_TRUE(contains(s.message(), "cannot sync " + root_ + "/job/chk-1/_metadata")) << s;
  EXPECT_TRUE(contains(s.message(), std::strerror(EIO))) << s;
  EXPECT_FALSE(storage_->exists("job/chk-1/_metadata"));
  EXPECT_TRUE(listOrDie("").empty());
  EXPECT_TRUE(rawFiles(root_).empty()) << "the temporary file must be discarded";
  // The rule fired once: the next put works.
  ASSERT_OK(storage_->put("job/chk-1/_metadata", "m"));
}

TEST_F(FaultInjectionTest, AnEnospcOnWriteSurfacesAsNoSpaceWithThePath) {
  fs_->failNth(FsOp::kWrite, 1, ENOSPC);
  Status s = storage_->put("job/chk-2/counts-0.kg", std::string(100, 'x'));
  EXPECT_TRUE(s.isNoSpace()) << s;
  EXPECT_TRUE(contains(s.message(), "cannot write " + root_ + "/job/chk-2/counts-0.kg")) << s;
  EXPECT_TRUE(contains(s.message(), "No space left on device")) << s;
  EXPECT_TRUE(rawFiles(root_).empty());
}

TEST_F(FaultInjectionTest, AnEnospcWhileUploadingALocalFileIsNoSpaceToo) {
  const std::string local = base_ + "/000012.sst";
  std::ofstream(local) << std::string(5000, 's');
  fs_->failNth(FsOp::kWrite, 1, ENOSPC);
  Status s = storage_->putFile("job/shared/000012.sst", local);
  EXPECT_TRUE(s.isNoSpace()) << s;
  EXPECT_TRUE(contains(s.message(), root_ + "/job/shared/000012.sst")) << s;
  EXPECT_FALSE(storage_->exists("job/shared/000012.sst"));
}

TEST_F(FaultInjectionTest, TheNthOperationIsCountedFromWhenTheRuleIsSet) {
  ASSERT_OK(storage_->put("a", "1"));
  ASSERT_OK(storage_->put("b", "2"));
  const uint64_t renamesBefore = fs_->count(FsOp::kRename);
  fs_->failNth(FsOp::kRename, 2, EIO);
  ASSERT_OK(storage_->put("c", "3"));
  Status s = storage_->put("d", "4");
  EXPECT_TRUE(s.isUnavailable()) << s;  // EIO: try again later (status.h)
  EXPECT_TRUE(contains(s.message(), "cannot publish " + root_ + "/d")) << s;
  ASSERT_OK(storage_->put("e", "5"));
  EXPECT_EQ(fs_->count(FsOp::kRename), renamesBefore + 3);
  EXPECT_EQ(listOrDie(""), (std::vector<FileEntry>{{"a", 1}, {"b", 1}, {"c", 1}, {"e", 1}}));
}

TEST_F(FaultInjectionTest, ReadListAndRemoveFaultsReachTheCaller) {
  ASSERT_OK(storage_->put("d/f", "data"));
  fs_->failNth(FsOp::kRead, 1, EIO);
  std::string out;
  Status read = storage_->get("d/f", &out);
  EXPECT_TRUE(read.isUnavailable()) << read;
  EXPECT_TRUE(contains(read.message(), "cannot read " + root_ + "/d/f")) << read;

  fs_->failNth(FsOp::kList, 1, EACCES);
  std::vector<FileEntry> entries;
  Status list = storage_->list("d", &entries);
  EXPECT_TRUE(list.isPermissionDenied()) << list;
  EXPECT_TRUE(contains(list.message(), "cannot list " + root_ + "/d")) << list;

  fs_->failNth(FsOp::kUnlink, 1, EIO);
  Status remove = storage_->remove("d/f");
  EXPECT_TRUE(remove.isUnavailable()) << remove;
  EXPECT_TRUE(storage_->exists("d/f"));

  fs_->failNth(FsOp::kMkdir, 1, ENOSPC);
  Status mkdir = storage_->put("new/f", "x");
  EXPECT_TRUE(mkdir.isNoSpace()) << mkdir;
  EXPECT_TRUE(contains(mkdir.message(), "cannot create directory " + root_ + "/new")) << mkdir;

  fs_->failNth(FsOp::kSyncDir, 1, EIO);
  Status syncDir = storage_->put("d/g", "x");
  EXPECT_TRUE(syncDir.isUnavailable()) << syncDir;
  EXPECT_FALSE(storage_->exists("d/g")) << "a file whose directory entry is not durable is withdrawn";
}

TEST_F(FaultInjectionTest, RandomFaultsAreTheSameForTheSameSeed) {
  auto run = [&](uint64_t seed) {
    fs_->failRandomly(FsOp::kSync, 0.5, EIO, seed);
    std::string failed;
    for (int i = 0; i < 40; ++i) {
      failed += storage_->put("f-" + std::to_string(i), "x").ok() ? '.' : 'F';
    }
    fs_->clearFaults();
    return failed;
  };
  const std::string first = run(7);
  EXPECT_NE(first.find('F'), std::string::npos) << first;
  EXPECT_NE(first.find('.'), std::string::npos) << first;
  ASSERT_OK(storage_->removeAll(""));
  EXPECT_EQ(run(7), first);
}

TEST_F(FaultInjectionTest, AFilePublishedThroughStorageSurvivesAPowerLossWithItsContent) {
  ASSERT_OK(storage_->put("job/chk-1/_metadata", "complete checkpoint"));
  powerLoss();
  std::string out;
  ASSERT_OK(storage_->get("job/chk-1/_metadata", &out));
  EXPECT_EQ(out, "complete checkpoint");
  EXPECT_EQ(rawFiles(root_), (std::set<std::string>{"job/chk-1/_metadata"}));
}

TEST_F(FaultInjectionTest, AFileWhoseDirectoryWasNotSyncedDisappearsInAPowerLoss) {
  ASSERT_OK(storage_->put("dir/durable", "kept"));  // creates and syncs dir
  writeDirect(root_ + "/dir/synced-entry", "synced", /*syncData=*/true);
  ASSERT_EQ(fs_->syncDir(root_ + "/dir"), 0);
  // A publish that forgets the directory sync.
  writeDirect(root_ + "/dir/unsynced-entry", "data synced, entry not", /*syncData=*/true);
  writeDirect(root_ + "/dir/nothing-synced", "neither", /*syncData=*/false);
  powerLoss();
  EXPECT_EQ(rawFiles(root_), (std::set<std::string>{"dir/durable", "dir/synced-entry"}));
  EXPECT_EQ(readLocal(root_ + "/dir/synced-entry"), "synced");
}

TEST_F(FaultInjectionTest, BytesWrittenAfterTheLastFsyncAreLostInAPowerLoss) {
  ASSERT_OK(storage_->put("dir/x", "x"));
  std::unique_ptr<FsWritableFile> f;
  ASSERT_EQ(fs_->newWritableFile(root_ + "/dir/log", FileSystem::CreateMode::kExclusive, &f), 0);
  ASSERT_EQ(fs_->syncDir(root_ + "/dir"), 0);
  ASSERT_EQ(f->append("synced;"), 0);
  ASSERT_EQ(f->sync(), 0);
  ASSERT_EQ(f->append("not synced"), 0);
  ASSERT_EQ(f->close(), 0);
  EXPECT_EQ(readLocal(root_ + "/dir/log"), "synced;not synced");
  powerLoss();
  EXPECT_EQ(readLocal(root_ + "/dir/log"), "synced;");
}

TEST_F(FaultInjectionTest, ARenameOrUnlinkNotMadeDurableIsUndoneByAPowerLoss) {
  ASSERT_OK(storage_->put("dir/a", "A"));
  ASSERT_OK(storage_->put("dir/b", "B"));
  ASSERT_EQ(fs_->renameNoReplace(root_ + "/dir/a", root_ + "/dir/renamed"), 0);
  ASSERT_EQ(fs_->unlink(root_ + "/dir/b"), 0);
  EXPECT_EQ(rawFiles(root_), (std::set<std::string>{"dir/renamed"}));
  powerLoss();
  EXPECT_EQ(rawFiles(root_), (std::set<std::string>{"dir/a", "dir/b"}));
  EXPECT_EQ(readLocal(root_ + "/dir/a"), "A");
  EXPECT_EQ(readLocal(root_ + "/dir/b"), "B");
}

TEST_F(FaultInjectionTest, ARemoveThroughStorageIsDurable) {
  ASSERT_OK(storage_->put("dir/a", "A"));
  ASSERT_OK(storage_->put("dir/b", "B"));
  ASSERT_OK(storage_->remove("dir/a"));
  ASSERT_OK(storage_->removeAll("dir"));
  powerLoss();
  EXPECT_TRUE(rawFiles(root_).empty());
  EXPECT_FALSE(fs::exists(root_ + "/dir"));
}

TEST_F(FaultInjectionTest, ADirectoryRemovedWithoutSyncingItsParentComesBackWithItsFiles) {
  ASSERT_OK(storage_->put("job/chk-1/_metadata", "m"));
  ASSERT_OK(storage_->put("job/chk-1/data", "d"));
  // What remove_all does: no directory sync anywhere.
  ASSERT_EQ(fs_->unlink(root_ + "/job/chk-1/_metadata"), 0);
  ASSERT_EQ(fs_->unlink(root_ + "/job/chk-1/data"), 0);
  ASSERT_EQ(fs_->rmdir(root_ + "/job/chk-1"), 0);
  powerLoss();
  EXPECT_EQ(rawFiles(root_), (std::set<std::string>{"job/chk-1/_metadata", "job/chk-1/data"}));
  EXPECT_EQ(readLocal(root_ + "/job/chk-1/_metadata"), "m");
}

TEST_F(FaultInjectionTest, AnInactiveFileSystemChangesNothingAndAPowerLossRevivesIt) {
  ASSERT_OK(storage_->put("kept", "k"));
  auto writer = storage_->create("in-flight");
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_OK((*writer)->append("partial"));
  fs_->setFilesystemActive(false);
  Status s = storage_->put("refused", "r");
  EXPECT_TRUE(s.isUnavailable()) << s;  // EIO: try again later (status.h)
  EXPECT_FALSE(fs::exists(root_ + "/refused"));
  ASSERT_OK(fs_->dropUnsyncedData());
  // A writer from before the power loss is dead.
  EXPECT_FALSE((*writer)->close().ok());
  writer->reset();
  ASSERT_OK(storage_->put("after", "a"));
  EXPECT_EQ(listOrDie(""), (std::vector<FileEntry>{{"after", 1}, {"kept", 1}}));
}

TEST_F(FaultInjectionTest, ATemporaryFileOfACrashedWriterIsLeftBehindOnceItsDirectoryWasSynced) {
  auto writer = storage_->create("chk-1/counts-0.kg");
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_OK((*writer)->append(std::string(100, 'k')));
  ASSERT_OK(storage_->put("chk-1/other", "o"));  // syncs chk-1: the temp name is durable now
  fs_->setFilesystemActive(false);               // the process dies mid-write
  writer->reset();
  storage_.reset();
  ASSERT_OK(fs_->dropUnsyncedData());
  reopen();
  EXPECT_EQ(listOrDie(""), (std::vector<FileEntry>{{"chk-1/other", 1}}));
  std::vector<FileEntry> temps;
  ASSERT_OK(storage_->listTemporary("", &temps));
  ASSERT_EQ(temps.size(), 1u);
  EXPECT_EQ(temps[0].path.rfind("chk-1/.counts-0.kg.tmp.", 0), 0u) << temps[0].path;
  EXPECT_EQ(temps[0].size, 0u) << "nothing of it was ever synced";
  ASSERT_OK(storage_->removeTemporary(temps[0].path));
  EXPECT_EQ(rawFiles(root_), (std::set<std::string>{"chk-1/other"}));
}

// ---------------------------------------------------------------------------------------
// FaultInjectionStorage

class FaultInjectionStorageTest : public FaultInjectionTest {
 protected:
  void SetUp() override {
    FaultInjectionTest::SetUp();
    faulty_ = std::make_unique<FaultInjectionStorage>(std::move(storage_));
  }
  void TearDown() override {
    faulty_.reset();
    FaultInjectionTest::TearDown();
  }
  std::unique_ptr<FaultInjectionStorage> faulty_;
};

TEST_F(FaultInjectionStorageTest, TheNthPutFailsWithTheGivenErrorAndWritesNothing) {
  faulty_->failNth(StorageOp::kPut, 2, ENOSPC);
  ASSERT_OK(faulty_->put("job/chk-1/a", "1"));
  Status s = faulty_->put("job/chk-1/b", "2");
  EXPECT_TRUE(s.isNoSpace()) << s;
  EXPECT_TRUE(contains(s.message(), "cannot put " + root_ + "/job/chk-1/b (injected fault)")) << s;
  EXPECT_TRUE(contains(s.message(), "No space left on device")) << s;
  EXPECT_FALSE(faulty_->exists("job/chk-1/b"));
  ASSERT_OK(faulty_->put("job/chk-1/c", "3"));
  EXPECT_EQ(faulty_->count(StorageOp::kPut), 3u);
  EXPECT_EQ(faulty_->count(StorageOp::kGet), 0u);
}

TEST_F(FaultInjectionStorageTest, AFailedCreateCloseDiscardsTheFile) {
  faulty_->failNth(StorageOp::kCreateClose, 1, EIO);
  auto w = faulty_->create("job/chk-1/_metadata");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_OK((*w)->append("m"));
  Status s = (*w)->close();
  EXPECT_TRUE(s.isUnavailable()) << s;  // EIO: try again later (status.h)
  EXPECT_TRUE(contains(s.message(), root_ + "/job/chk-1/_metadata")) << s;
  EXPECT_TRUE((*w)->close().isInvalidArgument());
  w->reset();
  EXPECT_TRUE(rawFiles(root_).empty());
}

TEST_F(FaultInjectionStorageTest, EachKindFailsOnlyItsOwnCalls) {
  ASSERT_OK(faulty_->put("d/f", "x"));
  const std::string local = base_ + "/local";
  std::ofstream(local) << "l";
  struct Case {
    StorageOp op;
    std::function<Status()> call;
  };
  std::string out;
  std::vector<FileEntry> entries;
  const std::vector<Case> cases = {
      {StorageOp::kPutFile, [&] { return faulty_->putFile("d/p", local); }},
      {StorageOp::kGet, [&] { return faulty_->get("d/f", &out); }},
      {StorageOp::kGet, [&] { return faulty_->getToLocalFile("d/f", base_ + "/copy"); }},
      {StorageOp::kOpen, [&] { return faulty_->open("d/f").status(); }},
      {StorageOp::kList, [&] { return faulty_->list("d", &entries); }},
      {StorageOp::kList, [&] { return faulty_->listTemporary("d", &entries); }},
      {StorageOp::kRemove, [&] { return faulty_->remove("d/f"); }},
      {StorageOp::kRemoveAll, [&] { return faulty_->removeAll("d"); }},
      {StorageOp::kPutFile, [&] { return faulty_->createBatch()->putFile("d/p", local); }},
      {StorageOp::kBatchCommit, [&] {
         auto batch = faulty_->createBatch();
         if (Status s = batch->putFile("d/p", local); !s.ok()) return s;
         return batch->commit();
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(storageOpName(c.op));
    faulty_->failNth(c.op, 1, EIO);
    Status s = c.call();
    EXPECT_TRUE(s.isUnavailable()) << s;  // EIO: try again later (status.h)
    EXPECT_TRUE(contains(s.message(), "(injected fault)")) << s;
    faulty_->clearFaults();
  }
  EXPECT_TRUE(faulty_->exists("d/f")) << "failed removals removed nothing";
  EXPECT_FALSE(faulty_->exists("d/p"));
  EXPECT_FALSE(fs::exists(base_ + "/copy"));
}

}  // namespace
}  // namespace jobhost::testing
