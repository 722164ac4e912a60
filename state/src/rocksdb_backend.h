// state/src/rocksdb_backend.h — private key layout of the RocksDB keyed state backend.
//
// Every declared state is one column family (named after the state, see columnFamilyName)
// and the default column family stays unused. Keys inside a column family:
//
//   ValueState / ListState:  kg(2, big-endian) | key
//   MapState:                kg(2, big-endian) | varint(len(key)) | key | userKey
//
// The varint length makes the map prefix kg|varint|key unambiguous (varints are
// prefix-free), so a prefix seek enumerates exactly one key's map entries, and the
// big-endian key group first keeps each column family sorted by key group (snapshots
// and rescaling scan or delete whole key-group ranges).
//
// ListState values are the concatenation of the length-prefixed elements; append is a
// RocksDB Merge with a concatenating merge operator.
//
// Thread-safety: pure functions on values; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace jobhost::state::rocksdb_layout {

inline void appendKeyGroup(std::string* dst, int keyGroup) {
  dst->push_back(static_cast<char>((keyGroup >> 8) & 0xff));
  dst->push_back(static_cast<char>(keyGroup & 0xff));
}

inline int decodeKeyGroup(std::string_view k) {
  return (static_cast<uint8_t>(k[0]) << 8) | static_cast<uint8_t>(k[1]);
}

inline void appendVarint(std::string* dst, uint64_t v) {
  while (v >= 0x80) {
    dst->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  dst->push_back(static_cast<char>(v));
}

/// Parses a varint from the front of *in and advances it. False if malformed.
inline bool consumeVarint(std::string_view* in, uint64_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift <= 63 && !in->empty(); shift += 7) {
    uint8_t b = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    result |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      *v = result;
      return true;
    }
  }
  return false;
}

/// Value/list key: kg | key.
inline void encodeValueKey(std::string* dst, int keyGroup, std::string_view key) {
  dst->clear();
  appendKeyGroup(dst, keyGroup);
  dst->append(key.data(), key.size());
}

/// Map prefix of one key: kg | varint(len(key)) | key.
inline void encodeMapPrefix(std::string* dst, int keyGroup, std::string_view key) {
  dst->clear();
  appendKeyGroup(dst, keyGroup);
  appendVarint(dst, key.size());
  dst->append(key.data(), key.size());
}

/// Splits a map entry key (kg | varint | key | userKey). False if malformed.
inline bool decodeMapKey(std::string_view k, std::string_view* key, std::string_view* userKey) {
  if (k.size() < 2) return false;
  k.remove_prefix(2);
  uint64_t len = 0;
  if (!consumeVarint(&k, &len) || len > k.size()) return false;
  *key = k.substr(0, len);
  *userKey = k.substr(len);
  return true;
}

/// The smallest string greater than every string starting with `prefix`; false if
/// there is none (prefix is all 0xff bytes).
inline bool prefixSuccessor(std::string_view prefix, std::string* out) {
  out->assign(prefix.data(), prefix.size());
  while (!out->empty()) {
    uint8_t last = static_cast<uint8_t>(out->back());
    if (last != 0xff) {
      out->back() = static_cast<char>(last + 1);
      return true;
    }
    out->pop_back();
  }
  return false;
}

/// Column family name for a state: the state name itself, except that "default" (the
/// RocksDB default column family, kept unused) and names starting with '_' get one
/// more leading '_'. Injective; stateNameOf() inverts it.
inline std::string columnFamilyName(const std::string& stateName) {
  if (stateName == "default" || (!stateName.empty() && stateName[0] == '_')) return "_" + stateName;
  return stateName;
}

inline std::string stateNameOf(const std::string& columnFamily) {
  if (!columnFamily.empty() && columnFamily[0] == '_') return columnFamily.substr(1);
  return columnFamily;
}

}  // namespace jobhost::state::rocksdb_layout
