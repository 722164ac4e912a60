// tests/support/fake_operator_context.h — what the host gives a sink run outside a job:
// its place (subtask, parallelism, name, uid) and nothing else; every other service
// throws. For tests that drive an SDK sink or its operator directly.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "jobhost/operator.h"

namespace jobhost_test {

class FakeOperatorContext : public jobhost::OperatorContext {
 public:
  FakeOperatorContext(int subtask, int parallelism, std::string name = "Sink", std::string uid = "sink")
      : subtask_(subtask), parallelism_(parallelism), name_(std::move(name)), uid_(std::move(uid)) {}
  int subtaskIndex() const override { return subtask_; }
  int parallelism() const override { return parallelism_; }
  int maxParallelism() const override { return 128; }
  const std::string& operatorName() const override { return name_; }
  const std::string& uid() const override { return uid_; }
  jobhost::KeyedStateAccess& keyedState() override { throw jobhost::StateError("not keyed"); }
  std::string_view currentKey() const override { return {}; }
  void setCurrentKey(std::string_view) override {}
  jobhost::ExchangeWriter& exchange() override { throw std::logic_error("no exchange"); }
  jobhost::LineSink& stdoutSink() override { throw std::logic_error("no stdout"); }
  jobhost::LineSink& fileSink(const std::string&) override { throw std::logic_error("no files"); }
  bool cancelled() const override { return false; }
  int64_t currentTimestamp() const override { return jobhost::kNoTimestamp; }
  void setCurrentTimestamp(int64_t) override {}
  int64_t currentWatermark() const override { return jobhost::kMinWatermark; }
  jobhost::InternalTimerService& timerService() override { throw jobhost::StateError("no timers"); }
  void emitWatermark(int64_t) override {}
  void markIdle() override {}
  void* sideOutput(const std::string&) override { return nullptr; }
  int64_t checkpointIntervalMs() const override { return 1000; }

 private:
  int subtask_, parallelism_;
  std::string name_, uid_;
};

}  // namespace jobhost_test
