// Tests of the one owner of snapshot files (jobhost/state/snapshot_registry.h) and of the
// job-directory lock (host/checkpoint/job_directory_lock.h).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoint/job_directory_lock.h"
#include "support/fault_injection.h"
#include "jobhost/state/checkpoint_layout.h"
#include "jobhost/state/snapshot_registry.h"

namespace fs = std::filesystem;
using namespace jobhost;
using namespace jobhost::state;

namespace {

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("jobhost-registry-" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

/// A rocksdb-incremental-like checkpoint: `own` files in chk-<id>/, `shared` files under
/// shared/ (written here unless they exist).
CheckpointMetadata incremental(uint64_t id, const std::vector<std::string>& shared) {
  CheckpointMetadata m;
  m.jobId = "job";
  m.checkpointId = id;
  m.jobClass = "WordCount";
  m.backend = "rocksdb";
  m.incremental = true;
  OperatorSnapshot op;
  op.uid = "counts";
  op.name = "counts";
  op.keyed = true;
  SubtaskSnapshot sub;
  IncrementalStateHandle h;
  h.backendId = "b";
  h.checkpointId = id;
  h.range = {0, 127};
  for (const auto& s : shared) h.sharedFiles.push_back({s, {"shared/" + s, 3}, id});
  h.privateFiles.push_back({"MANIFEST", {checkpointDirName(id) + "/MANIFEST", 3}, id});
  sub.keyed = h;
  op.subtasks.push_back(sub);
  m.operators.push_back(op);
  return m;
}

class Registry : public ::testing::Test {
 protected:
  TempDir tmp;
  std::shared_ptr<CheckpointStorage> storage;
  void SetUp() override { storage = std::shared_ptr<CheckpointStorage>(openStorage(tmp.path().string()).value()); }
  /// Writes the files of `m` and publishes it through a registry.
  void write(SnapshotRegistry& r, const CheckpointMetadata& m) {
    for (const auto& f : m.referencedFiles()) {
      if (!storage->exists(f.path)) {
        ASSERT_TRUE(storage->put(f.path, "abc").ok());
      }
    }
    ASSERT_TRUE(r.publish(checkpointDirName(m.checkpointId), m).ok());
  }
  SnapshotRegistry load() { return SnapshotRegistry::load(storage).value(); }
  bool has(const std::string& p) { return fs::exists(tmp.path() / p); }
};

TEST_F(Registry, IsRebuiltFromTheMetadataFilesWithEveryReference) {
  {
    auto r = load();
    write(r, incremental(1, {"a.sst", "b.sst"}));
    write(r, incremental(2, {"a.sst", "c.sst"}));
  }
  auto r = load();
  EXPECT_EQ(r.checkpointIds(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(r.referencesOf("shared/a.sst"), (std::vector<std::string>{"chk-1", "chk-2"}));
  EXPECT_EQ(r.referencesOf("shared/b.sst"), (std::vector<std::string>{"chk-1"}));
  EXPECT_EQ(r.highestCheckpointIdSeen(), 2u);
}

TEST_F(Registry, DiscardRemovesMetadataFirstAndKeepsSharedFilesOthersReference) {
  auto r = load();
  write(r, incremental(1, {"a.sst", "b.sst"}));
  write(r, incremental(2, {"a.sst", "c.sst"}));
  std::vector<RemovedFile> removed;
  ASSERT_TRUE(r.discard("chk-1", &removed).ok());
  ASSERT_FALSE(removed.empty());
  EXPECT_EQ(removed.front().path, "chk-1/_metadata") << "the checkpoint must stop existing before any file goes";
  EXPECT_FALSE(has("chk-1"));
  EXPECT_FALSE(has("shared/b.sst"));
  EXPECT_TRUE(has("shared/a.sst")) << "still referenced by chk-2";
  EXPECT_TRUE(has("shared/c.sst"));
  EXPECT_EQ(load().checkpointIds(), (std::vector<uint64_t>{2}));
}

TEST_F(Registry, GarbageIsWhatNoCompleteCheckpointReferencesIncludingTemporaryFiles) {
  auto r = load();
  write(r, incremental(1, {"a.sst"}));
  ASSERT_TRUE(storage->put("chk-2/x.kg", "x").ok());          // never completed
  ASSERT_TRUE(storage->put("shared/orphan.sst", "x").ok());   // uploaded, never referenced
  ASSERT_TRUE(storage->put(".lock", "").ok());                // the lock file is not garbage
  std::ofstream(tmp.path() / "shared" / ".up.sst.tmp.0123456789abcdef") << "partial";  // a crashed upload
  auto reg = load();
  EXPECT_EQ(reg.highestCheckpointIdSeen(), 2u);
  auto garbage = reg.findGarbage().value();
  std::vector<std::string> paths;
  for (const auto& g : garbage) paths.push_back(g.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"chk-2/x.kg", "shared/.up.sst.tmp.0123456789abcdef", "shared/orphan.sst"}));
  std::vector<RemovedFile> removed;
  ASSERT_TRUE(reg.collect(garbage, &removed).ok());
  EXPECT_EQ(removed.size(), 3u);
  EXPECT_FALSE(has("chk-2"));
  EXPECT_FALSE(has("shared/orphan.sst"));
  EXPECT_FALSE(has("shared/.up.sst.tmp.0123456789abcdef"));
  EXPECT_TRUE(has("shared/a.sst"));
  EXPECT_TRUE(has("chk-1/_metadata"));
  EXPECT_TRUE(has(".lock"));
  EXPECT_TRUE(load().findGarbage().value().empty());
}

/// Local storage whose listing lags behind: paths in `hidden` are not listed (as a Ceph
/// RGW bucket index may not list an object whose PUT was already acknowledged), while
/// get/exists/open see them.
class LaggingListing final : public CheckpointStorage {
 public:
  explicit LaggingListing(std::shared_ptr<CheckpointStorage> base) : base_(std::move(base)) {}
  std::set<std::string> hidden;
  Result<std::unique_ptr<WritableFile>> create(const std::string& p) override { return base_->create(p); }
  Status putFile(const std::string& p, const std::string& l) override { return base_->putFile(p, l); }
  Status put(const std::string& p, std::string_view b) override { return base_->put(p, b); }
  Result<std::unique_ptr<ReadableFile>> open(const std::string& p) override { return base_->open(p); }
  Status get(const std::string& p, std::string* out) override { return base_->get(p, out); }
  Status getToLocalFile(const std::string& p, const std::string& l) override { return base_->getToLocalFile(p, l); }
  Result<uint64_t> fileSize(const std::string& p) override { return base_->fileSize(p); }
  bool exists(const std::string& p) override { return base_->exists(p); }
  Status list(const std::string& prefix, std::vector<FileEntry>* out) override {
    Status s = base_->list(prefix, out);
    std::erase_if(*out, [&](const FileEntry& e) { return hidden.count(e.path) > 0; });
    return s;
  }
  Status listTemporary(const std::string& p, std::vector<FileEntry>* out) override { return base_->listTemporary(p, out); }
  Status remove(const std::string& p) override { return base_->remove(p); }
  Status removeTemporary(const std::string& p) override { return base_->removeTemporary(p); }
  Status removeAll(const std::string& p) override { return base_->removeAll(p); }
  std::string describe(const std::string& p) const override { return base_->describe(p); }
  std::string rootUri() const override { return base_->rootUri(); }

 private:
  std::shared_ptr<CheckpointStorage> base_;
};

// A checkpoint that is complete on the store but was not listed when the registry was
// loaded (an object store's listing lagging behind an acknowledged PUT, or published since)
// is not garbage, and neither is any shared file (it may reference them) — before, its
// files and the shared files only it references were collected as "never completed".
TEST_F(Registry, ACheckpointCompleteOnTheStoreButNotListedIsNeverGarbage) {
  auto r = load();
  write(r, incremental(1, {"a.sst"}));
  write(r, incremental(2, {"a.sst", "b.sst"}));
  auto lagging = std::make_shared<LaggingListing>(storage);
  lagging->hidden.insert("chk-2/_metadata");
  auto reg = SnapshotRegistry::load(lagging).value();
  EXPECT_EQ(reg.checkpointIds(), (std::vector<uint64_t>{1}));  // what the listing shows
  std::vector<std::string> kept;
  auto garbage = reg.findGarbage(&kept).value();
  EXPECT_TRUE(garbage.empty()) << garbage.front().path;
  EXPECT_EQ(kept.size(), 2u);  // chk-2, and shared/
  // Published after the load and listed now: the same.
  auto before = load();
  write(r, incremental(3, {"c.sst"}));
  garbage = before.findGarbage().value();
  EXPECT_TRUE(garbage.empty()) << garbage.front().path;
  EXPECT_TRUE(has("shared/b.sst"));
  EXPECT_TRUE(has("chk-2/MANIFEST"));
}

TEST_F(Registry, AnUnreadableMetadataKeepsEveryUnreferencedSharedFile) {
  auto r = load();
  write(r, incremental(1, {"a.sst"}));
  write(r, incremental(2, {"b.sst"}));
  // chk-2's _metadata is damaged: what it references is unknown.
  fs::resize_file(tmp.path() / "chk-2" / "_metadata", 5);
  auto reg = load();
  EXPECT_EQ(reg.checkpointIds(), (std::vector<uint64_t>{1}));
  ASSERT_EQ(reg.unreadable().count("chk-2"), 1u);
  std::vector<std::string> kept;
  auto garbage = reg.findGarbage(&kept).value();
  EXPECT_TRUE(garbage.empty()) << garbage.front().path;
  ASSERT_EQ(kept.size(), 2u);  // chk-2 itself, and shared/
  // Discarding chk-1 must not delete shared files chk-2 may reference.
  ASSERT_TRUE(reg.discard("chk-1").ok());
  EXPECT_TRUE(has("shared/a.sst"));
  EXPECT_TRUE(has("shared/b.sst"));
}

TEST_F(Registry, DiscardIncompleteRemovesTheDirectoryAndUnreferencedUploadsOnly) {
  auto r = load();
  write(r, incremental(1, {"a.sst"}));
  ASSERT_TRUE(storage->put("chk-2/MANIFEST", "x").ok());
  ASSERT_TRUE(storage->put("shared/new.sst", "x").ok());
  std::vector<RemovedFile> removed;
  ASSERT_TRUE(r.discardIncomplete("chk-2", {{"shared/new.sst", 1}, {"shared/a.sst", 3}}, &removed).ok());
  EXPECT_FALSE(has("chk-2"));
  EXPECT_FALSE(has("shared/new.sst"));
  EXPECT_TRUE(has("shared/a.sst")) << "referenced by the complete chk-1";
  Status s = r.discardIncomplete("chk-1");
  EXPECT_TRUE(s.isInvalidArgument()) << s.toString();
  EXPECT_TRUE(has("chk-1/_metadata"));
}

TEST_F(Registry, PublishNeverOverwritesAndDiscardOfAnUnknownSnapshotIsNotFound) {
  auto r = load();
  write(r, incremental(1, {"a.sst"}));
  EXPECT_FALSE(r.publish("chk-1", incremental(1, {"a.sst"})).ok());
  EXPECT_TRUE(r.discard("chk-9").isNotFound());
}

TEST_F(Registry, ASavepointIsDisposedOfAloneWhateverItsNeighboursAre) {
  // Savepoints are self-contained: disposing of one reads nothing else under the parent,
  // so a neighbour that cannot be read does not block it, and nothing outside it goes.
  auto r = load();
  CheckpointMetadata sp = incremental(7, {});
  sp.kind = SnapshotKind::kSavepoint;
  for (const auto& f : sp.referencedFiles()) ASSERT_TRUE(storage->put(f.path, "abc").ok());
  ASSERT_TRUE(r.publish("chk-7", sp).ok());
  ASSERT_TRUE(storage->put("savepoint-other/_metadata", "not a metadata file").ok());
  ASSERT_TRUE(storage->put("shared/a.sst", "kept").ok());
  auto one = SnapshotRegistry::loadOne(storage, "chk-7");
  ASSERT_TRUE(one.ok()) << one.status().toString();
  EXPECT_TRUE(one->findGarbage().value().empty()) << "a partial view finds no garbage";
  ASSERT_TRUE(one->discard("chk-7").ok());
  EXPECT_FALSE(has("chk-7"));
  EXPECT_TRUE(has("savepoint-other/_metadata"));
  EXPECT_TRUE(has("shared/a.sst"));
  EXPECT_TRUE(SnapshotRegistry::loadOne(storage, "chk-7").status().isNotFound());
}

TEST_F(Registry, APublicationThatLosesARaceLeavesTheWinnersMetadataAlone) {
  auto first = load();
  auto second = load();  // loaded before the first publishes
  write(first, incremental(3, {"a.sst"}));
  Status s = second.publish("chk-3", incremental(3, {"a.sst"}));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(has("chk-3/_metadata")) << "the loser removed the winner's _metadata: " << s.toString();
}

TEST(JobDirectoryLock, ASecondHolderIsRefusedWithTheFirstHoldersPidAndClass) {
  TempDir tmp;
  auto first = host::JobDirectoryLock::acquire(tmp.path().string(), {4242, "3f0c9a", "WordCount", "running job"});
  ASSERT_TRUE(first.ok()) << first.status().toString();
  // flock conflicts between open file descriptions, also within one process.
  std::optional<host::LockHolder> heldBy;
  auto second = host::JobDirectoryLock::acquire(tmp.path().string(), {1, "", "", "gc"}, &heldBy);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("3f0c9a"), std::string::npos) << second.status().message();
  EXPECT_NE(second.status().message().find("WordCount"), std::string::npos) << second.status().message();
  EXPECT_NE(second.status().message().find(std::to_string(::getpid())), std::string::npos)
      << "the pid recorded is the holder's own: " << second.status().message();
  ASSERT_TRUE(heldBy.has_value());
  EXPECT_EQ(heldBy->jobClass, "WordCount");
  ASSERT_TRUE(host::JobDirectoryLock::holder(tmp.path().string()).has_value());
  first->release();
  EXPECT_FALSE(host::JobDirectoryLock::holder(tmp.path().string()).has_value());
  EXPECT_TRUE(host::JobDirectoryLock::acquire(tmp.path().string(), {1, "", "", "gc"}).ok());
}

// The store of an object-store lease in the tests below: local storage, whose put() never
// overwrites either, wrapped per lock so that a test can fail that lock's calls.
std::shared_ptr<CheckpointStorage> leaseStore(const TempDir& tmp) {
  auto local = openStorage(tmp.path().string());
  EXPECT_TRUE(local.ok());
  return std::move(*local);
}
std::unique_ptr<jobhost::testing::FaultInjectionStorage> faultable(std::shared_ptr<CheckpointStorage> base) {
  return std::make_unique<jobhost::testing::FaultInjectionStorage>(std::move(base));
}

// An object-store lease left by a killed holder (on this host, its pid gone) or expired is
// removed before the conditional put. A remove that the store does not carry out (an
// outage) is an outage: Unavailable, which the run waits out. It was ignored: the put
// failed on the stale lease again, the second remove went through, and after two tries
// acquire() said "the lease keeps changing; another process is acquiring it", a final
// error (exit 2) in the middle of an S3 outage (chaos-s3-outages, CI of 9672a27).
TEST(JobDirectoryLock, AStaleLeaseThatCannotBeRemovedIsAnOutageNotAnotherAcquirer) {
  char host[256] = {0};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  ASSERT_EQ(waitpid(gone, nullptr, 0), gone);
  const int64_t nowMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
  struct Stale {
    const char* what;
    int pid;
    int64_t expiresMs;
  };
  for (const Stale& stale : {Stale{"holder gone", gone, nowMs + 60'000}, Stale{"expired", ::getpid(), nowMs - 1000}}) {
    SCOPED_TRACE(stale.what);
    TempDir tmp;
    std::shared_ptr<CheckpointStorage> base = leaseStore(tmp);
    ASSERT_TRUE(base->put(kLockFileName, "pid " + std::to_string(stale.pid) + "\njob old\nclass Old\nhost " + host +
                                             "\nowner old\nexpires " + std::to_string(stale.expiresMs) + "\n")
                    .ok());
    auto faulty = faultable(base);
    auto* faults = faulty.get();
    faults->failNth(jobhost::testing::StorageOp::kRemove, 1, ETIMEDOUT);
    auto first = host::JobDirectoryLock::acquireLease(std::move(faulty), "s3://bucket/job", {1, "new", "New", "running job"});
    ASSERT_FALSE(first.ok());
    EXPECT_TRUE(first.status().isUnavailable()) << first.status().toString();
    EXPECT_NE(first.status().message().find("stale lease"), std::string::npos) << first.status().message();
    std::string text;
    ASSERT_TRUE(base->get(kLockFileName, &text).ok());
    EXPECT_NE(text.find("owner old"), std::string::npos) << "the stale lease is still there: " << text;

    // The store answers again: the next try replaces the stale lease.
    auto second = host::JobDirectoryLock::acquireLease(faultable(base),
                                                       "s3://bucket/job", {1, "new", "New", "running job"});
    ASSERT_TRUE(second.ok()) << second.status().toString();
    ASSERT_TRUE(base->get(kLockFileName, &text).ok());
    EXPECT_NE(text.find("job new"), std::string::npos) << text;
  }
}

// A run probes its job directory's lock at start-up and releases it before the supervisor
// takes it for good. If the probe's release does not reach the store (an outage), its
// lease stays, naming this very process, which is alive: the supervisor was refused ("in
// use by job … (pid <ours>)", exit 2) until the lease expired. A lease of this process that
// no lock of it holds is taken over at once; one it still holds is refused as before.
TEST(JobDirectoryLock, ALeaseThisProcessFailedToReleaseIsTakenOverAtOnce) {
  TempDir tmp;
  std::shared_ptr<CheckpointStorage> base = leaseStore(tmp);
  auto probeStorage = faultable(base);
  auto* probeFaults = probeStorage.get();
  auto probe = host::JobDirectoryLock::acquireLease(std::move(probeStorage), "s3://bucket/job",
                                                    {1, "job1", "WordCount", "start of a run"});
  ASSERT_TRUE(probe.ok()) << probe.status().toString();
  // While the probe holds it, a second lock of this process is refused.
  auto refused = host::JobDirectoryLock::acquireLease(faultable(base),
                                                      "s3://bucket/job", {1, "job1", "WordCount", "running job"});
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().isInvalidArgument()) << refused.status().toString();
  probeFaults->failNth(jobhost::testing::StorageOp::kRemove, 1, ECONNRESET);
  probe->release();
  std::string text;
  ASSERT_TRUE(base->get(kLockFileName, &text).ok()) << "the failed release left the lease";
  EXPECT_NE(text.find("start of a run"), std::string::npos) << text;

  auto job = host::JobDirectoryLock::acquireLease(faultable(base),
                                                  "s3://bucket/job", {1, "job1", "WordCount", "running job"});
  ASSERT_TRUE(job.ok()) << job.status().toString();
  ASSERT_TRUE(base->get(kLockFileName, &text).ok());
  EXPECT_NE(text.find("purpose running job"), std::string::npos) << text;
}

TEST(JobDirectoryLock, IsReleasedByTheKernelWhenTheHolderDies) {
  TempDir tmp;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  if (pid == 0) {
    auto lock = host::JobDirectoryLock::acquire(tmp.path().string(), {0, "dead", "Gone", "running job"});
    char c = lock.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    pause();  // killed below, never releases the lock itself
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  EXPECT_FALSE(host::JobDirectoryLock::acquire(tmp.path().string(), {1, "", "", "gc"}).ok());
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_TRUE(host::JobDirectoryLock::acquire(tmp.path().string(), {1, "", "", "gc"}).ok());
}

}  // namespace
