// host/checkpoint/checkpoint_record_capnp.h — CheckpointRecord <-> its Cap'n Proto twins:
// `wire::CheckpointEvent` (worker -> supervisor, runtime/worker_protocol.capnp) and
// `rpc::CheckpointRecord` (control endpoint, control/control.capnp). Both structs have the
// same fields and the same enum, so one template serves both.
#pragma once

#include <capnp/list.h>

#include <string>
#include <utility>

#include "checkpoint/checkpoint_record.h"

namespace jobhost::host {

template <class Builder>
void writeCheckpointRecord(Builder b, const CheckpointRecord& r) {
  using Status = decltype(b.asReader().getStatus());
  b.setId(r.id);
  switch (r.status) {
    case CheckpointRecord::Status::kInProgress: b.setStatus(Status::IN_PROGRESS); break;
    case CheckpointRecord::Status::kCompleted: b.setStatus(Status::COMPLETED); break;
    case CheckpointRecord::Status::kFailed: b.setStatus(Status::FAILED); break;
  }
  b.setSavepoint(r.savepoint);
  b.setIncremental(r.incremental);
  b.setCanonical(r.canonical);
  b.setTriggerTimeMs(r.triggerTimeMs);
  b.setDurationMicros(r.durationMicros);
  b.setSyncMicros(r.syncMicros);
  b.setAsyncMicros(r.asyncMicros);
  b.setAlignmentMicros(r.alignmentMicros);
  b.setNewBytes(r.newBytes);
  b.setTotalBytes(r.totalBytes);
  auto deps = b.initDependsOn(static_cast<unsigned>(r.dependsOn.size()));
  for (unsigned i = 0; i < r.dependsOn.size(); ++i) {
    deps[i].setCheckpointId(r.dependsOn[i].checkpointId);
    deps[i].setFiles(r.dependsOn[i].files);
    deps[i].setBytes(r.dependsOn[i].bytes);
  }
  b.setPath(r.path);
  b.setFailureReason(r.failureReason);
  b.setSubsumed(r.subsumed);
}

template <class Reader>
CheckpointRecord readCheckpointRecord(Reader m) {
  using Status = decltype(m.getStatus());
  CheckpointRecord r;
  r.id = m.getId();
  switch (m.getStatus()) {
    case Status::COMPLETED: r.status = CheckpointRecord::Status::kCompleted; break;
    case Status::FAILED: r.status = CheckpointRecord::Status::kFailed; break;
    default: r.status = CheckpointRecord::Status::kInProgress; break;
  }
  r.savepoint = m.getSavepoint();
  r.incremental = m.getIncremental();
  r.canonical = m.getCanonical();
  r.triggerTimeMs = m.getTriggerTimeMs();
  r.durationMicros = m.getDurationMicros();
  r.syncMicros = m.getSyncMicros();
  r.asyncMicros = m.getAsyncMicros();
  r.alignmentMicros = m.getAlignmentMicros();
  r.newBytes = m.getNewBytes();
  r.totalBytes = m.getTotalBytes();
  for (auto d : m.getDependsOn()) r.dependsOn.push_back({d.getCheckpointId(), d.getFiles(), d.getBytes()});
  r.path = std::string(m.getPath().cStr(), m.getPath().size());
  r.failureReason = std::string(m.getFailureReason().cStr(), m.getFailureReason().size());
  r.subsumed = m.getSubsumed();
  return r;
}

}  // namespace jobhost::host
