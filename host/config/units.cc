#include "config/units.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>

namespace jobhost::host {

std::string formatBytes(uint64_t b) {
  char buf[32];
  if (b < 1024) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  else if (b < (1 << 20)) std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024.0);
  else if (b < (1ULL << 30)) std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / 1073741824.0);
  return buf;
}

std::string formatLocalTime(int64_t epochMs) {
  if (epochMs <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(epochMs / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string formatDuration(std::chrono::milliseconds d) {
  auto ms = d.count();
  if (ms % 60000 == 0 && ms > 0) return std::to_string(ms / 60000) + " min";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms) + " ms";
}

std::optional<std::chrono::milliseconds> parseDuration(const std::string& text) {
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) t.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (t.empty()) return std::nullopt;
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  if (i == 0 || std::count(t.begin(), t.begin() + static_cast<long>(i), '.') > 1) return std::nullopt;
  double n;
  try {
    n = std::stod(t.substr(0, i));
  } catch (...) {
    return std::nullopt;
  }
  std::string unit = t.substr(i);
  double ms;
  if (unit.empty() || unit == "ms" || unit == "milli" || unit == "millis") ms = n;
  else if (unit == "s" || unit == "sec" || unit == "second" || unit == "seconds") ms = n * 1000;
  else if (unit == "min" || unit == "m" || unit == "minute" || unit == "minutes") ms = n * 60000;
  else if (unit == "h" || unit == "hour" || unit == "hours") ms = n * 3600000;
  else return std::nullopt;
  if (!(ms >= 0) || ms > 9.0e15) return std::nullopt;  // beyond ~285,000 years: a typo
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

std::optional<uint64_t> parseBytes(const std::string& text) {
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) t.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  size_t i = 0;
  uint64_t n = 0;
  for (; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i) {
    if (n > (uint64_t{1} << 63) / 10) return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(t[i] - '0');
  }
  if (i == 0) return std::nullopt;
  const std::string unit = t.substr(i);
  int shift;
  if (unit.empty() || unit == "b" || unit == "bytes") shift = 0;
  else if (unit == "k" || unit == "kb" || unit == "kib") shift = 10;
  else if (unit == "m" || unit == "mb" || unit == "mib") shift = 20;
  else if (unit == "g" || unit == "gb" || unit == "gib") shift = 30;
  else if (unit == "t" || unit == "tb" || unit == "tib") shift = 40;
  else return std::nullopt;
  if (n > ((uint64_t{1} << 63) >> shift)) return std::nullopt;
  return n << shift;
}

std::string shellQuote(std::string_view s) {
  bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_-./:=@%+,").find(c) != std::string_view::npos;
  });
  if (plain) return std::string(s);
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string shellCommand(std::initializer_list<std::string_view> words) {
  std::string out;
  for (std::string_view w : words) out += (out.empty() ? "" : " ") + shellQuote(w);
  return out;
}

}  // namespace jobhost::host
