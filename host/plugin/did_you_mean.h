// host/plugin/did_you_mean.h — "did you mean ...?" suggestions for mistyped names.
//
// Used for unknown job classes (-c), and meant for unknown subcommands and configuration
// keys too. Distances are Levenshtein edit distances (insert, delete, substitute one
// byte); comparisons are optionally ASCII case-insensitive. Names are short, so the
// O(|a|·|b|) algorithm is fine; inputs longer than kMaxSuggestLength bytes get no
// suggestion rather than a quadratic amount of work.
//
// Thread-safety: pure functions; safe to call concurrently.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace jobhost::host {

/// Inputs or candidates longer than this never match in closestCandidate().
inline constexpr size_t kMaxSuggestLength = 256;

/// Levenshtein distance between a and b; with ignoreCase, ASCII letters compare
/// case-insensitively. O(|a|·|b|) time, O(min(|a|,|b|)) memory.
size_t levenshteinDistance(std::string_view a, std::string_view b, bool ignoreCase = false);

/// The largest distance at which `candidate` still counts as a plausible typo of
/// `input`: 1 if the longer of the two has at most 3 bytes, else a third of the longer
/// one but at least 2 (so "WordCont" -> "WordCount", "lsit" -> "list" and "Top" -> "Tap"
/// match; "xyz" -> "run" and "Avg" -> "RunningAverage" do not).
size_t maxSuggestionDistance(std::string_view input, std::string_view candidate);

/// The candidate closest to `input` (case-insensitive distance) if it is within
/// maxSuggestionDistance(); ties go to the earlier candidate. Returns nullopt if no
/// candidate is close enough. An exact (case-sensitive) match is returned as itself, so
/// callers should look for exact matches first.
std::optional<std::string> closestCandidate(std::string_view input,
                                            const std::vector<std::string>& candidates);

/// "a, b, c" — joins names for "Available: ..." lists.
std::string joinNames(const std::vector<std::string>& names, std::string_view separator = ", ");

}  // namespace jobhost::host
