// One execution attempt's life: built from the plan, prepared (task_setup.cc), started,
// waited for, cancelled or failed, and its tasks' numbers read. The tasks' loop is
// stream_task.cc, their part of checkpoints subtask_checkpoint.cc. See the header.
#include "runtime/job_execution.h"

#include "runtime/job_execution_impl.h"
#include "runtime/line_sinks.h"

namespace jobhost::host {

using state::Status;

JobExecution::JobExecution(Plan plan, ExecutionConfig config, CheckpointListener* listener)
    : impl_(std::make_unique<Impl>(std::move(plan), std::move(config), listener)) {}

JobExecution::~JobExecution() {
  cancel();
  for (auto& t : impl_->tasks)
    if (t->thread.joinable()) t->thread.join();
  {
    std::lock_guard lock(impl_->upMu);
    impl_->upStop = true;
    impl_->upCv.notify_all();
  }
  if (impl_->uploader.joinable()) impl_->uploader.join();
}
bool JobExecution::prepareFailedOnDependency() const { return impl_->prepareFailedOnDependency; }
bool JobExecution::prepareFailedOnUsage() const { return impl_->prepareFailedOnUsage; }

void JobExecution::start() {
  Impl& x = *impl_;
  x.liveTasks.store(static_cast<int>(x.tasks.size()));
  x.uploader = std::thread([&x] { x.uploaderLoop(); });
  for (auto& t : x.tasks) {
    Impl::Task* tp = t.get();
    tp->thread = std::thread([&x, tp] { x.runTask(*tp); });
  }
  x.started.store(true);
}

ExecutionResult JobExecution::wait() {
  for (auto& t : impl_->tasks)
    if (t->thread.joinable()) t->thread.join();
  {
    std::lock_guard lock(impl_->upMu);
    impl_->upStop = true;
    impl_->upCv.notify_all();
  }
  if (impl_->uploader.joinable()) impl_->uploader.join();
  LineSinks::instance().flush();
  std::lock_guard lock(impl_->resultMu);
  if (!impl_->failed && impl_->cancelled.load()) impl_->result.kind = ExecutionResult::kCancelled;
  return impl_->result;
}

void JobExecution::cancel() {
  impl_->cancelAll();
}

void JobExecution::cancelOpening() { impl_->cancelled.store(true); }

void JobExecution::failExternally(const std::string& reason) { impl_->fail(reason, "", ""); }
int JobExecution::taskCount() const { return static_cast<int>(impl_->tasks.size()); }
const std::vector<OperatorInfo>& JobExecution::operators() const { return impl_->operatorInfos; }
bool JobExecution::running() const {
  return impl_->started.load() && !impl_->cancelled.load() && impl_->liveTasks.load() > 0;
}
uint64_t JobExecution::recordsIn() const {
  uint64_t n = 0;
  for (const auto& t : impl_->tasks) n += t->metrics.recordsIn.get();
  return n;
}
uint64_t JobExecution::recordsOut() const {
  uint64_t n = 0;
  for (const auto& t : impl_->tasks) n += t->metrics.recordsOut.get();
  return n;
}

std::vector<TaskMetricsSample> JobExecution::taskMetrics() const {
  std::vector<TaskMetricsSample> out;
  for (const auto& tp : impl_->tasks) {
    const Impl::Task& t = *tp;
    TaskMetricsSample s;
    s.name = t.name;
    s.subtask = t.subtask;
    s.parallelism = impl_->stages[static_cast<size_t>(t.stage)].parallelism;
    s.recordsIn = t.metrics.recordsIn.get();
    s.recordsOut = t.metrics.recordsOut.get();
    s.idleNanos = t.metrics.idleNanos.get();
    s.backPressuredNanos = t.metrics.backPressuredNanos.get();
    s.inputWatermark = t.metrics.inputWatermark.load(std::memory_order_relaxed);
    for (size_t b = 0; b < t.metrics.backendEntries.size() && b < t.backendSlot.size(); ++b)
      s.backends.push_back({t.slots[static_cast<size_t>(t.backendSlot[b])].node->uid,
                            state::backendTypeName(impl_->config.backend),
                            t.metrics.backendEntries[b].load(std::memory_order_relaxed)});
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace jobhost::host
