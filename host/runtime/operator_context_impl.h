// host/runtime/operator_context_impl.h — what an operator of a task sees of its task
// (jobhost/operator.h's OperatorContext): its subtask, keyed state, current key and
// timestamp, timers, watermark, exchange output, side outputs and line sinks.
//
// Thread-safety: set up before the task thread starts, then used on that thread only.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "jobhost/operator.h"
#include "jobhost/state/keyed_backend.h"
#include "runtime/exchange_writer_impl.h"
#include "runtime/line_sinks.h"
#include "runtime/timer_service.h"

namespace jobhost::host {

class OperatorContextImpl : public OperatorContext {
 public:
  int subtask = 0, par = 1, maxPar = 128;
  std::string name, uidStr;
  state::KeyedStateBackend* backend = nullptr;
  std::vector<state::KeyedStateBackend*>* taskBackends = nullptr;
  TaskRecordContext* record = nullptr;
  ExchangeWriterImpl* writer = nullptr;
  const std::atomic<bool>* cancelFlag = nullptr;
  std::atomic<const char*>* activeSlot = nullptr;
  int64_t checkpointInterval = 0;  // ExecutionConfig::checkpointIntervalMs
  const int64_t* watermark = nullptr;  // the operator's input watermark
  InternalTimerService* timers = nullptr;
  std::function<void(int64_t)> emitWatermarkFn;  // watermark assigners
  std::function<void()> markIdleFn;
  std::map<std::string, void*> sideOutputs;  // tag key -> the consumer's input
  size_t miniBatchSize = 0;  // ExecutionConfig::windowMiniBatchSize

  int subtaskIndex() const override { return subtask; }
  int parallelism() const override { return par; }
  int maxParallelism() const override { return maxPar; }
  const std::string& operatorName() const override { return name; }
  const std::string& uid() const override { return uidStr; }
  KeyedStateAccess& keyedState() override {
    if (!backend) throw StateError("operator '" + name + "' is not keyed: keyed state needs a keyBy() before it");
    return *backend;
  }
  std::string_view currentKey() const override { return record->key; }
  void setCurrentKey(std::string_view keyBytes) override {
    record->key.assign(keyBytes);
    for (auto* b : *taskBackends) b->setCurrentKey(record->keyGroup, keyBytes);
  }
  int currentKeyGroup() const override { return record->keyGroup; }
  void setCurrentKeyAndGroup(int keyGroup, std::string_view keyBytes) override {
    if (!backend) OperatorContext::setCurrentKeyAndGroup(keyGroup, keyBytes);  // throws: not keyed
    record->keyGroup = keyGroup;
    setCurrentKey(keyBytes);
  }
  size_t windowMiniBatchSize() const override { return miniBatchSize; }
  ExchangeWriter& exchange() override {
    if (!writer) throw StateError("operator '" + name + "' has no exchange output");
    return *writer;
  }
  LineSink& stdoutSink() override { return remember(LineSinks::instance().stdoutSink()); }
  LineSink& fileSink(const std::string& path) override { return remember(LineSinks::instance().fileSink(path)); }
  bool cancelled() const override { return cancelFlag->load(std::memory_order_relaxed); }
  std::atomic<const char*>* activeOperatorSlot() override { return activeSlot; }
  int64_t currentTimestamp() const override { return record->timestamp; }
  void setCurrentTimestamp(int64_t timestamp) override { record->timestamp = timestamp; }
  int64_t currentWatermark() const override { return *watermark; }
  InternalTimerService& timerService() override {
    if (!timers)
      throw StateError("operator '" + name + "' has no timers: timers belong to keyed process functions, windows "
                                             "and joins (after a keyBy)");
    return *timers;
  }
  void emitWatermark(int64_t watermark) override {
    if (!emitWatermarkFn) throw StateError("operator '" + name + "' is not a watermark assigner");
    emitWatermarkFn(watermark);
  }
  void markIdle() override {
    if (!markIdleFn) throw StateError("operator '" + name + "' is not a watermark assigner");
    markIdleFn();
  }
  void* sideOutput(const std::string& tagId) override {
    auto it = sideOutputs.find(tagId);
    return it == sideOutputs.end() ? nullptr : it->second;
  }
  int64_t checkpointIntervalMs() const override { return checkpointInterval; }

  /// The line sinks this operator opened: its task flushes them (see flushLineSinks).
  /// Changed in open() before the task thread starts, then on the task thread only.
  std::vector<BufferedLineSink*> openedSinks;

 private:
  BufferedLineSink& remember(BufferedLineSink& sink) {
    if (std::find(openedSinks.begin(), openedSinks.end(), &sink) == openedSinks.end()) openedSinks.push_back(&sink);
    return sink;
  }
};

}  // namespace jobhost::host
