// host/runtime/key_group_assignment.h — which key group a key belongs to (as Flink's
// KeyGroupRangeAssignment.assignToKeyGroup). The runtime routes a keyed record to the
// subtask whose key-group range holds it; snapshots are split by key group, so the
// function is part of the snapshot format: it never changes.
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace jobhost::host {

/// Stable key-group assignment of serialized key bytes. Inline: every record sent through
/// a keyed exchange calls it.
inline int keyGroupFor(std::string_view key, int maxParallelism) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a, then a murmur3 finaliser
  constexpr uint64_t kPrime = 1099511628211ULL;
  const auto* p = reinterpret_cast<const unsigned char*>(key.data());
  size_t n = key.size();
  for (; n >= 8; n -= 8, p += 8) {  // the same steps, eight bytes per iteration (keys are often 8)
    h = (h ^ p[0]) * kPrime;
    h = (h ^ p[1]) * kPrime;
    h = (h ^ p[2]) * kPrime;
    h = (h ^ p[3]) * kPrime;
    h = (h ^ p[4]) * kPrime;
    h = (h ^ p[5]) * kPrime;
    h = (h ^ p[6]) * kPrime;
    h = (h ^ p[7]) * kPrime;
  }
  for (; n > 0; --n, ++p) h = (h ^ *p) * kPrime;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  const auto m = static_cast<uint64_t>(maxParallelism);
  return static_cast<int>((m & (m - 1)) == 0 ? h & (m - 1) : h % m);  // the same; no division for a power of two
}

}  // namespace jobhost::host
