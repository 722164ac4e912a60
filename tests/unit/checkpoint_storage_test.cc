// Unit tests for jobhost::state::Status/Result, the local CheckpointStorage and batches
// of files (FileBatch: LocalFileStorage's, and the default one of other storages).
//
// Every test runs against a fresh directory under $TMPDIR (or /tmp).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/file_system.h"
#include "jobhost/state/status.h"
#include "support/fault_injection.h"
#include "support/forwarding_storage.h"
#include "../support/contains.h"

namespace jobhost::state {
namespace {

namespace fs = std::filesystem;

#define ASSERT_OK(expr)                                   \
  do {                                                    \
    const ::jobhost::state::Status s_ = (expr);           \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.toString(); \
  } while (0)

#define EXPECT_OK(expr)                                   \
  do {                                                    \
    const ::jobhost::state::Status s_ = (expr);           \
    EXPECT_TRUE(s_.ok()) << #expr << ": " << s_.toString(); \
  } while (0)

std::string randomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

std::string readLocal(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeLocal(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
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

// ---------------------------------------------------------------------------------------
// Status and Result

TEST(StatusTest, OkIsOkAndPrintsOk) {
  Status s = Status::OK();
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kOk);
  EXPECT_EQ(s.toString(), "OK");
  EXPECT_EQ(s.message(), "");
  EXPECT_TRUE(Status().ok());
}

TEST(StatusTest, EachFactoryProducesItsCodeAndPrefix) {
  struct Case {
    Status status;
    Status::Code code;
    std::string text;
  };
  const std::vector<Case> cases = {
      {Status::NotFound("m"), Status::Code::kNotFound, "Not found: m"},
      {Status::Corruption("m"), Status::Code::kCorruption, "Corruption: m"},
      {Status::InvalidArgument("m"), Status::Code::kInvalidArgument, "Invalid argument: m"},
      {Status::IOError("m"), Status::Code::kIOError, "IO error: m"},
      {Status::NoSpace("m"), Status::Code::kNoSpace, "No space: m"},
      {Status::PermissionDenied("m"), Status::Code::kPermissionDenied, "Permission denied: m"},
      {Status::Incompatible("m"), Status::Code::kIncompatible, "Incompatible: m"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_FALSE(c.status.ok());
    EXPECT_EQ(c.status.code(), c.code);
    EXPECT_EQ(c.status.message(), "m");
    EXPECT_EQ(c.status.toString(), c.text);
  }
  EXPECT_TRUE(Status::NotFound("x").isNotFound());
  EXPECT_TRUE(Status::Corruption("x").isCorruption());
  EXPECT_TRUE(Status::InvalidArgument("x").isInvalidArgument());
  EXPECT_TRUE(Status::IOError("x").isIOError());
  EXPECT_TRUE(Status::NoSpace("x").isNoSpace());
  EXPECT_TRUE(Status::PermissionDenied("x").isPermissionDenied());
  EXPECT_TRUE(Status::Incompatible("x").isIncompatible());
  EXPECT_FALSE(Status::IOError("x").isNotFound());
}

TEST(StatusTest, CopiesAreIndependentAndMovesLeaveValues) {
  Status a = Status::IOError("disk");
  Status b = a;
  EXPECT_EQ(b.toString(), "IO error: disk");
  a = Status::OK();
  EXPECT_TRUE(a.ok());
  EXPECT_EQ(b.toString(), "IO error: disk");
  Status c = std::move(b);
  EXPECT_EQ(c.toString(), "IO error: disk");
  Status& self = c;
  c = self;
  EXPECT_EQ(c.toString(), "IO error: disk");
}

TEST(StatusTest, FromErrnoMapsErrnoToCodesAndAppendsStrerror) {
  struct Case {
    int err;
    Status::Code code;
  };
  const std::vector<Case> cases = {
      {ENOENT, Status::Code::kNotFound},         {ENOSPC, Status::Code::kNoSpace},
      {EDQUOT, Status::Code::kNoSpace},          {EACCES, Status::Code::kPermissionDenied},
      {EPERM, Status::Code::kPermissionDenied},  {EROFS, Status::Code::kPermissionDenied},
      {EIO, Status::Code::kUnavailable},         {EBADF, Status::Code::kIOError},
      {ECONNRESET, Status::Code::kUnavailable},  {ETIMEDOUT, Status::Code::kUnavailable},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.err);
    Status s = fromErrno("cannot write /x", c.err);
    EXPECT_EQ(s.code(), c.code);
    EXPECT_EQ(s.message(), std::string("cannot write /x: ") + std::strerror(c.err));
  }
  EXPECT_EQ(fromErrno("cannot write /x/_metadata", ENOSPC).toString(),
            "No space: cannot write /x/_metadata: No space left on device");
}

TEST(ResultTest, HoldsAValueOrAnError) {
  Result<std::unique_ptr<int>> good(std::make_unique<int>(7));
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(good.status().ok());
  EXPECT_EQ(**good, 7);
  std::unique_ptr<int> taken = std::move(good).value();
  EXPECT_EQ(*taken, 7);

  Result<std::string> bad(Status::NotFound("nope"));
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().isNotFound());
  EXPECT_EQ(bad.status().message(), "nope");

  Result<std::string> str(std::string("abc"));
  EXPECT_EQ(str->size(), 3u);
}

TEST(ResultTest, ConstructingFromOkStatusBecomesAnError) {
  Result<int> r(Status::OK());
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.status().isInvalidArgument());
}

TEST(ResultDeathTest, AccessingTheValueOfAnErrorAborts) {
  Result<int> r(Status::Corruption("bad bytes"));
  EXPECT_DEATH((void)r.value(), "bad bytes");
}

// ---------------------------------------------------------------------------------------
// openStorage

TEST(OpenStorageTest, AcceptsLocalPathsAndFileUrisAndNormalizesTheRoot) {
  const std::string cwd = fs::current_path().string();
  struct Case {
    std::string input;
    std::string expectedUri;
  };
  const std::vector<Case> cases = {
      {"/var/ckpt", "file:///var/ckpt"},
      {"/var/ckpt/", "file:///var/ckpt"},
      {"/var/./a/../ckpt", "file:///var/ckpt"},
      {"file:///var/ckpt", "file:///var/ckpt"},
      {"FILE:///var/ckpt", "file:///var/ckpt"},
      {"rel/dir", "file://" + cwd + "/rel/dir"},
      {"./rel", "file://" + cwd + "/rel"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.input);
    auto storage = openStorage(c.input);
    ASSERT_TRUE(storage.ok()) << storage.status();
    EXPECT_EQ((*storage)->rootUri(), c.expectedUri);
  }
}

TEST(OpenStorageTest, RejectsOtherSchemesEmptyInputAndNonAbsoluteFileUris) {
  struct Case {
    std::string input;
    std::string messagePart;
  };
  const std::vector<Case> cases = {
      {"s3:///ckpt", "no bucket"},
      {"hdfs://nn:8020/ckpt", "unsupported storage scheme 'hdfs'; use a local path, file:/// or s3://bucket/prefix"},
      {"file://host/ckpt", "file:///"},
      {"file://", "file:///"},
      {"", "empty"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.input);
    auto storage = openStorage(c.input);
    ASSERT_FALSE(storage.ok());
    EXPECT_TRUE(storage.status().isInvalidArgument()) << storage.status();
    EXPECT_NE(storage.status().message().find(c.messagePart), std::string::npos)
        << storage.status();
  }
}

// ---------------------------------------------------------------------------------------
// LocalFileStorage

class LocalStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                       "/jobhost-storage-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    base_ = tmpl;
    root_ = base_ + "/root";  // does not exist yet: created on first write
    auto opened = openStorage(root_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    storage_ = std::move(opened).value();
  }

  void TearDown() override {
    storage_.reset();
    // Undo any chmod from permission tests so the tree can be removed.
    std::error_code ec;
    for (fs::recursive_directory_iterator it(base_, ec), end; !ec && it != end;
         it.increment(ec)) {
      if (it->is_directory()) ::chmod(it->path().c_str(), 0755);
    }
    ::chmod(base_.c_str(), 0755);
    fs::remove_all(base_, ec);
  }

  std::string getOrDie(const std::string& path) {
    std::string out;
    Status s = storage_->get(path, &out);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  std::vector<FileEntry> listOrDie(const std::string& prefix) {
    std::vector<FileEntry> out;
    Status s = storage_->list(prefix, &out);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  std::string base_;
  std::string root_;
  std::unique_ptr<CheckpointStorage> storage_;
};

TEST_F(LocalStorageTest, OpeningDoesNotCreateTheRootButTheFirstWriteDoes) {
  EXPECT_FALSE(fs::exists(root_));
  EXPECT_TRUE(listOrDie("").empty());
  EXPECT_FALSE(storage_->exists("a"));
  ASSERT_OK(storage_->put("job/chk-1/_metadata", "m"));
  EXPECT_TRUE(fs::is_directory(root_ + "/job/chk-1"));
  EXPECT_EQ(readLocal(root_ + "/job/chk-1/_metadata"), "m");
}

TEST_F(LocalStorageTest, PutThenGetReturnsTheSameBytes) {
  struct Case {
    std::string path;
    std::string bytes;
  };
  const std::vector<Case> cases = {
      {"empty", ""},
      {"small", "hello"},
      {"binary", std::string("a\0b\xff\n\0", 6)},
      {"deep/er/and/deeper/file.sst", "nested"},
      {"big", randomBytes(3 * 1024 * 1024 + 17, 1)},  // well past the write buffer
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    ASSERT_OK(storage_->put(c.path, c.bytes));
    EXPECT_EQ(getOrDie(c.path), c.bytes);
    auto size = storage_->fileSize(c.path);
    ASSERT_TRUE(size.ok()) << size.status();
    EXPECT_EQ(*size, c.bytes.size());
    EXPECT_TRUE(storage_->exists(c.path));
  }
}

TEST_F(LocalStorageTest, AWriterIsInvisibleUntilCloseAndThenHoldsEveryAppendInOrder) {
  auto writer = storage_->create("chk-1/state.bin");
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::string expected;
  const std::vector<std::string> pieces = {"x", std::string(1000, 'y'), "",
                                           randomBytes(70 * 1024, 2), "z",
                                           randomBytes(200 * 1024, 3)};
  for (int round = 0; round < 50; ++round) {
    for (const std::string& piece : pieces) {
      if (round > 0 && piece.size() > 1000) continue;  // keep the test fast
      ASSERT_OK((*writer)->append(piece));
      expected += piece;
      EXPECT_EQ((*writer)->size(), expected.size());
    }
  }
  EXPECT_FALSE(storage_->exists("chk-1/state.bin"));
  EXPECT_TRUE(listOrDie("").empty());
  ASSERT_OK((*writer)->close());
  EXPECT_TRUE(storage_->exists("chk-1/state.bin"));
  EXPECT_EQ(getOrDie("chk-1/state.bin"), expected);
  EXPECT_EQ(rawFiles(root_), std::set<std::string>{"chk-1/state.bin"});
}

TEST_F(LocalStorageTest, AWriterDestroyedWithoutCloseLeavesNothingBehind) {
  {
    auto writer = storage_->create("chk-2/_metadata");
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_OK((*writer)->append(randomBytes(300 * 1024, 4)));
    EXPECT_EQ(rawFiles(root_).size(), 1u);  // the temporary file exists meanwhile
  }
  EXPECT_FALSE(storage_->exists("chk-2/_metadata"));
  EXPECT_TRUE(listOrDie("").empty());
  EXPECT_TRUE(rawFiles(root_).empty());
  // The name is still free.
  ASSERT_OK(storage_->put("chk-2/_metadata", "ok"));
  EXPECT_EQ(getOrDie("chk-2/_metadata"), "ok");
}

TEST_F(LocalStorageTest, AppendOrCloseAfterCloseIsRejected) {
  auto writer = storage_->create("f");
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_OK((*writer)->append("abc"));
  ASSERT_OK((*writer)->close());
  EXPECT_TRUE((*writer)->append("more").isInvalidArgument());
  EXPECT_TRUE((*writer)->close().isInvalidArgument());
  EXPECT_EQ(getOrDie("f"), "abc");
}

TEST_F(LocalStorageTest, CreatingAnExistingFileFailsAndKeepsTheOriginal) {
  ASSERT_OK(storage_->put("chk-1/_metadata", "original"));
  const std::string local = base_ + "/src";
  writeLocal(local, "replacement");

  Status viaPut = storage_->put("chk-1/_metadata", "replacement");
  auto viaCreate = storage_->create("chk-1/_metadata");
  Status viaPutFile = storage_->putFile("chk-1/_metadata", local);
  Status viaDirectory = storage_->put("chk-1", "x");  // a directory is in the way
  ASSERT_FALSE(viaCreate.ok());
  for (const Status& s : {viaPut, viaCreate.status(), viaPutFile, viaDirectory}) {
    SCOPED_TRACE(s.toString());
    EXPECT_TRUE(s.isInvalidArgument());
    EXPECT_NE(s.message().find("already exists"), std::string::npos);
    EXPECT_NE(s.message().find(root_ + "/chk-1"), std::string::npos);
  }
  EXPECT_EQ(getOrDie("chk-1/_metadata"), "original");
  EXPECT_EQ(rawFiles(root_), std::set<std::string>{"chk-1/_metadata"});
}

TEST_F(LocalStorageTest, OfTwoWritersOfOnePathOnlyTheFirstToCloseWins) {
  auto first = storage_->create("race");
  auto second = storage_->create("race");
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_OK((*second)->append("second"));
  ASSERT_OK((*first)->append("first"));
  ASSERT_OK((*second)->close());
  Status lost = (*first)->close();
  EXPECT_TRUE(lost.isInvalidArgument()) << lost;
  EXPECT_NE(lost.message().find("already exists"), std::string::npos) << lost;
  EXPECT_EQ(getOrDie("race"), "second");
  EXPECT_EQ(rawFiles(root_), std::set<std::string>{"race"});  // loser's temp is gone
}

TEST_F(LocalStorageTest, ConcurrentPutsOfOnePathHaveExactlyOneWinner) {
  constexpr int kThreads = 8;
  std::vector<Status> results(kThreads);
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      results[i] = storage_->put("shared/_metadata", "writer-" + std::to_string(i));
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  int winner = -1;
  for (int i = 0; i < kThreads; ++i) {
    if (results[i].ok()) {
      EXPECT_EQ(winner, -1) << "two writers succeeded";
      winner = i;
    } else {
      EXPECT_TRUE(results[i].isInvalidArgument()) << results[i];
    }
  }
  ASSERT_NE(winner, -1);
  EXPECT_EQ(getOrDie("shared/_metadata"), "writer-" + std::to_string(winner));
  EXPECT_EQ(rawFiles(root_), std::set<std::string>{"shared/_metadata"});
}

TEST_F(LocalStorageTest, InvalidPathsAreRejectedByEveryOperation) {
  const std::vector<std::string> badPaths = {
      "",
      "/abs",
      "/",
      "a//b",
      "a/",
      "./a",
      "a/./b",
      "..",
      "../escape",
      "a/../../escape",
      ".",
      std::string("a\0b", 3),
      ".f.tmp.123",        // reserved for temporary files
      "dir/.x.tmp.abc",
  };
  const std::string local = base_ + "/src";
  writeLocal(local, "data");
  for (const std::string& path : badPaths) {
    SCOPED_TRACE("path '" + path + "'");
    std::string out;
    auto writer = storage_->create(path);
    auto reader = storage_->open(path);
    auto size = storage_->fileSize(path);
    ASSERT_FALSE(writer.ok());
    ASSERT_FALSE(reader.ok());
    ASSERT_FALSE(size.ok());
    for (const Status& s :
         {storage_->put(path, "x"), storage_->putFile(path, local), storage_->get(path, &out),
          storage_->getToLocalFile(path, base_ + "/dest"), storage_->remove(path),
          writer.status(), reader.status(), size.status()}) {
      EXPECT_TRUE(s.isInvalidArgument()) << s;
      EXPECT_NE(s.message().find("invalid storage path"), std::string::npos) << s;
    }
    EXPECT_FALSE(storage_->exists(path));
  }
  EXPECT_FALSE(fs::exists(root_)) << "nothing may be written for an invalid path";
  EXPECT_FALSE(fs::exists(base_ + "/dest"));
  EXPECT_FALSE(fs::exists(base_ + "/escape"));
}

TEST_F(LocalStorageTest, InvalidDirectoryPrefixesAreRejectedAndValidOnesAccepted) {
  const std::vector<std::string> badPrefixes = {"/", "/abs", "a//b", "a//", "../x", "a/..",
                                                "./", ".d.tmp.1/"};
  for (const std::string& prefix : badPrefixes) {
    SCOPED_TRACE("prefix '" + prefix + "'");
    std::vector<FileEntry> out;
    EXPECT_TRUE(storage_->list(prefix, &out).isInvalidArgument());
    EXPECT_TRUE(storage_->removeAll(prefix).isInvalidArgument());
  }
  for (const char* prefix : {"", "a", "a/", "a/b", "a/b/"}) {
    SCOPED_TRACE("prefix '" + std::string(prefix) + "'");
    std::vector<FileEntry> out;
    EXPECT_OK(storage_->list(prefix, &out));
    EXPECT_OK(storage_->removeAll(prefix));
  }
}

TEST_F(LocalStorageTest, ListIsRecursiveSortedByPathAndReportsSizes) {
  ASSERT_OK(storage_->put("b/2", "22"));
  ASSERT_OK(storage_->put("a/sub/x", "xxx"));
  ASSERT_OK(storage_->put("a/1", "1"));
  ASSERT_OK(storage_->put("a.txt", ""));
  ASSERT_OK(storage_->put("ab/z", "zzzz"));
  ASSERT_OK(storage_->put("c", "c"));

  const std::vector<FileEntry> all = {{"a.txt", 0}, {"a/1", 1}, {"a/sub/x", 3},
                                      {"ab/z", 4},  {"b/2", 2}, {"c", 1}};
  EXPECT_EQ(listOrDie(""), all);

  struct Case {
    std::string prefix;
    std::vector<FileEntry> expected;
  };
  const std::vector<Case> cases = {
      {"a", {{"a/1", 1}, {"a/sub/x", 3}}},  // not "a.txt" or "ab/z"
      {"a/", {{"a/1", 1}, {"a/sub/x", 3}}},
      {"a/sub", {{"a/sub/x", 3}}},
      {"missing", {}},
      {"missing/deeper", {}},
      {"c", {}},    // a file, not a directory: nothing under it
      {"c/d", {}},  // below a file
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("prefix '" + c.prefix + "'");
    std::vector<FileEntry> out = {{"stale", 9}};  // list replaces, not appends
    ASSERT_OK(storage_->list(c.prefix, &out));
    EXPECT_EQ(out, c.expected);
  }
}

TEST_F(LocalStorageTest, ListSkipsInFlightAndLeftoverTemporaryFiles) {
  ASSERT_OK(storage_->put("chk-1/done", "d"));
  auto writer = storage_->create("chk-1/pending");
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_OK((*writer)->append("p"));
  writeLocal(root_ + "/chk-1/.crashed.tmp.0123456789abcdef", "left by a crash");
  writeLocal(root_ + "/.top.tmp.x", "left by a crash");

  EXPECT_EQ(listOrDie(""), (std::vector<FileEntry>{{"chk-1/done", 1}}));
  EXPECT_EQ(listOrDie("chk-1"), (std::vector<FileEntry>{{"chk-1/done", 1}}));

  ASSERT_OK((*writer)->close());
  EXPECT_EQ(listOrDie("chk-1"),
            (std::vector<FileEntry>{{"chk-1/done", 1}, {"chk-1/pending", 1}}));
}

TEST_F(LocalStorageTest, RemoveDeletesOneFileAndReportsMissingOnes) {
  ASSERT_OK(storage_->put("d/f", "x"));
  ASSERT_OK(storage_->put("d/g", "y"));
  ASSERT_OK(storage_->remove("d/f"));
  EXPECT_FALSE(storage_->exists("d/f"));
  EXPECT_EQ(listOrDie(""), (std::vector<FileEntry>{{"d/g", 1}}));

  struct Case {
    std::string path;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"d/f", "already removed"}, {"never", "never existed"},
      {"d", "a directory, not a file"}, {"d/g/below", "below a file"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.why);
    Status s = storage_->remove(c.path);
    EXPECT_TRUE(s.isNotFound()) << s;
    EXPECT_NE(s.message().find(root_ + "/" + c.path), std::string::npos) << s;
  }
  EXPECT_EQ(getOrDie("d/g"), "y");
}

TEST_F(LocalStorageTest, RemoveAllDeletesExactlyTheSubtreeUnderThePrefix) {
  ASSERT_OK(storage_->put("job/chk-1/_metadata", "m"));
  ASSERT_OK(storage_->put("job/chk-1/shared/1.sst", "s"));
  ASSERT_OK(storage_->put("job/chk-10/_metadata", "m"));
  ASSERT_OK(storage_->put("job/chk-1.txt", "t"));
  auto pending = storage_->create("job/chk-1/in-flight");
  ASSERT_TRUE(pending.ok()) << pending.status();

  ASSERT_OK(storage_->removeAll("job/chk-1"));
  EXPECT_EQ(listOrDie(""),
            (std::vector<FileEntry>{{"job/chk-1.txt", 1}, {"job/chk-10/_metadata", 1}}));
  EXPECT_FALSE(fs::exists(root_ + "/job/chk-1"));
  // The writer lost its directory; it must fail rather than resurrect anything.
  EXPECT_FALSE((*pending)->close().ok());
  EXPECT_FALSE(fs::exists(root_ + "/job/chk-1"));

  EXPECT_OK(storage_->removeAll("job/chk-1"));        // already gone
  EXPECT_OK(storage_->removeAll("nothing/here"));     // never existed
  EXPECT_OK(storage_->removeAll("job/chk-1.txt"));    // a file: nothing under it
  EXPECT_TRUE(storage_->exists("job/chk-1.txt"));

  ASSERT_OK(storage_->removeAll(""));
  EXPECT_TRUE(listOrDie("").empty());
  EXPECT_TRUE(fs::is_directory(root_)) << "the root itself is kept";
  EXPECT_TRUE(fs::is_empty(root_));
}

TEST_F(LocalStorageTest, PutFileAndGetToLocalFileCopyWholeFiles) {
  const std::string bytes = randomBytes(5 * 1024 * 1024 + 3, 5);  // several copy chunks
  const std::string src = base_ + "/000042.sst";
  writeLocal(src, bytes);
  ASSERT_OK(storage_->putFile("job/shared/000042.sst", src));
  EXPECT_EQ(getOrDie("job/shared/000042.sst"), bytes);
  auto size = storage_->fileSize("job/shared/000042.sst");
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, bytes.size());

  const std::string dest = base_ + "/restored.sst";
  writeLocal(dest, std::string(10 * 1024 * 1024, 'o'));  // longer: must be truncated
  ASSERT_OK(storage_->getToLocalFile("job/shared/000042.sst", dest));
  EXPECT_EQ(readLocal(dest), bytes);

  writeLocal(base_ + "/empty", "");
  ASSERT_OK(storage_->putFile("empty.sst", base_ + "/empty"));
  EXPECT_EQ(getOrDie("empty.sst"), "");
}

TEST_F(LocalStorageTest, CopyingFromMissingFilesIsNotFoundAndNamesThePath) {
  const std::string missingSrc = base_ + "/no-such.sst";
  Status up = storage_->putFile("x.sst", missingSrc);
  EXPECT_TRUE(up.isNotFound()) << up;
  EXPECT_NE(up.message().find(missingSrc), std::string::npos) << up;
  EXPECT_FALSE(storage_->exists("x.sst"));

  Status upDir = storage_->putFile("y.sst", base_);
  EXPECT_TRUE(upDir.isInvalidArgument()) << upDir;
  EXPECT_FALSE(storage_->exists("y.sst"));

  const std::string dest = base_ + "/dest.sst";
  Status down = storage_->getToLocalFile("no/such.sst", dest);
  EXPECT_TRUE(down.isNotFound()) << down;
  EXPECT_NE(down.message().find(root_ + "/no/such.sst"), std::string::npos) << down;
  EXPECT_FALSE(fs::exists(dest));
}

TEST_F(LocalStorageTest, ReadingMissingFilesIsNotFoundAndNamesTheFullPath) {
  ASSERT_OK(storage_->put("dir/file", "x"));
  for (const std::string path : {"chk-9/_metadata", "dir", "dir/file/below"}) {
    SCOPED_TRACE(path);
    const std::string full = root_ + "/" + path;
    std::string out;
    Status viaGet = storage_->get(path, &out);
    auto viaOpen = storage_->open(path);
    auto viaSize = storage_->fileSize(path);
    ASSERT_FALSE(viaOpen.ok());
    ASSERT_FALSE(viaSize.ok());
    for (const Status& s : {viaGet, viaOpen.status(), viaSize.status()}) {
      EXPECT_TRUE(s.isNotFound()) << s;
      EXPECT_NE(s.message().find(full), std::string::npos) << s;
    }
    EXPECT_FALSE(storage_->exists(path));
  }
}

TEST_F(LocalStorageTest, ReadsReturnExactRangesAndShortReadsAreCorruption) {
  ASSERT_OK(storage_->put("f", "0123456789"));
  auto file = storage_->open("f");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->size(), 10u);

  struct Case {
    uint64_t offset;
    size_t n;
    std::string expected;  // empty with ok=false means Corruption
    bool ok;
  };
  const std::vector<Case> cases = {
      {0, 10, "0123456789", true}, {3, 4, "3456", true},  {9, 1, "9", true},
      {10, 0, "", true},           {0, 11, "", false},    {5, 6, "", false},
      {10, 1, "", false},          {11, 0, "", false},    {UINT64_MAX, 2, "", false},
      {2, SIZE_MAX, "", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.offset) + "+" + std::to_string(c.n));
    std::string out = "garbage";
    Status s = (*file)->read(c.offset, c.n, &out);
    if (c.ok) {
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(out, c.expected);
    } else {
      EXPECT_TRUE(s.isCorruption()) << s;
      EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
      EXPECT_NE(s.message().find(root_ + "/f"), std::string::npos) << s;
    }
  }
}

TEST_F(LocalStorageTest, AFileTruncatedAfterOpenGivesCorruptionNotShortData) {
  ASSERT_OK(storage_->put("chk/_metadata", "0123456789"));
  auto file = storage_->open("chk/_metadata");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(::truncate((root_ + "/chk/_metadata").c_str(), 4), 0);
  std::string out;
  Status s = (*file)->read(2, 6, &out);
  EXPECT_TRUE(s.isCorruption()) << s;
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
  ASSERT_OK((*file)->read(0, 4, &out));
  EXPECT_EQ(out, "0123");
}

TEST_F(LocalStorageTest, DescribeGivesTheAbsoluteLocalPath) {
  EXPECT_EQ(storage_->describe("job/chk-3/_metadata"), root_ + "/job/chk-3/_metadata");
  EXPECT_EQ(storage_->describe(""), root_);
  EXPECT_EQ(storage_->rootUri(), "file://" + root_);
}

TEST_F(LocalStorageTest, AFileWhereTheRootShouldBeFailsWritesWithThePath) {
  writeLocal(root_, "not a directory");
  Status s = storage_->put("chk-1/_metadata", "x");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(root_), std::string::npos) << s;
  EXPECT_EQ(readLocal(root_), "not a directory");
}

TEST_F(LocalStorageTest, WritingIntoAReadOnlyDirectoryIsPermissionDenied) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  ASSERT_OK(storage_->put("ro/existing", "e"));
  ASSERT_EQ(::chmod((root_ + "/ro").c_str(), 0555), 0);

  struct Case {
    std::string path;
    std::string messagePart;
  };
  const std::vector<Case> cases = {
      {"ro/new", "cannot create " + root_ + "/ro/new: Permission denied"},
      {"ro/sub/new", "cannot create directory " + root_ + "/ro/sub: Permission denied"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    Status s = storage_->put(c.path, "x");
    EXPECT_TRUE(s.isPermissionDenied()) << s;
    EXPECT_NE(s.message().find(c.messagePart), std::string::npos) << s;
    EXPECT_FALSE(storage_->exists(c.path));
  }
  Status removal = storage_->remove("ro/existing");
  EXPECT_TRUE(removal.isPermissionDenied()) << removal;
  Status removalAll = storage_->removeAll("ro");
  EXPECT_TRUE(removalAll.isPermissionDenied()) << removalAll;
  EXPECT_EQ(getOrDie("ro/existing"), "e");
}


// ---------------------------------------------------------------------------------------
// Temporary files of writes that never completed

TEST_F(LocalStorageTest, ListTemporaryFindsLeftoversRecursivelyByTheirRealNames) {
  ASSERT_OK(storage_->put("job/chk-1/done", "d"));
  ASSERT_OK(storage_->put("job/shared/000012.sst", "s"));
  writeLocal(root_ + "/job/chk-1/.counts-0.kg.tmp.0123456789abcdef", "left by a crash");
  writeLocal(root_ + "/job/shared/.000013.sst.tmp.fedcba9876543210", "xy");
  writeLocal(root_ + "/.top.tmp.x", "");

  std::vector<FileEntry> temps;
  ASSERT_OK(storage_->listTemporary("", &temps));
  EXPECT_EQ(temps, (std::vector<FileEntry>{{".top.tmp.x", 0},
                                           {"job/chk-1/.counts-0.kg.tmp.0123456789abcdef", 15},
                                           {"job/shared/.000013.sst.tmp.fedcba9876543210", 2}}));
  ASSERT_OK(storage_->listTemporary("job/shared/", &temps));
  EXPECT_EQ(temps, (std::vector<FileEntry>{{"job/shared/.000013.sst.tmp.fedcba9876543210", 2}}));
  ASSERT_OK(storage_->listTemporary("missing", &temps));
  EXPECT_TRUE(temps.empty());
  EXPECT_TRUE(storage_->listTemporary("../x", &temps).isInvalidArgument());
  // list() still shows only published files.
  EXPECT_EQ(listOrDie(""), (std::vector<FileEntry>{{"job/chk-1/done", 1}, {"job/shared/000012.sst", 1}}));
}

TEST_F(LocalStorageTest, ListTemporaryShowsALiveWritersFileUntilItIsPublished) {
  auto writer = storage_->create("job/chk-2/_metadata");
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::vector<FileEntry> temps;
  ASSERT_OK(storage_->listTemporary("job", &temps));
  ASSERT_EQ(temps.size(), 1u);
  EXPECT_EQ(temps[0].path.rfind("job/chk-2/._metadata.tmp.", 0), 0u) << temps[0].path;
  ASSERT_OK((*writer)->append("m"));
  ASSERT_OK((*writer)->close());
  ASSERT_OK(storage_->listTemporary("job", &temps));
  EXPECT_TRUE(temps.empty());
}

TEST_F(LocalStorageTest, RemoveTemporaryDeletesALeftoverAndThenReportsItMissing) {
  ASSERT_OK(storage_->put("job/chk-1/done", "d"));
  const std::string temp = "job/chk-1/.counts-0.kg.tmp.0123456789abcdef";
  writeLocal(root_ + "/" + temp, "left by a crash");
  ASSERT_OK(storage_->removeTemporary(temp));
  EXPECT_EQ(rawFiles(root_), (std::set<std::string>{"job/chk-1/done"}));
  Status again = storage_->removeTemporary(temp);
  EXPECT_TRUE(again.isNotFound()) << again;
  EXPECT_NE(again.message().find(root_ + "/" + temp), std::string::npos) << again;
}

TEST_F(LocalStorageTest, RemoveTemporaryRefusesNamesThatAreNotTemporary) {
  ASSERT_OK(storage_->put("job/chk-1/_metadata", "m"));
  const std::vector<std::string> refused = {
      "job/chk-1/_metadata", "job/chk-1",   "",           "job/chk-1/",
      "../.x.tmp.1",         "/abs/.x.tmp.1", "a//.x.tmp.1", "job/.hidden"};
  for (const std::string& path : refused) {
    SCOPED_TRACE(path);
    Status s = storage_->removeTemporary(path);
    EXPECT_TRUE(s.isInvalidArgument()) << s;
  }
  Status s = storage_->removeTemporary("job/chk-1/_metadata");
  EXPECT_NE(s.message().find("not a temporary name"), std::string::npos) << s;
  EXPECT_EQ(getOrDie("job/chk-1/_metadata"), "m");
}

TEST_F(LocalStorageTest, RemovingALiveWritersTemporaryFileMakesItsCloseFail) {
  // Why only the owner of a directory may remove temporary files: a live writer's file
  // looks exactly like a crashed one's.
  auto writer = storage_->create("job/chk-3/_metadata");
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::vector<FileEntry> temps;
  ASSERT_OK(storage_->listTemporary("", &temps));
  ASSERT_EQ(temps.size(), 1u);
  ASSERT_OK(storage_->removeTemporary(temps[0].path));
  ASSERT_OK((*writer)->append("m"));
  Status s = (*writer)->close();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(root_ + "/job/chk-3/_metadata"), std::string::npos) << s;
  EXPECT_FALSE(storage_->exists("job/chk-3/_metadata"));
}

// ---------------------------------------------------------------------------------------
// FileBatch of LocalFileStorage, over a FaultInjectionFileSystem (the real disk below it)

class FileBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/jobhost-batch-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    base_ = tmpl;
    root_ = base_ + "/root";  // created by the first write
    fs::create_directories(base_ + "/local");
    fs_ = std::make_shared<testing::FaultInjectionFileSystem>();
    reopen();
  }

  void TearDown() override {
    storage_.reset();
    std::error_code ec;
    fs::remove_all(base_, ec);
  }

  void reopen() {
    auto opened = openStorage(root_, fs_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    storage_ = std::move(opened).value();
  }

  // A local source file named name with n bytes (content from seed); its path.
  std::string source(const std::string& name, size_t n, uint32_t seed) {
    const std::string path = base_ + "/local/" + name;
    writeLocal(path, randomBytes(n, seed));
    return path;
  }

  std::vector<FileEntry> listOrDie(const std::string& prefix) {
    std::vector<FileEntry> out;
    Status s = storage_->list(prefix, &out);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  std::vector<FileEntry> temporaries(const std::string& prefix) {
    std::vector<FileEntry> out;
    Status s = storage_->listTemporary(prefix, &out);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  std::string getOrDie(const std::string& path) {
    std::string out;
    Status s = storage_->get(path, &out);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  // Three files as a RocksDB upload has them, under dir: two SSTs in a shared directory
  // (the first spans several copy chunks) and a small file in a checkpoint's own one.
  struct Upload {
    std::string path;
    std::string local;
  };
  std::vector<Upload> threeFiles(const std::string& dir) {
    return {{dir + "/shared/000012.sst", source("000012.sst", 3 * 1024 * 1024 + 5, 12)},
            {dir + "/shared/000013.sst", source("000013.sst", 4000, 13)},
            {dir + "/chk-1/MANIFEST-000005", source("MANIFEST-000005", 77, 5)}};
  }

  std::unique_ptr<FileBatch> batchOf(const std::vector<Upload>& files) {
    std::unique_ptr<FileBatch> batch = storage_->createBatch();
    for (const Upload& f : files) {
      Status s = batch->putFile(f.path, f.local);
      EXPECT_TRUE(s.ok()) << f.path << ": " << s;
    }
    return batch;
  }

  std::string base_;
  std::string root_;
  std::shared_ptr<testing::FaultInjectionFileSystem> fs_;
  std::unique_ptr<CheckpointStorage> storage_;
};

TEST_F(FileBatchTest, NothingIsPublishedBeforeCommitAndThenEveryFileWhole) {
  const auto files = threeFiles("job");
  auto batch = batchOf(files);
  EXPECT_TRUE(listOrDie("").empty()) << "a file of the batch is visible before commit()";
  EXPECT_EQ(temporaries("").size(), 3u);
  for (const Upload& f : files) EXPECT_FALSE(storage_->exists(f.path)) << f.path;
  ASSERT_OK(batch->commit());
  std::vector<FileEntry> expected;
  for (const Upload& f : files) expected.push_back({f.path, fs::file_size(f.local)});
  std::sort(expected.begin(), expected.end(), [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
  EXPECT_EQ(listOrDie(""), expected);
  for (const Upload& f : files) EXPECT_EQ(getOrDie(f.path), readLocal(f.local)) << f.path;
  EXPECT_TRUE(temporaries("").empty());
  batch.reset();  // a committed batch keeps its files
  EXPECT_EQ(listOrDie("").size(), 3u);
}

TEST_F(FileBatchTest, ABatchDroppedWithoutCommitLeavesNoFile) {
  auto batch = batchOf(threeFiles("job"));
  batch.reset();
  EXPECT_TRUE(rawFiles(root_).empty()) << *rawFiles(root_).begin();
  ASSERT_OK(storage_->createBatch()->commit());  // an empty batch commits
  EXPECT_TRUE(rawFiles(root_).empty());
}

TEST_F(FileBatchTest, AnExistingOrRepeatedPathOrAMissingSourceFailsThatFileAndTheBatchGoesOn) {
  ASSERT_OK(storage_->put("job/chk-1/CURRENT", "earlier"));
  const std::string a = source("a", 100, 1);
  const std::string b = source("b", 200, 2);
  auto batch = storage_->createBatch();

  Status existing = batch->putFile("job/chk-1/CURRENT", a);
  EXPECT_TRUE(existing.isInvalidArgument()) << existing;
  EXPECT_TRUE(contains(existing.message(), root_ + "/job/chk-1/CURRENT: already exists")) << existing;

  ASSERT_OK(batch->putFile("job/shared/a.sst", a));
  Status twice = batch->putFile("job/shared/a.sst", b);
  EXPECT_TRUE(twice.isInvalidArgument()) << twice;
  EXPECT_TRUE(contains(twice.message(), "added twice to one batch")) << twice;

  const std::string missing = base_ + "/local/no-such.sst";
  Status notFound = batch->putFile("job/shared/c.sst", missing);
  EXPECT_TRUE(notFound.isNotFound()) << notFound;
  EXPECT_TRUE(contains(notFound.message(), missing)) << notFound;

  ASSERT_OK(batch->putFile("job/shared/c.sst", b));  // the name is free again
  ASSERT_OK(batch->commit());
  EXPECT_EQ(listOrDie("job"), (std::vector<FileEntry>{{"job/chk-1/CURRENT", 7}, {"job/shared/a.sst", 100},
                                                      {"job/shared/c.sst", 200}}));
  EXPECT_EQ(getOrDie("job/chk-1/CURRENT"), "earlier");
  EXPECT_EQ(getOrDie("job/shared/a.sst"), readLocal(a));
  EXPECT_TRUE(temporaries("").empty());

  Status late = batch->putFile("job/shared/d.sst", a);
  EXPECT_TRUE(late.isInvalidArgument()) << late;
  EXPECT_TRUE(contains(late.message(), "already committed")) << late;
  EXPECT_TRUE(batch->commit().isInvalidArgument());
  EXPECT_FALSE(storage_->exists("job/shared/d.sst"));
}

TEST_F(FileBatchTest, AFileCreatedAtABatchPathBeforeCommitFailsTheCommitAndNoFileOfTheBatchStays) {
  const auto files = threeFiles("job");
  auto batch = batchOf(files);
  ASSERT_OK(storage_->put(files[1].path, "a racing creator's"));
  Status s = batch->commit();
  EXPECT_TRUE(s.isInvalidArgument()) << s;
  EXPECT_TRUE(contains(s.message(), root_ + "/" + files[1].path + ": already exists")) << s;
  EXPECT_EQ(listOrDie(""), (std::vector<FileEntry>{{files[1].path, 18}}));
  EXPECT_EQ(getOrDie(files[1].path), "a racing creator's") << "overwritten";
  EXPECT_TRUE(temporaries("").empty());
}

TEST_F(FileBatchTest, AFailureInTheCommitLeavesNoFileOfTheBatchAndNoTemporaryFile) {
  struct Case {
    std::string name;
    testing::FsOp op;
    uint64_t nth;
    std::string message;
  };
  // The commit of a batch into new directories (a new root each time): 3 renames, then
  // fsyncs of the storage root's parent, the root, job, job/chk-1 and job/shared (at
  // once, so "first" and "last" are in the order they happen to start).
  const std::vector<Case> cases = {
      {"the first rename fails", testing::FsOp::kRename, 1, "cannot publish"},
      {"the third rename fails", testing::FsOp::kRename, 3, "cannot publish"},
      {"the first directory fsync fails", testing::FsOp::kSyncDir, 1, "cannot sync directory"},
      {"the last directory fsync fails", testing::FsOp::kSyncDir, 5, "cannot sync directory"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::error_code ec;
    fs::remove_all(root_, ec);
    auto batch = batchOf(threeFiles("job"));
    const uint64_t syncDirsBefore = fs_->count(testing::FsOp::kSyncDir);
    fs_->failNth(c.op, c.nth, EIO);
    Status s = batch->commit();
    fs_->clearFaults();
    EXPECT_TRUE(s.isUnavailable()) << s;  // EIO: try again later (status.h)
    EXPECT_TRUE(contains(s.message(), c.message)) << s;
    EXPECT_TRUE(contains(s.message(), std::strerror(EIO))) << s;
    if (c.op == testing::FsOp::kSyncDir) {
      EXPECT_GE(fs_->count(testing::FsOp::kSyncDir), syncDirsBefore + c.nth);
    }
    EXPECT_TRUE(listOrDie("").empty()) << listOrDie("").front().path;
    EXPECT_TRUE(temporaries("").empty()) << temporaries("").front().path;
    batch.reset();
    EXPECT_TRUE(rawFiles(root_).empty());
  }
}

TEST_F(FileBatchTest, AFailureWhileAddingAFileFailsThatFileOnlyAndLeavesNoTemporaryOfIt) {
  struct Case {
    std::string name;
    testing::FsOp op;
    uint64_t nth;
    int err;
    bool (Status::*is)() const;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"a full disk while copying", testing::FsOp::kWrite, 1, ENOSPC, &Status::isNoSpace, "cannot write"},
      {"an fsync fails", testing::FsOp::kSync, 1, EIO, &Status::isUnavailable, "cannot sync"},
      // The source is opened first, then the temporary file.
      {"the temporary file cannot be created", testing::FsOp::kOpen, 2, EIO, &Status::isUnavailable, "cannot create"},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = "job-" + std::to_string(++n);
    const auto files = threeFiles(dir);
    auto batch = storage_->createBatch();
    ASSERT_OK(batch->putFile(files[0].path, files[0].local));
    fs_->failNth(c.op, c.nth, c.err);
    Status s = batch->putFile(files[1].path, files[1].local);
    fs_->clearFaults();
    EXPECT_TRUE((s.*c.is)()) << s;
    EXPECT_TRUE(contains(s.message(), c.message)) << s;
    EXPECT_EQ(temporaries(dir).size(), 1u) << "only the first file's";
    ASSERT_OK(batch->putFile(files[2].path, files[2].local));
    ASSERT_OK(batch->commit());
    std::vector<FileEntry> published = listOrDie(dir);
    ASSERT_EQ(published.size(), 2u);
    EXPECT_EQ(published[0].path, files[2].path);
    EXPECT_EQ(published[1].path, files[0].path);
    EXPECT_TRUE(temporaries(dir).empty());
  }
}

TEST_F(FileBatchTest, AfterAPowerLossAtAnyPointEveryPublishedFileIsWholeAndACommittedBatchIsComplete) {
  struct Case {
    std::string name;
    bool commit;                           // call commit() at all
    std::vector<std::pair<testing::FsOp, uint64_t>> faults;  // during commit()
    bool complete;                         // every file must be there after the power loss
  };
  const std::vector<Case> cases = {
      {"power lost before commit", false, {}, false},
      {"the second rename fails, then the power", true, {{testing::FsOp::kRename, 2}}, false},
      {"a directory fsync fails, then the power", true, {{testing::FsOp::kSyncDir, 2}}, false},
      {"a directory fsync and the clean-up fail, then the power", true,
       {{testing::FsOp::kSyncDir, 1}, {testing::FsOp::kUnlink, 1}}, false},
      {"power lost after commit", true, {}, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::error_code ec;
    fs::remove_all(root_, ec);  // new directories each time: their durability is tested too
    const auto files = threeFiles("job");
    auto batch = batchOf(files);
    if (c.commit) {
      for (const auto& [op, nth] : c.faults) fs_->failNth(op, nth, EIO);
      Status s = batch->commit();
      fs_->clearFaults();
      EXPECT_EQ(s.ok(), c.faults.empty()) << s;
    }
    fs_->setFilesystemActive(false);  // the process dies, its clean-up does nothing
    batch.reset();
    storage_.reset();
    ASSERT_OK(fs_->dropUnsyncedData());
    reopen();
    std::vector<FileEntry> left = listOrDie("");
    for (const FileEntry& e : left) {
      auto f = std::find_if(files.begin(), files.end(), [&](const Upload& u) { return u.path == e.path; });
      ASSERT_NE(f, files.end()) << e.path;
      EXPECT_EQ(getOrDie(e.path), readLocal(f->local)) << e.path << " is not whole";
    }
    if (c.complete) {
      EXPECT_EQ(left.size(), files.size());
    }
  }
}

TEST_F(FileBatchTest, ACommitFsyncsEachDirectoryOnceWhereOnePutFilePerFileFsyncsItForEveryFile) {
  // Existing directories, as for a checkpoint's shared/ and chk-N/ after the first.
  ASSERT_OK(storage_->put("job/shared/old", "o"));
  ASSERT_OK(storage_->put("job/chk-1/old", "o"));
  std::vector<Upload> files;
  for (int i = 0; i < 6; ++i) {
    const std::string name = (i < 4 ? "shared/0000" : "chk-1/misc-") + std::to_string(i);
    files.push_back({"job/" + name, source("f" + std::to_string(i), 1000 + i, 100 + i)});
  }
  struct Counts {
    uint64_t syncs, syncDirs, renames;
  };
  auto counts = [&] {
    return Counts{fs_->count(testing::FsOp::kSync), fs_->count(testing::FsOp::kSyncDir),
                  fs_->count(testing::FsOp::kRename)};
  };
  Counts before = counts();
  auto batch = batchOf(files);
  ASSERT_OK(batch->commit());
  Counts after = counts();
  EXPECT_EQ(after.syncs - before.syncs, 6u);
  EXPECT_EQ(after.renames - before.renames, 6u);
  EXPECT_EQ(after.syncDirs - before.syncDirs, 2u) << "one fsync per directory";

  ASSERT_OK(storage_->removeAll("job/chk-1"));
  ASSERT_OK(storage_->put("job/chk-1/old", "o"));
  for (int i = 0; i < 4; ++i) ASSERT_OK(storage_->remove(files[i].path));
  before = counts();
  for (const Upload& f : files) ASSERT_OK(storage_->putFile(f.path, f.local));
  after = counts();
  EXPECT_EQ(after.syncDirs - before.syncDirs, 6u) << "putFile: one per file";
}

TEST_F(FileBatchTest, FilesAddedFromManyThreadsAtOnceAreAllPublished) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 4;
  std::vector<std::string> locals;
  for (int i = 0; i < kThreads * kPerThread; ++i) locals.push_back(source("t" + std::to_string(i), 3000 + i, i));
  auto batch = storage_->createBatch();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kPerThread; ++k) {
        const int i = t * kPerThread + k;
        if (!batch->putFile("job/" + std::string(i % 2 == 0 ? "shared/" : "chk-1/") + std::to_string(i), locals[i]).ok())
          failures.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(listOrDie("").empty());
  ASSERT_OK(batch->commit());
  std::vector<FileEntry> published = listOrDie("");
  ASSERT_EQ(published.size(), locals.size());
  for (const FileEntry& e : published) {
    const int i = std::stoi(e.path.substr(e.path.rfind('/') + 1));
    EXPECT_EQ(e.size, 3000u + i) << e.path;
  }
  EXPECT_TRUE(temporaries("").empty());
}

// ---------------------------------------------------------------------------------------
// The default FileBatch (storages that do not batch, e.g. S3): one putFile() per file

/// Forwards everything to a LocalFileStorage except createBatch(), so the base class's
/// default batch runs over it.
class NonBatchingStorage final : public testing::ForwardingStorage {
 public:
  using ForwardingStorage::ForwardingStorage;
  Status putFile(const std::string& p, const std::string& l) override {
    ++putFiles;
    return base_.putFile(p, l);
  }

  std::atomic<int> putFiles{0};
};

TEST_F(FileBatchTest, TheDefaultBatchPutsEachFileAsItIsAddedAndRemovesThemUnlessCommitted) {
  NonBatchingStorage plain(*storage_);
  const auto files = threeFiles("job");
  for (bool commit : {false, true}) {
    SCOPED_TRACE(commit ? "committed" : "dropped");
    auto batch = plain.createBatch();
    for (const Upload& f : files) ASSERT_OK(batch->putFile(f.path, f.local));
    EXPECT_EQ(listOrDie("").size(), 3u) << "each file is published by its putFile()";
    Status again = batch->putFile(files[0].path, files[1].local);
    EXPECT_TRUE(again.isInvalidArgument()) << again;
    if (commit) ASSERT_OK(batch->commit());
    batch.reset();
    EXPECT_EQ(listOrDie("").size(), commit ? 3u : 0u);
  }
  EXPECT_EQ(plain.putFiles.load(), 8);
  for (const Upload& f : files) EXPECT_EQ(getOrDie(f.path), readLocal(f.local)) << f.path;
}

}  // namespace
}  // namespace jobhost::state
