// jobhost/windows.h — window assigners: tumbling, sliding and session windows in event or
// processing time, as Flink's.
//
//   words.keyBy(byWord)
//       .window(jobhost::TumblingEventTimeWindows::of(10s))
//       .allowedLateness(5s)
//       .sideOutputLateData(lateTag)
//       .aggregate(CountWords{}, EmitWindowEnd{});
//
// An event-time window fires when the watermark passes its end (window.maxTimestamp()),
// a processing-time window when the wall clock does. Its contents are keyed state
// ("window-contents", keyed by the window), its timers too; both are in every snapshot.
// A record for a window whose end + allowed lateness is behind the watermark is late: it
// goes to sideOutputLateData's tag, or is dropped. Within the allowed lateness a late
// record updates the window and fires it again.
//
// The assigner is part of the window state's identity: a snapshot written with 10 s
// tumbling windows does not restore into 5 s windows (the restore check says so).
//
// Thread-safety: values.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "jobhost/errors.h"
#include "jobhost/time.h"

namespace jobhost {

/// Which windows a record belongs to. Made by the factories below.
class WindowAssigner {
 public:
  enum class Kind { kTumbling, kSliding, kSession };

  Kind kind() const { return kind_; }
  bool isEventTime() const { return eventTime_; }
  /// Session windows merge when they overlap.
  bool isMerging() const { return kind_ == Kind::kSession; }
  int64_t sizeMs() const { return size_; }
  int64_t slideMs() const { return slide_; }
  int64_t offsetMs() const { return offset_; }
  int64_t gapMs() const { return gap_; }

  /// The windows of a record at `timestamp` (event time, or the processing time).
  std::vector<TimeWindow> assignWindows(int64_t timestamp) const {
    switch (kind_) {
      case Kind::kTumbling: {
        int64_t start = windowStart(timestamp, offset_, size_);
        return {{start, start + size_}};
      }
      case Kind::kSliding: {
        std::vector<TimeWindow> out;
        out.reserve(static_cast<size_t>(size_ / slide_) + 1);
        for (int64_t start = windowStart(timestamp, offset_, slide_); start > timestamp - size_; start -= slide_)
          out.push_back({start, start + size_});
        return out;
      }
      case Kind::kSession: return {{timestamp, timestamp + gap_}};
    }
    return {};
  }

  /// The assigner as recorded in the window state's serializer id (so a changed assigner
  /// is reported before a restore), e.g. "TumblingEventTimeWindows(size=10000ms
  /// offset=0ms)". Snapshots hold this text: never change its format (describe() may).
  std::string stateId() const {
    std::string domain = eventTime_ ? "EventTime" : "ProcessingTime";
    switch (kind_) {
      case Kind::kTumbling:
        return "Tumbling" + domain + "Windows(size=" + std::to_string(size_) + "ms offset=" + std::to_string(offset_) +
               "ms)";
      case Kind::kSliding:
        return "Sliding" + domain + "Windows(size=" + std::to_string(size_) + "ms slide=" + std::to_string(slide_) +
               "ms offset=" + std::to_string(offset_) + "ms)";
      case Kind::kSession: return domain + "SessionWindows(gap=" + std::to_string(gap_) + "ms)";
    }
    return "?";
  }

  /// For people (messages); today the same text as stateId().
  std::string describe() const { return stateId(); }

  /// The start of the window of `size` (aligned to `offset`) that holds `timestamp`.
  static int64_t windowStart(int64_t timestamp, int64_t offset, int64_t size) {
    int64_t r = (timestamp - offset) % size;
    if (r < 0) r += size;
    return timestamp - r;
  }

  static WindowAssigner tumbling(bool eventTime, std::chrono::milliseconds size, std::chrono::milliseconds offset) {
    const char* name = eventTime ? "TumblingEventTimeWindows" : "TumblingProcessingTimeWindows";
    checkSize(name, size.count());
    checkOffset(name, offset.count(), size.count());
    return WindowAssigner(Kind::kTumbling, eventTime, size.count(), size.count(), offset.count(), 0);
  }
  static WindowAssigner sliding(bool eventTime, std::chrono::milliseconds size, std::chrono::milliseconds slide,
                                std::chrono::milliseconds offset) {
    const char* name = eventTime ? "SlidingEventTimeWindows" : "SlidingProcessingTimeWindows";
    checkSize(name, size.count());
    if (slide.count() <= 0)
      throw JobArgumentError(std::string(name) + ": the slide must be positive, got " + std::to_string(slide.count()) +
                             " ms");
    checkOffset(name, offset.count(), slide.count());
    return WindowAssigner(Kind::kSliding, eventTime, size.count(), slide.count(), offset.count(), 0);
  }
  static WindowAssigner session(bool eventTime, std::chrono::milliseconds gap) {
    if (gap.count() <= 0)
      throw JobArgumentError(std::string(eventTime ? "EventTimeSessionWindows" : "ProcessingTimeSessionWindows") +
                             "::withGap: the gap must be positive, got " + std::to_string(gap.count()) + " ms");
    return WindowAssigner(Kind::kSession, eventTime, 0, 0, 0, gap.count());
  }

 private:
  WindowAssigner(Kind k, bool eventTime, int64_t size, int64_t slide, int64_t offset, int64_t gap)
      : kind_(k), eventTime_(eventTime), size_(size), slide_(slide), offset_(offset), gap_(gap) {}
  static void checkSize(const char* name, int64_t size) {
    if (size <= 0)
      throw JobArgumentError(std::string(name) + ": the window size must be positive, got " + std::to_string(size) +
                             " ms");
  }
  static void checkOffset(const char* name, int64_t offset, int64_t period) {
    if (offset <= -period || offset >= period)
      throw JobArgumentError(std::string(name) + ": the offset (" + std::to_string(offset) +
                             " ms) must be smaller than the window's period (" + std::to_string(period) + " ms)");
  }

  Kind kind_;
  bool eventTime_;
  int64_t size_, slide_, offset_, gap_;
};

struct TumblingEventTimeWindows {
  static WindowAssigner of(std::chrono::milliseconds size, std::chrono::milliseconds offset = {}) {
    return WindowAssigner::tumbling(true, size, offset);
  }
};
struct TumblingProcessingTimeWindows {
  static WindowAssigner of(std::chrono::milliseconds size, std::chrono::milliseconds offset = {}) {
    return WindowAssigner::tumbling(false, size, offset);
  }
};
struct SlidingEventTimeWindows {
  static WindowAssigner of(std::chrono::milliseconds size, std::chrono::milliseconds slide,
                           std::chrono::milliseconds offset = {}) {
    return WindowAssigner::sliding(true, size, slide, offset);
  }
};
struct SlidingProcessingTimeWindows {
  static WindowAssigner of(std::chrono::milliseconds size, std::chrono::milliseconds slide,
                           std::chrono::milliseconds offset = {}) {
    return WindowAssigner::sliding(false, size, slide, offset);
  }
};
struct EventTimeSessionWindows {
  static WindowAssigner withGap(std::chrono::milliseconds gap) { return WindowAssigner::session(true, gap); }
};
struct ProcessingTimeSessionWindows {
  static WindowAssigner withGap(std::chrono::milliseconds gap) { return WindowAssigner::session(false, gap); }
};

}  // namespace jobhost
