// host/plugin/did_you_mean.cc — see did_you_mean.h.
#include "host/plugin/did_you_mean.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace jobhost::host {
namespace {

char foldCase(char c, bool ignoreCase) {
  return ignoreCase && c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

}  // namespace

size_t levenshteinDistance(std::string_view a, std::string_view b, bool ignoreCase) {
  if (a.size() < b.size()) std::swap(a, b);  // the row is sized by the shorter string
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];  // distance(a[0..i-1), b[0..j-1))
    row[0] = i;
    const char ca = foldCase(a[i - 1], ignoreCase);
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      const size_t substitute = diagonal + (ca == foldCase(b[j - 1], ignoreCase) ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

size_t maxSuggestionDistance(std::string_view input, std::string_view candidate) {
  const size_t longer = std::max(input.size(), candidate.size());
  return longer <= 3 ? 1 : std::max<size_t>(2, longer / 3);
}

std::optional<std::string> closestCandidate(std::string_view input,
                                            const std::vector<std::string>& candidates) {
  if (input.empty() || input.size() > kMaxSuggestLength) return std::nullopt;
  const std::string* best = nullptr;
  size_t bestDistance = 0;
  for (const std::string& candidate : candidates) {
    if (candidate.size() > kMaxSuggestLength) continue;
    // Cheap bound: the distance is at least the length difference.
    const size_t lengthGap = candidate.size() > input.size() ? candidate.size() - input.size()
                                                              : input.size() - candidate.size();
    const size_t limit = maxSuggestionDistance(input, candidate);
    if (lengthGap > limit) continue;
    const size_t d = levenshteinDistance(input, candidate, /*ignoreCase=*/true);
    if (d > limit) continue;
    if (best == nullptr || d < bestDistance) {
      best = &candidate;
      bestDistance = d;
    }
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

std::string joinNames(const std::vector<std::string>& names, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += separator;
    out += names[i];
  }
  return out;
}

}  // namespace jobhost::host
