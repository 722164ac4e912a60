// jobhost/detail/window_panes.h — the panes of tumbling and sliding windows (internal), as
// Flink's slices (flink-table-runtime SliceAssigners) and the "panes" of Li et al., "No
// pane, no gain" (SIGMOD Record 2005).
//
// A sliding assigner of size S and slide D puts a record into S/D overlapping windows.
// Every window edge lies on the grid of P = gcd(S, D) shifted by the offset, so a window
// is a run of whole panes of size P and a record belongs to exactly one pane. The
// window operator's mini-batch (window_mini_batch.h) keeps one accumulator per pane and
// key, updated once per record, and adds it to each of the pane's windows when it writes
// to keyed state. A tumbling assigner's pane is its window.
//
// Thread-safety: a value.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "jobhost/time.h"
#include "jobhost/windows.h"

namespace jobhost::detail {

class PaneGrid {
 public:
  /// `a` is a tumbling or sliding assigner (for a session assigner the grid is unused).
  explicit PaneGrid(const WindowAssigner& a)
      : size_(a.sizeMs()), slide_(a.slideMs()), offset_(a.offsetMs()),
        pane_(std::max<int64_t>(1, std::gcd(a.sizeMs(), a.slideMs()))) {}

  int64_t slide() const { return slide_; }

  /// The pane holding `timestamp`.
  TimeWindow paneOf(int64_t timestamp) const {
    const int64_t start = WindowAssigner::windowStart(timestamp, offset_, pane_);
    return {start, start + pane_};
  }

  /// The windows holding `pane`: their starts run from *firstStart to *lastStart by
  /// slide(), oldest first. False if no window holds it (a sliding assigner
  /// whose slide exceeds its size leaves gaps between windows).
  bool windowsOf(const TimeWindow& pane, int64_t* firstStart, int64_t* lastStart) const {
    // The latest window starting at or before the pane; earlier ones end earlier.
    const int64_t last = WindowAssigner::windowStart(pane.start, offset_, slide_);
    if (last + size_ < pane.end) return false;
    // The earliest one still ending at or after the pane's end.
    *firstStart = last - (last - (pane.end - size_)) / slide_ * slide_;
    *lastStart = last;
    return true;
  }
  TimeWindow window(int64_t start) const { return {start, start + size_}; }

 private:
  int64_t size_, slide_, offset_, pane_;
};

}  // namespace jobhost::detail
