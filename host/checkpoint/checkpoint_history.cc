#include "checkpoint/checkpoint_history.h"

#include <algorithm>

namespace jobhost::host {

void CheckpointHistory::record(const CheckpointRecord& r) {
  auto it = std::find_if(records_.rbegin(), records_.rend(), [&](const CheckpointRecord& h) {
    return h.id == r.id && h.triggerTimeMs == r.triggerTimeMs;
  });
  const bool known = it != records_.rend();
  if (!r.savepoint && (!known || it->status != r.status)) {
    if (r.status == CheckpointRecord::Status::kCompleted) ++completed_;
    if (r.status == CheckpointRecord::Status::kFailed) ++failed_;
  }
  if (known) {
    *it = r;
    return;
  }
  records_.push_back(r);
  while (records_.size() > kLimit) records_.pop_front();
}

CheckpointRecord CheckpointHistory::asFailed(CheckpointRecord r, const std::string& reason, int64_t nowMs) {
  r.status = CheckpointRecord::Status::kFailed;
  r.failureReason = reason;
  r.durationMicros = static_cast<uint64_t>(std::max<int64_t>(0, nowMs - r.triggerTimeMs)) * 1000;
  return r;
}

std::optional<CheckpointRecord> CheckpointHistory::fail(uint64_t id, const std::string& reason, int64_t nowMs) {
  for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
    if (it->id != id || it->status != CheckpointRecord::Status::kInProgress) continue;
    CheckpointRecord r = asFailed(*it, reason, nowMs);
    record(r);
    return r;
  }
  return std::nullopt;
}

std::vector<CheckpointRecord> CheckpointHistory::failAllInProgress(const std::string& reason, int64_t nowMs) {
  std::vector<CheckpointRecord> out;
  for (const auto& h : records_)
    if (h.status == CheckpointRecord::Status::kInProgress) out.push_back(asFailed(h, reason, nowMs));
  for (const auto& r : out) record(r);
  return out;
}

}  // namespace jobhost::host
