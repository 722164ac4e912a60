// A randomized, model-based test of the checkpoint files' life cycle under injected faults
// (issue 12, item 7; LevelDB's fault_injection_test and RocksDB's crash test are the
// models). A real job — generator source -> keyBy -> running count, parallelism 2, heap or
// RocksDB incremental — runs in-process under the real CheckpointCoordinator, whose job
// directory storage does all its I/O through a FaultInjectionFileSystem. A seeded RNG
// picks the steps: checkpoints (with random EIO/ENOSPC on writes, fsyncs, renames,
// unlinks), crashes with a power loss that drops everything not fsynced, recoveries as the
// supervisor does them (registry rebuilt, garbage collected, the latest complete
// checkpoint restored), `gc`, a claimed restore into a new job directory, and a cancel
// with DELETE_ON_CANCELLATION. After every step:
//   - every checkpoint reported complete and still retained restores to the model's state
//     (the count of every key follows from the source position stored with it), and
//   - no file a retained checkpoint names was deleted.
// CI runs fixed seeds; any seed by hand: JOBHOST_MODEL_SEED=<n> JOBHOST_MODEL_STEPS=<n>
// ./jobhost_unit_tests --gtest_filter='*RecoveryModel*'.
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "checkpoint/checkpoint_coordinator.h"
#include "jobhost/jobhost.h"
#include "jobhost/state/checkpoint_layout.h"
#include "jobhost/state/snapshot_registry.h"
#include "runtime/job_execution.h"
#include "runtime/key_group_assignment.h"
#include "support/fault_injection.h"

namespace jobhost::host {
namespace {

namespace fs = std::filesystem;
using testing::FaultInjectionFileSystem;
using testing::FsOp;

constexpr int64_t kKeys = 37;
constexpr int kMaxParallelism = 128;

Plan countingPlan() {
  StreamEnvironment env;
  env.fromGenerator<int64_t>(0, [](uint64_t i) { return static_cast<int64_t>(i); }, 20000)
      .uid("src")
      .map([](const int64_t& i) { return std::pair<int64_t, int64_t>(i % kKeys, 1); })
      .keyBy([](const std::pair<int64_t, int64_t>& p) { return p.first; })
      .sum<1>()
      .uid("counts")
      .addSink([](const std::pair<int64_t, int64_t>&) {});
  return env.takePlan();
}

/// What the count of `key` must be once the source emitted records 0 .. position-1.
int64_t expectedCount(int64_t key, uint64_t position) {
  uint64_t full = position / kKeys, rest = position % kKeys;
  return static_cast<int64_t>(full + (static_cast<uint64_t>(key) < rest ? 1 : 0));
}

/// Checks one snapshot against the model; "" if it matches, else what is wrong.
std::string verify(state::CheckpointStorage& storage, const state::CheckpointMetadata& m, const fs::path& scratch) {
  const auto* src = m.findOperator("src");
  const auto* counts = m.findOperator("counts");
  if (!src || src->subtasks.size() != 1 || !counts) return "operators missing from the metadata";
  for (const auto& f : m.referencedFiles()) {
    auto size = storage.fileSize(f.path);
    if (!size.ok() || *size != f.size) return "file " + f.path + " is missing or has another size";
  }
  ByteReader r(src->subtasks[0].operatorState);
  uint64_t position = r.readFixed<uint64_t>();
  state::BackendOptions bo;
  bo.operatorUid = "counts";
  bo.maxParallelism = kMaxParallelism;
  bo.range = {0, kMaxParallelism - 1};
  bo.localDir = (scratch / ("verify-" + std::to_string(m.checkpointId))).string();
  bool rocks = m.backend == "rocksdb";
  auto backend = rocks ? state::createRocksDbBackend(bo) : state::createHeapBackend(bo);
  if (!backend.ok()) return "backend: " + backend.status().toString();
  state::RestoreInput in;
  in.storage = &storage;
  in.states = counts->states;
  for (const auto& sub : counts->subtasks) in.handles.push_back(sub.keyed);
  if (auto s = (*backend)->restore(in); !s.ok()) return "restore: " + s.toString();
  int handle = (*backend)->registerState(counts->states.at(0));
  for (int64_t key = 0; key < kKeys; ++key) {
    std::string keyBytes, value;
    serializeInto(keyBytes, key);
    (*backend)->setCurrentKey(keyGroupFor(keyBytes, kMaxParallelism), keyBytes);
    int64_t have = (*backend)->get(handle, value) ? deserialize<std::pair<int64_t, int64_t>>(value).second : 0;
    if (have != expectedCount(key, position))
      return "key " + std::to_string(key) + " has count " + std::to_string(have) + ", the model says " +
             std::to_string(expectedCount(key, position)) + " at position " + std::to_string(position);
  }
  backend->reset();
  std::error_code ec;
  fs::remove_all(bo.localDir, ec);
  return "";
}

/// One process of the job: a coordinator and an execution over the job directory.
class Incarnation {
 public:
  Incarnation(std::shared_ptr<state::FileSystem> fs, const fs::path& jobDir, const fs::path& local, bool rocks,
              int retained, const std::optional<fs::path>& restoreFrom, uint64_t firstId,
              size_t abortedIdsRemembered = CoordinatorOptions{}.abortedIdsRemembered) {
    auto storage = state::openStorage(jobDir.string(), fs);
    EXPECT_TRUE(storage.ok()) << storage.status().toString();
    auto registry = state::SnapshotRegistry::load(std::move(*storage));
    EXPECT_TRUE(registry.ok()) << registry.status().toString();
    CoordinatorOptions co;
    co.numRetained = retained;
    co.tolerableFailures = 1 << 20;
    co.abortedIdsRemembered = abortedIdsRemembered;
    state::CheckpointMetadata templ;
    templ.jobId = jobDir.filename().string();
    templ.jobClass = "Model";
    templ.backend = rocks ? "rocksdb" : "hashmap";
    templ.incremental = rocks;
    templ.parallelism = 2;
    templ.maxParallelism = kMaxParallelism;
    coordinator_ = std::make_unique<CheckpointCoordinator>(co, std::move(*registry), templ, firstId);
    coordinator_->setOnHistoryChange([this](const CheckpointRecord& r) {
      std::lock_guard lock(mu_);
      if (!r.savepoint) status_[r.id] = r;
      cv_.notify_all();
    });
    ExecutionConfig ec;
    ec.parallelism = 2;
    ec.maxParallelism = kMaxParallelism;
    ec.backend = rocks ? state::BackendType::kRocksDb : state::BackendType::kHashMap;
    ec.incremental = rocks;
    ec.localStateDir = local.string();
    exec_ = std::make_unique<JobExecution>(countingPlan(), ec, coordinator_.get());
    std::optional<ResolvedSnapshot> snapshot;
    RestoreSource rs;
    if (restoreFrom) {
      auto snap = openSnapshot(restoreFrom->string());
      EXPECT_TRUE(snap.ok()) << snap.status().toString();
      snapshot = std::move(*snap);
      rs.metadata = &snapshot->metadata;
      rs.storage = snapshot->storage.get();
    }
    state::Status s = exec_->prepare(restoreFrom ? &rs : nullptr);
    EXPECT_TRUE(s.ok()) << s.toString();
    coordinator_->attach(exec_.get());
    exec_->start();
  }
  ~Incarnation() { stop(); }

  /// Triggers a checkpoint and waits until it completed or failed; its id if completed.
  std::optional<uint64_t> checkpoint() {
    uint64_t before = 0;
    {
      std::lock_guard lock(mu_);
      if (!status_.empty()) before = status_.rbegin()->first;
    }
    if (!coordinator_->triggerCheckpoint()) return std::nullopt;
    std::unique_lock lock(mu_);
    bool ended = cv_.wait_for(lock, std::chrono::seconds(60), [&] {
      auto it = status_.upper_bound(before);
      return it != status_.end() && it->second.status != CheckpointRecord::Status::kInProgress;
    });
    EXPECT_TRUE(ended) << "a checkpoint neither completed nor failed within a minute";
    if (!ended) return std::nullopt;
    auto it = status_.upper_bound(before);
    if (it->second.status != CheckpointRecord::Status::kCompleted) return std::nullopt;
    return it->first;
  }
  std::vector<uint64_t> retained() const { return coordinator_->retainedIds(); }
  /// Ends the process: the execution is cancelled and the coordinator detached.
  void stop() {
    if (!exec_) return;
    exec_->cancel();
    exec_->wait();
    coordinator_->detach();
    coordinator_->stop();
    exec_.reset();
    coordinator_.reset();
  }

 private:
  std::unique_ptr<CheckpointCoordinator> coordinator_;
  std::unique_ptr<JobExecution> exec_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, CheckpointRecord> status_;  // guarded by mu_
};

struct ModelParam {
  bool rocks;
  uint64_t seed;
};

class RecoveryModel : public ::testing::TestWithParam<ModelParam> {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("jobhost-model-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(GetParam().seed) + (GetParam().rocks ? "-rocks" : "-heap"));
    fs::remove_all(root_);
    fs::create_directories(root_ / "local");
    fs_ = std::make_shared<FaultInjectionFileSystem>();
  }
  void TearDown() override {
    job_.reset();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  /// A plain storage on the same directory, for checking (no faults).
  std::shared_ptr<state::CheckpointStorage> plain(const fs::path& dir) { return state::openStorage(dir.string()).value(); }

  /// Invariants: every retained checkpoint the job reported complete restores to the
  /// model and has all its files.
  void checkInvariants(const std::string& step) {
    SCOPED_TRACE(step);
    auto storage = plain(jobDir_);
    auto registry = state::SnapshotRegistry::load(storage);
    ASSERT_TRUE(registry.ok()) << registry.status().toString();
    for (uint64_t id : mustExist_) {
      const auto* m = registry->checkpoint(id);
      ASSERT_NE(m, nullptr) << "checkpoint " << id << " was reported complete and is retained, but is gone";
      std::string problem = verify(*storage, *m, root_ / "local");
      EXPECT_EQ(problem, "") << "checkpoint " << id;
    }
  }
  void startJob(const std::optional<fs::path>& restoreFrom) {
    uint64_t firstId = 1;
    if (restoreFrom) firstId = state::parseCheckpointDirName(restoreFrom->filename().string()).value_or(0) + 1;
    job_ = std::make_unique<Incarnation>(fs_, jobDir_, root_ / "local" / ("attempt-" + std::to_string(++attempts_)),
                                         GetParam().rocks, 2, restoreFrom, firstId);
  }
  /// The supervisor's recovery: no writer runs; collect garbage, restore the latest.
  void recover() {
    fs_->clearFaults();
    auto registry = state::SnapshotRegistry::load(state::openStorage(jobDir_.string(), fs_).value());
    ASSERT_TRUE(registry.ok()) << registry.status().toString();
    for (uint64_t id : mustExist_)
      ASSERT_NE(registry->checkpoint(id), nullptr) << "checkpoint " << id << " did not survive the crash";
    auto garbage = registry->findGarbage();
    ASSERT_TRUE(garbage.ok());
    ASSERT_TRUE(registry->collect(*garbage).ok());
    auto ids = registry->checkpointIds();
    std::optional<fs::path> from;
    if (!ids.empty()) from = jobDir_ / state::checkpointDirName(ids.back());
    // The newest complete checkpoint is restored: the newest one reported complete, or a
    // newer one whose publication failed only after its `_metadata` was durable.
    if (!mustExist_.empty()) {
      ASSERT_GE(ids.back(), *mustExist_.rbegin()) << "recovery must restore the newest";
    }
    startJob(from);
  }
  void injectRandomFaults(std::mt19937_64& rng) {
    fs_->clearFaults();
    if (rng() % 3 == 0) return;  // a third of the checkpoints run clean
    const FsOp kinds[] = {FsOp::kWrite, FsOp::kSync, FsOp::kRename, FsOp::kUnlink, FsOp::kSyncDir, FsOp::kMkdir};
    FsOp op = kinds[rng() % std::size(kinds)];
    fs_->failRandomly(op, 0.05, rng() % 2 ? EIO : ENOSPC, rng());
  }
  void crash() {
    fs_->setFilesystemActive(false);  // the process dies: nothing it does reaches the disk
    job_.reset();
    ASSERT_TRUE(fs_->dropUnsyncedData().ok());  // and the power goes
  }

  fs::path root_;
  fs::path jobDir_;
  std::shared_ptr<FaultInjectionFileSystem> fs_;
  std::unique_ptr<Incarnation> job_;
  std::set<uint64_t> mustExist_;  // reported complete and retained
  int attempts_ = 0;
};

uint64_t envOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::stoull(v) : fallback;
}

TEST_P(RecoveryModel, EveryCompleteCheckpointRestoresToTheModelAndNoReferencedFileIsDeletedUnderFaultsAndCrashes) {
  uint64_t seed = envOr("JOBHOST_MODEL_SEED", GetParam().seed);
  int steps = static_cast<int>(envOr("JOBHOST_MODEL_STEPS", 40));
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (JOBHOST_MODEL_SEED reproduces it)");
  jobDir_ = root_ / "job-1";
  fs::create_directories(jobDir_);
  startJob(std::nullopt);
  int jobs = 1;
  int completedCount = 0, failedCount = 0, crashes = 0, claims = 0, cancels = 0;
  for (int step = 0; step < steps && !HasFatalFailure(); ++step) {
    uint64_t dice = rng() % 100;
    std::string what;
    if (dice < 60) {
      what = "checkpoint";
      injectRandomFaults(rng);
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 20));  // let the state change
      auto id = job_->checkpoint();
      fs_->clearFaults();
      if (id) ++completedCount;
      else ++failedCount;
      auto retained = job_->retained();
      mustExist_ = {retained.begin(), retained.end()};
    } else if (dice < 80) {
      what = "crash + power loss + recovery";
      ++crashes;
      crash();
      recover();
    } else if (dice < 88) {
      what = "crash + gc + recovery";
      ++crashes;
      crash();
      auto registry = state::SnapshotRegistry::load(state::openStorage(jobDir_.string(), fs_).value());
      ASSERT_TRUE(registry.ok());
      auto garbage = registry->findGarbage();
      ASSERT_TRUE(garbage.ok());
      ASSERT_TRUE(registry->collect(*garbage).ok());
      ASSERT_TRUE(registry->findGarbage().value().empty()) << "gc left garbage";
      checkInvariants("after gc");
      recover();
    } else if (dice < 96) {
      if (mustExist_.empty()) continue;
      what = "claimed restore into a new job directory";
      ++claims;
      job_.reset();  // a clean stop
      fs::path claimed = jobDir_ / state::checkpointDirName(*mustExist_.rbegin());
      fs::path oldDir = jobDir_;
      jobDir_ = root_ / ("job-" + std::to_string(++jobs));
      fs::create_directories(jobDir_);
      mustExist_.clear();
      startJob(claimed);
      std::optional<uint64_t> first;
      for (int i = 0; i < 20 && !first; ++i) first = job_->checkpoint();
      ASSERT_TRUE(first.has_value()) << "the claiming job never completed a checkpoint";
      auto retained = job_->retained();
      mustExist_ = {retained.begin(), retained.end()};
      // Claim disposal, as the supervisor does it: through the old directory's registry.
      auto registry = state::SnapshotRegistry::load(state::openStorage(oldDir.string(), fs_).value());
      ASSERT_TRUE(registry.ok());
      ASSERT_TRUE(registry->discard(claimed.filename().string()).ok());
      EXPECT_FALSE(fs::exists(claimed / "_metadata"));
    } else {
      what = "cancel with DELETE_ON_CANCELLATION, then a fresh job";
      ++cancels;
      job_.reset();
      auto registry = state::SnapshotRegistry::load(state::openStorage(jobDir_.string(), fs_).value());
      ASSERT_TRUE(registry.ok());
      for (uint64_t id : registry->checkpointIds()) ASSERT_TRUE(registry->discard(state::checkpointDirName(id)).ok());
      ASSERT_TRUE(registry->collect(registry->findGarbage().value()).ok());
      std::vector<state::FileEntry> left;
      ASSERT_TRUE(plain(jobDir_)->list("", &left).ok());
      EXPECT_TRUE(left.empty()) << left.front().path << " survived the cancel";
      mustExist_.clear();
      jobDir_ = root_ / ("job-" + std::to_string(++jobs));
      fs::create_directories(jobDir_);
      startJob(std::nullopt);
    }
    checkInvariants("step " + std::to_string(step) + ": " + what);
  }
  job_.reset();
  RecordProperty("completed", completedCount);
  RecordProperty("failed", failedCount);
  std::printf("seed %llu: %d checkpoints completed, %d failed, %d crashes, %d claims, %d cancels\n",
              static_cast<unsigned long long>(seed), completedCount, failedCount, crashes, claims, cancels);
  EXPECT_GT(completedCount, 0) << "no checkpoint ever completed: nothing was tested";
}

/// The files below dir (recursively), as paths relative to `base`.
std::set<std::string> filesBelow(const fs::path& dir, const fs::path& base) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    // Lexically: the background clean-up may delete a file meanwhile (fs::relative
    // resolves the path on disk and would throw).
    if (std::error_code fe; it->is_regular_file(fe)) out.insert(it->path().lexically_relative(base).string());
  return out;
}

std::shared_ptr<state::CheckpointStorage> plainStorage(const fs::path& jobDir) {
  return state::openStorage(jobDir.string()).value();
}

/// A completed checkpoint as the store has it: its metadata and the shared files it
/// references.
struct Published {
  state::CheckpointMetadata metadata;
  std::set<std::string> shared;
};
std::optional<Published> published(const fs::path& jobDir, uint64_t id) {
  auto registry = state::SnapshotRegistry::load(plainStorage(jobDir));
  if (!registry.ok()) {
    ADD_FAILURE() << registry.status().toString();
    return std::nullopt;
  }
  const state::CheckpointMetadata* m = registry->checkpoint(id);
  if (!m) return std::nullopt;
  Published p{*m, {}};
  for (const auto& f : m->referencedFiles())
    if (f.path.rfind("shared/", 0) == 0) p.shared.insert(f.path);
  return p;
}

// Regression: a checkpoint whose `_metadata` cannot be written is aborted, and the shared
// files it uploaded itself go with it (nothing references them): at once after an I/O
// error, once the store answers again after ENOSPC (taken as the store being unavailable:
// clean-ups wait for it). The coordinator moved the tasks' handles out of their
// acknowledgements into the metadata it assembled, so the abort's clean-up found no file
// of the checkpoint and left its SSTs in shared/ until a `jobhost gc`.
TEST(CheckpointFiles, ACheckpointWhoseMetadataCannotBeWrittenLeavesNoSharedFileBehind) {
  for (int err : {EIO, ENOSPC}) {
    SCOPED_TRACE(std::strerror(err));
    const fs::path root = fs::temp_directory_path() / ("jobhost-abort-" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root / "local");
    const fs::path jobDir = root / "job";
    auto faults = std::make_shared<FaultInjectionFileSystem>();
    Incarnation job(faults, jobDir, root / "local", /*rocks=*/true, 1, std::nullopt, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // records in RocksDB's memtable: SSTs to upload
    faults->failOnPath(FsOp::kRename, "_metadata", err);
    EXPECT_EQ(job.checkpoint(), std::nullopt) << "the checkpoint must fail: its _metadata cannot be published";
    // Both errors leave the store "unavailable", so the clean-up waits for the next
    // checkpoint and the aborted one's files are still there to be seen.
    std::set<std::string> aborted = filesBelow(jobDir / "shared", jobDir);
    EXPECT_FALSE(aborted.empty()) << "the test needs a checkpoint that uploads shared files";
    // The next one completes with its own shared files. Once the clean-up (in the
    // background) has run, shared/ holds exactly what that checkpoint references.
    std::optional<uint64_t> next = job.checkpoint();
    ASSERT_TRUE(next.has_value());
    std::optional<Published> done = published(jobDir, *next);
    ASSERT_TRUE(done.has_value());
    const state::CheckpointMetadata* m = &done->metadata;
    const std::set<std::string>& referenced = done->shared;
    for (int i = 0; i < 500 && filesBelow(jobDir / "shared", jobDir) != referenced; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(filesBelow(jobDir / "shared", jobDir), referenced) << "files of the aborted checkpoint 1 are left";
    for (int i = 0; i < 500 && !filesBelow(jobDir / "chk-1", jobDir).empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(filesBelow(jobDir / "chk-1", jobDir), std::set<std::string>{});
    EXPECT_EQ(verify(*plainStorage(jobDir), *m, root / "local"), "");
    job.stop();
    std::error_code ec;
    fs::remove_all(root, ec);
  }
}

// Regression: clean-ups of checkpoints aborted while the store is unavailable wait until
// it answers again, but the coordinator ran them only for ids it still remembered as
// aborted (then the last 64). After an outage of more than that many checkpoints the
// directories and shared files of the earlier ones stayed until a `jobhost gc`; meanwhile
// it held every aborted checkpoint's whole acknowledgements (operator state, in-flight
// records) in memory. Here it remembers 8 ids, and the outage aborts 20 checkpoints.
TEST(CheckpointFiles, AnOutageOfManyCheckpointsLeavesNoFileOfTheAbortedOnesOnceTheStoreAnswers) {
  const fs::path root = fs::temp_directory_path() / ("jobhost-outage-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "local");
  const fs::path jobDir = root / "job";
  auto faults = std::make_shared<FaultInjectionFileSystem>();
  Incarnation job(faults, jobDir, root / "local", /*rocks=*/true, 1, std::nullopt, 1, /*abortedIdsRemembered=*/8);
  // ENOSPC publishing every `_metadata`: the store is unavailable, each checkpoint is
  // aborted after its parts uploaded their files, and the clean-ups wait for the store.
  constexpr int kAborted = 20;
  for (int i = 0; i < kAborted; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // new records: new SSTs to upload
    faults->failOnPath(FsOp::kRename, "_metadata", ENOSPC);  // a rule fails once
    ASSERT_EQ(job.checkpoint(), std::nullopt) << "checkpoint " << i + 1 << " must fail: its _metadata cannot be published";
  }
  auto chkDirs = [&] {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(jobDir))
      if (e.path().filename().string().rfind("chk-", 0) == 0) out.insert(e.path().filename().string());
    return out;
  };
  EXPECT_GE(chkDirs().size(), static_cast<size_t>(kAborted)) << "the aborted checkpoints' clean-ups must wait";
  faults->clearFaults();
  std::optional<uint64_t> next = job.checkpoint();
  ASSERT_TRUE(next.has_value());
  std::optional<Published> done = published(jobDir, *next);
  ASSERT_TRUE(done.has_value());
  const state::CheckpointMetadata* m = &done->metadata;
  const std::set<std::string>& referenced = done->shared;
  const std::set<std::string> onlyTheCompleted = {state::checkpointDirName(*next)};
  for (int i = 0; i < 1000 && (chkDirs() != onlyTheCompleted || filesBelow(jobDir / "shared", jobDir) != referenced);
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(chkDirs(), onlyTheCompleted) << "directories of aborted checkpoints are left";
  EXPECT_EQ(filesBelow(jobDir / "shared", jobDir), referenced) << "shared files of aborted checkpoints are left";
  EXPECT_EQ(verify(*plainStorage(jobDir), *m, root / "local"), "");
  job.stop();
  std::error_code ec;
  fs::remove_all(root, ec);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RecoveryModel,
                         ::testing::Values(ModelParam{false, 1}, ModelParam{false, 2}, ModelParam{true, 3},
                                           ModelParam{true, 4}),
                         [](const ::testing::TestParamInfo<ModelParam>& p) {
                           return std::string(p.param.rocks ? "RocksDbIncremental" : "Hashmap") + "Seed" +
                                  std::to_string(p.param.seed);
                         });

}  // namespace
}  // namespace jobhost::host
