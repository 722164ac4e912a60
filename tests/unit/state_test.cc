// Unit tests for state/: the key-group file format, the heap (hashmap) keyed backend and
// the `_metadata` codec.
//
// Every test runs against real local checkpoint storage in a fresh temp directory.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include "jobhost/errors.h"
#include "jobhost/serializer.h"
#include "jobhost/state.h"
#include "jobhost/state/checkpoint_metadata.h"
#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/key_group_format.h"
#include "jobhost/state/keyed_backend.h"
#include "support/fault_injection.h"
#include "support/forwarding_storage.h"
#include "support/state_descriptors.h"
#include "../support/contains.h"

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

constexpr int kMaxParallelism = 128;

StateDescriptorInfo desc(const std::string& name, StateKind kind) {
  return testing::stringDescriptor(name, kind);
}

// A fresh directory with checkpoint storage at <dir>/ckpt.
class StateTestBase : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() / ("jobhost-state-test-" + std::to_string(::getpid()) + "-" +
                                         info->test_suite_name() + "-" + info->name());
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

  // Writes a file under the storage root directly (storage puts fsync: too slow for
  // tests that write a hundred damaged copies).
  void writeStored(const std::string& path, const std::string& bytes) {
    fs::path p = root_ / "ckpt" / path;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  }

  fs::path root_;
  std::unique_ptr<CheckpointStorage> storage_;
};

// ---------------------------------------------------------------------------------------
// Key-group file format

struct Entry {
  int stateIndex;
  int keyGroup;
  std::string key, userKey, value;
  bool operator==(const Entry&) const = default;
  bool operator<(const Entry& o) const {
    return std::tie(keyGroup, stateIndex, key, userKey, value) <
           std::tie(o.keyGroup, o.stateIndex, o.key, o.userKey, o.value);
  }
};

void PrintTo(const Entry& e, std::ostream* os) {
  *os << "{s" << e.stateIndex << " kg" << e.keyGroup << " " << e.key << "/" << e.userKey << "=" << e.value << "}";
}

class KeyGroupFormatTest : public StateTestBase {
 protected:
  const std::vector<StateDescriptorInfo> states_ = {desc("counts", StateKind::kValue),
                                                    desc("index", StateKind::kMap)};
  const KeyGroupRange range_{4, 9};
  // Key groups 4..9; 5 and 8 stay empty.
  const std::vector<Entry> entries_ = {
      {0, 4, "apple", "", "1"},    {1, 4, "apple", "u1", "x"}, {1, 4, "apple", "u2", "y"},
      {0, 6, "banana", "", "22"},  {0, 6, "cherry", "", "333"}, {1, 7, "date", "k", "v"},
      {0, 9, "elder", "", "9999"}, {1, 9, "fig", "", "empty user key"},
  };

  KeyGroupsStateHandle write(const std::string& path) {
    auto w = KeyGroupWriter::create(*storage_, path, states_, range_);
    EXPECT_TRUE(w.ok()) << w.status();
    int group = range_.start - 1;
    for (const auto& e : entries_) {
      while (group < e.keyGroup) EXPECT_OK((*w)->beginKeyGroup(++group));
      EXPECT_OK((*w)->add(e.stateIndex, e.key, e.userKey, e.value));
    }
    while (group < range_.end) EXPECT_OK((*w)->beginKeyGroup(++group));
    auto h = (*w)->finish();
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? *h : KeyGroupsStateHandle{};
  }

  Status read(const KeyGroupsStateHandle& h, KeyGroupRange wanted, std::vector<Entry>* out,
              std::vector<std::string>* names) {
    out->clear();
    return readKeyGroups(*storage_, h, wanted, names, [&](const KeyGroupEntry& e) {
      out->push_back({e.stateIndex, e.keyGroup, std::string(e.key), std::string(e.userKey), std::string(e.value)});
      return Status::OK();
    });
  }

  std::vector<Entry> entriesIn(KeyGroupRange r) const {
    std::vector<Entry> out;
    for (const auto& e : entries_)
      if (r.contains(e.keyGroup)) out.push_back(e);
    return out;
  }

  /// The file header of states_, as ByteWriter encodes the format.
  std::string encodedHeader() const {
    std::string out;
    ByteWriter bw(out);
    bw.writeRaw("JHKG", 4);
    bw.writeFixed<uint32_t>(kKeyGroupFormatVersion);
    bw.writeVarint(states_.size());
    for (const auto& s : states_) {
      bw.writeBytes(s.name);
      bw.writeU8(static_cast<uint8_t>(s.kind));
    }
    bw.writeFixed<uint64_t>(XXH3_64bits(out.data(), out.size()));  // format version 2: the header's checksum
    return out;
  }
  /// Ends the group that starts at `groupStart` in `expected`: varint(0), then the XXH3
  /// of the group's bytes (the varint included), little-endian.
  static void endGroup(std::string& expected, uint64_t groupStart) {
    ByteWriter bw(expected);
    bw.writeVarint(0);
    bw.writeFixed<uint64_t>(XXH3_64bits(expected.data() + groupStart, expected.size() - groupStart));
  }
  /// Adds an entry to `w` and its encoding (as ByteWriter gives it) to `expected`.
  void addToBoth(KeyGroupWriter& w, ByteWriter& expected, int state, const std::string& key, const std::string& user,
                 const std::string& value) {
    ASSERT_OK(w.add(state, key, user, value));
    expected.writeVarint(static_cast<uint64_t>(state) + 1);
    expected.writeBytes(key);
    if (states_[static_cast<size_t>(state)].kind == StateKind::kMap) expected.writeBytes(user);
    expected.writeBytes(value);
  }
  /// The file `h` names holds exactly `expected`, and `h` its size and group offsets.
  void expectFileBytes(const KeyGroupsStateHandle& h, const std::string& expected, const std::vector<uint64_t>& offsets) {
    EXPECT_EQ(h.file.size, expected.size());
    EXPECT_EQ(h.offsets, offsets);
    std::string bytes;
    ASSERT_OK(storage_->get(h.file.path, &bytes));
    ASSERT_EQ(bytes.size(), expected.size());
    EXPECT_TRUE(bytes == expected) << "first difference at byte "
                                   << (std::mismatch(bytes.begin(), bytes.end(), expected.begin()).first - bytes.begin());
  }
};

TEST_F(KeyGroupFormatTest, AFileReadsBackEveryEntryInKeyGroupOrderWithTheStateNames) {
  KeyGroupsStateHandle h = write("chk-1/op-0.kg");
  EXPECT_EQ(h.file.path, "chk-1/op-0.kg");
  EXPECT_EQ(h.range, range_);
  std::vector<Entry> got;
  std::vector<std::string> names;
  ASSERT_OK(read(h, {0, kMaxParallelism - 1}, &got, &names));
  EXPECT_EQ(names, (std::vector<std::string>{"counts", "index"}));
  EXPECT_EQ(got, entries_);
}

TEST_F(KeyGroupFormatTest, ASubRangeReadsOnlyItsKeyGroups) {
  KeyGroupsStateHandle h = write("chk-1/op-0.kg");
  const std::vector<KeyGroupRange> wanted = {{6, 7}, {4, 4}, {9, 20}, {0, 5}, {5, 5}, {8, 8}};
  for (const auto& r : wanted) {
    SCOPED_TRACE("wanted [" + std::to_string(r.start) + ", " + std::to_string(r.end) + "]");
    std::vector<Entry> got;
    std::vector<std::string> names;
    ASSERT_OK(read(h, r, &got, &names));
    EXPECT_EQ(got, entriesIn(r));
    EXPECT_EQ(names.size(), 2u);
  }
}

TEST_F(KeyGroupFormatTest, ARangeOutsideTheFileReadsNothingButStillTheNames) {
  KeyGroupsStateHandle h = write("chk-1/op-0.kg");
  std::vector<Entry> got;
  std::vector<std::string> names;
  ASSERT_OK(read(h, {64, 127}, &got, &names));
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(names, (std::vector<std::string>{"counts", "index"}));
}

TEST_F(KeyGroupFormatTest, OffsetsPointAtEachKeyGroupAndTheSizeIsTheFileSize) {
  KeyGroupsStateHandle h = write("chk-1/op-0.kg");
  ASSERT_EQ(h.offsets.size(), 6u);
  auto size = storage_->fileSize(h.file.path);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(h.file.size, *size);
  // Header: "JHKG", u32 version, varint(2), then bytes(name) u8(kind) per state, u64 checksum.
  const uint64_t header = 4 + 4 + 1 + (1 + 6 + 1) + (1 + 5 + 1) + 8;
  EXPECT_EQ(h.offsets[0], header);
  for (size_t i = 1; i < h.offsets.size(); ++i) EXPECT_LT(h.offsets[i - 1], h.offsets[i]) << i;
  // Empty groups (5 and 8) are just their terminating varint(0) and checksum.
  EXPECT_EQ(h.offsets[2] - h.offsets[1], kKeyGroupEndBytes);
  EXPECT_EQ(h.offsets[5] - h.offsets[4], kKeyGroupEndBytes);
  // The group at each offset starts with the first entry's tag: state index + 1.
  std::string bytes;
  ASSERT_OK(storage_->get(h.file.path, &bytes));
  EXPECT_EQ(bytes.substr(0, 4), "JHKG");
  EXPECT_EQ(bytes[h.offsets[0]], '\x01');  // kg 4: "counts" (state 0)
  EXPECT_EQ(bytes[h.offsets[3]], '\x02');  // kg 7: "index" (state 1)
  EXPECT_EQ(bytes[bytes.size() - kKeyGroupEndBytes], '\0');
}

TEST_F(KeyGroupFormatTest, ManySmallEntriesWrittenThroughTheBackgroundWriterAreTheFormatsBytes) {
  // ~5 MiB of small entries (the stack-encoded path, key and value sizes 0..20 around the
  // 8..16-byte copy), so the writer hands four full buffers to its writing thread. The
  // file must be byte for byte what ByteWriter's encoding of the format gives.
  const KeyGroupRange range{0, 3};
  auto w = KeyGroupWriter::create(*storage_, "chk-1/small.kg", states_, range);
  ASSERT_TRUE(w.ok()) << w.status();
  std::string expected = encodedHeader();
  ByteWriter bw(expected);
  std::vector<uint64_t> offsets;
  for (int kg = range.start; kg <= range.end; ++kg) {
    if (kg > range.start) endGroup(expected, offsets.back());
    offsets.push_back(expected.size());
    ASSERT_OK((*w)->beginKeyGroup(kg));
    for (int i = 0; i < 60000; ++i) {
      const int state = i % 3 == 0 ? 1 : 0;  // every third a MapState entry
      std::string key = std::to_string(kg) + ":" + std::to_string(i) + std::string(static_cast<size_t>(i % 12), 'k');
      std::string user = state == 1 ? std::string(static_cast<size_t>(i % 9), 'u') : "";
      std::string value(static_cast<size_t>(i % 21), static_cast<char>('a' + i % 26));
      ASSERT_NO_FATAL_FAILURE(addToBoth(**w, bw, state, key, user, value));
    }
  }
  endGroup(expected, offsets.back());
  auto h = (*w)->finish();
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_GT(expected.size(), size_t{4} << 20);
  expectFileBytes(*h, expected, offsets);
}

TEST_F(KeyGroupFormatTest, EntriesOfEverySizeAreTheFormatsBytes) {
  // Sizes on both sides of the inline path's limit (key + user key + value <= 64 bytes),
  // lengths whose varint takes two bytes (>= 128), empty parts, and values of 1.5 and 3 MiB
  // that span several buffers, interleaved with small entries so that the inline path
  // meets buffers at every fill level. Byte for byte what ByteWriter gives.
  const KeyGroupRange range{0, 2};
  auto w = KeyGroupWriter::create(*storage_, "chk-1/sizes.kg", states_, range);
  ASSERT_TRUE(w.ok()) << w.status();
  std::string expected = encodedHeader();
  ByteWriter bw(expected);
  const std::vector<size_t> sizes = {0, 1, 3, 4, 7, 8, 16, 17, 20, 31, 32, 33, 40, 63, 64, 65, 127, 128, 300};
  std::vector<uint64_t> offsets;
  int n = 0;
  for (int kg = range.start; kg <= range.end; ++kg) {
    if (kg > range.start) endGroup(expected, offsets.back());
    offsets.push_back(expected.size());
    ASSERT_OK((*w)->beginKeyGroup(kg));
    for (int round = 0; round < 400; ++round) {
      for (size_t k : sizes) {
        for (size_t v : sizes) {
          if (k + v > 400) continue;
          ++n;
          const int state = n % 4 == 0 ? 1 : 0;
          // Every byte differs from its neighbours, so a copy shifted by one shows.
          auto bytesOf = [&](size_t len, int seed) {
            std::string b(len, '\0');
            for (size_t i = 0; i < len; ++i) b[i] = static_cast<char>((seed + 7 * i) % 251);
            return b;
          };
          std::string key = bytesOf(k, n);
          std::string user = state == 1 ? bytesOf(static_cast<size_t>(n % 70), n + 1) : "";
          std::string value = bytesOf(v, n + 2);
          if (n % 9000 == 0) value = bytesOf((n % 18000 == 0 ? 3u : 1u) << 20 | 12345, n);  // spans buffers
          ASSERT_NO_FATAL_FAILURE(addToBoth(**w, bw, state, key, user, value));
        }
      }
    }
  }
  endGroup(expected, offsets.back());
  auto h = (*w)->finish();
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_GT(expected.size(), size_t{8} << 20);
  expectFileBytes(*h, expected, offsets);
}

TEST_F(KeyGroupFormatTest, AWriteFailingOnTheBackgroundWriterIsReturnedAndNothingIsPublished) {
  // The second write of a ~4 MiB file fails (the disk is full) on the writer's thread: a
  // later add() or finish() returns that error, and no file appears.
  auto faultyFs = std::make_shared<jobhost::testing::FaultInjectionFileSystem>();
  auto st = openStorage((root_ / "faulty").string(), faultyFs);
  ASSERT_TRUE(st.ok()) << st.status();
  auto storage = std::move(st).value();
  auto w = KeyGroupWriter::create(*storage, "chk-1/full.kg", states_, {0, 0});
  ASSERT_TRUE(w.ok()) << w.status();
  faultyFs->failNth(jobhost::testing::FsOp::kWrite, 2, ENOSPC);
  Status failed;
  ASSERT_OK((*w)->beginKeyGroup(0));
  for (int i = 0; i < 4000 && failed.ok(); ++i)
    failed = (*w)->add(0, "key-" + std::to_string(i), "", std::string(1000, 'v'));
  if (failed.ok()) {
    auto h = (*w)->finish();
    ASSERT_FALSE(h.ok()) << "a file whose write failed was published";
    failed = h.status();
  }
  EXPECT_TRUE(failed.isNoSpace()) << failed;
  EXPECT_NE(failed.toString().find("full.kg"), std::string::npos) << failed;
  w->reset();
  EXPECT_FALSE(storage->exists("chk-1/full.kg"));
}

TEST_F(KeyGroupFormatTest, OffsetsStayRightAcrossBufferFlushesOfLargeFiles) {
  // 4 groups of ~600 KiB: the writer flushes its 1 MiB buffer in the middle of groups.
  const KeyGroupRange range{10, 13};
  auto w = KeyGroupWriter::create(*storage_, "chk-1/big.kg", states_, range);
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<Entry> all;
  for (int kg = range.start; kg <= range.end; ++kg) {
    ASSERT_OK((*w)->beginKeyGroup(kg));
    for (int i = 0; i < 3; ++i) {
      Entry e{0, kg, "key-" + std::to_string(kg) + "-" + std::to_string(i), "",
              std::string(200 * 1024 + static_cast<size_t>(i), static_cast<char>('a' + kg - range.start))};
      ASSERT_OK((*w)->add(e.stateIndex, e.key, e.userKey, e.value));
      all.push_back(std::move(e));
    }
  }
  auto h = (*w)->finish();
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->file.size, (*w)->bytesWritten());
  for (KeyGroupRange r : {KeyGroupRange{11, 11}, KeyGroupRange{12, 13}, range}) {
    SCOPED_TRACE("wanted [" + std::to_string(r.start) + ", " + std::to_string(r.end) + "]");
    std::vector<Entry> got, expected;
    std::vector<std::string> names;
    ASSERT_OK(read(*h, r, &got, &names));
    for (const auto& e : all)
      if (r.contains(e.keyGroup)) expected.push_back(e);
    EXPECT_TRUE(got == expected) << got.size() << " entries read, " << expected.size() << " expected";
  }
}

TEST_F(KeyGroupFormatTest, AnEmptyFileHasOneTerminatorPerKeyGroup) {
  auto w = KeyGroupWriter::create(*storage_, "chk-1/empty.kg", states_, {0, 3});
  ASSERT_TRUE(w.ok()) << w.status();
  auto h = (*w)->finish();  // finish() writes the groups nobody began
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->offsets.size(), 4u);
  EXPECT_EQ(h->file.size, h->offsets[0] + 4 * kKeyGroupEndBytes);
  std::vector<Entry> got;
  std::vector<std::string> names;
  ASSERT_OK(read(*h, {0, 3}, &got, &names));
  EXPECT_TRUE(got.empty());
}

TEST_F(KeyGroupFormatTest, KeyGroupsOutOfOrderOrOutsideTheRangeAreRejected) {
  auto w = KeyGroupWriter::create(*storage_, "chk-1/op-0.kg", states_, range_);
  ASSERT_TRUE(w.ok()) << w.status();
  Status before = (*w)->beginKeyGroup(3);
  EXPECT_TRUE(before.isInvalidArgument()) << before;
  EXPECT_TRUE(contains(before.message(), "key group 3")) << before;
  EXPECT_TRUE(contains(before.message(), "expected 4")) << before;

  ASSERT_OK((*w)->beginKeyGroup(4));
  Status skip = (*w)->beginKeyGroup(6);
  EXPECT_TRUE(skip.isInvalidArgument()) << skip;
  EXPECT_TRUE(contains(skip.message(), "key group 6")) << skip;
  EXPECT_TRUE(contains(skip.message(), "expected 5")) << skip;

  Status again = (*w)->beginKeyGroup(4);
  EXPECT_TRUE(again.isInvalidArgument()) << again;
  ASSERT_OK((*w)->beginKeyGroup(5));
}

TEST_F(KeyGroupFormatTest, EntriesOutsideAKeyGroupOrForUnknownStatesAreRejected) {
  auto w = KeyGroupWriter::create(*storage_, "chk-1/op-0.kg", states_, range_);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE((*w)->add(0, "k", "", "v").isInvalidArgument());
  ASSERT_OK((*w)->beginKeyGroup(4));
  EXPECT_TRUE((*w)->add(2, "k", "", "v").isInvalidArgument());
  EXPECT_TRUE((*w)->add(-1, "k", "", "v").isInvalidArgument());
  EXPECT_OK((*w)->add(1, "k", "u", "v"));
}

TEST_F(KeyGroupFormatTest, CreatingAnExistingFileFails) {
  write("chk-1/op-0.kg");
  auto again = KeyGroupWriter::create(*storage_, "chk-1/op-0.kg", states_, range_);
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(contains(again.status().message(), "already exists")) << again.status();
}

TEST_F(KeyGroupFormatTest, EveryTruncationIsCorruptionNamingTheFile) {
  KeyGroupsStateHandle h = write("chk-1/op-0.kg");
  std::string bytes;
  ASSERT_OK(storage_->get(h.file.path, &bytes));
  for (size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE("truncated to " + std::to_string(n) + " of " + std::to_string(bytes.size()) + " bytes");
    const std::string path = "trunc/op-" + std::to_string(n) + ".kg";
    writeStored(path, bytes.substr(0, n));
    KeyGroupsStateHandle t = h;
    t.file = {path, n};  // the metadata agrees with the short file: only the content can tell
    std::vector<Entry> got;
    std::vector<std::string> names;
    Status s = read(t, {0, kMaxParallelism - 1}, &got, &names);
    EXPECT_TRUE(s.isCorruption()) << s;
    EXPECT_TRUE(contains(s.message(), storage_->describe(path))) << s;
  }
}

TEST_F(KeyGroupFormatTest, AFileWhoseSizeDiffersFromTheMetadataIsCorruption) {
  KeyGroupsStateHandle h = write("chk-1/op-0.kg");
  KeyGroupsStateHandle bigger = h;
  bigger.file.size += 10;
  std::vector<Entry> got;
  std::vector<std::string> names;
  Status s = read(bigger, range_, &got, &names);
  EXPECT_TRUE(s.isCorruption()) << s;
  EXPECT_TRUE(contains(s.message(), storage_->describe(h.file.path))) << s;
  EXPECT_TRUE(contains(s.message(), std::to_string(h.file.size) + " bytes")) << s;
  EXPECT_TRUE(contains(s.message(), "_metadata records " + std::to_string(bigger.file.size))) << s;
  EXPECT_TRUE(got.empty());
}

TEST_F(KeyGroupFormatTest, InconsistentOffsetsAreCorruption) {
  KeyGroupsStateHandle h = write("chk-1/op-0.kg");
  std::vector<Entry> got;
  std::vector<std::string> names;

  KeyGroupsStateHandle fewer = h;
  fewer.offsets.pop_back();
  Status s = read(fewer, range_, &got, &names);
  EXPECT_TRUE(s.isCorruption()) << s;
  EXPECT_TRUE(contains(s.message(), "5 offsets for 6 key groups")) << s;

  KeyGroupsStateHandle shifted = h;
  shifted.offsets[2] += 1;
  s = read(shifted, range_, &got, &names);
  EXPECT_TRUE(s.isCorruption()) << s;
  EXPECT_TRUE(contains(s.message(), storage_->describe(h.file.path))) << s;

  KeyGroupsStateHandle beyond = h;
  beyond.offsets[0] = h.file.size + 1;
  s = read(beyond, range_, &got, &names);
  EXPECT_TRUE(s.isCorruption()) << s;
}

TEST_F(KeyGroupFormatTest, BadMagicIsCorruptionAndANewerVersionIsIncompatible) {
  KeyGroupsStateHandle h = write("chk-1/op-0.kg");
  std::string bytes;
  ASSERT_OK(storage_->get(h.file.path, &bytes));
  std::vector<Entry> got;
  std::vector<std::string> names;

  std::string badMagic = bytes;
  badMagic[0] = 'X';
  ASSERT_OK(storage_->put("bad/magic.kg", badMagic));
  KeyGroupsStateHandle m = h;
  m.file.path = "bad/magic.kg";
  Status s = read(m, range_, &got, &names);
  EXPECT_TRUE(s.isCorruption()) << s;
  EXPECT_TRUE(contains(s.message(), "bad magic")) << s;

  std::string newer = bytes;
  newer[4] = static_cast<char>(kKeyGroupFormatVersion + 1);
  ASSERT_OK(storage_->put("bad/newer.kg", newer));
  KeyGroupsStateHandle n = h;
  n.file.path = "bad/newer.kg";
  s = read(n, range_, &got, &names);
  EXPECT_TRUE(s.isIncompatible()) << s;
  EXPECT_TRUE(contains(s.message(), "version " + std::to_string(kKeyGroupFormatVersion + 1))) << s;
}

TEST_F(KeyGroupFormatTest, EveryByteFlippedIsCorruptionNamingTheFileAndNeverOtherEntries) {
  // A flipped byte inside a value parses as another value: version 1 restored it as a
  // different count. Every single-byte change must now fail the read (or, for a byte
  // of a group outside the range read, leave the read unchanged).
  KeyGroupsStateHandle h = write("chk-1/op-0.kg");
  std::string bytes;
  ASSERT_OK(storage_->get(h.file.path, &bytes));
  for (size_t at = 0; at < bytes.size(); ++at) {
    std::string damaged = bytes;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x01);
    ASSERT_OK(storage_->put("bad/flip-" + std::to_string(at) + ".kg", damaged));
    KeyGroupsStateHandle d = h;
    d.file.path = "bad/flip-" + std::to_string(at) + ".kg";
    std::vector<Entry> got;
    std::vector<std::string> names;
    Status s = read(d, range_, &got, &names);
    // (A changed version field reads as a version this jobhost does not know.)
    EXPECT_TRUE(s.isCorruption() || (at >= 4 && at < 8 && s.isIncompatible())) << "byte " << at << ": " << s;
    EXPECT_TRUE(contains(s.message(), d.file.path)) << s;
  }
  // The checksum names the key group.
  std::string damaged = bytes;
  const size_t inValue = bytes.find("9999");
  ASSERT_NE(inValue, std::string::npos);
  damaged[inValue] = '8';
  ASSERT_OK(storage_->put("bad/value.kg", damaged));
  KeyGroupsStateHandle d = h;
  d.file.path = "bad/value.kg";
  std::vector<Entry> got;
  std::vector<std::string> names;
  Status s = read(d, range_, &got, &names);
  EXPECT_TRUE(contains(s.message(), "the checksum of key group 9 does not match")) << s;
  // Reading only the other key groups does not touch the damaged one.
  EXPECT_OK(read(d, {4, 8}, &got, &names));
  EXPECT_EQ(got, entriesIn({4, 8}));
}

TEST_F(KeyGroupFormatTest, AVersionOneFileWithoutChecksumsStillReads) {
  // Version 1, as written until 2026-12-07 (tests/compat/v1 and v2 hold such files).
  std::string v1;
  ByteWriter bw(v1);
  bw.writeRaw("JHKG", 4);
  bw.writeFixed<uint32_t>(1);
  bw.writeVarint(states_.size());
  for (const auto& st : states_) {
    bw.writeBytes(st.name);
    bw.writeU8(static_cast<uint8_t>(st.kind));
  }
  std::vector<uint64_t> offsets;
  for (int kg = range_.start; kg <= range_.end; ++kg) {
    offsets.push_back(v1.size());
    for (const auto& e : entriesIn({kg, kg})) {
      bw.writeVarint(static_cast<uint64_t>(e.stateIndex) + 1);
      bw.writeBytes(e.key);
      if (states_[static_cast<size_t>(e.stateIndex)].kind == StateKind::kMap) bw.writeBytes(e.userKey);
      bw.writeBytes(e.value);
    }
    bw.writeVarint(0);
  }
  ASSERT_OK(storage_->put("v1/op-0.kg", v1));
  KeyGroupsStateHandle h;
  h.file = {"v1/op-0.kg", v1.size()};
  h.range = range_;
  h.offsets = offsets;
  std::vector<Entry> got;
  std::vector<std::string> names;
  ASSERT_OK(read(h, range_, &got, &names));
  EXPECT_EQ(got, entries_);
}

TEST_F(KeyGroupFormatTest, AMissingFileIsCorruptionNamingIt) {
  // The storage answered completely that a file `_metadata` references is not there: the
  // snapshot is incomplete (final), not "not found" (snapshot_file.h).
  KeyGroupsStateHandle h = write("chk-1/op-0.kg");
  h.file.path = "chk-1/gone.kg";
  std::vector<Entry> got;
  std::vector<std::string> names;
  Status s = read(h, range_, &got, &names);
  EXPECT_TRUE(s.isCorruption()) << s;
  EXPECT_TRUE(contains(s.message(), storage_->describe(h.file.path))) << s;
  EXPECT_TRUE(contains(s.message(), "does not exist")) << s;
}

TEST_F(KeyGroupFormatTest, AnErrorFromTheCallbackStopsTheRead) {
  KeyGroupsStateHandle h = write("chk-1/op-0.kg");
  std::vector<std::string> names;
  int calls = 0;
  Status s = readKeyGroups(*storage_, h, range_, &names, [&](const KeyGroupEntry&) {
    ++calls;
    return Status::InvalidArgument("stop here");
  });
  EXPECT_TRUE(s.isInvalidArgument()) << s;
  EXPECT_EQ(s.message(), "stop here");
  EXPECT_EQ(calls, 1);
}

// Forwards to a storage and remembers the largest single read of an opened file: how
// much of a file a reader holds at once.
class ReadSizeRecordingStorage final : public testing::ForwardingStorage {
 public:
  using ForwardingStorage::ForwardingStorage;
  size_t largestRead() const { return *largest_; }

  Result<std::unique_ptr<ReadableFile>> open(const std::string& p) override {
    auto f = base_.open(p);
    if (!f.ok()) return f.status();
    return std::unique_ptr<ReadableFile>(new File(std::move(*f), largest_));
  }

 private:
  class File final : public ReadableFile {
   public:
    File(std::unique_ptr<ReadableFile> base, std::shared_ptr<size_t> largest)
        : base_(std::move(base)), largest_(std::move(largest)) {}
    uint64_t size() const override { return base_->size(); }
    Status read(uint64_t offset, size_t n, std::string* out) const override {
      *largest_ = std::max(*largest_, n);
      return base_->read(offset, n, out);
    }

   private:
    std::unique_ptr<ReadableFile> base_;
    std::shared_ptr<size_t> largest_;
  };
  std::shared_ptr<size_t> largest_ = std::make_shared<size_t>(0);
};

TEST_F(KeyGroupFormatTest, ARangeOfManyReadChunksIsStreamedAndEveryEntryComesBack) {
  // About seven read chunks: small entries, three values larger than a chunk, a map
  // entry whose user key is larger than a chunk, and entries straddling every boundary.
  const KeyGroupRange range{0, 15};
  const size_t kLarge = kKeyGroupReadChunkSize + kKeyGroupReadChunkSize / 2;
  auto w = KeyGroupWriter::create(*storage_, "chk-1/large.kg", states_, range);
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<Entry> all;
  auto add = [&](Entry e) {
    EXPECT_OK((*w)->add(e.stateIndex, e.key, e.userKey, e.value));
    all.push_back(std::move(e));
  };
  for (int kg = range.start; kg <= range.end; ++kg) {
    ASSERT_OK((*w)->beginKeyGroup(kg));
    for (int i = 0; i < 500; ++i) {
      const std::string key = "k" + std::to_string(kg) + "-" + std::to_string(i);
      if (i % 2 == 0) {
        add({0, kg, key, "", std::string(97 + static_cast<size_t>(i % 13), 'v')});
      } else {
        add({1, kg, key, "uk" + std::to_string(i), std::to_string(kg * 1000 + i)});
      }
      if (i == 250 && (kg == 1 || kg == 7 || kg == 15)) {
        add({0, kg, key + "-large", "", std::string(kLarge, static_cast<char>('a' + kg))});
      }
      if (i == 101 && kg == 9) add({1, kg, key + "-large", std::string(kLarge, 'u'), "large user key"});
    }
  }
  auto h = (*w)->finish();
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_GT(h->file.size, 6 * kKeyGroupReadChunkSize);

  for (KeyGroupRange r : {range, KeyGroupRange{7, 9}}) {
    SCOPED_TRACE("wanted [" + std::to_string(r.start) + ", " + std::to_string(r.end) + "]");
    ReadSizeRecordingStorage recording(*storage_);
    std::vector<Entry> got, expected;
    std::vector<std::string> names;
    ASSERT_OK(readKeyGroups(recording, *h, r, &names, [&](const KeyGroupEntry& e) {
      got.push_back({e.stateIndex, e.keyGroup, std::string(e.key), std::string(e.userKey), std::string(e.value)});
      return Status::OK();
    }));
    for (const auto& e : all)
      if (r.contains(e.keyGroup)) expected.push_back(e);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(got[i] == expected[i]) << "entry " << i;
    EXPECT_EQ(names, (std::vector<std::string>{"counts", "index"}));
    // Never the whole range at once: at most a chunk plus the one entry being completed.
    EXPECT_LE(recording.largestRead(), kKeyGroupReadChunkSize + kLarge + 64);
  }
}

TEST_F(KeyGroupFormatTest, AWrongOffsetFarIntoALargeFileIsCorruptionNamingTheKeyGroup) {
  const KeyGroupRange range{0, 7};
  auto w = KeyGroupWriter::create(*storage_, "chk-1/large.kg", states_, range);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int kg = range.start; kg <= range.end; ++kg) {
    ASSERT_OK((*w)->beginKeyGroup(kg));
    ASSERT_OK((*w)->add(0, "key-" + std::to_string(kg), "", std::string(kKeyGroupReadChunkSize / 2, 'x')));
  }
  auto h = (*w)->finish();
  ASSERT_TRUE(h.ok()) << h.status();
  KeyGroupsStateHandle bad = *h;
  bad.offsets[6] += 1;  // in the fourth chunk
  std::vector<Entry> got;
  std::vector<std::string> names;
  Status s = read(bad, range, &got, &names);
  EXPECT_TRUE(s.isCorruption()) << s;
  EXPECT_TRUE(contains(s.message(), storage_->describe("chk-1/large.kg"))) << s;
  EXPECT_TRUE(contains(s.message(), "key group 6 does not start at its recorded offset")) << s;
  EXPECT_EQ(got.size(), 6u) << "the groups before the damage were read";
}

TEST_F(KeyGroupFormatTest, TheStatesOfAFileComeWithTheirKinds) {
  KeyGroupsStateHandle h = write("chk-1/op-0.kg");
  std::vector<KeyGroupFileState> states;
  ASSERT_OK(readKeyGroups(*storage_, h, {64, 127}, &states, [](const KeyGroupEntry&) { return Status::OK(); }));
  ASSERT_EQ(states.size(), 2u);
  EXPECT_EQ(states[0].name, "counts");
  EXPECT_EQ(states[0].kind, StateKind::kValue);
  EXPECT_EQ(states[1].name, "index");
  EXPECT_EQ(states[1].kind, StateKind::kMap);
}

// ---------------------------------------------------------------------------------------
// Heap backend

std::string encodeKey(const std::string& k) {
  std::string out;
  serializeInto(out, k);
  return out;
}

std::string keyOf(int i) { return "key-" + std::to_string(i); }
int kgOf(int i) { return (i * 37) % kMaxParallelism; }

class HeapBackendTest : public StateTestBase {
 protected:
  static constexpr int kValue = 0, kList = 1, kMap = 2;

  std::unique_ptr<KeyedStateBackend> make(KeyGroupRange range) {
    BackendOptions o;
    o.operatorUid = "op";
    o.maxParallelism = kMaxParallelism;
    o.range = range;
    auto b = createHeapBackend(o);
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return nullptr;
    EXPECT_EQ((*b)->type(), BackendType::kHashMap);
    EXPECT_EQ((*b)->range(), range);
    return std::move(b).value();
  }
  static std::vector<StateDescriptorInfo> allStates() {
    return {desc("v", StateKind::kValue), desc("l", StateKind::kList), desc("m", StateKind::kMap)};
  }
  static void registerAll(KeyedStateBackend& b) {
    auto states = allStates();
    for (size_t i = 0; i < states.size(); ++i) EXPECT_EQ(b.registerState(states[i]), static_cast<int>(i));
  }
  static std::optional<std::string> get(KeyedStateBackend& b, int state) {
    std::string out;
    if (!b.get(state, out)) return std::nullopt;
    return out;
  }
  static std::optional<std::string> mapGet(KeyedStateBackend& b, const std::string& userKey) {
    std::string out;
    if (!b.mapGet(kMap, userKey, out)) return std::nullopt;
    return out;
  }
  static std::map<std::string, std::string> mapAll(KeyedStateBackend& b) {
    std::map<std::string, std::string> out;
    b.mapForEach(kMap, [&](std::string_view k, std::string_view v) {
      out.emplace(k, v);
      return true;
    });
    return out;
  }
  Result<KeyedStateHandle> snapshot(KeyedStateBackend& b, const std::string& prefix, uint64_t id = 1) {
    SnapshotRequest req;
    req.checkpointId = id;
    req.storage = storage_.get();
    req.exclusiveDir = "chk-" + std::to_string(id);
    req.filePrefix = prefix;
    auto async = b.snapshotSync(req);
    if (!async.ok()) return async.status();
    return (*async)->run();
  }
  // Every entry of a key-group handle: (state name, kg, key, user key) -> value.
  std::map<std::tuple<std::string, int, std::string, std::string>, std::string> dump(const KeyedStateHandle& h) {
    std::map<std::tuple<std::string, int, std::string, std::string>, std::string> out;
    const auto* kg = std::get_if<KeyGroupsStateHandle>(&h);
    EXPECT_NE(kg, nullptr) << handleTypeName(h);
    if (!kg) return out;
    std::vector<std::string> names;
    EXPECT_OK(readKeyGroups(*storage_, *kg, kg->range, &names, [&](const KeyGroupEntry& e) {
      out[{names[static_cast<size_t>(e.stateIndex)], e.keyGroup, std::string(e.key), std::string(e.userKey)}] =
          std::string(e.value);
      return Status::OK();
    }));
    return out;
  }
  // Fills value state "v" of keys 0..n-1 with "value-<i>", each key in kgOf(i).
  static void fill(KeyedStateBackend& b, int n) {
    for (int i = 0; i < n; ++i) {
      b.setCurrentKey(kgOf(i), keyOf(i));
      b.put(kValue, "value-" + std::to_string(i));
    }
  }
};

TEST_F(HeapBackendTest, ValueStateIsPerKey) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  b->setCurrentKey(3, "a");
  EXPECT_EQ(get(*b, kValue), std::nullopt);
  b->put(kValue, "1");
  b->setCurrentKey(3, "b");  // same key group, other key
  EXPECT_EQ(get(*b, kValue), std::nullopt);
  b->put(kValue, "2");
  b->setCurrentKey(90, "a");  // same key bytes in another key group is another entry
  EXPECT_EQ(get(*b, kValue), std::nullopt);
  b->setCurrentKey(3, "a");
  EXPECT_EQ(get(*b, kValue), "1");
  b->put(kValue, "1b");
  EXPECT_EQ(get(*b, kValue), "1b");
  b->clear(kValue);
  EXPECT_EQ(get(*b, kValue), std::nullopt);
  b->setCurrentKey(3, "b");
  EXPECT_EQ(get(*b, kValue), "2");
  EXPECT_EQ(b->approximateEntries(), 1u);
}

TEST_F(HeapBackendTest, AValueReadAsAViewIsTheValueItselfShortOrLong) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  const std::string longValue(1000, 'L');
  b->setCurrentKey(1, "short");
  b->put(kValue, "v");
  b->mapPut(kMap, "u", longValue);
  b->setCurrentKey(1, "long");
  b->put(kValue, longValue);
  std::string_view view;
  ASSERT_TRUE(b->get(kValue, &view));
  EXPECT_EQ(view, longValue);
  b->setCurrentKey(1, "short");
  ASSERT_TRUE(b->get(kValue, &view));
  EXPECT_EQ(view, "v");
  ASSERT_TRUE(b->mapGet(kMap, "u", &view));
  EXPECT_EQ(view, longValue);
  EXPECT_FALSE(b->mapGet(kMap, "absent", &view));
  b->setCurrentKey(1, "absent");
  EXPECT_FALSE(b->get(kValue, &view));
}

TEST_F(HeapBackendTest, ListStateAppendsEncodedElementsPerKey) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  b->setCurrentKey(7, "a");
  b->append(kList, "\x01x");
  b->append(kList, "\x02yz");
  b->setCurrentKey(7, "b");
  b->append(kList, "\x01q");
  b->setCurrentKey(7, "a");
  EXPECT_EQ(get(*b, kList), std::string("\x01x\x02yz"));
  b->clear(kList);
  EXPECT_EQ(get(*b, kList), std::nullopt);
  b->setCurrentKey(7, "b");
  EXPECT_EQ(get(*b, kList), std::string("\x01q"));
}

TEST_F(HeapBackendTest, MapStateGetPutRemoveAndIteratePerKey) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  b->setCurrentKey(1, "a");
  b->mapPut(kMap, "x", "1");
  b->mapPut(kMap, "y", "2");
  b->mapPut(kMap, "x", "3");  // overwrite
  b->setCurrentKey(1, "b");
  b->mapPut(kMap, "x", "other");
  EXPECT_EQ(mapAll(*b), (std::map<std::string, std::string>{{"x", "other"}}));
  b->setCurrentKey(1, "a");
  EXPECT_EQ(mapGet(*b, "x"), "3");
  EXPECT_EQ(mapGet(*b, "z"), std::nullopt);
  EXPECT_EQ(mapAll(*b), (std::map<std::string, std::string>{{"x", "3"}, {"y", "2"}}));
  b->mapRemove(kMap, "x");
  b->mapRemove(kMap, "never-there");
  EXPECT_EQ(mapAll(*b), (std::map<std::string, std::string>{{"y", "2"}}));
  b->clear(kMap);
  EXPECT_TRUE(mapAll(*b).empty());
  b->setCurrentKey(1, "b");
  EXPECT_EQ(mapGet(*b, "x"), "other");
}

TEST_F(HeapBackendTest, MapForEachStopsWhenTheVisitorReturnsFalse) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  b->setCurrentKey(1, "a");
  for (int i = 0; i < 5; ++i) b->mapPut(kMap, std::to_string(i), "v");
  int visits = 0;
  b->mapForEach(kMap, [&](std::string_view, std::string_view) { return ++visits < 2; });
  EXPECT_EQ(visits, 2);
}

TEST_F(HeapBackendTest, StatesAreSeparateForTheSameKey) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  b->setCurrentKey(5, "k");
  b->put(kValue, "value");
  b->append(kList, "\x01l");
  b->mapPut(kMap, "u", "m");
  b->clear(kValue);
  EXPECT_EQ(get(*b, kValue), std::nullopt);
  EXPECT_EQ(get(*b, kList), std::string("\x01l"));
  EXPECT_EQ(mapGet(*b, "u"), "m");
}

TEST_F(HeapBackendTest, RegisteringTheSameStateAgainReturnsTheSameHandle) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  EXPECT_EQ(b->registerState(desc("m", StateKind::kMap)), kMap);
  EXPECT_EQ(b->registerState(desc("v", StateKind::kValue)), kValue);
  EXPECT_EQ(b->states().size(), 3u);
  EXPECT_EQ(b->states()[1].name, "l");
}

TEST_F(HeapBackendTest, AccessOutsideAKeyedContextThrowsStateError) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  std::string out;
  EXPECT_THROW(b->get(kValue, out), StateError);
  EXPECT_THROW(b->put(kValue, "x"), StateError);
  b->setCurrentKey(0, "k");
  EXPECT_THROW(b->get(17, out), StateError);
}

TEST_F(HeapBackendTest, TypedStatesWorkOverTheBackend) {
  auto b = make({0, kMaxParallelism - 1});
  struct Owner : StateOwner {
    ValueState<int64_t> count{*this, "count"};
    ListState<std::string> seen{*this, "seen"};
    MapState<std::string, double> scores{*this, "scores"};
  } owner;
  for (StateBase* s : owner.declaredStates()) s->bind(*b, "string", 1);
  b->setCurrentKey(11, encodeKey("alice"));
  owner.count.update(41);
  owner.count.update(*owner.count.value() + 1);
  owner.seen.add("x");
  owner.seen.add("");
  owner.seen.add("yz");
  owner.scores.put("math", 1.5);
  owner.scores.put("art", 2.5);
  owner.scores.remove("art");
  b->setCurrentKey(11, encodeKey("bob"));
  EXPECT_EQ(owner.count.value(), std::nullopt);
  EXPECT_TRUE(owner.seen.get().empty());
  b->setCurrentKey(11, encodeKey("alice"));
  EXPECT_EQ(owner.count.value(), 42);
  EXPECT_EQ(owner.seen.get(), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(owner.scores.get("math"), 1.5);
  EXPECT_FALSE(owner.scores.contains("art"));
  EXPECT_EQ(owner.scores.entries(), (std::vector<std::pair<std::string, double>>{{"math", 1.5}}));
  owner.seen.update({});
  EXPECT_EQ(get(*b, 1), std::nullopt);
}

TEST_F(HeapBackendTest, ASnapshotHoldsTheStateAtSnapshotTimeNotAfter) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  b->setCurrentKey(2, "a");
  b->put(kValue, "a-before");
  b->append(kList, "\x01p");
  b->mapPut(kMap, "u", "a-map-before");
  b->setCurrentKey(2, "b");
  b->put(kValue, "b-before");
  b->setCurrentKey(40, "c");
  b->put(kValue, "c-before");

  SnapshotRequest req;
  req.checkpointId = 1;
  req.storage = storage_.get();
  req.exclusiveDir = "chk-1";
  req.filePrefix = "op-0";
  auto async = b->snapshotSync(req);
  ASSERT_TRUE(async.ok()) << async.status();

  // Modify every kind of state in the snapshotted key groups before the async part runs.
  b->setCurrentKey(2, "a");
  b->put(kValue, "a-after");
  b->append(kList, "\x01q");
  b->mapPut(kMap, "u", "a-map-after");
  b->mapPut(kMap, "new", "n");
  b->setCurrentKey(2, "b");
  b->clear(kValue);
  b->setCurrentKey(40, "c");
  b->put(kValue, "c-after");
  b->setCurrentKey(2, "d");  // a new key in a snapshotted group
  b->put(kValue, "d-after");
  b->setCurrentKey(99, "e");  // a new key in a group that was empty
  b->put(kValue, "e-after");

  auto h = (*async)->run();
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(std::get<KeyGroupsStateHandle>(*h).file.path, "chk-1/op-0.kg");
  using K = std::tuple<std::string, int, std::string, std::string>;
  const std::map<K, std::string> expected = {
      {{"v", 2, "a", ""}, "a-before"},  {{"l", 2, "a", ""}, "\x01p"}, {{"m", 2, "a", "u"}, "a-map-before"},
      {{"v", 2, "b", ""}, "b-before"},  {{"v", 40, "c", ""}, "c-before"},
  };
  EXPECT_EQ(dump(*h), expected);

  // The live state has the modifications.
  b->setCurrentKey(2, "a");
  EXPECT_EQ(get(*b, kValue), "a-after");
  EXPECT_EQ(get(*b, kList), std::string("\x01p\x01q"));
  EXPECT_EQ(mapAll(*b), (std::map<std::string, std::string>{{"u", "a-map-after"}, {"new", "n"}}));
  b->setCurrentKey(2, "b");
  EXPECT_EQ(get(*b, kValue), std::nullopt);
}

// put() reuses the entry its get() found (HeapBackend::LastEntry): that entry must not be
// written when a snapshot taken between the two froze its table — the put goes to the copy.
TEST_F(HeapBackendTest, APutAfterASnapshotOfTheTableItsGetReadWritesTheCopy) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  b->setCurrentKey(5, "a");
  b->put(kValue, "before");
  ASSERT_EQ(get(*b, kValue), "before");
  SnapshotRequest req;
  req.checkpointId = 1;
  req.storage = storage_.get();
  req.exclusiveDir = "chk-1";
  req.filePrefix = "op-0";
  auto async = b->snapshotSync(req);
  ASSERT_TRUE(async.ok()) << async.status();
  b->put(kValue, "after");
  auto h = (*async)->run();
  ASSERT_TRUE(h.ok()) << h.status();
  using K = std::tuple<std::string, int, std::string, std::string>;
  EXPECT_EQ(dump(*h), (std::map<K, std::string>{{{"v", 5, "a", ""}, "before"}}));
  EXPECT_EQ(get(*b, kValue), "after");
}

// Many keys in one key group (its table grows many times), read-modify-written through
// get() + put(), with lists that outgrow a slot and long keys: a snapshot and a restore
// give back every entry.
TEST_F(HeapBackendTest, ManyKeysOfOneKeyGroupWithLongValuesSurviveGrowthSnapshotAndRestore) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  const int n = 5000;
  auto key = [](int i) { return i % 10 == 0 ? std::string(40, 'K') + keyOf(i) : keyOf(i); };
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i) {
      b->setCurrentKey(9, key(i));
      int count = 0;
      if (auto v = get(*b, kValue)) count = std::stoi(*v);
      b->put(kValue, std::to_string(count + 1));
      if (i % 7 == 0) b->append(kList, "element-" + std::to_string(round) + ";");
    }
  }
  for (int i = 0; i < n; i += 3) {
    b->setCurrentKey(9, key(i));
    b->clear(kValue);
  }
  auto check = [&](KeyedStateBackend& kb) {
    for (int i = 0; i < n; ++i) {
      kb.setCurrentKey(9, key(i));
      ASSERT_EQ(get(kb, kValue), i % 3 == 0 ? std::nullopt : std::optional<std::string>("3")) << i;
      ASSERT_EQ(get(kb, kList), i % 7 == 0 ? std::optional<std::string>("element-0;element-1;element-2;")
                                           : std::nullopt)
          << i;
    }
  };
  check(*b);
  auto h = snapshot(*b, "op-0");
  ASSERT_TRUE(h.ok()) << h.status();
  auto restored = make({0, kMaxParallelism - 1});
  ASSERT_OK(restored->restore({storage_.get(), {*h}, allStates()}));
  check(*restored);
  EXPECT_EQ(restored->approximateEntries(), b->approximateEntries());
}

// The copy-on-write protocol under real concurrency (issue 16, item 2; the CI's
// ThreadSanitizer run of this binary checks its memory ordering): two snapshots upload on
// their own threads — the second taken while the first is still writing, as a savepoint
// during a checkpoint — while the task thread keeps rewriting every key, adding and
// clearing keys and map entries. Each snapshot must hold exactly the state of its
// synchronous part.
TEST_F(HeapBackendTest, SnapshotsUploadingOnTheirThreadsWhileTheTaskWritesHoldTheirMoment) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  using K = std::tuple<std::string, int, std::string, std::string>;
  std::map<K, std::string> model;  // what the backend holds now
  const int keys = 3000;
  auto write = [&](int i, int round) {
    const std::string k = keyOf(i);
    const int kg = kgOf(i);
    b->setCurrentKey(kg, k);
    const std::string v = k + "@" + std::to_string(round);
    if ((i + round) % 7 == 0) {
      b->clear(kValue);
      model.erase({"v", kg, k, ""});
    } else {
      b->put(kValue, v);
      model[{"v", kg, k, ""}] = v;
    }
    const std::string uk = "u" + std::to_string(round % 3);
    b->mapPut(kMap, uk, v);
    model[{"m", kg, k, uk}] = v;
    if (i % 5 == 0) {  // lists grow past the slot (spilled blocks) while snapshots read them
      const std::string element = v + ";" + std::string(static_cast<size_t>(i % 40), 'x');
      b->append(kList, element);
      model[{"l", kg, k, ""}] += element;
    }
  };
  for (int i = 0; i < keys; ++i) write(i, 0);

  auto take = [&](uint64_t id) {
    SnapshotRequest req;
    req.checkpointId = id;
    req.storage = storage_.get();
    req.exclusiveDir = "chk-" + std::to_string(id);
    req.filePrefix = "op-0";
    auto async = b->snapshotSync(req);
    EXPECT_TRUE(async.ok()) << async.status();
    return std::move(async).value();
  };
  std::map<K, std::string> atFirst = model;
  auto first = take(1);
  Result<KeyedStateHandle> firstHandle = Status::IOError("not run");
  std::thread t1([&] { firstHandle = first->run(); });
  for (int i = 0; i < keys; i += 2) write(i, 1);
  std::map<K, std::string> atSecond = model;
  auto second = take(2);
  Result<KeyedStateHandle> secondHandle = Status::IOError("not run");
  std::thread t2([&] { secondHandle = second->run(); });
  for (int round = 2; round < 6; ++round)
    for (int i = round % 2; i < keys; i += 2) write(i, round);
  t1.join();
  t2.join();
  ASSERT_TRUE(firstHandle.ok()) << firstHandle.status();
  ASSERT_TRUE(secondHandle.ok()) << secondHandle.status();
  EXPECT_EQ(dump(*firstHandle), atFirst);
  EXPECT_EQ(dump(*secondHandle), atSecond);
  // The live state went on; a snapshot now sees all of it.
  auto now = snapshot(*b, "op-0", 3);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(dump(*now), model);
}

// MapState iterated and changed on the task thread while a snapshot of the same tables
// uploads on its own: the task sees its latest writes, the snapshot its moment.
TEST_F(HeapBackendTest, MapStateIteratedAndChangedWhileASnapshotUploadsKeepsBothViews) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  const int keys = 500;
  for (int i = 0; i < keys; ++i) {
    b->setCurrentKey(kgOf(i), keyOf(i));
    for (int u = 0; u < 4; ++u) b->mapPut(kMap, "u" + std::to_string(u), "old");
  }
  SnapshotRequest req;
  req.checkpointId = 1;
  req.storage = storage_.get();
  req.exclusiveDir = "chk-1";
  req.filePrefix = "op-0";
  auto async = b->snapshotSync(req);
  ASSERT_TRUE(async.ok()) << async.status();
  Result<KeyedStateHandle> handle = Status::IOError("not run");
  std::thread uploader([&] { handle = (*async)->run(); });
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < keys; ++i) {
      b->setCurrentKey(kgOf(i), keyOf(i));
      std::map<std::string, std::string> seen = mapAll(*b);
      ASSERT_EQ(seen.size(), round == 0 ? 4u : 3u) << i;
      for (const auto& [uk, v] : seen) ASSERT_EQ(v, round == 0 ? "old" : "new" + std::to_string(round - 1)) << uk;
      for (const auto& [uk, v] : seen) b->mapPut(kMap, uk, "new" + std::to_string(round));
      if (round == 0) b->mapRemove(kMap, "u3");
    }
  }
  uploader.join();
  ASSERT_TRUE(handle.ok()) << handle.status();
  auto frozen = dump(*handle);
  EXPECT_EQ(frozen.size(), static_cast<size_t>(4 * keys));
  for (const auto& [k, v] : frozen) ASSERT_EQ(v, "old");
}

// A snapshot dropped without running (a declined checkpoint) lets the task write in place
// again; one dropped while others run does not unpin theirs.
TEST_F(HeapBackendTest, ADroppedSnapshotReleasesOnlyItsOwnHoldOnTheTables) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  b->setCurrentKey(5, "k");
  b->put(kValue, "1");
  SnapshotRequest req;
  req.storage = storage_.get();
  req.filePrefix = "op-0";
  req.checkpointId = 1;
  req.exclusiveDir = "chk-1";
  auto kept = b->snapshotSync(req);
  ASSERT_TRUE(kept.ok());
  req.checkpointId = 2;
  req.exclusiveDir = "chk-2";
  {
    auto dropped = b->snapshotSync(req);
    ASSERT_TRUE(dropped.ok());
  }  // dropped unrun
  b->put(kValue, "2");  // must not write into the table the kept snapshot holds
  auto h = (*kept)->run();
  ASSERT_TRUE(h.ok()) << h.status();
  using K = std::tuple<std::string, int, std::string, std::string>;
  EXPECT_EQ(dump(*h), (std::map<K, std::string>{{{"v", 5, "k", ""}, "1"}}));
  b->setCurrentKey(5, "k");
  EXPECT_EQ(get(*b, kValue), "2");
}

TEST_F(HeapBackendTest, ALaterSnapshotSeesTheLaterState) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  b->setCurrentKey(2, "a");
  b->put(kValue, "1");
  auto first = snapshot(*b, "op-0", 1);
  ASSERT_TRUE(first.ok()) << first.status();
  b->put(kValue, "2");
  auto second = snapshot(*b, "op-0", 2);
  ASSERT_TRUE(second.ok()) << second.status();
  using K = std::tuple<std::string, int, std::string, std::string>;
  EXPECT_EQ(dump(*first), (std::map<K, std::string>{{{"v", 2, "a", ""}, "1"}}));
  EXPECT_EQ(dump(*second), (std::map<K, std::string>{{{"v", 2, "a", ""}, "2"}}));
}

TEST_F(HeapBackendTest, RestoreWithTheFullRangeBringsBackEveryKey) {
  constexpr int kKeys = 300;
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  fill(*b, kKeys);
  b->setCurrentKey(kgOf(0), keyOf(0));
  b->mapPut(kMap, "u", "m0");
  auto h = snapshot(*b, "op-0");
  ASSERT_TRUE(h.ok()) << h.status();

  auto r = make({0, kMaxParallelism - 1});
  ASSERT_OK(r->restore({storage_.get(), {*h}, allStates()}));
  EXPECT_EQ(r->approximateEntries(), static_cast<uint64_t>(kKeys) + 1);
  for (int i = 0; i < kKeys; ++i) {
    r->setCurrentKey(kgOf(i), keyOf(i));
    EXPECT_EQ(get(*r, kValue), "value-" + std::to_string(i)) << keyOf(i);
  }
  r->setCurrentKey(kgOf(0), keyOf(0));
  EXPECT_EQ(mapGet(*r, "u"), "m0");
  EXPECT_EQ(r->states().size(), 3u);
}

TEST_F(HeapBackendTest, RestoreIntoHalfRangesGivesEachHalfExactlyItsKeys) {
  constexpr int kKeys = 300;
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  fill(*b, kKeys);
  auto h = snapshot(*b, "op-0");
  ASSERT_TRUE(h.ok()) << h.status();

  for (KeyGroupRange half : {KeyGroupRange{0, 63}, KeyGroupRange{64, 127}}) {
    SCOPED_TRACE("range [" + std::to_string(half.start) + ", " + std::to_string(half.end) + "]");
    auto r = make(half);
    ASSERT_OK(r->restore({storage_.get(), {*h}, allStates()}));
    uint64_t expected = 0;
    for (int i = 0; i < kKeys; ++i) {
      if (!half.contains(kgOf(i))) continue;
      ++expected;
      r->setCurrentKey(kgOf(i), keyOf(i));
      EXPECT_EQ(get(*r, kValue), "value-" + std::to_string(i)) << keyOf(i);
    }
    EXPECT_GT(expected, 100u);
    EXPECT_EQ(r->approximateEntries(), expected);
    // The snapshot of a half holds its range only.
    auto hh = snapshot(*r, "half-" + std::to_string(half.start), 2);
    ASSERT_TRUE(hh.ok()) << hh.status();
    for (const auto& [k, v] : dump(*hh)) EXPECT_TRUE(half.contains(std::get<1>(k)));
  }
}

TEST_F(HeapBackendTest, RestoreFromTwoHalvesIntoOneBackendMergesThem) {
  constexpr int kKeys = 200;
  std::vector<KeyedStateHandle> handles;
  for (KeyGroupRange half : {KeyGroupRange{0, 63}, KeyGroupRange{64, 127}}) {
    auto b = make(half);
    registerAll(*b);
    for (int i = 0; i < kKeys; ++i) {
      if (!half.contains(kgOf(i))) continue;
      b->setCurrentKey(kgOf(i), keyOf(i));
      b->put(kValue, "value-" + std::to_string(i));
    }
    auto h = snapshot(*b, "op-" + std::to_string(half.start));
    ASSERT_TRUE(h.ok()) << h.status();
    handles.push_back(*h);
  }
  auto r = make({0, kMaxParallelism - 1});
  ASSERT_OK(r->restore({storage_.get(), handles, allStates()}));
  EXPECT_EQ(r->approximateEntries(), static_cast<uint64_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    r->setCurrentKey(kgOf(i), keyOf(i));
    EXPECT_EQ(get(*r, kValue), "value-" + std::to_string(i)) << keyOf(i);
  }
}

TEST_F(HeapBackendTest, RestoringAnIncrementalHandleIsIncompatibleAndPointsAtRocksdbAndConvert) {
  IncrementalStateHandle inc;
  inc.backendId = "rocks-1";
  inc.checkpointId = 3;
  inc.range = {0, kMaxParallelism - 1};
  inc.sharedFiles = {{"000012.sst", {"shared/000012.sst", 100}, 2}};
  auto r = make({0, kMaxParallelism - 1});
  Status s = r->restore({storage_.get(), {KeyedStateHandle(inc)}, allStates()});
  EXPECT_TRUE(s.isIncompatible()) << s;
  EXPECT_TRUE(contains(s.message(), "IncrementalRemoteKeyedStateHandle")) << s;
  EXPECT_TRUE(contains(s.message(), "state.backend.type=rocksdb")) << s;
  EXPECT_TRUE(contains(s.message(), "`jobhost convert`")) << s;
}

TEST_F(HeapBackendTest, RegisteringARestoredStateWithAnotherKindThrowsStateError) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  fill(*b, 10);
  auto h = snapshot(*b, "op-0");
  ASSERT_TRUE(h.ok()) << h.status();

  auto r = make({0, kMaxParallelism - 1});
  ASSERT_OK(r->restore({storage_.get(), {*h}, allStates()}));
  EXPECT_EQ(r->registerState(desc("v", StateKind::kValue)), kValue);  // same declaration: fine
  try {
    r->registerState(desc("v", StateKind::kList));
    FAIL() << "expected StateError";
  } catch (const StateError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "'v'")) << msg;
    EXPECT_TRUE(contains(msg, "ValueState")) << msg;
    EXPECT_TRUE(contains(msg, "ListState")) << msg;
  }
  StateDescriptorInfo otherSerializer = desc("v", StateKind::kValue);
  otherSerializer.valueSerializer = "i64";
  try {
    r->registerState(otherSerializer);
    FAIL() << "expected StateError";
  } catch (const StateError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "string v1")) << msg;
    EXPECT_TRUE(contains(msg, "i64 v1")) << msg;
  }
}

TEST_F(HeapBackendTest, RestoreWithoutDescriptorsRegistersTheFileStatesByName) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  fill(*b, 5);
  auto h = snapshot(*b, "op-0");
  ASSERT_TRUE(h.ok()) << h.status();
  auto r = make({0, kMaxParallelism - 1});
  ASSERT_OK(r->restore({storage_.get(), {*h}, {}}));
  ASSERT_EQ(r->states().size(), 3u);
  EXPECT_EQ(r->states()[0].name, "v");
  r->setCurrentKey(kgOf(3), keyOf(3));
  EXPECT_EQ(get(*r, 0), "value-3");
}

// Fills map state "m" of keys 0..n-1 with three user keys each.
void fillMap(KeyedStateBackend& b, int mapState, int n) {
  for (int i = 0; i < n; ++i) {
    b.setCurrentKey(kgOf(i), keyOf(i));
    for (int j = 0; j < 3; ++j) b.mapPut(mapState, "u" + std::to_string(j), "m-" + std::to_string(i) + "-" + std::to_string(j));
  }
}

const StateDescriptorInfo* findState(const std::vector<StateDescriptorInfo>& states, const std::string& name) {
  for (const auto& s : states)
    if (s.name == name) return &s;
  return nullptr;
}

TEST_F(HeapBackendTest, AStateWithoutADescriptorIsRestoredWithTheKindTheFileRecords) {
  // Older metadata lists no descriptor for 'l' and 'm': their kinds come from the
  // key-group file, so the user keys of 'm' stay apart instead of collapsing into one
  // value, and the next snapshot writes every entry unchanged.
  constexpr int kKeys = 40;
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  fill(*b, kKeys);
  fillMap(*b, kMap, kKeys);
  b->setCurrentKey(kgOf(5), keyOf(5));
  b->append(kList, "e1");
  auto h = snapshot(*b, "op-0");
  ASSERT_TRUE(h.ok()) << h.status();

  auto r = make({0, kMaxParallelism - 1});
  ASSERT_OK(r->restore({storage_.get(), {*h}, {desc("v", StateKind::kValue)}}));
  const auto states = r->states();
  ASSERT_EQ(states.size(), 3u);
  ASSERT_NE(findState(states, "m"), nullptr);
  EXPECT_EQ(findState(states, "m")->kind, StateKind::kMap);
  ASSERT_NE(findState(states, "l"), nullptr);
  EXPECT_EQ(findState(states, "l")->kind, StateKind::kList);

  auto again = snapshot(*r, "op-0", 2);
  ASSERT_TRUE(again.ok()) << again.status();
  const auto before = dump(*h);
  EXPECT_EQ(before.size(), static_cast<size_t>(kKeys * 4 + 1));
  EXPECT_TRUE(dump(*again) == before) << "every value, list and map entry is written again unchanged";

  // A job declaring the state again reads its map entries; another kind is refused.
  const int m = r->registerState(desc("m", StateKind::kMap));
  r->setCurrentKey(kgOf(7), keyOf(7));
  std::string out;
  ASSERT_TRUE(r->mapGet(m, "u2", out));
  EXPECT_EQ(out, "m-7-2");
  try {
    r->registerState(desc("l", StateKind::kMap));
    FAIL() << "expected StateError";
  } catch (const StateError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "'l'")) << msg;
    EXPECT_TRUE(contains(msg, "ListState")) << msg;
    EXPECT_TRUE(contains(msg, "MapState")) << msg;
  }
}

TEST_F(HeapBackendTest, AStateTheJobNoLongerDeclaresIsCarriedToTheNextRestore) {
  // Version 1 declares 'v' and 'm'; version 2 declares only 'v'; version 3 declares
  // both again and must find every map entry of 'm'.
  constexpr int kKeys = 50;
  const std::vector<StateDescriptorInfo> both = {desc("v", StateKind::kValue), desc("m", StateKind::kMap)};
  auto v1 = make({0, kMaxParallelism - 1});
  ASSERT_EQ(v1->registerState(both[0]), 0);
  ASSERT_EQ(v1->registerState(both[1]), 1);
  fill(*v1, kKeys);
  fillMap(*v1, 1, kKeys);
  auto h1 = snapshot(*v1, "op-0", 1);
  ASSERT_TRUE(h1.ok()) << h1.status();

  auto v2 = make({0, kMaxParallelism - 1});
  ASSERT_OK(v2->restore({storage_.get(), {*h1}, v1->states()}));
  const int v = v2->registerState(both[0]);  // the job declares 'v' only
  v2->setCurrentKey(kgOf(0), keyOf(0));
  v2->put(v, "changed by version 2");
  const auto kept = v2->states();  // what the checkpoint's metadata records
  ASSERT_NE(findState(kept, "m"), nullptr);
  EXPECT_EQ(findState(kept, "m")->kind, StateKind::kMap);
  EXPECT_EQ(findState(kept, "m")->valueSerializer, "string") << "kept with its descriptor";
  auto h2 = snapshot(*v2, "op-0", 2);
  ASSERT_TRUE(h2.ok()) << h2.status();

  auto v3 = make({0, kMaxParallelism - 1});
  ASSERT_OK(v3->restore({storage_.get(), {*h2}, kept}));
  const int v3v = v3->registerState(both[0]);
  const int v3m = v3->registerState(both[1]);
  for (int i = 0; i < kKeys; ++i) {
    v3->setCurrentKey(kgOf(i), keyOf(i));
    std::map<std::string, std::string> entries;
    v3->mapForEach(v3m, [&](std::string_view k, std::string_view val) {
      entries.emplace(k, val);
      return true;
    });
    const std::string p = "m-" + std::to_string(i) + "-";
    EXPECT_EQ(entries, (std::map<std::string, std::string>{{"u0", p + "0"}, {"u1", p + "1"}, {"u2", p + "2"}}))
        << keyOf(i);
    std::string value;
    ASSERT_TRUE(v3->get(v3v, value)) << keyOf(i);
    EXPECT_EQ(value, i == 0 ? "changed by version 2" : "value-" + std::to_string(i));
  }
}

TEST_F(HeapBackendTest, AFileStateWhoseKindContradictsTheMetadataIsCorruption) {
  auto b = make({0, kMaxParallelism - 1});
  registerAll(*b);
  fillMap(*b, kMap, 5);
  auto h = snapshot(*b, "op-0");
  ASSERT_TRUE(h.ok()) << h.status();
  auto r = make({0, kMaxParallelism - 1});
  Status s = r->restore({storage_.get(), {*h}, {desc("m", StateKind::kValue)}});
  EXPECT_TRUE(s.isCorruption()) << s;
  EXPECT_TRUE(contains(s.message(), storage_->describe("chk-1/op-0.kg"))) << s;
  EXPECT_TRUE(contains(s.message(), "'m'")) << s;
  EXPECT_TRUE(contains(s.message(), "MapState")) << s;
  EXPECT_TRUE(contains(s.message(), "ValueState")) << s;
}

// ---------------------------------------------------------------------------------------
// Checkpoint metadata

CheckpointMetadata sampleMetadata() {
  CheckpointMetadata m;
  m.jobId = "job-1";
  m.checkpointId = 3;
  m.kind = SnapshotKind::kSavepoint;
  m.format = SnapshotFormat::kCanonical;
  m.timestampMs = 1700000000123;
  m.jobClass = "WordCount";
  m.pluginFile = "libwordcount_jobs.so";
  m.pluginDigest = "sha256:abc";
  m.sdkVersion = "0.1.0";
  m.parallelism = 2;
  m.backend = "rocksdb";
  m.incremental = true;
  m.maxParallelism = 128;
  m.stats = {11, 22, 33, 44};

  OperatorSnapshot counts;
  counts.uid = "counts";
  counts.name = "Keyed Aggregation";
  counts.parallelism = 2;
  counts.keyed = true;
  StateDescriptorInfo reduce = desc("reduce", StateKind::kValue);
  reduce.valueSerializer = "pair<string,i64>";
  reduce.valueSerializerVersion = 1001;
  counts.states = {reduce, desc("index", StateKind::kMap), desc("log", StateKind::kList)};
  SubtaskSnapshot s0;
  s0.index = 0;
  KeyGroupsStateHandle kg;
  kg.file = {"chk-3/counts-0.kg", 1234};
  kg.range = {0, 63};
  for (int i = 0; i < 64; ++i) kg.offsets.push_back(20 + static_cast<uint64_t>(i) * 3);
  s0.keyed = kg;
  SubtaskSnapshot s1;
  s1.index = 1;
  IncrementalStateHandle inc;
  inc.backendId = "backend-xyz";
  inc.checkpointId = 3;
  inc.range = {64, 127};
  inc.sharedFiles = {{"000012.sst", {"shared/x", 4096}, 2}, {"000015.sst", {"shared/counts-1/000015.sst", 99}, 3}};
  inc.privateFiles = {{"MANIFEST-000005", {"chk-3/counts-1/MANIFEST-000005", 300}, 3},
                      {"CURRENT", {"chk-3/counts-1/CURRENT", 16}, 3}};
  inc.columnFamilies = {"default", "reduce", "index"};
  s1.keyed = inc;
  counts.subtasks = {s0, s1};

  OperatorSnapshot source;
  source.uid = "auto-0-text-file-source";
  source.name = "Text File Source";
  SubtaskSnapshot src;
  src.operatorState = std::string("pos\0\x01\xff", 6);
  source.subtasks = {src};

  m.operators = {counts, source};
  return m;
}

void expectSameDescriptor(const StateDescriptorInfo& a, const StateDescriptorInfo& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.keySerializer, b.keySerializer);
  EXPECT_EQ(a.keySerializerVersion, b.keySerializerVersion);
  EXPECT_EQ(a.userKeySerializer, b.userKeySerializer);
  EXPECT_EQ(a.userKeySerializerVersion, b.userKeySerializerVersion);
  EXPECT_EQ(a.valueSerializer, b.valueSerializer);
  EXPECT_EQ(a.valueSerializerVersion, b.valueSerializerVersion);
}

void expectSameShared(const std::vector<SharedFileRef>& a, const std::vector<SharedFileRef>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].localName, b[i].localName);
    EXPECT_EQ(a[i].file, b[i].file);
    EXPECT_EQ(a[i].createdByCheckpoint, b[i].createdByCheckpoint);
  }
}

void expectSameMetadata(const CheckpointMetadata& a, const CheckpointMetadata& b) {
  EXPECT_EQ(a.formatVersion, b.formatVersion);
  EXPECT_EQ(a.jobId, b.jobId);
  EXPECT_EQ(a.checkpointId, b.checkpointId);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.timestampMs, b.timestampMs);
  EXPECT_EQ(a.jobClass, b.jobClass);
  EXPECT_EQ(a.pluginFile, b.pluginFile);
  EXPECT_EQ(a.pluginDigest, b.pluginDigest);
  EXPECT_EQ(a.sdkVersion, b.sdkVersion);
  EXPECT_EQ(a.parallelism, b.parallelism);
  EXPECT_EQ(a.backend, b.backend);
  EXPECT_EQ(a.incremental, b.incremental);
  EXPECT_EQ(a.maxParallelism, b.maxParallelism);
  EXPECT_EQ(a.stats.syncMicros, b.stats.syncMicros);
  EXPECT_EQ(a.stats.asyncMicros, b.stats.asyncMicros);
  EXPECT_EQ(a.stats.newBytes, b.stats.newBytes);
  EXPECT_EQ(a.stats.totalBytes, b.stats.totalBytes);
  ASSERT_EQ(a.operators.size(), b.operators.size());
  for (size_t i = 0; i < a.operators.size(); ++i) {
    const auto &x = a.operators[i], &y = b.operators[i];
    SCOPED_TRACE("operator " + x.uid);
    EXPECT_EQ(x.uid, y.uid);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.parallelism, y.parallelism);
    EXPECT_EQ(x.keyed, y.keyed);
    ASSERT_EQ(x.states.size(), y.states.size());
    for (size_t j = 0; j < x.states.size(); ++j) expectSameDescriptor(x.states[j], y.states[j]);
    ASSERT_EQ(x.subtasks.size(), y.subtasks.size());
    for (size_t j = 0; j < x.subtasks.size(); ++j) {
      const auto &s = x.subtasks[j], &t = y.subtasks[j];
      EXPECT_EQ(s.index, t.index);
      EXPECT_EQ(s.operatorState, t.operatorState);
      ASSERT_EQ(s.keyed.index(), t.keyed.index());
      if (auto* kg = std::get_if<KeyGroupsStateHandle>(&s.keyed)) {
        const auto& kg2 = std::get<KeyGroupsStateHandle>(t.keyed);
        EXPECT_EQ(kg->file, kg2.file);
        EXPECT_EQ(kg->range, kg2.range);
        EXPECT_EQ(kg->offsets, kg2.offsets);
      }
      if (auto* inc = std::get_if<IncrementalStateHandle>(&s.keyed)) {
        const auto& inc2 = std::get<IncrementalStateHandle>(t.keyed);
        EXPECT_EQ(inc->backendId, inc2.backendId);
        EXPECT_EQ(inc->checkpointId, inc2.checkpointId);
        EXPECT_EQ(inc->range, inc2.range);
        expectSameShared(inc->sharedFiles, inc2.sharedFiles);
        expectSameShared(inc->privateFiles, inc2.privateFiles);
        EXPECT_EQ(inc->columnFamilies, inc2.columnFamilies);
      }
    }
  }
}

Result<CheckpointMetadata> roundTrip(const CheckpointMetadata& m, const std::string& writeDir,
                                     const std::string& readDir) {
  auto bytes = serializeMetadata(m, writeDir);
  if (!bytes.ok()) return bytes.status();
  return parseMetadata(*bytes, readDir, readDir + "/_metadata");
}

TEST(CheckpointMetadataTest, SerializeThenParseGivesBackEveryField) {
  const CheckpointMetadata m = sampleMetadata();
  auto parsed = roundTrip(m, "chk-3", "chk-3");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  expectSameMetadata(*parsed, m);
}

TEST(CheckpointMetadataTest, DefaultsRoundTripToo) {
  CheckpointMetadata m;
  auto parsed = roundTrip(m, "chk-1", "chk-1");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  expectSameMetadata(*parsed, m);
}

TEST(CheckpointMetadataTest, PathsAreStoredRelativeToTheMetadataDirectory) {
  auto bytes = serializeMetadata(sampleMetadata(), "chk-3");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->substr(0, 8), "JHMETA\r\n");
  EXPECT_EQ(bytes->substr(8, 4), std::string("\x01\0\0\0", 4));
  EXPECT_TRUE(contains(*bytes, "../shared/x"));
  EXPECT_TRUE(contains(*bytes, "../shared/counts-1/000015.sst"));
  EXPECT_TRUE(contains(*bytes, "counts-1/MANIFEST-000005"));
  EXPECT_FALSE(contains(*bytes, "chk-3/counts-1/MANIFEST-000005"));
  EXPECT_FALSE(contains(*bytes, "chk-3/counts-0.kg"));
}

TEST(CheckpointMetadataTest, AMovedSnapshotResolvesPathsAgainstItsNewDirectory) {
  auto parsed = roundTrip(sampleMetadata(), "chk-3", "savepoints/sp-1");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto& subs = parsed->operators.at(0).subtasks;
  EXPECT_EQ(std::get<KeyGroupsStateHandle>(subs.at(0).keyed).file.path, "savepoints/sp-1/counts-0.kg");
  const auto& inc = std::get<IncrementalStateHandle>(subs.at(1).keyed);
  EXPECT_EQ(inc.sharedFiles.at(0).file.path, "savepoints/shared/x");
  EXPECT_EQ(inc.privateFiles.at(1).file.path, "savepoints/sp-1/counts-1/CURRENT");
}

TEST(CheckpointMetadataTest, ReferencedFilesListsEveryHandlesFiles) {
  const CheckpointMetadata m = sampleMetadata();
  std::vector<FileRef> expected = {{"chk-3/counts-0.kg", 1234},
                                   {"shared/x", 4096},
                                   {"shared/counts-1/000015.sst", 99},
                                   {"chk-3/counts-1/MANIFEST-000005", 300},
                                   {"chk-3/counts-1/CURRENT", 16}};
  EXPECT_EQ(m.referencedFiles(), expected);
  ASSERT_NE(m.findOperator("counts"), nullptr);
  EXPECT_EQ(m.findOperator("counts")->name, "Keyed Aggregation");
  EXPECT_EQ(m.findOperator("nope"), nullptr);
}

TEST(CheckpointMetadataTest, BadMagicIsCorruptionNamingTheFile) {
  auto bytes = serializeMetadata(sampleMetadata(), "chk-3");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  for (const std::string& bad : {std::string("XHMETA\r\n") + bytes->substr(8), std::string("not a checkpoint at all"),
                                 std::string("JHMETA")}) {
    auto parsed = parseMetadata(bad, "chk-3", "/ckpt/chk-3/_metadata");
    ASSERT_FALSE(parsed.ok());
    EXPECT_TRUE(parsed.status().isCorruption()) << parsed.status();
    EXPECT_TRUE(contains(parsed.status().message(), "/ckpt/chk-3/_metadata")) << parsed.status();
    EXPECT_TRUE(contains(parsed.status().message(), "not a jobhost checkpoint")) << parsed.status();
  }
}

TEST(CheckpointMetadataTest, InFlightRecordsRoundTripAndMakeTheSnapshotVersionTwoWhileOthersStayVersionOne) {
  CheckpointMetadata m = sampleMetadata();
  auto plain = serializeMetadata(m, "chk-3");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)[8], 1) << "a snapshot without in-flight records stays readable by older releases";
  OperatorSnapshot ex;
  ex.uid = "auto-3-key-by";
  ex.name = "Key By";
  ex.parallelism = 2;
  SubtaskSnapshot sub;
  sub.index = 1;
  sub.inputChannels.push_back({0, 0, std::string("\x01\x00rec", 5)});
  sub.inputChannels.push_back({1, 3, std::string(70000, 'x')});
  ex.subtasks.push_back(sub);
  m.operators.push_back(ex);
  auto bytes = serializeMetadata(m, "chk-3");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ((*bytes)[8], 2) << "an older release must refuse it instead of dropping the records";
  auto parsed = parseMetadata(*bytes, "chk-3", "chk-3/_metadata");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->hasChannelState());
  EXPECT_EQ(parsed->formatVersion, kMetadataFormatVersion);
  const OperatorSnapshot* got = parsed->findOperator("auto-3-key-by");
  ASSERT_NE(got, nullptr);
  ASSERT_EQ(got->subtasks.size(), 1u);
  EXPECT_EQ(got->subtasks[0].index, 1);
  EXPECT_EQ(got->subtasks[0].inputChannels, sub.inputChannels);
  EXPECT_TRUE(parsed->referencedFiles().size() == m.referencedFiles().size()) << "in-flight records are no files";
}

TEST(CheckpointMetadataTest, ANewerFormatVersionIsIncompatibleNamingBothVersions) {
  auto bytes = serializeMetadata(sampleMetadata(), "chk-3");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::string newer = *bytes;
  newer[8] = 7;
  auto parsed = parseMetadata(newer, "chk-3", "sp/_metadata");
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(parsed.status().isIncompatible()) << parsed.status();
  const std::string& msg = parsed.status().message();
  EXPECT_TRUE(contains(msg, "sp/_metadata")) << msg;
  EXPECT_TRUE(contains(msg, "version 7")) << msg;
  EXPECT_TRUE(contains(msg, "versions 1 to " + std::to_string(kMetadataFormatVersion))) << msg;
}

TEST(CheckpointMetadataTest, EveryTruncationIsAnErrorNeverACrash) {
  auto bytes = serializeMetadata(sampleMetadata(), "chk-3");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  for (size_t n = 0; n < bytes->size(); ++n) {
    auto parsed = parseMetadata(std::string_view(*bytes).substr(0, n), "chk-3", "m");
    EXPECT_FALSE(parsed.ok()) << "truncated to " << n << " of " << bytes->size() << " bytes parsed OK";
    if (!parsed.ok()) {
      EXPECT_TRUE(parsed.status().isCorruption()) << n << ": " << parsed.status();
    }
  }
}

TEST(CheckpointMetadataTest, FlippedBytesNeverCrash) {
  auto bytes = serializeMetadata(sampleMetadata(), "chk-3");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  for (size_t i = 12; i < bytes->size(); ++i) {
    std::string corrupt = *bytes;
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0xa5);
    auto parsed = parseMetadata(corrupt, "chk-3", "m");  // any outcome but a crash
    if (parsed.ok()) {
      for (const auto& f : parsed->referencedFiles()) EXPECT_FALSE(f.path.empty()) << i;
    }
  }
}

TEST(CheckpointMetadataTest, APathEscapingTheStorageRootIsCorruption) {
  CheckpointMetadata m = sampleMetadata();
  m.operators[0].subtasks.pop_back();  // keep the one key-group handle
  // Written from "a/b", "etc/passwd" is stored as "../../etc/passwd"; read from "chk-3"
  // it would resolve above the storage root.
  std::get<KeyGroupsStateHandle>(m.operators[0].subtasks[0].keyed).file.path = "etc/passwd";
  auto bytes = serializeMetadata(m, "a/b");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(contains(*bytes, "../../etc/passwd"));
  auto parsed = parseMetadata(*bytes, "chk-3", "chk-3/_metadata");
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(parsed.status().isCorruption()) << parsed.status();
  EXPECT_TRUE(contains(parsed.status().message(), "'../../etc/passwd'")) << parsed.status();
  EXPECT_TRUE(contains(parsed.status().message(), "chk-3/_metadata")) << parsed.status();
  // Read from a directory deep enough, the same bytes are fine.
  auto deep = parseMetadata(*bytes, "x/y/z", "x/y/z/_metadata");
  ASSERT_TRUE(deep.ok()) << deep.status();
  EXPECT_EQ(std::get<KeyGroupsStateHandle>(deep->operators[0].subtasks[0].keyed).file.path, "x/etc/passwd");
}

TEST(CheckpointMetadataTest, AnEscapingSharedFileIsCorruptionToo) {
  CheckpointMetadata m = sampleMetadata();
  m.operators[0].subtasks.erase(m.operators[0].subtasks.begin());  // keep the incremental handle
  auto& inc = std::get<IncrementalStateHandle>(m.operators[0].subtasks[0].keyed);
  inc.sharedFiles.resize(1);
  inc.privateFiles.clear();
  inc.sharedFiles[0].file.path = "x";
  auto bytes = serializeMetadata(m, "a/b/c");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto parsed = parseMetadata(*bytes, "chk-3", "chk-3/_metadata");
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(parsed.status().isCorruption()) << parsed.status();
  EXPECT_TRUE(contains(parsed.status().message(), "'../../../x'")) << parsed.status();
}

TEST(CheckpointMetadataTest, AKeyGroupHandleBeyondTheMaxParallelismIsCorruption) {
  CheckpointMetadata m = sampleMetadata();
  m.maxParallelism = 64;  // subtask 1's range [64, 127] no longer fits
  auto parsed = roundTrip(m, "chk-3", "chk-3");
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(parsed.status().isCorruption()) << parsed.status();
  EXPECT_TRUE(contains(parsed.status().message(), "'counts'")) << parsed.status();
}

struct NormalizeCase {
  std::string in, out;
};

TEST(PathHelpersTest, NormalizePathResolvesDotsAndRefusesToLeaveTheRoot) {
  const std::vector<NormalizeCase> cases = {
      {"a/b/../c", "a/c"},  {"a/./b", "a/b"},     {"a//b/", "a/b"},   {"./a", "a"},
      {"a/b/c/../../d", "a/d"}, {"chk-3/../shared/x", "shared/x"}, {"../x", ""}, {"a/../../x", ""},
      {"..", ""},           {"", ""},            {"a", "a"},
  };
  for (const auto& c : cases) EXPECT_EQ(normalizePath(c.in), c.out) << "normalizePath(\"" << c.in << "\")";
}

struct RelativeCase {
  std::string fromDir, to, out;
};

TEST(PathHelpersTest, RelativePathWalksUpToTheCommonDirectory) {
  const std::vector<RelativeCase> cases = {
      {"chk-3", "shared/x", "../shared/x"},
      {"chk-3", "chk-3/counts-0.kg", "counts-0.kg"},
      {"job/chk-3", "job/shared/x", "../shared/x"},
      {"", "a/b", "a/b"},
      {"a/b", "a/c/d", "../c/d"},
      {"a/b/c", "x", "../../../x"},
      {"chk-3", "chk-30/x", "../chk-30/x"},
      {"a/./b/", "a/b/f", "f"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(relativePath(c.fromDir, c.to), c.out) << "relativePath(\"" << c.fromDir << "\", \"" << c.to << "\")";
    // Joining the result back onto the directory gives the target.
    EXPECT_EQ(normalizePath(c.fromDir + "/" + relativePath(c.fromDir, c.to)), normalizePath(c.to)) << c.to;
  }
}

}  // namespace
}  // namespace jobhost::state
