// state/src/random_id.h — random identifiers in hex, for names no two backends may share
// (a backend's shared snapshot files, its incremental base).
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace jobhost::state {

/// `bytes` random bytes as 2*bytes lowercase hex digits (seeded from std::random_device).
inline std::string randomHexId(size_t bytes) {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd());
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  uint64_t word = 0;
  for (size_t i = 0; i < bytes; ++i) {
    if (i % 8 == 0) word = gen();
    const auto b = static_cast<unsigned>(word & 0xff);
    word >>= 8;
    out += kDigits[b >> 4];
    out += kDigits[b & 0xf];
  }
  return out;
}

}  // namespace jobhost::state
