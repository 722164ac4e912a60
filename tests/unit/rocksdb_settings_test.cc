// Unit tests of host/config/rocksdb_settings: the state.backend.rocksdb.* keys, their
// Flink defaults and the one error each bad value gives.
#include "config/rocksdb_settings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace jobhost::host {
namespace {

TEST(RocksDbSettings, DefaultsAreFlinks) {
  const state::RocksDbOptions o = rocksDbOptionsFrom(Configuration());
  EXPECT_EQ(o.writeBufferSize, 64u << 20);
  EXPECT_EQ(o.writeBufferCount, 2);
  EXPECT_EQ(o.blockCacheSize, 8u << 20);
  EXPECT_EQ(o.compactionStyle, state::RocksDbOptions::CompactionStyle::kLevel);
  EXPECT_EQ(o.transferThreads, 4);
  EXPECT_EQ(o.entryCacheSize, 32u << 20);  // ours: Flink has no entry cache
}

TEST(RocksDbSettings, ValuesAreReadInFlinksSpelling) {
  Configuration c;
  c.setFromArgument("state.backend.rocksdb.writebuffer.size=128 mb");
  c.setFromArgument("state.backend.rocksdb.writebuffer.count=3");
  c.setFromArgument("state.backend.rocksdb.block.cache-size=1gb");
  c.setFromArgument("state.backend.rocksdb.compaction.style=universal");
  c.setFromArgument("state.backend.rocksdb.checkpoint.transfer.thread.num=1");
  c.setFromArgument("state.backend.rocksdb.entry-cache.size=0");
  const state::RocksDbOptions o = rocksDbOptionsFrom(c);
  EXPECT_EQ(o.writeBufferSize, 128u << 20);
  EXPECT_EQ(o.writeBufferCount, 3);
  EXPECT_EQ(o.blockCacheSize, 1u << 30);
  EXPECT_EQ(o.compactionStyle, state::RocksDbOptions::CompactionStyle::kUniversal);
  EXPECT_STREQ(state::compactionStyleName(o.compactionStyle), "UNIVERSAL");
  EXPECT_EQ(o.transferThreads, 1);
  EXPECT_EQ(o.entryCacheSize, 0u);
}

TEST(RocksDbSettings, EachBadValueIsOneConfigErrorNamingKeyValueOriginAndWhatIsAccepted) {
  struct Case {
    std::string define;
    std::vector<std::string> expected;  // substrings of the message
  };
  const std::vector<Case> cases = {
      {"state.backend.rocksdb.writebuffer.size=lots", {"writebuffer.size", "'lots'", "-D", "not a memory size", "64mb"}},
      {"state.backend.rocksdb.writebuffer.size=1kb", {"writebuffer.size", "1kb", "out of range", "64.0 KiB"}},
      {"state.backend.rocksdb.writebuffer.size=-5mb", {"writebuffer.size", "not a memory size"}},
      {"state.backend.rocksdb.writebuffer.count=0", {"writebuffer.count", "out of range [1, 64]"}},
      {"state.backend.rocksdb.writebuffer.count=two", {"writebuffer.count", "not an integer"}},
      {"state.backend.rocksdb.block.cache-size=8 parsecs", {"block.cache-size", "not a memory size"}},
      {"state.backend.rocksdb.entry-cache.size=lots", {"entry-cache.size", "'lots'", "not a memory size"}},
      {"state.backend.rocksdb.compaction.style=TIERED", {"compaction.style", "'TIERED'", "LEVEL, UNIVERSAL or FIFO"}},
      {"state.backend.rocksdb.checkpoint.transfer.thread.num=0", {"transfer.thread.num", "out of range [1, 64]"}},
  };
  for (const auto& c : cases) {
    Configuration config;
    config.setFromArgument(c.define);
    try {
      rocksDbOptionsFrom(config);
      ADD_FAILURE() << c.define << ": accepted";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      for (const auto& x : c.expected) EXPECT_NE(msg.find(x), std::string::npos) << c.define << ": " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace jobhost::host
