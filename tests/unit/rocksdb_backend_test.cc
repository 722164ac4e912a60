// Unit tests for the RocksDB keyed state backend (createRocksDbBackend).
//
// Real RocksDB instances in fresh temp directories and the real local CheckpointStorage.
// State contents are compared through "dumps": a canonical (key-group file) snapshot of a
// backend read back with readKeyGroups, so the comparison sees every entry of the range.
#include "rocksdb_backend.h"
#include "rocksdb_entry_cache.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "jobhost/errors.h"
#include "jobhost/serializer.h"
#include "jobhost/state.h"
#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/key_group_format.h"
#include "jobhost/state/keyed_backend.h"
#include "support/state_descriptors.h"
#include "support/fault_injection.h"
#include "support/forwarding_storage.h"

namespace jobhost::state {
namespace {

namespace fs = std::filesystem;

#define ASSERT_OK(expr)                                     \
  do {                                                      \
    const ::jobhost::state::Status s_ = (expr);             \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.toString(); \
  } while (0)

#define EXPECT_OK(expr)                                     \
  do {                                                      \
    const ::jobhost::state::Status s_ = (expr);             \
    EXPECT_TRUE(s_.ok()) << #expr << ": " << s_.toString(); \
  } while (0)

// (state name, key group, key, user key) -> value
using Model = std::map<std::tuple<std::string, int, std::string, std::string>, std::string>;

constexpr int kMaxParallelism = 128;

StateDescriptorInfo desc(const std::string& name, StateKind kind) {
  return testing::stringDescriptor(name, kind);
}

const std::vector<StateDescriptorInfo>& testStates() {
  static const std::vector<StateDescriptorInfo> states = {
      desc("v", StateKind::kValue), desc("l", StateKind::kList), desc("m", StateKind::kMap)};
  return states;
}

std::string lengthPrefixed(std::string_view s) {
  std::string out;
  ByteWriter w(out);
  w.writeBytes(s);
  return out;
}

std::string keyOf(int i) { return "key-" + std::to_string(i); }
int kgOf(int i) { return i % kMaxParallelism; }

uint64_t uploadedBy(const IncrementalStateHandle& h, uint64_t checkpointId) {
  uint64_t n = 0;
  for (const auto& f : h.sharedFiles) {
    if (f.createdByCheckpoint == checkpointId) n += f.file.size;
  }
  for (const auto& f : h.privateFiles) n += f.file.size;
  return n;
}

class RocksDbBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("jobhost-rocksdb-test-" + std::to_string(::getpid()) + "-" + info->name());
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

  std::unique_ptr<KeyedStateBackend> make(KeyGroupRange range, bool incremental,
                                          const std::string& name, int transferThreads = 4) {
    BackendOptions o;
    o.rocksdb.transferThreads = transferThreads;
    o.rocksdb.entryCacheSize = entryCacheSize_;
    o.operatorUid = "op";
    o.maxParallelism = kMaxParallelism;
    o.range = range;
    o.localDir = (root_ / "local" / name).string();
    o.incremental = incremental;
    auto b = createRocksDbBackend(o);
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return nullptr;
    return std::move(b).value();
  }

  /// An incremental backend over all key groups with the test states and keys [0, keys)
  /// (tag "t1"), mirrored in *model.
  std::unique_ptr<KeyedStateBackend> populatedSource(const std::string& name, int keys, Model* model) {
    auto b = make({0, 127}, true, name);
    if (!b) return nullptr;
    registerAll(*b);
    populate(*b, 0, keys, "t1", model);
    return b;
  }

  static void registerAll(KeyedStateBackend& b) {
    for (size_t i = 0; i < testStates().size(); ++i) {
      EXPECT_EQ(b.registerState(testStates()[i]), static_cast<int>(i));
    }
  }

  /// Writes value, list (two elements) and map (two entries) state for keys [from, to)
  /// that fall into the backend's range, mirroring them in *model.
  static void populate(KeyedStateBackend& b, int from, int to, const std::string& tag,
                       Model* model) {
    for (int i = from; i < to; ++i) {
      const int kg = kgOf(i);
      if (!b.range().contains(kg)) continue;
      const std::string key = keyOf(i);
      b.setCurrentKey(kg, key);
      const std::string v = "value-" + std::to_string(i) + "-" + tag;
      b.put(0, v);
      (*model)[{"v", kg, key, ""}] = v;
      const std::string e1 = lengthPrefixed("a" + std::to_string(i));
      const std::string e2 = lengthPrefixed("b" + tag);
      b.append(1, e1);
      b.append(1, e2);
      (*model)[{"l", kg, key, ""}] += e1 + e2;
      b.mapPut(2, "u1", "x" + std::to_string(i) + tag);
      b.mapPut(2, "u2", "y" + tag);
      (*model)[{"m", kg, key, "u1"}] = "x" + std::to_string(i) + tag;
      (*model)[{"m", kg, key, "u2"}] = "y" + tag;
    }
  }

  static Model filter(const Model& m, KeyGroupRange r) {
    Model out;
    for (const auto& [k, v] : m) {
      if (r.contains(std::get<1>(k))) out.emplace(k, v);
    }
    return out;
  }

  SnapshotRequest request(uint64_t id, const std::string& prefix,
                          SnapshotFormat format = SnapshotFormat::kNative, bool shared = true) {
    SnapshotRequest r;
    r.checkpointId = id;
    r.format = format;
    r.storage = storage_.get();
    r.exclusiveDir = "chk-" + std::to_string(id);
    r.sharedDir = shared ? "shared" : "";
    r.filePrefix = prefix;
    return r;
  }

  KeyedStateHandle snapshot(KeyedStateBackend& b, const SnapshotRequest& r) {
    auto async = b.snapshotSync(r);
    EXPECT_TRUE(async.ok()) << async.status();
    if (!async.ok()) return {};
    auto h = (*async)->run();
    EXPECT_TRUE(h.ok()) << h.status();
    if (!h.ok()) return {};
    return std::move(h).value();
  }

  /// Every entry of the backend's range, via a canonical snapshot into scratch storage.
  Model dump(KeyedStateBackend& b) {
    auto st = openStorage((root_ / ("dump-" + std::to_string(++dumps_))).string());
    EXPECT_TRUE(st.ok());
    SnapshotRequest r;
    r.checkpointId = 1000000 + dumps_;
    r.format = SnapshotFormat::kCanonical;
    r.storage = st->get();
    r.exclusiveDir = "d";
    r.filePrefix = "dump";
    auto async = b.snapshotSync(r);
    EXPECT_TRUE(async.ok()) << async.status();
    if (!async.ok()) return {};
    auto h = (*async)->run();
    EXPECT_TRUE(h.ok()) << h.status();
    if (!h.ok()) return {};
    const auto& kgh = std::get<KeyGroupsStateHandle>(*h);
    EXPECT_EQ(kgh.range, b.range());
    Model m;
    std::vector<std::string> names;
    Status s = readKeyGroups(**st, kgh, b.range(), &names, [&](const KeyGroupEntry& e) {
      m[{names.at(e.stateIndex), e.keyGroup, std::string(e.key), std::string(e.userKey)}] =
          std::string(e.value);
      return Status::OK();
    });
    EXPECT_TRUE(s.ok()) << s;
    return m;
  }

  std::unique_ptr<KeyedStateBackend> restoreInto(KeyGroupRange range, const std::string& name,
                                                 std::vector<KeyedStateHandle> handles,
                                                 Status* status = nullptr, int transferThreads = 4,
                                                 CheckpointStorage* storage = nullptr) {
    auto b = make(range, true, name, transferThreads);
    if (!b) return nullptr;
    RestoreInput in;
    in.storage = storage != nullptr ? storage : storage_.get();
    in.handles = std::move(handles);
    in.states = testStates();
    Status s = b->restore(in);
    if (status != nullptr) {
      *status = std::move(s);
    } else {
      EXPECT_TRUE(s.ok()) << s;
    }
    return b;
  }

  /// Keys visible in a downloaded incremental checkpoint, per key group, for all CFs.
  std::map<int, int> keysPerKeyGroupInCheckpoint(const IncrementalStateHandle& h) {
    const fs::path dir = root_ / ("inspect-" + std::to_string(++dumps_));
    fs::create_directories(dir);
    for (const auto* list : {&h.sharedFiles, &h.privateFiles}) {
      for (const auto& f : *list) {
        EXPECT_OK(storage_->getToLocalFile(f.file.path, (dir / f.localName).string()));
      }
    }
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
    rocksdb::ColumnFamilyOptions cfo;
    cfo.merge_operator = nullptr;
    cfs.emplace_back(rocksdb::kDefaultColumnFamilyName, cfo);
    for (const auto& n : h.columnFamilies)
      cfs.emplace_back(rocksdb_layout::columnFamilyName(n), cfo);
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    rocksdb::DBOptions dbo;
    std::map<int, int> out;
    rocksdb::Status s = rocksdb::DB::OpenForReadOnly(dbo, dir.string(), cfs, &handles, &db);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return out;
    for (size_t i = 1; i < handles.size(); ++i) {
      // Only the keys are read, so merge operands need no merge operator.
      std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[i]));
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        out[rocksdb_layout::decodeKeyGroup(std::string_view(it->key().data(), it->key().size()))]++;
      }
    }
    for (auto* hd : handles) db->DestroyColumnFamilyHandle(hd).PermitUncheckedError();
    delete db;
    return out;
  }

  fs::path root_;
  std::unique_ptr<CheckpointStorage> storage_;
  int dumps_ = 0;
  uint64_t entryCacheSize_ = RocksDbOptions{}.entryCacheSize;  // of the backends make() creates
};

// ---------------------------------------------------------------------------------------
// CRUD

TEST_F(RocksDbBackendTest, ValueListMapCrudAcrossKeysAndKeyGroups) {
  auto b = make({0, 127}, false, "crud");
  ASSERT_TRUE(b);
  registerAll(*b);
  EXPECT_EQ(b->type(), BackendType::kRocksDb);
  EXPECT_EQ(b->range(), (KeyGroupRange{0, 127}));

  std::string out;
  b->setCurrentKey(3, "alice");
  EXPECT_FALSE(b->get(0, out));
  b->put(0, "1");
  b->append(1, lengthPrefixed("x"));
  b->append(1, lengthPrefixed("yy"));
  b->mapPut(2, "k1", "v1");
  b->mapPut(2, "k2", "v2");

  b->setCurrentKey(100, "bob");
  EXPECT_FALSE(b->get(0, out));
  EXPECT_FALSE(b->get(1, out));
  EXPECT_FALSE(b->mapGet(2, "k1", out));
  b->put(0, "2");
  b->put(1, lengthPrefixed("z"));  // ListState update replaces the list
  b->mapPut(2, "k1", "bob-v1");

  b->setCurrentKey(3, "alice");
  ASSERT_TRUE(b->get(0, out));
  EXPECT_EQ(out, "1");
  ASSERT_TRUE(b->get(1, out));
  EXPECT_EQ(out, lengthPrefixed("x") + lengthPrefixed("yy"));
  ASSERT_TRUE(b->mapGet(2, "k1", out));
  EXPECT_EQ(out, "v1");
  b->put(0, "1b");  // overwrite
  ASSERT_TRUE(b->get(0, out));
  EXPECT_EQ(out, "1b");
  b->append(1, lengthPrefixed("w"));  // append after merges
  ASSERT_TRUE(b->get(1, out));
  EXPECT_EQ(out, lengthPrefixed("x") + lengthPrefixed("yy") + lengthPrefixed("w"));

  std::map<std::string, std::string> entries;
  b->mapForEach(2, [&](std::string_view k, std::string_view v) {
    entries[std::string(k)] = std::string(v);
    return true;
  });
  EXPECT_EQ(entries, (std::map<std::string, std::string>{{"k1", "v1"}, {"k2", "v2"}}));
  b->mapRemove(2, "k1");
  EXPECT_FALSE(b->mapGet(2, "k1", out));
  ASSERT_TRUE(b->mapGet(2, "k2", out));

  b->clear(0);
  b->clear(1);
  b->clear(2);
  EXPECT_FALSE(b->get(0, out));
  EXPECT_FALSE(b->get(1, out));
  EXPECT_FALSE(b->mapGet(2, "k2", out));

  b->setCurrentKey(100, "bob");  // untouched by alice's clears
  ASSERT_TRUE(b->get(0, out));
  EXPECT_EQ(out, "2");
  ASSERT_TRUE(b->get(1, out));
  EXPECT_EQ(out, lengthPrefixed("z"));
  ASSERT_TRUE(b->mapGet(2, "k1", out));
  EXPECT_EQ(out, "bob-v1");
}

TEST_F(RocksDbBackendTest, MapKeysArePrefixUnambiguous) {
  auto b = make({0, 127}, false, "prefix");
  ASSERT_TRUE(b);
  registerAll(*b);
  // Keys that are prefixes of each other, in one key group, plus odd bytes.
  const std::vector<std::string> keys = {
      "", "a", "ab", std::string("a\0", 2), "\xff", std::string(200, 'k')};
  for (size_t i = 0; i < keys.size(); ++i) {
    b->setCurrentKey(7, keys[i]);
    b->mapPut(2, "", "empty-" + std::to_string(i));
    b->mapPut(2, "b", "b-" + std::to_string(i));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    b->setCurrentKey(7, keys[i]);
    std::map<std::string, std::string> entries;
    b->mapForEach(2, [&](std::string_view k, std::string_view v) {
      entries[std::string(k)] = std::string(v);
      return true;
    });
    EXPECT_EQ(entries, (std::map<std::string, std::string>{{"", "empty-" + std::to_string(i)},
                                                           {"b", "b-" + std::to_string(i)}}))
        << "key #" << i;
  }
  b->setCurrentKey(7, "a");
  b->clear(2);
  for (size_t i = 0; i < keys.size(); ++i) {
    b->setCurrentKey(7, keys[i]);
    int n = 0;
    b->mapForEach(2, [&](std::string_view, std::string_view) { return ++n, true; });
    EXPECT_EQ(n, keys[i] == "a" ? 0 : 2) << "key #" << i;
  }
  // Early stop.
  b->setCurrentKey(7, "ab");
  int visits = 0;
  b->mapForEach(2, [&](std::string_view, std::string_view) { return ++visits, false; });
  EXPECT_EQ(visits, 1);
}

TEST_F(RocksDbBackendTest, TypedStatesThroughSdkWrappers) {
  auto b = make({0, 127}, false, "typed");
  ASSERT_TRUE(b);
  struct Owner : StateOwner {
    ValueState<int64_t> count{*this, "count"};
    ListState<std::string> names{*this, "names"};
    MapState<std::string, int64_t> perWord{*this, "perWord"};
  } owner;
  for (StateBase* s : owner.declaredStates()) s->bind(*b, "string", 1);
  b->setCurrentKey(5, "k");
  owner.count.update(41);
  owner.count.update(*owner.count.value() + 1);
  owner.names.add("a");
  owner.names.add("bc");
  owner.perWord.put("x", 1);
  owner.perWord.put("y", 2);
  EXPECT_EQ(owner.count.value(), 42);
  EXPECT_EQ(owner.names.get(), (std::vector<std::string>{"a", "bc"}));
  owner.names.update({"z"});
  EXPECT_EQ(owner.names.get(), (std::vector<std::string>{"z"}));
  EXPECT_EQ(owner.perWord.get("y"), 2);
  EXPECT_EQ(owner.perWord.entries().size(), 2u);
  b->setCurrentKey(6, "k");  // another key group, same key bytes
  EXPECT_FALSE(owner.count.value().has_value());
  EXPECT_TRUE(owner.names.get().empty());
  ASSERT_EQ(b->states().size(), 3u);
  EXPECT_EQ(b->states()[1].name, "names");
}

TEST_F(RocksDbBackendTest, MisuseThrowsStateError) {
  auto b = make({0, 63}, false, "misuse");
  ASSERT_TRUE(b);
  registerAll(*b);
  std::string out;
  EXPECT_THROW(b->get(0, out), StateError);  // no current key yet
  EXPECT_THROW(b->put(0, "x"), StateError);
  EXPECT_THROW(b->mapPut(2, "k", "x"), StateError);
  // Idempotent registration; another kind under an existing name is refused.
  EXPECT_EQ(b->registerState(desc("v", StateKind::kValue)), 0);
  EXPECT_EQ(b->registerState(desc("m", StateKind::kMap)), 2);
  try {
    b->registerState(desc("v", StateKind::kMap));
    FAIL() << "expected StateError";
  } catch (const StateError& e) {
    EXPECT_NE(std::string(e.what()).find("'v'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ValueState"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MapState"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b->states().size(), 3u);
  b->setCurrentKey(1, "k");
  EXPECT_THROW(b->setCurrentKey(64, "k"), StateError);  // outside the range
  EXPECT_THROW(b->mapGet(0, "k", out), StateError);     // map call on a ValueState
  EXPECT_THROW(b->append(0, "x"), StateError);          // append on a ValueState
  EXPECT_THROW(b->get(2, out), StateError);             // value call on a MapState
  EXPECT_THROW(b->get(17, out), StateError);            // unknown handle
  // A state named like RocksDB's default column family is just another state.
  int d = b->registerState(desc("default", StateKind::kValue));
  b->put(d, "mine");
  ASSERT_TRUE(b->get(d, out));
  EXPECT_EQ(out, "mine");
}

TEST_F(RocksDbBackendTest, LocalDirectoryWipedOnOpenAndDestroy) {
  const fs::path dir = root_ / "local" / "wipe";
  fs::create_directories(dir);
  { std::ofstream(dir / "stale-file") << "x"; }
  auto b = make({0, 127}, true, "wipe");
  ASSERT_TRUE(b);
  EXPECT_FALSE(fs::exists(dir / "stale-file"));
  registerAll(*b);
  Model m;
  populate(*b, 0, 100, "t", &m);
  snapshot(*b, request(1, "op-0"));
  b.reset();
  EXPECT_FALSE(fs::exists(dir));

  BackendOptions o;
  o.range = {0, 127};
  o.localDir = "";
  EXPECT_FALSE(createRocksDbBackend(o).ok());
  o.localDir = "/";
  EXPECT_FALSE(createRocksDbBackend(o).ok());
}

// ---------------------------------------------------------------------------------------
// Full snapshots

TEST_F(RocksDbBackendTest, FullSnapshotRestoresEqualState) {
  auto b = make({0, 127}, false, "full-src");
  ASSERT_TRUE(b);
  registerAll(*b);
  Model model;
  populate(*b, 0, 5000, "t1", &model);
  EXPECT_EQ(dump(*b), model);
  EXPECT_GT(b->approximateEntries(), 0u);

  auto h = snapshot(*b, request(1, "op-0"));
  ASSERT_TRUE(std::holds_alternative<KeyGroupsStateHandle>(h)) << handleTypeName(h);
  const auto& kgh = std::get<KeyGroupsStateHandle>(h);
  EXPECT_EQ(kgh.file.path, "chk-1/op-0.kg");
  EXPECT_EQ(kgh.offsets.size(), 128u);

  auto r = restoreInto({0, 127}, "full-dst", {h});
  ASSERT_TRUE(r);
  EXPECT_EQ(dump(*r), model);
  ASSERT_EQ(r->states().size(), 3u);
  EXPECT_EQ(r->states()[2].kind, StateKind::kMap);
  // The restored backend keeps working (states registered by restore).
  r->setCurrentKey(kgOf(1), keyOf(1));
  r->append(1, lengthPrefixed("more"));
  std::string out;
  ASSERT_TRUE(r->get(1, out));
  const std::string expected = model[{"l", kgOf(1), keyOf(1), ""}] + lengthPrefixed("more");
  EXPECT_EQ(out, expected);
  EXPECT_EQ(r->registerState(desc("l", StateKind::kList)), 1);
}

TEST_F(RocksDbBackendTest, FullSnapshotIsIsolatedFromLaterWritesAndRunsOnAnotherThread) {
  auto b = make({0, 127}, false, "iso");
  ASSERT_TRUE(b);
  registerAll(*b);
  Model model;
  populate(*b, 0, 3000, "before", &model);
  auto async = b->snapshotSync(request(1, "op-0"));
  ASSERT_TRUE(async.ok()) << async.status();
  Result<KeyedStateHandle> h = Status::IOError("not run");
  std::thread t([&] { h = (*async)->run(); });
  Model later = model;
  populate(*b, 0, 3000, "after", &later);  // concurrent writes, not in the snapshot
  populate(*b, 3000, 4000, "after", &later);
  t.join();
  ASSERT_TRUE(h.ok()) << h.status();
  auto r = restoreInto({0, 127}, "iso-dst", {*h});
  EXPECT_EQ(dump(*r), model);
  EXPECT_EQ(dump(*b), later);

  // A snapshot dropped without run() releases its resources.
  {
    auto dropped = b->snapshotSync(request(2, "op-0"));
    ASSERT_TRUE(dropped.ok());
  }
  EXPECT_FALSE(storage_->exists("chk-2/op-0.kg"));
}

// ---------------------------------------------------------------------------------------
// The entry cache (rocksdb_entry_cache.h)

// Random operations of every kind on a few keys, checked against a model after each read,
// with snapshots (full and incremental, some restored into a fresh backend that carries
// on) in between: with the cache off, with a cache so small that nearly every write
// evicts, and with the default one. Every read and every snapshot must see exactly the
// model, whatever the cache holds unwritten at that moment.
TEST_F(RocksDbBackendTest, RandomOperationsThroughTheEntryCacheMatchAModelAcrossEvictionsSnapshotsAndRestores) {
  for (const uint64_t cacheSize : {uint64_t{0}, uint64_t{700}, RocksDbOptions{}.entryCacheSize}) {
    SCOPED_TRACE("entry cache " + std::to_string(cacheSize));
    entryCacheSize_ = cacheSize;
    std::mt19937 rng(static_cast<uint32_t>(cacheSize) + 7);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    const std::string tag = std::to_string(cacheSize);
    int generation = 0;
    auto b = make({0, 127}, true, "rand-" + tag + "-0");
    ASSERT_TRUE(b);
    registerAll(*b);
    Model model;
    uint64_t checkpointId = 0;
    for (int op = 0; op < 6000; ++op) {
      const int i = pick(24);
      const int kg = kgOf(i * 37);
      const std::string key = keyOf(i);
      const std::string uk = "u" + std::to_string(pick(6));
      const std::string value = "v" + std::to_string(op) + std::string(static_cast<size_t>(pick(3)) * 20, 'x');
      b->setCurrentKey(kg, key);
      const auto vKey = std::make_tuple(std::string("v"), kg, key, std::string());
      const auto lKey = std::make_tuple(std::string("l"), kg, key, std::string());
      const auto mKey = std::make_tuple(std::string("m"), kg, key, uk);
      std::string got;
      std::string_view view;
      switch (pick(16)) {
        case 0:
          b->put(0, value);
          model[vKey] = value;
          break;
        case 1: {
          const bool found = b->get(0, &view);
          ASSERT_EQ(found, model.count(vKey) == 1) << "op " << op;
          if (found) {
            ASSERT_EQ(std::string(view), model[vKey]) << "op " << op;
          }
          break;
        }
        case 2:
          b->clear(0);
          model.erase(vKey);
          break;
        case 3: {
          const std::string e = lengthPrefixed(value);
          b->append(1, e);
          model[lKey] += e;
          break;
        }
        case 4: {
          const bool found = b->get(1, &view);
          ASSERT_EQ(found, model.count(lKey) == 1) << "op " << op;
          if (found) {
            ASSERT_EQ(std::string(view), model[lKey]) << "op " << op;
          }
          break;
        }
        case 5:
          b->clear(1);
          model.erase(lKey);
          break;
        case 6:
        case 7:
          b->mapPut(2, uk, value);
          model[mKey] = value;
          break;
        case 8:
        case 9: {
          const bool found = b->mapGet(2, uk, &view);
          ASSERT_EQ(found, model.count(mKey) == 1) << "op " << op;
          if (found) {
            ASSERT_EQ(std::string(view), model[mKey]) << "op " << op;
          }
          break;
        }
        case 10:
          b->mapRemove(2, uk);
          model.erase(mKey);
          break;
        case 11:
          b->mapAppend(2, uk, value);
          model[mKey] += value;
          break;
        case 12: {
          // Only for an entry the key does not have: the method's contract.
          if (model.count(mKey) == 1) break;
          b->mapPutAbsent(2, uk, value);
          model[mKey] = value;
          break;
        }
        case 13: {
          std::map<std::string, std::string> seen, expected;
          b->mapForEach(2, [&](std::string_view k, std::string_view v) {
            seen.emplace(std::string(k), std::string(v));
            return true;
          });
          for (const auto& [k, v] : model)
            if (std::get<0>(k) == "m" && std::get<1>(k) == kg && std::get<2>(k) == key) expected[std::get<3>(k)] = v;
          ASSERT_EQ(seen, expected) << "op " << op;
          break;
        }
        case 14:
          if (pick(4) == 0) {
            b->clear(2);
            for (auto it = model.begin(); it != model.end();) {
              const auto& k = it->first;
              const bool mine = std::get<0>(k) == "m" && std::get<1>(k) == kg && std::get<2>(k) == key;
              it = mine ? model.erase(it) : std::next(it);
            }
          }
          break;
        case 15: {
          if (pick(8) != 0) break;
          // A checkpoint (incremental or full), sometimes restored into a fresh backend
          // that carries on; or a dump, which reads everything.
          const int what = pick(3);
          if (what == 0) {
            ASSERT_EQ(dump(*b), model) << "op " << op;
            break;
          }
          const SnapshotFormat format = what == 1 ? SnapshotFormat::kNative : SnapshotFormat::kCanonical;
          KeyedStateHandle h = snapshot(*b, request(++checkpointId, "rand-" + tag, format));
          b->notifyCheckpointComplete(checkpointId);
          if (pick(2) == 0) {
            b = restoreInto({0, 127}, "rand-" + tag + "-" + std::to_string(++generation), {h});
            ASSERT_TRUE(b);
            ASSERT_EQ(dump(*b), model) << "op " << op << ", restored";
          }
          break;
        }
      }
    }
    EXPECT_EQ(dump(*b), model);
  }
}

// An entry written to the DB, removed in the cache (a tombstone pending), put again as
// absent and removed again must still be deleted in the DB: the pending tombstone is not
// forgotten because the caller thought the key absent.
TEST_F(RocksDbBackendTest, AnEntryPutAsAbsentOverAPendingDeleteIsStillDeletedInTheDb) {
  auto b = make({0, 127}, false, "absent");
  ASSERT_TRUE(b);
  registerAll(*b);
  b->setCurrentKey(kgOf(1), keyOf(1));
  b->mapPut(2, "t", "written");
  EXPECT_EQ(dump(*b).size(), 1u);  // a dump's snapshot writes the cache to the DB
  b->setCurrentKey(kgOf(1), keyOf(1));
  b->mapRemove(2, "t");
  b->mapPutAbsent(2, "t", "again");
  b->mapRemove(2, "t");
  std::string_view v;
  EXPECT_FALSE(b->mapGet(2, "t", &v));
  EXPECT_EQ(dump(*b), Model{});
}

// A flush whose batch the DB refused (a full disk declines the checkpoint, the job goes
// on) leaves every entry dirty: the next flush writes the same changes, and an entry the
// DB still holds is not taken for absent.
TEST(EntryCacheTest, AFailedCommitLeavesEveryChangeForTheNextFlush) {
  EntryCache cache(1u << 20);
  std::string a, b;
  EntryCache::makeKey(&a, 0, "a");
  EntryCache::makeKey(&b, 2, "b");
  const std::string v1 = "v1", t = "";
  cache.loaded(a, 0, &v1);  // the DB holds a = v1 and b
  cache.loaded(b, 2, &t);
  cache.put(a, 0, "v2");
  cache.remove(b, 2);
  std::vector<std::string> written;
  auto record = [&](int state, std::string_view key, const std::string* value) {
    written.push_back(std::to_string(state) + ":" + std::string(key) + "=" + (value ? *value : "<deleted>"));
  };
  EXPECT_THROW(cache.flush(record, [] { throw std::runtime_error("No space left on device"); }), std::runtime_error);
  EXPECT_EQ(cache.dirtyCount(), 2u);
  ASSERT_NE(cache.find(b), nullptr);
  EXPECT_TRUE(cache.find(b)->dirty);
  written.clear();
  cache.flush(record, [] {});
  std::sort(written.begin(), written.end());
  EXPECT_EQ(written, (std::vector<std::string>{"0:a=v2", "2:b=<deleted>"}));
  EXPECT_EQ(cache.dirtyCount(), 0u);
  // Written now: a later remove of a needs a delete in the DB.
  cache.remove(a, 0);
  written.clear();
  cache.flush(record, [] {});
  EXPECT_EQ(written, (std::vector<std::string>{"0:a=<deleted>"}));
}

// A flush hands the entries over in the DB's key order, state handle first, bytes compared
// unsigned (RocksDB's bytewise comparator): the memtable then inserts each key next to the
// one before it. Before, they came in the order they became dirty.
TEST(EntryCacheTest, AFlushWritesInKeyOrder) {
  EntryCache cache(1u << 20);
  const std::vector<std::pair<int, std::string>> puts = {
      {2, "b"}, {0, "\xff"}, {2, "a"}, {0, std::string("\x01", 1)}, {1, "m"}, {0, "\x7f"}, {2, "ab"}};
  std::string key;
  for (const auto& [state, dbKey] : puts) {
    EntryCache::makeKey(&key, state, dbKey);
    cache.put(key, state, "v");
  }
  std::vector<std::pair<int, std::string>> written;
  cache.flush([&](int state, std::string_view dbKey, const std::string*) { written.emplace_back(state, dbKey); },
              [] {});
  const std::vector<std::pair<int, std::string>> expected = {{0, std::string("\x01", 1)}, {0, "\x7f"}, {0, "\xff"},
                                                             {1, "m"}, {2, "a"}, {2, "ab"}, {2, "b"}};
  EXPECT_EQ(written, expected);
}

// An event-time job's entries live for one window: read as absent, put, removed when the
// window fires. When the cache fills, the removed ones are dropped and nothing is written
// as long as that leaves room; the live entries stay, dirty, with their values. Before,
// every full cache was written to the DB (live entries included) and halved.
TEST(EntryCacheTest, RemovedEntriesMakeRoomWithoutAWrite) {
  constexpr uint64_t kSize = 1u << 20;
  EntryCache cache(kSize);
  std::string key;
  auto keyOf = [&](uint64_t i) {
    std::string dbKey(16, '\0');
    std::memcpy(dbKey.data(), &i, sizeof i);
    EntryCache::makeKey(&key, 3, dbKey);
    return key;
  };
  std::map<std::string, std::string> written;  // db key -> the value the last write gave it
  int writes = 0, rooms = 0;
  auto makeRoomIfFull = [&] {
    if (!cache.full()) return;
    ++rooms;
    cache.makeRoom([&] {
      ++writes;
      cache.flush([&](int, std::string_view dbKey, const std::string* v) { written[std::string(dbKey)] = v ? *v : "-"; },
                  [] {});
    });
    ASSERT_LE(cache.bytes(), kSize);
  };
  // Every live entry is either still dirty in the cache with its value or was written
  // with it: none is dropped unwritten.
  auto expectKept = [&](uint64_t i, const std::string& value) {
    const std::string k = keyOf(i);
    const EntryCache::Entry* e = cache.find(k);
    if (e != nullptr && e->dirty) {
      EXPECT_TRUE(e->present) << i;
      EXPECT_EQ(e->value, value) << i;
    } else {
      auto w = written.find(std::string(EntryCache::dbKeyOf(k)));
      ASSERT_NE(w, written.end()) << "entry " << i << " was dropped without being written";
      EXPECT_EQ(w->second, value) << i;
    }
  };
  for (uint64_t live = 0; live < 500; ++live) {
    cache.loaded(keyOf(live), 3, nullptr);
    cache.put(keyOf(live), 3, "live " + std::to_string(live));
    makeRoomIfFull();
  }
  for (uint64_t i = 1000; i < 60000; ++i) {
    const std::string k = keyOf(i);
    cache.loaded(k, 3, nullptr);
    makeRoomIfFull();
    cache.put(k, 3, "window");
    makeRoomIfFull();
    if (i >= 1010) cache.remove(keyOf(i - 10), 3);  // ten windows open at a time
  }
  EXPECT_GT(rooms, 2) << "the cache never filled: the test shows nothing";
  EXPECT_EQ(writes, 0) << "a full cache of removed entries was written to the DB";
  for (uint64_t live = 0; live < 500; ++live) {
    const EntryCache::Entry* e = cache.find(keyOf(live));
    ASSERT_NE(e, nullptr) << live;
    EXPECT_TRUE(e->dirty && e->present) << live;
    EXPECT_EQ(e->value, "live " + std::to_string(live));
  }

  // Live entries alone past the size: they are written before any is dropped.
  for (uint64_t i = 100000; i < 130000; ++i) {
    cache.put(keyOf(i), 3, "live " + std::to_string(i));
    makeRoomIfFull();
  }
  EXPECT_GT(writes, 0) << "live entries past the size were never written";
  for (uint64_t live = 0; live < 500; ++live) expectKept(live, "live " + std::to_string(live));
  for (uint64_t i = 100000; i < 130000; ++i) expectKept(i, "live " + std::to_string(i));
}

// Keys the drop takes off the dirty list are listed again, once, when put again: the next
// flush writes each exactly once with its new value. One was put and removed before it
// was ever written (its entry is dropped too); the other was written through by its owner
// (a merge: forgotten) and read back (its entry stays, clean).
TEST(EntryCacheTest, AKeyTakenOffTheDirtyListIsListedAgainWhenPutAgain) {
  EntryCache cache(1u << 20);
  std::string gone, kept;
  EntryCache::makeKey(&gone, 1, "gone");
  EntryCache::makeKey(&kept, 1, "kept");
  cache.loaded(gone, 1, nullptr);
  cache.put(gone, 1, "first");
  cache.remove(gone, 1);  // never in the DB: nothing to write, but still on the list
  cache.put(kept, 1, "a");
  ASSERT_NE(cache.dirtyEntry(kept), nullptr);
  cache.forget(kept);  // the backend wrote it itself (mapAppend), then
  const std::string merged = "a+b";
  cache.loaded(kept, 1, &merged);  // read it back: clean, still on the list
  int writes = 0;
  cache.makeRoom([&] { ++writes; });
  EXPECT_EQ(writes, 0);
  EXPECT_EQ(cache.find(gone), nullptr) << "the removed entry was not dropped";
  ASSERT_NE(cache.find(kept), nullptr);
  EXPECT_EQ(cache.dirtyCount(), 0u) << "keys of entries that are not dirty stayed on the list";
  cache.put(gone, 1, "second");
  cache.put(kept, 1, "c");
  std::vector<std::string> flushed;
  cache.flush([&](int, std::string_view dbKey, const std::string* v) {
    flushed.push_back(std::string(dbKey) + "=" + (v ? *v : "-"));
  }, [] {});
  EXPECT_EQ(flushed, (std::vector<std::string>{"gone=second", "kept=c"}));
}

// The cache's size bounds the memory it really holds (state.backend.rocksdb.entry-cache.size
// is a memory budget per backend): malloc's own count of the bytes in use, sampled while
// the cache fills, evicts and refills, stays within the size and matches what the cache
// counts. Before the table, the heap parts and the dirty list were counted as they are,
// a 16 MiB cache held about 30 MiB. Keys and values on both sides of the inline sizes.
TEST(EntryCacheTest, ItsMemoryStaysWithinItsConfiguredSize) {
#if !defined(JOBHOST_SANITIZED_ALLOCATOR) && (defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__))
#define JOBHOST_SANITIZED_ALLOCATOR 1
#endif
#if !defined(JOBHOST_SANITIZED_ALLOCATOR) && defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define JOBHOST_SANITIZED_ALLOCATOR 1
#endif
#endif
#ifdef JOBHOST_SANITIZED_ALLOCATOR
  GTEST_SKIP() << "the sanitizers' allocators keep their own books: mallinfo2 does not see the cache's memory";
#else
  auto inUse = [] {
    const struct mallinfo2 m = mallinfo2();
    return static_cast<int64_t>(m.uordblks + m.hblkhd);  // small chunks and mmapped ones
  };
  constexpr uint64_t kSize = 4u << 20;
  for (const auto& [keyLength, valueLength] :
       std::vector<std::pair<size_t, size_t>>{{23, 8}, {23, 40}, {60, 8}, {23, 200}}) {
    SCOPED_TRACE("key " + std::to_string(keyLength) + " bytes, value " + std::to_string(valueLength));
    std::string key, dbKey(keyLength, 'k'), value(valueLength, 'v');
    std::mt19937_64 rng(keyLength * 1000 + valueLength);
    const int64_t before = inUse();
    int64_t peak = 0;
    uint64_t evictions = 0;
    {
      EntryCache cache(kSize);
      for (uint64_t i = 0; i < 120000; ++i) {
        const uint64_t k = rng() % 200000;
        std::memcpy(dbKey.data(), &k, sizeof k);
        EntryCache::makeKey(&key, 1, dbKey);
        switch (rng() % 4) {
          case 0: cache.loaded(key, 1, &value); break;
          case 1: cache.remove(key, 1); break;
          default: cache.put(key, 1, value); break;
        }
        if (cache.full()) {
          cache.makeRoom([&] {
            cache.flush([](int, std::string_view, const std::string*) {}, [] {});
            ++evictions;  // written, then halved
          });
        }
        if (i % 61 == 0) {
          const int64_t held = inUse() - before;
          peak = std::max(peak, held);
          ASSERT_LE(held, static_cast<int64_t>(kSize)) << "after " << i << " operations";
          // What the cache counts is what it holds, within 5 % and 4 KiB.
          EXPECT_NEAR(static_cast<double>(cache.bytes()), static_cast<double>(held), held * 0.05 + 4096)
              << "after " << i << " operations";
        }
      }
      EXPECT_GT(evictions, 0u) << "the cache never filled: the test bounds nothing";
      // Not a cache that empties itself: after the last eviction at least a quarter of
      // the size is still in use.
      EXPECT_GT(cache.bytes(), kSize / 4);
      EXPECT_GT(cache.size(), 1000u);
    }
    EXPECT_GT(peak, static_cast<int64_t>(kSize / 2));
  }
#endif
}

// ---------------------------------------------------------------------------------------
// Incremental snapshots

TEST_F(RocksDbBackendTest, IncrementalReusesSstsOfCompletedCheckpoint) {
  auto b = make({0, 127}, true, "inc");
  ASSERT_TRUE(b);
  registerAll(*b);
  Model model;
  populate(*b, 0, 20000, "t1", &model);

  auto k1 = snapshot(*b, request(1, "op-0"));
  ASSERT_TRUE(std::holds_alternative<IncrementalStateHandle>(k1)) << handleTypeName(k1);
  const auto h1 = std::get<IncrementalStateHandle>(k1);
  EXPECT_EQ(h1.checkpointId, 1u);
  EXPECT_EQ(h1.range, (KeyGroupRange{0, 127}));
  EXPECT_EQ(h1.columnFamilies, (std::vector<std::string>{"v", "l", "m"}));
  EXPECT_EQ(h1.backendId.size(), 32u);
  ASSERT_GE(h1.sharedFiles.size(), 3u);  // one SST per non-empty column family at least
  std::map<std::string, SharedFileRef> first;
  for (const auto& f : h1.sharedFiles) {
    EXPECT_TRUE(f.localName.ends_with(".sst")) << f.localName;
    EXPECT_EQ(f.file.path, "shared/" + h1.backendId + "-" + f.localName);
    EXPECT_EQ(f.createdByCheckpoint, 1u);
    auto size = storage_->fileSize(f.file.path);
    ASSERT_TRUE(size.ok()) << size.status();
    EXPECT_EQ(*size, f.file.size);
    first[f.localName] = f;
  }
  std::set<std::string> privateNames;
  for (const auto& f : h1.privateFiles) {
    EXPECT_EQ(f.file.path, "chk-1/op-0-" + f.localName);
    EXPECT_TRUE(storage_->exists(f.file.path));
    privateNames.insert(f.localName.substr(0, f.localName.find('-')));
  }
  EXPECT_TRUE(privateNames.count("CURRENT"));
  EXPECT_TRUE(privateNames.count("MANIFEST"));
  EXPECT_TRUE(privateNames.count("OPTIONS"));
  EXPECT_FALSE(fs::exists(root_ / "local" / "inc" / "chk-1-1"));  // local hard links removed

  b->notifyCheckpointComplete(1);
  Model model2 = model;
  for (int i = 0; i < 10; ++i) {  // change a few keys of one state
    b->setCurrentKey(kgOf(i), keyOf(i));
    b->put(0, "changed");
    model2[{"v", kgOf(i), keyOf(i), ""}] = "changed";
  }
  auto k2 = snapshot(*b, request(2, "op-0"));
  const auto h2 = std::get<IncrementalStateHandle>(k2);
  EXPECT_EQ(h2.backendId, h1.backendId);
  int reused = 0, fresh = 0;
  for (const auto& f : h2.sharedFiles) {
    auto it = first.find(f.localName);
    if (it != first.end()) {
      ++reused;
      EXPECT_EQ(f.file, it->second.file) << f.localName;
      EXPECT_EQ(f.createdByCheckpoint, 1u) << f.localName;
    } else {
      ++fresh;
      EXPECT_EQ(f.createdByCheckpoint, 2u) << f.localName;
      EXPECT_EQ(f.file.path, "shared/" + h2.backendId + "-" + f.localName);
    }
  }
  EXPECT_GE(reused, 3);
  EXPECT_GE(fresh, 1);
  const uint64_t bytes1 = uploadedBy(h1, 1), bytes2 = uploadedBy(h2, 2);
  std::printf(
      "[ measure  ] incremental #1: %zu SSTs, %llu bytes uploaded; #2: %d new SSTs, %d reused, "
      "%llu bytes uploaded (%.4f of #1)\n",
      h1.sharedFiles.size(), static_cast<unsigned long long>(bytes1), fresh, reused,
      static_cast<unsigned long long>(bytes2), double(bytes2) / double(bytes1));
  EXPECT_LT(bytes2 * 10, bytes1);

  // Restore from the incremental handle gives equal state.
  auto r = restoreInto({0, 127}, "inc-dst", {k2});
  ASSERT_TRUE(r);
  EXPECT_EQ(dump(*r), model2);
  ASSERT_EQ(r->states().size(), 3u);

  // After a restore nothing is reused: the first checkpoint re-uploads every SST under
  // a new backend id (no-claim), never touching the restored checkpoint's files.
  auto k3 = snapshot(*r, request(3, "op-0"));
  const auto h3 = std::get<IncrementalStateHandle>(k3);
  EXPECT_NE(h3.backendId, h2.backendId);
  std::set<std::string> oldPaths;
  for (const auto& f : h2.sharedFiles) oldPaths.insert(f.file.path);
  for (const auto& f : h3.sharedFiles) {
    EXPECT_EQ(f.createdByCheckpoint, 3u);
    EXPECT_FALSE(oldPaths.count(f.file.path)) << f.file.path;
  }
  // And the re-uploaded checkpoint restores too.
  auto r2 = restoreInto({0, 127}, "inc-dst2", {k3});
  EXPECT_EQ(dump(*r2), model2);
}

TEST_F(RocksDbBackendTest, AbortedOrUnconfirmedCheckpointIsNotReused) {
  for (bool abort : {true, false}) {
    SCOPED_TRACE(abort ? "aborted" : "never confirmed");
    auto b = make({0, 127}, true, abort ? "abort" : "unconfirmed");
    ASSERT_TRUE(b);
    registerAll(*b);
    Model model;
    populate(*b, 0, 2000, "t1", &model);
    const uint64_t base = abort ? 10 : 20;
    auto k1 = snapshot(*b, request(base + 1, "op-0"));
    const auto h1 = std::get<IncrementalStateHandle>(k1);
    if (abort) b->notifyCheckpointAborted(base + 1);

    b->setCurrentKey(0, keyOf(0));
    b->put(0, "changed");
    auto k2 = snapshot(*b, request(base + 2, "op-0"));
    const auto h2 = std::get<IncrementalStateHandle>(k2);
    std::map<std::string, std::string> firstPaths;
    for (const auto& f : h1.sharedFiles) firstPaths[f.localName] = f.file.path;
    int renamed = 0;
    for (const auto& f : h2.sharedFiles) {
      EXPECT_EQ(f.createdByCheckpoint, base + 2) << f.localName;
      auto it = firstPaths.find(f.localName);
      if (it != firstPaths.end()) {
        ++renamed;
        EXPECT_NE(f.file.path, it->second);
        EXPECT_EQ(f.file.path, it->second + "-" + std::to_string(base + 2));
      }
      auto size = storage_->fileSize(f.file.path);
      ASSERT_TRUE(size.ok()) << size.status();
      EXPECT_EQ(*size, f.file.size);
    }
    EXPECT_GE(renamed, 3);
    for (const auto& f : h1.sharedFiles)
      EXPECT_TRUE(storage_->exists(f.file.path));  // nothing deleted

    // A late completion of the older checkpoint, then of the newer one.
    b->notifyCheckpointComplete(base + 2);
    b->notifyCheckpointComplete(base + 1);  // older than the last completed: ignored
    auto k3 = snapshot(*b, request(base + 3, "op-0"));
    const auto h3 = std::get<IncrementalStateHandle>(k3);
    std::map<std::string, SharedFileRef> second;
    for (const auto& f : h2.sharedFiles) second[f.localName] = f;
    for (const auto& f : h3.sharedFiles) {
      auto it = second.find(f.localName);
      ASSERT_NE(it, second.end()) << "nothing changed, every SST is reused: " << f.localName;
      EXPECT_EQ(f.file, it->second.file);
      EXPECT_EQ(f.createdByCheckpoint, base + 2);
    }
    model[{"v", 0, keyOf(0), ""}] = "changed";
    auto r = restoreInto({0, 127}, abort ? "abort-dst" : "unconfirmed-dst", {k3});
    EXPECT_EQ(dump(*r), model);
  }
}

TEST_F(RocksDbBackendTest, IncrementalSnapshotIsolationAndDrop) {
  auto b = make({0, 127}, true, "inciso");
  ASSERT_TRUE(b);
  registerAll(*b);
  Model model;
  populate(*b, 0, 1000, "t1", &model);
  auto async = b->snapshotSync(request(1, "op-0"));
  ASSERT_TRUE(async.ok()) << async.status();
  Result<KeyedStateHandle> h = Status::IOError("not run");
  std::thread t([&] { h = (*async)->run(); });
  Model later = model;
  populate(*b, 0, 1500, "t2", &later);
  t.join();
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(dump(*restoreInto({0, 127}, "inciso-dst", {*h})), model);
  EXPECT_EQ(dump(*b), later);
  {
    auto dropped = b->snapshotSync(request(2, "op-0"));
    ASSERT_TRUE(dropped.ok());
    EXPECT_TRUE(fs::exists(root_ / "local" / "inciso" / "chk-2-2"));
  }
  EXPECT_FALSE(fs::exists(root_ / "local" / "inciso" / "chk-2-2"));
}

TEST_F(RocksDbBackendTest, SelfContainedNativeSnapshotPutsEverythingInExclusiveDir) {
  auto b = make({0, 127}, true, "selfc");
  ASSERT_TRUE(b);
  registerAll(*b);
  Model model;
  populate(*b, 0, 1000, "t1", &model);
  auto k1 = snapshot(*b, request(1, "op-0"));
  b->notifyCheckpointComplete(1);
  auto k2 = snapshot(*b, request(2, "op-0", SnapshotFormat::kNative, /*shared=*/false));
  const auto h2 = std::get<IncrementalStateHandle>(k2);
  ASSERT_FALSE(h2.sharedFiles.empty());
  for (const auto& f : h2.sharedFiles) {
    EXPECT_EQ(f.file.path, "chk-2/op-0-" + f.localName);
    EXPECT_EQ(f.createdByCheckpoint, 2u);
  }
  for (const auto& f : h2.privateFiles) EXPECT_TRUE(f.file.path.starts_with("chk-2/"));
  EXPECT_EQ(dump(*restoreInto({0, 127}, "selfc-dst", {k2})), model);
  // A canonical snapshot from an incremental backend is a key-group file.
  auto k3 = snapshot(*b, request(3, "op-0", SnapshotFormat::kCanonical));
  EXPECT_TRUE(std::holds_alternative<KeyGroupsStateHandle>(k3));
}

// ---------------------------------------------------------------------------------------
// Rescaling

TEST_F(RocksDbBackendTest, RescaleSplitAndMerge) {
  auto src = make({0, 127}, true, "src");
  ASSERT_TRUE(src);
  registerAll(*src);
  Model model;
  populate(*src, 0, 4000, "t1", &model);
  auto inc = snapshot(*src, request(1, "op-0"));
  auto full = snapshot(*src, request(2, "op-0", SnapshotFormat::kCanonical));
  ASSERT_TRUE(std::holds_alternative<IncrementalStateHandle>(inc));
  ASSERT_TRUE(std::holds_alternative<KeyGroupsStateHandle>(full));

  const KeyGroupRange lo{0, 63}, hi{64, 127};
  for (const auto* h : {&inc, &full}) {
    SCOPED_TRACE(handleTypeName(*h));
    const std::string tag = h == &inc ? "inc" : "full";
    auto a = restoreInto(lo, tag + "-lo", {*h});
    auto b = restoreInto(hi, tag + "-hi", {*h});
    ASSERT_TRUE(a && b);
    const Model ma = dump(*a), mb = dump(*b);
    EXPECT_EQ(ma, filter(model, lo));
    EXPECT_EQ(mb, filter(model, hi));
    EXPECT_EQ(ma.size() + mb.size(), model.size());

    // The split backends contain no entries outside their range, even physically
    // (DeleteRange on the in-place restore): inspect their own native checkpoints.
    auto ha =
        std::get<IncrementalStateHandle>(snapshot(*a, request(10 + (h == &inc), "op-a-" + tag)));
    auto hb =
        std::get<IncrementalStateHandle>(snapshot(*b, request(10 + (h == &inc), "op-b-" + tag)));
    const auto physA = keysPerKeyGroupInCheckpoint(ha), physB = keysPerKeyGroupInCheckpoint(hb);
    EXPECT_EQ(physA.size(), 64u);
    EXPECT_EQ(physB.size(), 64u);
    for (const auto& [kg, n] : physA) EXPECT_TRUE(lo.contains(kg)) << kg;
    for (const auto& [kg, n] : physB) EXPECT_TRUE(hi.contains(kg)) << kg;

    // Merge back: two incremental handles, and two key-group handles, into one backend.
    auto merged = restoreInto({0, 127}, tag + "-merged", {ha, hb});
    EXPECT_EQ(dump(*merged), model);
    auto fa = snapshot(*a, request(20 + (h == &inc), "op-a-" + tag, SnapshotFormat::kCanonical));
    auto fb = snapshot(*b, request(20 + (h == &inc), "op-b-" + tag, SnapshotFormat::kCanonical));
    auto mergedFull = restoreInto({0, 127}, tag + "-merged-full", {fa, fb});
    EXPECT_EQ(dump(*mergedFull), model);
    // Mixed handle types, and an uneven split (31..96) from two handles.
    auto mixed = restoreInto({31, 96}, tag + "-mixed", {ha, fb});
    EXPECT_EQ(dump(*mixed), filter(model, {31, 96}));
  }
}

// ---------------------------------------------------------------------------------------
// Corrupt or incomplete checkpoints

TEST_F(RocksDbBackendTest, RestoreFromMissingOrTruncatedFilesFailsNamingTheFile) {
  auto src = make({0, 127}, true, "bad-src");
  ASSERT_TRUE(src);
  registerAll(*src);
  Model model;
  populate(*src, 0, 2000, "t1", &model);
  auto k = snapshot(*src, request(1, "op-0"));
  const auto h = std::get<IncrementalStateHandle>(k);
  ASSERT_GE(h.sharedFiles.size(), 2u);

  // Missing shared file.
  const std::string missing = h.sharedFiles[0].file.path;
  std::string saved;
  ASSERT_OK(storage_->get(missing, &saved));
  ASSERT_OK(storage_->remove(missing));
  Status s;
  auto r1 = restoreInto({0, 127}, "bad-1", {k}, &s);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(missing), std::string::npos) << s;
  std::printf("[ message  ] missing: %s\n", s.toString().c_str());
  // The backend stays usable (empty) after the failed restore.
  r1->setCurrentKey(1, "k");
  r1->put(0, "x");
  ASSERT_OK(storage_->put(missing, saved));

  // Truncated shared file (multi-handle path too).
  const std::string truncated = h.sharedFiles[1].file.path;
  fs::resize_file(root_ / "ckpt" / truncated, h.sharedFiles[1].file.size / 2);
  auto r2 = restoreInto({0, 127}, "bad-2", {k}, &s);
  EXPECT_TRUE(s.isCorruption()) << s;
  std::printf("[ message  ] truncated: %s\n", s.toString().c_str());
  EXPECT_NE(s.message().find(truncated), std::string::npos) << s;
  auto r3 = restoreInto({0, 63}, "bad-3", {k, KeyedStateHandle()}, &s);
  EXPECT_TRUE(s.isCorruption()) << s;
  EXPECT_NE(s.message().find(truncated), std::string::npos) << s;

  // Truncated private file (MANIFEST).
  auto k2 = snapshot(*src, request(2, "op-0", SnapshotFormat::kNative, false));
  const auto h2 = std::get<IncrementalStateHandle>(k2);
  int manifests = 0;
  for (const auto& f : h2.privateFiles) {
    if (!f.localName.starts_with("MANIFEST")) continue;
    ++manifests;
    fs::resize_file(root_ / "ckpt" / f.file.path, 3);
    auto r4 = restoreInto({0, 127}, "bad-4", {k2}, &s);
    EXPECT_TRUE(s.isCorruption()) << s;
    EXPECT_NE(s.message().find(f.file.path), std::string::npos) << s;
  }

  EXPECT_EQ(manifests, 1);

  // Truncated key-group file.
  auto full = snapshot(*src, request(3, "op-0", SnapshotFormat::kCanonical));
  const auto& kgh = std::get<KeyGroupsStateHandle>(full);
  fs::resize_file(root_ / "ckpt" / kgh.file.path, kgh.file.size - 10);
  auto r5 = restoreInto({0, 127}, "bad-5", {full}, &s);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(kgh.file.path), std::string::npos) << s;

  // A handle whose column family has no descriptor.
  IncrementalStateHandle odd = std::get<IncrementalStateHandle>(snapshot(*src, request(4, "op-0")));
  odd.columnFamilies.push_back("ghost");
  auto r6 = restoreInto({0, 127}, "bad-6", {odd}, &s);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("ghost"), std::string::npos) << s;

  // A kind conflict between the snapshot's descriptors and a declared state.
  auto b7 = make({0, 127}, true, "bad-7");
  b7->registerState(desc("v", StateKind::kList));
  RestoreInput in;
  in.storage = storage_.get();
  in.handles = {full};
  in.states = testStates();
  s = b7->restore(in);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'v'"), std::string::npos) << s;
}

// ---------------------------------------------------------------------------------------
// Restore fast path: hard links, parallel transfers, clean failure

bool isSst(const std::string& name) { return name.ends_with(".sst"); }

/// path under dir -> (content, link count), for every regular file.
std::map<std::string, std::pair<std::string, nlink_t>> filesUnder(const fs::path& dir) {
  std::map<std::string, std::pair<std::string, nlink_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    struct stat st {};
    ::stat(e.path().c_str(), &st);
    out[fs::relative(e.path(), dir).string()] = {std::move(content), st.st_nlink};
  }
  return out;
}

TEST_F(RocksDbBackendTest, RestoreHardLinksSstsAndLeavesTheCheckpointByteIdenticalAfterCompactionsAndWrites) {
  Model model;
  auto src = populatedSource("link-src", 5000, &model);
  ASSERT_TRUE(src);
  snapshot(*src, request(1, "op-0"));
  src->notifyCheckpointComplete(1);
  populate(*src, 2500, 8000, "t2", &model);
  auto k2 = snapshot(*src, request(2, "op-0"));  // incremental: references checkpoint 1's SSTs
  const auto& h2 = std::get<IncrementalStateHandle>(k2);
  ASSERT_TRUE(std::any_of(h2.sharedFiles.begin(), h2.sharedFiles.end(),
                          [](const SharedFileRef& f) { return f.createdByCheckpoint == 1; }));
  src.reset();
  const auto before = filesUnder(root_ / "ckpt");

  auto r = restoreInto({0, 127}, "link-dst", {k2});
  ASSERT_TRUE(r);
  // Same file system: each SST is a second name of the checkpoint's file (same inode), the
  // rest are copies. (Checked at once: a compaction may already be replacing SSTs.)
  int linked = 0;
  for (const auto* list : {&h2.sharedFiles, &h2.privateFiles}) {
    for (const auto& f : *list) {
      struct stat ck {}, local {};
      ASSERT_EQ(::stat((root_ / "ckpt" / f.file.path).c_str(), &ck), 0) << f.file.path;
      if (::stat((root_ / "local" / "link-dst" / "db" / f.localName).c_str(), &local) != 0) continue;  // compacted
      EXPECT_EQ(ck.st_ino == local.st_ino, isSst(f.localName)) << f.file.path << " / " << f.localName;
      // A copy is private like RocksDB's own files, whatever the umask; a link is the
      // checkpoint's file and keeps its mode.
      if (ck.st_ino != local.st_ino) {
        EXPECT_EQ(local.st_mode & 07777, 0600u) << f.localName;
      }
      linked += ck.st_ino == local.st_ino;
    }
  }
  EXPECT_GT(linked, 0);
  EXPECT_EQ(dump(*r), model);
  // The restored DB overwrites every key, flushes and compacts (level 0 compacts at 4
  // files), then goes away, unlinking its names of the checkpoint's files.
  for (int round = 0; round < 6; ++round) {
    populate(*r, 0, 8000, "w" + std::to_string(round), &model);
    snapshot(*r, request(10 + round, "op-r", SnapshotFormat::kNative, false));
  }
  EXPECT_EQ(dump(*r), model);
  r.reset();

  auto after = filesUnder(root_ / "ckpt");
  for (const auto& [path, entry] : before) {
    auto it = after.find(path);
    ASSERT_NE(it, after.end()) << path << " was removed";
    EXPECT_TRUE(it->second.first == entry.first) << path << " changed";
    EXPECT_EQ(it->second.second, 1u) << path;
  }
}

TEST_F(RocksDbBackendTest, RestoreWithOneOrFourTransferThreadsGivesTheSameState) {
  auto src = make({0, 127}, true, "threads-src", 4);
  ASSERT_TRUE(src);
  registerAll(*src);
  Model model;
  for (int round = 0; round < 4; ++round) {  // several SSTs per column family
    populate(*src, round * 2000, round * 2000 + 3000, "t" + std::to_string(round), &model);
    snapshot(*src, request(round + 1, "op-0"));
    src->notifyCheckpointComplete(round + 1);
  }
  auto k = snapshot(*src, request(5, "op-0"));
  const auto& h = std::get<IncrementalStateHandle>(k);
  ASSERT_GT(h.sharedFiles.size() + h.privateFiles.size(), 4u);  // more files than threads
  for (int threads : {1, 4}) {
    auto r = restoreInto({0, 127}, "threads-" + std::to_string(threads), {k}, nullptr, threads);
    ASSERT_TRUE(r);
    EXPECT_EQ(dump(*r), model) << threads << " threads";
    auto part = restoreInto({0, 63}, "threads-part-" + std::to_string(threads), {k}, nullptr, threads);
    ASSERT_TRUE(part);
    EXPECT_EQ(dump(*part), filter(model, {0, 63})) << threads << " threads, rescaled";
  }
}

TEST_F(RocksDbBackendTest, DownloadErrorFailsTheRestoreNamingTheFileAndLeavesNoPartialDb) {
  Model model;
  auto src = populatedSource("fault-src", 4000, &model);
  ASSERT_TRUE(src);
  auto k = snapshot(*src, request(1, "op-0"));
  const auto& h = std::get<IncrementalStateHandle>(k);
  auto base = openStorage((root_ / "ckpt").string());
  ASSERT_TRUE(base.ok()) << base.status();
  testing::FaultInjectionStorage faulty(std::shared_ptr<CheckpointStorage>(std::move(base).value()));
  const auto before = filesUnder(root_ / "ckpt");
  for (uint64_t nth : {1u, 3u}) {
    faulty.failNth(testing::StorageOp::kGet, nth, EIO);
    Status s;
    const std::string name = "fault-" + std::to_string(nth);
    auto r = restoreInto({0, 127}, name, {k}, &s, 4, &faulty);
    ASSERT_TRUE(r);
    EXPECT_TRUE(s.isUnavailable()) << s;
    EXPECT_NE(s.message().find("cannot download"), std::string::npos) << s;
    EXPECT_NE(s.message().find("injected fault"), std::string::npos) << s;
    bool named = false;
    for (const auto* list : {&h.sharedFiles, &h.privateFiles})
      for (const auto& f : *list) named = named || s.message().find(storage_->describe(f.file.path)) != std::string::npos;
    EXPECT_TRUE(named) << "no file of the checkpoint named in: " << s;
    std::printf("[ message  ] %s\n", s.toString().c_str());
    // Nothing of the restore is left in the local directory ...
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(root_ / "local" / name)) left.push_back(e.path().filename());
    EXPECT_TRUE(left.empty()) << left.size() << " entries left, first " << left.front();
    // ... the checkpoint is untouched, and the backend works (empty).
    EXPECT_TRUE(filesUnder(root_ / "ckpt") == before);
    EXPECT_TRUE(dump(*r).empty());
    r->setCurrentKey(1, "k");
    r->put(0, "x");
    std::string v;
    EXPECT_TRUE(r->get(0, v));
  }
}

/// Forwards to another storage; putFile() first asks `hook`, whose error it returns
/// instead of uploading.
class HookedPutStorage final : public testing::ForwardingStorage {
 public:
  HookedPutStorage(CheckpointStorage& base, std::function<Status(const std::string&)> hook)
      : ForwardingStorage(base), hook_(std::move(hook)) {}
  Status putFile(const std::string& path, const std::string& local) override {
    if (Status s = hook_(path); !s.ok()) return s;
    return base_.putFile(path, local);
  }

 private:
  std::function<Status(const std::string&)> hook_;
};

// Regression (CI, issue 16): with uploads on several threads, an abort seen while the
// first file was in flight stopped the queued files but left a MANIFEST/CURRENT/OPTIONS
// another thread had already written in the exclusive directory.
TEST_F(RocksDbBackendTest, AnAbortOrAFailureDuringParallelUploadsFailsOnceAndLeavesNoExclusiveFile) {
  struct Case {
    std::string name;
    bool sst;           // the hook acts on the first SST upload, else on the first other file
    bool abort;         // it aborts the checkpoint (and lets the file through), else fails the file
    bool selfContained; // no shared directory: the SSTs go to the exclusive one too
  };
  const std::vector<Case> cases = {
      {"abort while an SST uploads", true, true, false},
      {"abort while an SST uploads, self-contained", true, true, true},
      {"abort while MANIFEST/CURRENT/OPTIONS upload", false, true, false},
      {"a MANIFEST/CURRENT/OPTIONS upload fails", false, false, false},
      {"an SST upload fails, self-contained", true, false, true},
  };
  uint64_t id = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ++id;
    Model model;
    auto b = make({0, 127}, true, "upload-" + std::to_string(id), 4);
    ASSERT_TRUE(b);
    registerAll(*b);
    populate(*b, 0, 3000, "t", &model);  // one SST per state, and MANIFEST, CURRENT, OPTIONS
    auto aborted = std::make_shared<std::atomic<bool>>(false);
    std::atomic<bool> acted{false};
    HookedPutStorage hooked(*storage_, [&](const std::string& path) -> Status {
      if (path.ends_with(".sst") != c.sst || acted.exchange(true)) return Status::OK();
      if (!c.abort) return Status::IOError("cannot write " + path + " (test)");
      aborted->store(true, std::memory_order_release);
      return Status::OK();
    });
    SnapshotRequest r = request(id, "op-0", SnapshotFormat::kNative, !c.selfContained);
    r.storage = &hooked;
    r.aborted = aborted;
    auto async = b->snapshotSync(r);
    ASSERT_TRUE(async.ok()) << async.status();
    auto h = (*async)->run();
    ASSERT_FALSE(h.ok()) << "the upload went through";
    if (c.abort) {
      EXPECT_NE(h.status().message().find("checkpoint " + std::to_string(id) + " was aborted; stopped writing"),
                std::string::npos)
          << h.status();
    } else {
      EXPECT_NE(h.status().message().find("(test)"), std::string::npos) << h.status();
    }
    std::vector<FileEntry> left;
    EXPECT_TRUE(storage_->list(r.exclusiveDir, &left).ok());
    EXPECT_TRUE(left.empty()) << left.size() << " files left in " << r.exclusiveDir << ", first " << left.front().path;
    // The backend goes on: the next checkpoint is complete and restores the state.
    auto k = snapshot(*b, request(100 + id, "op-0"));
    auto restored = restoreInto({0, 127}, "upload-dst-" + std::to_string(id), {k});
    ASSERT_TRUE(restored);
    EXPECT_EQ(dump(*restored), model);
  }
}

// The upload is one FileBatch of the local storage: a file that fails, or a commit that
// fails, leaves no file of the checkpoint under a final name — in the exclusive directory
// nor in the shared one — and no temporary file.
TEST_F(RocksDbBackendTest, AFailedFileOrCommitOfTheUploadBatchLeavesNoFileInEitherDirectory) {
  struct Case {
    std::string name;
    testing::StorageOp op;
    uint64_t nth;
  };
  const std::vector<Case> cases = {
      {"the first file added fails", testing::StorageOp::kPutFile, 1},
      {"the third file added fails", testing::StorageOp::kPutFile, 3},
      {"the commit fails", testing::StorageOp::kBatchCommit, 1},
  };
  auto base = openStorage((root_ / "ckpt").string());
  ASSERT_TRUE(base.ok()) << base.status();
  testing::FaultInjectionStorage faulty(std::shared_ptr<CheckpointStorage>(std::move(base).value()));
  uint64_t id = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ++id;
    Model model;
    auto b = make({0, 127}, true, "batch-" + std::to_string(id), 4);
    ASSERT_TRUE(b);
    registerAll(*b);
    populate(*b, 0, 3000, "t", &model);
    SnapshotRequest r = request(id, "op-0");
    r.storage = &faulty;
    r.sharedDir = "shared-" + std::to_string(id);
    faulty.failNth(c.op, c.nth, EIO);
    auto async = b->snapshotSync(r);
    ASSERT_TRUE(async.ok()) << async.status();
    auto h = (*async)->run();
    faulty.clearFaults();
    ASSERT_FALSE(h.ok()) << "the upload went through";
    EXPECT_NE(h.status().message().find("(injected fault)"), std::string::npos) << h.status();
    for (const std::string& dir : {r.exclusiveDir, r.sharedDir}) {
      std::vector<FileEntry> left, temps;
      EXPECT_TRUE(storage_->list(dir, &left).ok());
      EXPECT_TRUE(left.empty()) << left.size() << " files left in " << dir << ", first " << left.front().path;
      EXPECT_TRUE(storage_->listTemporary(dir, &temps).ok());
      EXPECT_TRUE(temps.empty()) << temps.size() << " temporary files left in " << dir;
    }
    // The next checkpoint uploads everything and restores the state.
    SnapshotRequest next = request(100 + id, "op-0");
    next.storage = &faulty;
    next.sharedDir = r.sharedDir;
    auto k = snapshot(*b, next);
    auto restored = restoreInto({0, 127}, "batch-dst-" + std::to_string(id), {k});
    ASSERT_TRUE(restored);
    EXPECT_EQ(dump(*restored), model);
  }
}

// ---------------------------------------------------------------------------------------
// Interoperability with the heap backend (key-group files restore anywhere)

TEST_F(RocksDbBackendTest, KeyGroupFilesInteroperateWithHeapBackend) {
  auto rocks = make({0, 127}, false, "interop");
  ASSERT_TRUE(rocks);
  registerAll(*rocks);
  Model model;
  populate(*rocks, 0, 1000, "t1", &model);
  auto full = snapshot(*rocks, request(1, "rocks", SnapshotFormat::kCanonical));

  BackendOptions ho;
  ho.maxParallelism = kMaxParallelism;
  ho.range = {0, 63};
  auto heap = createHeapBackend(ho);
  ASSERT_TRUE(heap.ok()) << heap.status();
  RestoreInput in;
  in.storage = storage_.get();
  in.handles = {full};
  in.states = testStates();
  ASSERT_OK((*heap)->restore(in));
  auto back = snapshot(**heap, request(2, "heap", SnapshotFormat::kCanonical));
  ASSERT_TRUE(std::holds_alternative<KeyGroupsStateHandle>(back));
  auto r = restoreInto({0, 63}, "interop-back", {back});
  EXPECT_EQ(dump(*r), filter(model, {0, 63}));
}

}  // namespace
}  // namespace jobhost::state
