#include "config/rocksdb_settings.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "config/units.h"

namespace jobhost::host {

namespace {

uint64_t bytesOf(const Configuration& config, const std::string& key, uint64_t min, uint64_t max) {
  const std::string v = config.getString(key);
  auto n = parseBytes(v);
  if (!n)
    throw ConfigError(key + " = '" + v + "' (from " + config.origin(key) +
                      ") is not a memory size; use e.g. 64mb, 512 kb, 1gb");
  if (*n < min || *n > max)
    throw ConfigError(key + " = " + v + " (from " + config.origin(key) + ") is out of range [" + formatBytes(min) +
                      ", " + formatBytes(max) + "]");
  return *n;
}

}  // namespace

state::RocksDbOptions rocksDbOptionsFrom(const Configuration& config) {
  state::RocksDbOptions o;
  // RocksDB clips write_buffer_size to [64 KiB, 64 GiB] (SanitizeOptions): refuse what it would change.
  o.writeBufferSize = bytesOf(config, "state.backend.rocksdb.writebuffer.size", uint64_t{64} << 10, uint64_t{64} << 30);
  o.writeBufferCount = static_cast<int>(config.getInt("state.backend.rocksdb.writebuffer.count", 1, 64));
  o.blockCacheSize = bytesOf(config, "state.backend.rocksdb.block.cache-size", 0, uint64_t{1} << 40);
  o.entryCacheSize = bytesOf(config, "state.backend.rocksdb.entry-cache.size", 0, uint64_t{1} << 40);
  o.transferThreads = static_cast<int>(config.getInt("state.backend.rocksdb.checkpoint.transfer.thread.num", 1, 64));
  const std::string key = "state.backend.rocksdb.compaction.style";
  std::string style = config.getString(key);
  std::transform(style.begin(), style.end(), style.begin(), [](unsigned char c) { return std::toupper(c); });
  if (style == "LEVEL") o.compactionStyle = state::RocksDbOptions::CompactionStyle::kLevel;
  else if (style == "UNIVERSAL") o.compactionStyle = state::RocksDbOptions::CompactionStyle::kUniversal;
  else if (style == "FIFO") o.compactionStyle = state::RocksDbOptions::CompactionStyle::kFifo;
  else
    throw ConfigError(key + " = '" + config.getString(key) + "' (from " + config.origin(key) +
                      ") is unknown; use LEVEL, UNIVERSAL or FIFO");
  return o;
}

}  // namespace jobhost::host
