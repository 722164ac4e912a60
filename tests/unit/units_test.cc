// Unit tests of host/config/units: the host's one formatter of byte counts and durations
// and its one duration parser.
#include "config/units.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace jobhost::host {
namespace {

using std::chrono::milliseconds;

TEST(Units, ByteCountsUseBinaryUnitsWithTheDecimalsOfEachUnit) {
  const std::vector<std::pair<uint64_t, std::string>> cases = {
      {0, "0 B"},
      {1023, "1023 B"},
      {1024, "1.0 KiB"},
      {14438, "14.1 KiB"},
      {(1u << 20) - 1, "1024.0 KiB"},  // one byte short of a MiB rounds up, but stays in KiB
      {1u << 20, "1.0 MiB"},
      {3u << 20, "3.0 MiB"},
      {1ULL << 30, "1.00 GiB"},
      {(5ULL << 30) / 4, "1.25 GiB"},
      {1ULL << 40, "1024.00 GiB"},
  };
  for (const auto& [bytes, text] : cases) EXPECT_EQ(formatBytes(bytes), text) << bytes;
}

TEST(Units, DurationsUseTheLargestUnitThatDividesThemEvenly) {
  const std::vector<std::pair<int64_t, std::string>> cases = {
      {0, "0 s"},      {1, "1 ms"},       {999, "999 ms"}, {1000, "1 s"},
      {1500, "1500 ms"}, {90000, "90 s"}, {60000, "1 min"}, {7200000, "120 min"},
  };
  for (const auto& [ms, text] : cases) EXPECT_EQ(formatDuration(milliseconds(ms)), text) << ms;
}

TEST(Units, ParsingReadsEveryUnitSpellingAndFractions) {
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"100", 100},       {"500ms", 500},     {"500 MS", 500},   {"2 millis", 2},   {"10 s", 10000},
      {"1sec", 1000},     {"3 seconds", 3000}, {"1.5 s", 1500},   {"1min", 60000},   {"2 m", 120000},
      {"1 minute", 60000}, {"1h", 3600000},    {"2 hours", 7200000}, {" 7 s ", 7000}, {"0.5ms", 0},
  };
  for (const auto& [text, ms] : cases) {
    auto d = parseDuration(text);
    ASSERT_TRUE(d.has_value()) << "'" << text << "'";
    EXPECT_EQ(d->count(), ms) << "'" << text << "'";
  }
}

TEST(Units, ParsingRefusesWhatIsNotADuration) {
  for (const std::string text : {"", "s", "ten s", "1.2.3 s", "-1 s", "5 days", "1e3", ".", "99999999999999 h"})
    EXPECT_FALSE(parseDuration(text).has_value()) << "'" << text << "'";
}

TEST(Units, ByteCountsParseInFlinksMemorySizeSpellings) {
  EXPECT_EQ(parseBytes("4096"), 4096u);
  EXPECT_EQ(parseBytes("0"), 0u);
  EXPECT_EQ(parseBytes("10 b"), 10u);
  EXPECT_EQ(parseBytes("512kb"), 512u << 10);
  EXPECT_EQ(parseBytes("64mb"), 64u << 20);
  EXPECT_EQ(parseBytes("64 MiB"), 64u << 20);
  EXPECT_EQ(parseBytes("8m"), 8u << 20);
  EXPECT_EQ(parseBytes("1GB"), 1u << 30);
  EXPECT_EQ(parseBytes("2 t"), uint64_t{2} << 40);
  for (const char* bad : {"", "mb", "-1mb", "1.5mb", "64 parsecs", "64mbb", "99999999999999999999", "9000000tb"})
    EXPECT_FALSE(parseBytes(bad).has_value()) << bad;
}

TEST(Units, WhatIsFormattedParsesBackToTheSameDuration) {
  for (int64_t ms : {0, 1, 250, 1000, 1500, 60000, 90000, 3600000})
    EXPECT_EQ(parseDuration(formatDuration(milliseconds(ms))), milliseconds(ms)) << ms;
}

}  // namespace
}  // namespace jobhost::host
