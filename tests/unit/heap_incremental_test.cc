// Unit tests of incremental checkpoints of the hashmap backend
// (state.backend.incremental=true, IncrementalKeyGroupsStateHandle): which key groups a
// checkpoint writes, which files it references, what becomes the base, and that every
// backend restores the handle, whole and rescaled.
//
// Real local checkpoint storage in a fresh temp directory; real RocksDB for the restores
// into the rocksdb backend.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "jobhost/state/checkpoint_metadata.h"
#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/key_group_format.h"
#include "jobhost/state/keyed_backend.h"
#include "support/state_descriptors.h"

namespace jobhost::state {
// Named, not anonymous: this binary is compiled as one unit per batch of sources
// (JOBHOST_UNITY_BUILD), where the helpers of two test files would collide.
namespace heap_incremental_test {

namespace fs = std::filesystem;

constexpr int kMaxParallelism = 32;

StateDescriptorInfo desc(const std::string& name, StateKind kind) {
  return testing::stringDescriptor(name, kind);
}

std::vector<StateDescriptorInfo> allStates() { return {desc("v", StateKind::kValue), desc("m", StateKind::kMap)}; }
constexpr int kValue = 0, kMap = 1;

std::string keyOf(int i) { return "key-" + std::to_string(i); }
int kgOf(int i) { return i % kMaxParallelism; }

/// The model of what the backend should hold: key -> value of "v", key -> map of "m".
struct Model {
  std::map<std::string, std::string> values;
  std::map<std::string, std::map<std::string, std::string>> maps;
  std::map<std::string, int> kg;
};

class HeapIncrementalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() / ("jobhost-heap-incremental-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    auto st = openStorage((root_ / "ckpt").string());
    ASSERT_TRUE(st.ok()) << st.status();
    storage_ = std::move(st).value();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  std::unique_ptr<KeyedStateBackend> make(BackendType type, KeyGroupRange range, bool incremental = true) {
    BackendOptions o;
    o.operatorUid = "op";
    o.maxParallelism = kMaxParallelism;
    o.range = range;
    o.incremental = incremental;
    o.localDir = (root_ / ("local-" + std::to_string(++locals_))).string();
    auto b = type == BackendType::kHashMap ? createHeapBackend(o) : createRocksDbBackend(o);
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return nullptr;
    for (const auto& d : allStates()) (*b)->registerState(d);
    return std::move(b).value();
  }

  void put(KeyedStateBackend& b, Model& m, int i, const std::string& v) {
    b.setCurrentKey(kgOf(i), keyOf(i));
    b.put(kValue, v);
    m.values[keyOf(i)] = v;
    m.kg[keyOf(i)] = kgOf(i);
  }
  void mapPut(KeyedStateBackend& b, Model& m, int i, const std::string& uk, const std::string& v) {
    b.setCurrentKey(kgOf(i), keyOf(i));
    b.mapPut(kMap, uk, v);
    m.maps[keyOf(i)][uk] = v;
    m.kg[keyOf(i)] = kgOf(i);
  }
  void clear(KeyedStateBackend& b, Model& m, int i) {
    b.setCurrentKey(kgOf(i), keyOf(i));
    b.clear(kValue);
    b.clear(kMap);
    m.values.erase(keyOf(i));
    m.maps.erase(keyOf(i));
  }

  /// A checkpoint (shared directory "shared") or, with savepoint, a self-contained one.
  Result<KeyedStateHandle> snapshot(KeyedStateBackend& b, uint64_t id, bool savepoint = false) {
    SnapshotRequest req;
    req.checkpointId = id;
    req.storage = storage_.get();
    req.exclusiveDir = (savepoint ? "sp-" : "chk-") + std::to_string(id);
    req.sharedDir = savepoint ? "" : "shared";
    req.filePrefix = "op-" + std::to_string(b.range().start);
    auto async = b.snapshotSync(req);
    if (!async.ok()) return async.status();
    return (*async)->run();
  }

  static const IncrementalKeyGroupsStateHandle& inc(const KeyedStateHandle& h) {
    return std::get<IncrementalKeyGroupsStateHandle>(h);
  }
  /// The key groups a handle reads from the file this checkpoint wrote itself.
  static std::set<int> written(const KeyedStateHandle& h, uint64_t id) {
    std::set<int> out;
    for (const auto& p : inc(h).parts)
      if (p.createdByCheckpoint == id)
        for (const auto& r : p.keyGroups)
          for (int kg = r.start; kg <= r.end; ++kg) out.insert(kg);
    return out;
  }
  static std::set<uint64_t> creators(const KeyedStateHandle& h) {
    std::set<uint64_t> out;
    for (const auto& p : inc(h).parts) out.insert(p.createdByCheckpoint);
    return out;
  }

  /// Restores `handles` into a fresh backend of `type` over `range` and compares every
  /// key of the model in that range (and that nothing else is there).
  void expectRestores(BackendType type, KeyGroupRange range, const std::vector<KeyedStateHandle>& handles,
                      const Model& m) {
    SCOPED_TRACE(std::string(type == BackendType::kHashMap ? "hashmap" : "rocksdb") + " [" +
                 std::to_string(range.start) + ", " + std::to_string(range.end) + "]");
    auto r = make(type, range, false);
    ASSERT_TRUE(r);
    Status s = r->restore({storage_.get(), handles, allStates()});
    ASSERT_TRUE(s.ok()) << s;
    std::map<std::string, std::string> values;
    std::map<std::string, std::map<std::string, std::string>> maps;
    r->forEachEntry(kValue, [&](int kg, std::string_view k, std::string_view, std::string_view v) {
      EXPECT_TRUE(range.contains(kg)) << kg;
      values[std::string(k)] = std::string(v);
    });
    r->forEachEntry(kMap, [&](int kg, std::string_view k, std::string_view uk, std::string_view v) {
      EXPECT_TRUE(range.contains(kg)) << kg;
      maps[std::string(k)][std::string(uk)] = std::string(v);
    });
    std::map<std::string, std::string> wantValues;
    std::map<std::string, std::map<std::string, std::string>> wantMaps;
    for (const auto& [k, v] : m.values)
      if (range.contains(m.kg.at(k))) wantValues[k] = v;
    for (const auto& [k, mm] : m.maps)
      if (range.contains(m.kg.at(k))) wantMaps[k] = mm;
    EXPECT_EQ(values, wantValues);
    EXPECT_EQ(maps, wantMaps);
  }

  fs::path root_;
  std::unique_ptr<CheckpointStorage> storage_;
  int locals_ = 0;
};

TEST_F(HeapIncrementalTest, TheFirstCheckpointWritesEveryKeyGroupTheNextOnlyTheChangedOnes) {
  auto b = make(BackendType::kHashMap, {0, kMaxParallelism - 1});
  Model m;
  for (int i = 0; i < 320; ++i) put(*b, m, i, "v" + std::to_string(i));
  auto c1 = snapshot(*b, 1);
  ASSERT_TRUE(c1.ok()) << c1.status();
  ASSERT_TRUE(std::holds_alternative<IncrementalKeyGroupsStateHandle>(*c1)) << handleTypeName(*c1);
  EXPECT_EQ(inc(*c1).parts.size(), 1u);
  EXPECT_EQ(written(*c1, 1).size(), static_cast<size_t>(kMaxParallelism));
  EXPECT_EQ(inc(*c1).parts[0].file.file.path.rfind("shared/", 0), 0u) << inc(*c1).parts[0].file.file.path;
  b->notifyCheckpointComplete(1);

  put(*b, m, 3, "changed");    // key group 3
  put(*b, m, 3 + 32, "too");   // key group 3 again
  mapPut(*b, m, 17, "u", "x");  // key group 17
  auto c2 = snapshot(*b, 2);
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_EQ(written(*c2, 2), (std::set<int>{3, 17}));
  EXPECT_EQ(creators(*c2), (std::set<uint64_t>{1, 2}));
  // The new file holds only those two key groups' entries.
  auto freshIt = std::find_if(inc(*c2).parts.begin(), inc(*c2).parts.end(),
                              [](const auto& p) { return p.createdByCheckpoint == 2; });
  ASSERT_NE(freshIt, inc(*c2).parts.end());
  const auto& fresh = *freshIt;
  std::vector<std::string> names;
  int entries = 0;
  ASSERT_TRUE(readKeyGroups(*storage_, fresh.file, fresh.file.range, &names, [&](const KeyGroupEntry& e) {
                EXPECT_TRUE(e.keyGroup == 3 || e.keyGroup == 17) << e.keyGroup;
                ++entries;
                return Status::OK();
              }).ok());
  EXPECT_EQ(entries, 10 + 10 + 1);  // every key of key groups 3 and 17, and the map entry
  b->notifyCheckpointComplete(2);

  // Nothing changed: no new file at all.
  auto c3 = snapshot(*b, 3);
  ASSERT_TRUE(c3.ok()) << c3.status();
  EXPECT_TRUE(written(*c3, 3).empty());
  EXPECT_EQ(creators(*c3), (std::set<uint64_t>{1, 2}));

  for (const auto& h : {*c1, *c2, *c3}) EXPECT_EQ(handleRange(h), (KeyGroupRange{0, kMaxParallelism - 1}));
  expectRestores(BackendType::kHashMap, {0, kMaxParallelism - 1}, {*c3}, m);
}

TEST_F(HeapIncrementalTest, AChainOfCheckpointsRestoresIntoBothBackendsWholeAndRescaled) {
  auto b = make(BackendType::kHashMap, {0, kMaxParallelism - 1});
  Model m;
  uint64_t id = 0;
  KeyedStateHandle last;
  for (int round = 0; round < 6; ++round) {
    // Each round touches a few key groups: overwrites, new keys, map entries, deletes.
    const int kg = 3 * round;
    for (int i = kg; i < 400; i += kMaxParallelism) put(*b, m, i, "r" + std::to_string(round) + "-" + std::to_string(i));
    for (int i = kg + 1; i < 400; i += 2 * kMaxParallelism) mapPut(*b, m, i, "u" + std::to_string(round), "m");
    if (round >= 2) clear(*b, m, kg - 6);
    auto h = snapshot(*b, ++id);
    ASSERT_TRUE(h.ok()) << h.status();
    b->notifyCheckpointComplete(id);
    last = *h;
  }
  EXPECT_GT(creators(last).size(), 2u) << "the chain should reference files of several checkpoints";
  for (BackendType type : {BackendType::kHashMap, BackendType::kRocksDb}) {
    expectRestores(type, {0, kMaxParallelism - 1}, {last}, m);
    expectRestores(type, {0, 10}, {last}, m);
    expectRestores(type, {11, kMaxParallelism - 1}, {last}, m);
  }
  // The serialized handle reads back the same and restores the same.
  CheckpointMetadata meta;
  meta.checkpointId = id;
  meta.maxParallelism = kMaxParallelism;
  meta.backend = "hashmap";
  meta.incremental = true;
  OperatorSnapshot op;
  op.uid = "op";
  op.keyed = true;
  op.parallelism = 1;
  op.states = allStates();
  SubtaskSnapshot sub;
  sub.keyed = last;
  op.subtasks.push_back(sub);
  meta.operators.push_back(op);
  auto bytes = serializeMetadata(meta, "chk-" + std::to_string(id));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto parsed = parseMetadata(*bytes, "chk-" + std::to_string(id), "_metadata");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto& back = std::get<IncrementalKeyGroupsStateHandle>(parsed->operators[0].subtasks[0].keyed);
  ASSERT_EQ(back.parts.size(), inc(last).parts.size());
  for (size_t p = 0; p < back.parts.size(); ++p) {
    EXPECT_EQ(back.parts[p].file.file, inc(last).parts[p].file.file);
    EXPECT_EQ(back.parts[p].file.offsets, inc(last).parts[p].file.offsets);
    EXPECT_EQ(back.parts[p].createdByCheckpoint, inc(last).parts[p].createdByCheckpoint);
    EXPECT_EQ(back.parts[p].keyGroups.size(), inc(last).parts[p].keyGroups.size());
  }
  EXPECT_EQ(back.backendId, inc(last).backendId);
  expectRestores(BackendType::kHashMap, {0, kMaxParallelism - 1}, {parsed->operators[0].subtasks[0].keyed}, m);
}

TEST_F(HeapIncrementalTest, TwoSubtasksRestoreIntoOneAndOneIntoThree) {
  Model m;
  std::vector<KeyedStateHandle> handles;
  for (KeyGroupRange half : {KeyGroupRange{0, 15}, KeyGroupRange{16, 31}}) {
    auto b = make(BackendType::kHashMap, half);
    for (int i = 0; i < 300; ++i)
      if (half.contains(kgOf(i))) put(*b, m, i, "first");
    auto c1 = snapshot(*b, 1);
    ASSERT_TRUE(c1.ok()) << c1.status();
    b->notifyCheckpointComplete(1);
    for (int i = 0; i < 300; i += 7)
      if (half.contains(kgOf(i))) put(*b, m, i, "second");
    auto c2 = snapshot(*b, 2);
    ASSERT_TRUE(c2.ok()) << c2.status();
    handles.push_back(*c2);
  }
  for (BackendType type : {BackendType::kHashMap, BackendType::kRocksDb}) {
    expectRestores(type, {0, kMaxParallelism - 1}, handles, m);
    for (KeyGroupRange third : {KeyGroupRange{0, 10}, KeyGroupRange{11, 21}, KeyGroupRange{22, 31}})
      expectRestores(type, third, handles, m);
  }
}

TEST_F(HeapIncrementalTest, AnAbortedOrUnconfirmedCheckpointIsNeverTheBase) {
  auto b = make(BackendType::kHashMap, {0, kMaxParallelism - 1});
  Model m;
  for (int i = 0; i < 100; ++i) put(*b, m, i, "a");
  ASSERT_TRUE(snapshot(*b, 1).ok());
  b->notifyCheckpointComplete(1);

  put(*b, m, 4, "b");  // key group 4
  auto c2 = snapshot(*b, 2);
  ASSERT_TRUE(c2.ok()) << c2.status();
  b->notifyCheckpointAborted(2);

  put(*b, m, 9, "c");  // key group 9
  auto c3 = snapshot(*b, 3);
  ASSERT_TRUE(c3.ok()) << c3.status();
  // Key group 4 changed since checkpoint 1, the base; checkpoint 2's file is not used.
  EXPECT_EQ(written(*c3, 3), (std::set<int>{4, 9}));
  EXPECT_EQ(creators(*c3), (std::set<uint64_t>{1, 3}));
  // Checkpoint 3 is not confirmed yet: checkpoint 4 is still relative to checkpoint 1.
  put(*b, m, 12, "d");
  auto c4 = snapshot(*b, 4);
  ASSERT_TRUE(c4.ok()) << c4.status();
  EXPECT_EQ(written(*c4, 4), (std::set<int>{4, 9, 12}));
  b->notifyCheckpointComplete(4);
  b->notifyCheckpointComplete(3);  // late: older than the base, ignored
  put(*b, m, 20, "e");
  auto c5 = snapshot(*b, 5);
  ASSERT_TRUE(c5.ok()) << c5.status();
  EXPECT_EQ(written(*c5, 5), (std::set<int>{20}));
  EXPECT_EQ(creators(*c5), (std::set<uint64_t>{1, 4, 5}));
  expectRestores(BackendType::kHashMap, {0, kMaxParallelism - 1}, {*c5}, m);
}

TEST_F(HeapIncrementalTest, WritesDuringTheUploadGoToTheNextCheckpointNotThisOne) {
  auto b = make(BackendType::kHashMap, {0, kMaxParallelism - 1});
  Model m;
  for (int i = 0; i < 100; ++i) put(*b, m, i, "a");
  ASSERT_TRUE(snapshot(*b, 1).ok());
  b->notifyCheckpointComplete(1);
  put(*b, m, 2, "b");
  Model atTwo = m;
  SnapshotRequest req;
  req.checkpointId = 2;
  req.storage = storage_.get();
  req.exclusiveDir = "chk-2";
  req.sharedDir = "shared";
  req.filePrefix = "op-0";
  auto async = b->snapshotSync(req);
  ASSERT_TRUE(async.ok());
  put(*b, m, 2, "during");  // after the barrier, before the upload ran
  put(*b, m, 5, "during");
  auto c2 = (*async)->run();
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_EQ(written(*c2, 2), (std::set<int>{2}));
  expectRestores(BackendType::kHashMap, {0, kMaxParallelism - 1}, {*c2}, atTwo);
  b->notifyCheckpointComplete(2);
  auto c3 = snapshot(*b, 3);
  ASSERT_TRUE(c3.ok()) << c3.status();
  EXPECT_EQ(written(*c3, 3), (std::set<int>{2, 5}));
  expectRestores(BackendType::kHashMap, {0, kMaxParallelism - 1}, {*c3}, m);
}

TEST_F(HeapIncrementalTest, SavepointsAreSelfContainedAndLeaveTheBaseAlone) {
  auto b = make(BackendType::kHashMap, {0, kMaxParallelism - 1});
  Model m;
  for (int i = 0; i < 100; ++i) put(*b, m, i, "a");
  ASSERT_TRUE(snapshot(*b, 1).ok());
  b->notifyCheckpointComplete(1);
  put(*b, m, 7, "b");
  auto sp = snapshot(*b, 2, /*savepoint=*/true);
  ASSERT_TRUE(sp.ok()) << sp.status();
  ASSERT_TRUE(std::holds_alternative<KeyGroupsStateHandle>(*sp)) << handleTypeName(*sp);
  EXPECT_EQ(std::get<KeyGroupsStateHandle>(*sp).file.path.rfind("sp-2/", 0), 0u);
  b->notifyCheckpointComplete(2);  // the savepoint completed
  auto c3 = snapshot(*b, 3);
  ASSERT_TRUE(c3.ok()) << c3.status();
  EXPECT_EQ(written(*c3, 3), (std::set<int>{7}));
  EXPECT_EQ(creators(*c3), (std::set<uint64_t>{1, 3}));
  expectRestores(BackendType::kHashMap, {0, kMaxParallelism - 1}, {*sp}, m);
}

TEST_F(HeapIncrementalTest, ARestoredBackendReferencesNoRestoredFile) {
  auto b = make(BackendType::kHashMap, {0, kMaxParallelism - 1});
  Model m;
  for (int i = 0; i < 100; ++i) put(*b, m, i, "a");
  auto c1 = snapshot(*b, 1);
  ASSERT_TRUE(c1.ok());
  b->notifyCheckpointComplete(1);

  auto r = make(BackendType::kHashMap, {0, kMaxParallelism - 1});
  ASSERT_TRUE(r->restore({storage_.get(), {*c1}, allStates()}).ok());
  auto c2 = snapshot(*r, 2);
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_EQ(creators(*c2), (std::set<uint64_t>{2}));
  EXPECT_EQ(written(*c2, 2).size(), static_cast<size_t>(kMaxParallelism));
  EXPECT_NE(inc(*c2).backendId, inc(*c1).backendId);
  r->notifyCheckpointComplete(2);
  r->setCurrentKey(kgOf(1), keyOf(1));
  r->put(kValue, "z");
  m.values[keyOf(1)] = "z";
  auto c3 = snapshot(*r, 3);
  ASSERT_TRUE(c3.ok());
  EXPECT_EQ(written(*c3, 3), (std::set<int>{kgOf(1)}));
  expectRestores(BackendType::kRocksDb, {0, kMaxParallelism - 1}, {*c3}, m);
}

TEST_F(HeapIncrementalTest, AnAbortedUploadWritesNoHandleAndTheNextCheckpointIsComplete) {
  auto b = make(BackendType::kHashMap, {0, kMaxParallelism - 1});
  Model m;
  for (int i = 0; i < 100; ++i) put(*b, m, i, "a");
  SnapshotRequest req;
  req.checkpointId = 1;
  req.storage = storage_.get();
  req.exclusiveDir = "chk-1";
  req.sharedDir = "shared";
  req.filePrefix = "op-0";
  auto flag = std::make_shared<std::atomic<bool>>(true);
  req.aborted = flag;
  auto async = b->snapshotSync(req);
  ASSERT_TRUE(async.ok());
  auto h = (*async)->run();
  EXPECT_FALSE(h.ok());
  b->notifyCheckpointAborted(1);
  auto c2 = snapshot(*b, 2);
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_EQ(written(*c2, 2).size(), static_cast<size_t>(kMaxParallelism));
  expectRestores(BackendType::kHashMap, {0, kMaxParallelism - 1}, {*c2}, m);
}

TEST_F(HeapIncrementalTest, AnEmptiedKeyGroupIsInNoFileSoItKeepsNoOldFileAlive) {
  auto b = make(BackendType::kHashMap, {0, kMaxParallelism - 1});
  Model m;
  put(*b, m, 5, "a");  // key group 5 only
  put(*b, m, 6, "b");  // key group 6 only
  auto c1 = snapshot(*b, 1);
  ASSERT_TRUE(c1.ok());
  EXPECT_EQ(written(*c1, 1), (std::set<int>{5, 6}));  // the 30 empty key groups are in no file
  b->notifyCheckpointComplete(1);
  clear(*b, m, 5);
  clear(*b, m, 6);
  put(*b, m, 7, "c");
  auto c2 = snapshot(*b, 2);
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(written(*c2, 2), (std::set<int>{7}));
  EXPECT_EQ(creators(*c2), (std::set<uint64_t>{2})) << "checkpoint 1's file holds nothing checkpoint 2 needs";
  expectRestores(BackendType::kHashMap, {0, kMaxParallelism - 1}, {*c2}, m);
}

TEST_F(HeapIncrementalTest, AFileMostlyOverwrittenByLaterCheckpointsIsWrittenAgainAndDropped) {
  auto b = make(BackendType::kHashMap, {0, kMaxParallelism - 1});
  Model m;
  for (int i = 0; i < 320; ++i) put(*b, m, i, "first-" + std::to_string(i));  // 10 keys per key group
  ASSERT_TRUE(snapshot(*b, 1).ok());
  b->notifyCheckpointComplete(1);
  // Checkpoints 2..: each rewrites two more key groups; checkpoint 1's file stays in use
  // while at least half of it is read, then its remaining key groups are written again.
  uint64_t id = 1;
  bool dropped = false;
  for (int kg = 0; kg + 1 < kMaxParallelism && !dropped; kg += 2) {
    for (int i = kg; i < 320; i += kMaxParallelism) put(*b, m, i, "later");
    for (int i = kg + 1; i < 320; i += kMaxParallelism) put(*b, m, i, "later");
    auto h = snapshot(*b, ++id);
    ASSERT_TRUE(h.ok()) << h.status();
    b->notifyCheckpointComplete(id);
    const bool usesFirst = creators(*h).count(1) > 0;
    if (kg + 2 <= kMaxParallelism / 2) {
      EXPECT_TRUE(usesFirst) << "checkpoint " << id << ": checkpoint 1's file is still mostly read";
      EXPECT_EQ(written(*h, id).size(), 2u) << id;
    } else if (!usesFirst) {
      dropped = true;
      EXPECT_GT(written(*h, id).size(), 2u) << "the rest of checkpoint 1's key groups were written again";
      expectRestores(BackendType::kHashMap, {0, kMaxParallelism - 1}, {*h}, m);
    }
  }
  EXPECT_TRUE(dropped) << "checkpoint 1's file was never dropped";
}

TEST_F(HeapIncrementalTest, AHandleReadingAKeyGroupFromTwoFilesIsCorruption) {
  auto b = make(BackendType::kHashMap, {0, kMaxParallelism - 1});
  Model m;
  for (int i = 0; i < 50; ++i) put(*b, m, i, "a");
  auto c1 = snapshot(*b, 1);
  ASSERT_TRUE(c1.ok());
  auto bad = inc(*c1);
  bad.parts.push_back(bad.parts[0]);  // the same key groups from a second part
  CheckpointMetadata meta;
  meta.checkpointId = 1;
  meta.maxParallelism = kMaxParallelism;
  OperatorSnapshot op;
  op.uid = "op";
  SubtaskSnapshot sub;
  sub.keyed = bad;
  op.subtasks.push_back(sub);
  meta.operators.push_back(op);
  auto bytes = serializeMetadata(meta, "chk-1");
  ASSERT_TRUE(bytes.ok());
  auto parsed = parseMetadata(*bytes, "chk-1", "chk-1/_metadata");
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(parsed.status().isCorruption()) << parsed.status();
  EXPECT_NE(parsed.status().message().find("from two files"), std::string::npos) << parsed.status();
  EXPECT_NE(parsed.status().message().find("restore from another checkpoint"), std::string::npos) << parsed.status();
}

}  // namespace heap_incremental_test
}  // namespace jobhost::state
