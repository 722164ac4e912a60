// host/config/units.h — byte counts and durations as people read and write them: the
// one formatter/parser for the whole host (logs, CLI tables, the dashboard, messages,
// configuration values); and commands to type, quoted for a POSIX shell.
//
// Thread-safety: pure functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <initializer_list>
#include <string>
#include <string_view>

namespace jobhost::host {

/// Binary units: "0 B", "1023 B", "1.0 KiB", "14.1 KiB", "3.0 MiB", "1.25 GiB" (bytes
/// below 1 KiB exactly, KiB and MiB with one decimal, GiB and above with two).
std::string formatBytes(uint64_t bytes);

/// The largest unit that divides `d` evenly: "2 min", "90 s", "1500 ms", "0 s". What
/// parseDuration reads back to the same value.
std::string formatDuration(std::chrono::milliseconds d);
/// Milliseconds since the epoch as local time "2026-12-02 01:02:03"; "-" for <= 0.
std::string formatLocalTime(int64_t epochMs);

/// Parses a duration as configuration values write it: a non-negative number (a decimal
/// point allowed) followed by a unit — "ms"/"milli"/"millis" (also no unit),
/// "s"/"sec"/"second"/"seconds", "min"/"m"/"minute"/"minutes", "h"/"hour"/"hours" —
/// case-insensitive, spaces ignored: "500ms", "10 s", "1min", "1.5 s". Fractions of a
/// millisecond are cut. nullopt if malformed, negative or beyond ~285,000 years.
std::optional<std::chrono::milliseconds> parseDuration(const std::string& text);

/// Parses a byte count as Flink's memory sizes write it: a non-negative integer followed
/// by an optional binary unit — "b"/"bytes", "k"/"kb"/"kib", "m"/"mb"/"mib", "g"/"gb"/"gib",
/// "t"/"tb"/"tib" — case-insensitive, spaces ignored: "64mb", "8 MiB", "1g", "4096".
/// nullopt if malformed or beyond 2^63 bytes.
std::optional<uint64_t> parseBytes(const std::string& text);

/// `word` as a POSIX shell reads it back: unchanged when it holds only characters no
/// shell treats specially (letters, digits, _-./:=@%+,), else in single quotes ('' for
/// an empty word; a ' inside written '\''), so a path with spaces pastes as one word.
std::string shellQuote(std::string_view word);
/// The words quoted and joined by spaces: a command a message tells people to type
/// ("jobhost run -s <path> -c <Class> <plugin>"). Words with placeholders such as
/// "<out-dir>" are quoted too; pass those in the text around the command instead.
std::string shellCommand(std::initializer_list<std::string_view> words);

}  // namespace jobhost::host
