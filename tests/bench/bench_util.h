// tests/bench/bench_util.h — small helpers for jobhost-bench: clocks, a deterministic key
// sequence, statistics, formatting, the result table and its JSON, child processes.
//
// Thread-safety: none needed; the harness is single-threaded apart from the code it calls.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/units.h"

extern "C" char** environ;

namespace bench {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// splitmix64: the key of index i is mix(i) — random-looking, unique, no table needed.
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// xorshift64*: the operation sequence (which index to touch next). Same seed, same sequence.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(mix(seed) | 1) {}
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1DULL;
  }
  uint64_t below(uint64_t n) { return next() % n; }
  double unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
};

// ---------------------------------------------------------------------------------------
// Statistics

inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
/// Nearest-rank percentile, p in [0, 100].
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  if (rank < 1) rank = 1;
  return v[std::min(rank, v.size()) - 1];
}
inline double minOf(const std::vector<double>& v) { return v.empty() ? NAN : *std::min_element(v.begin(), v.end()); }
inline double maxOf(const std::vector<double>& v) { return v.empty() ? NAN : *std::max_element(v.begin(), v.end()); }

// ---------------------------------------------------------------------------------------
// Formatting

inline std::string strf(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a);
  return buf;
}

inline std::string fmtRate(double perSec) {
  if (!std::isfinite(perSec)) return "-";
  if (perSec >= 1e6) return strf("%.2f M/s", perSec / 1e6);
  if (perSec >= 1e3) return strf("%.1f k/s", perSec / 1e3);
  return strf("%.0f /s", perSec);
}
inline std::string fmtTime(double sec) {
  if (!std::isfinite(sec)) return "-";
  if (sec >= 1) return strf("%.2f s", sec);
  if (sec >= 1e-3) return strf("%.2f ms", sec * 1e3);
  return strf("%.1f us", sec * 1e6);
}
/// The host's byte format (config/units.h) for a measured, possibly fractional count.
inline std::string fmtBytes(double b) {
  if (!std::isfinite(b) || b < 0) return "-";
  return jobhost::host::formatBytes(static_cast<uint64_t>(std::llround(b)));
}
inline std::string fmtBps(double bps) { return std::isfinite(bps) ? fmtBytes(bps) + "/s" : "-"; }
inline std::string fmtCount(double n) {
  if (n >= 1e6 && std::fmod(n, 1e6) == 0) return strf("%.0fM", n / 1e6);
  if (n >= 1e6) return strf("%.1fM", n / 1e6);
  if (n >= 1e3 && std::fmod(n, 1e3) == 0) return strf("%.0fk", n / 1e3);
  return strf("%.0f", n);
}

// ---------------------------------------------------------------------------------------
// Rows

enum class Unit { kRate, kTime, kBytes, kBps, kPerEntry, kNone };

inline std::string fmtUnit(Unit u, double v) {
  switch (u) {
    case Unit::kRate: return fmtRate(v);
    case Unit::kTime: return fmtTime(v);
    case Unit::kBytes: return fmtBytes(v);
    case Unit::kBps: return fmtBps(v);
    case Unit::kPerEntry: return std::isfinite(v) ? strf("%.1f B/entry", v) : "-";
    case Unit::kNone: return std::isfinite(v) ? strf("%.3g", v) : "-";
  }
  return "-";
}
inline const char* unitName(Unit u) {
  switch (u) {
    case Unit::kRate: return "ops/s";
    case Unit::kTime: return "s";
    case Unit::kBytes: return "B";
    case Unit::kBps: return "B/s";
    case Unit::kPerEntry: return "B/entry";
    case Unit::kNone: return "";
  }
  return "";
}

struct Row {
  std::string id;
  std::string what;
  Unit unit = Unit::kNone;
  std::vector<double> ours, raw, ratio;  // one per repetition (or per sample, see note)
  std::string oursText, rawText;         // overrides of the median display
  std::string target;
  std::string verdict = "info";          // met | missed | not measured | info | error
  std::string note;                      // printed below the table
  std::map<std::string, double> extra;   // more figures, JSON only (and used in notes)

  std::string oursShown() const { return !oursText.empty() ? oursText : fmtUnit(unit, median(ours)); }
  std::string rawShown() const { return !rawText.empty() ? rawText : (raw.empty() ? "-" : fmtUnit(unit, median(raw))); }
  std::string ratioShown() const {
    if (ratio.empty()) return "-";
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.2f [%.2f-%.2f]", median(ratio), minOf(ratio), maxOf(ratio));
    return buf;
  }
  /// Verdict from the median ratio: ">=" or "<=" threshold.
  void judge(const char* op, double threshold) {
    double m = median(ratio);
    bool ok = std::string(op) == ">=" ? m >= threshold : m <= threshold;
    verdict = ok ? "met" : "missed";
  }
};

inline std::string jsonEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += c;
        }
    }
  }
  return o;
}
inline std::string jsonNum(double v) {
  if (!std::isfinite(v)) return "null";
  char b[40];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}
inline std::string jsonArray(const std::vector<double>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) o += (i ? "," : "") + jsonNum(v[i]);
  return o + "]";
}
inline std::string jsonSummary(const std::vector<double>& v) {
  return "{\"median\":" + jsonNum(median(v)) + ",\"min\":" + jsonNum(minOf(v)) + ",\"max\":" + jsonNum(maxOf(v)) +
         ",\"samples\":" + jsonArray(v) + "}";
}

inline std::string rowJson(const Row& r) {
  std::string o = "{\"id\":\"" + jsonEscape(r.id) + "\",\"what\":\"" + jsonEscape(r.what) + "\",\"unit\":\"" +
                  unitName(r.unit) + "\",\"ours_display\":\"" + jsonEscape(r.oursShown()) + "\",\"raw_display\":\"" +
                  jsonEscape(r.rawShown()) + "\",\"ours\":" + jsonSummary(r.ours) + ",\"raw\":" + jsonSummary(r.raw) +
                  ",\"ratio\":" + jsonSummary(r.ratio) + ",\"target\":\"" + jsonEscape(r.target) + "\",\"verdict\":\"" +
                  jsonEscape(r.verdict) + "\",\"note\":\"" + jsonEscape(r.note) + "\",\"extra\":{";
  bool first = true;
  for (const auto& [k, v] : r.extra) {
    o += (first ? "\"" : ",\"") + jsonEscape(k) + "\":" + jsonNum(v);
    first = false;
  }
  return o + "}}";
}

/// Display width of UTF-8 text (counts code points; our strings have no wide glyphs).
inline size_t displayWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

inline std::string table(const std::vector<Row>& rows) {
  const std::vector<std::string> head = {"ID", "WHAT", "OURS", "RAW", "RATIO med [min-max]", "TARGET", "VERDICT"};
  std::vector<std::vector<std::string>> cells;
  for (const auto& r : rows)
    cells.push_back({r.id, r.what, r.oursShown(), r.rawShown(), r.ratioShown(), r.target, r.verdict});
  std::vector<size_t> w(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    w[c] = displayWidth(head[c]);
    for (const auto& row : cells) w[c] = std::max(w[c], displayWidth(row[c]));
  }
  auto line = [&](const std::vector<std::string>& v) {
    std::string o;
    for (size_t c = 0; c < v.size(); ++c) {
      o += v[c];
      if (c + 1 < v.size()) o += std::string(w[c] - displayWidth(v[c]) + 2, ' ');
    }
    return o + "\n";
  };
  std::string out = line(head);
  for (const auto& row : cells) out += line(row);
  return out;
}

// ---------------------------------------------------------------------------------------
// Files and processes

inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void writeFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

struct ProcResult {
  int exitCode = -1;
  double seconds = 0;
};

/// Runs argv[0] with argv, stdout and stderr to the given files; waits; wall time.
/// posix_spawn (clone with CLONE_VM|CLONE_VFORK in glibc), not fork(): a fork of this
/// multi-GiB process would copy its page tables and add tens of ms to every timing.
inline ProcResult runProcess(const std::vector<std::string>& argv, const std::string& outPath,
                             const std::string& errPath) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  auto t0 = Clock::now();
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid failed");
  }
  ProcResult r;
  r.seconds = secondsSince(t0);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

/// Last `n` bytes of a file, for error messages.
inline std::string tailOf(const std::string& path, size_t n = 600) {
  try {
    std::string s = readFile(path);
    return s.size() > n ? s.substr(s.size() - n) : s;
  } catch (...) {
    return "";
  }
}

/// Resident set size of this process in bytes (/proc/self/statm, second field).
inline uint64_t residentBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

inline std::string firstLineMatching(const std::string& path, const std::string& prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) return line;
  return "";
}

inline std::string trim(std::string s) {
  size_t a = s.find_first_not_of(" \t");
  size_t b = s.find_last_not_of(" \t\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

}  // namespace bench
