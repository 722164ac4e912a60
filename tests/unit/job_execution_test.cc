// Unit tests for host/runtime/job_execution: whole executions of small plans, driven step
// by step. The job's user code (a scripted source, a map) and the test meet at named
// points of a Script, so every interleaving that matters is forced, not hoped for; a
// deadline only turns a hang (the defect) into a failure, it never decides a pass.
// Also: operator uid validation (describeOperators).
#include "runtime/exchange_writer_impl.h"
#include "runtime/job_execution.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_coordinator.h"
#include "jobhost/jobhost.h"
#include "jobhost/state/checkpoint_metadata.h"
#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/state_handle.h"
#include "../support/contains.h"

namespace jobhost::host {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// How long a test waits for something that happens within milliseconds unless the
/// execution hangs.
constexpr auto kHang = 60s;

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The lines of `text`, each without a "N> " subtask prefix.
std::multiset<std::string> linesOf(const std::string& text) {
  std::multiset<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto p = line.find("> ");
    if (p != std::string::npos && p > 0 && line.find_first_not_of("0123456789") == p) line = line.substr(p + 2);
    out.insert(line);
  }
  return out;
}

/// Named points where the test and the job's user code meet. The job marks points it
/// reached and waits at gates the test opens; open() of every gate at the end of a test
/// (ScriptRelease) lets job threads finish whatever happened.
class Script {
 public:
  void open(const std::string& gate) {
    std::lock_guard lock(mu_);
    open_.insert(gate);
    cv_.notify_all();
  }
  void openEverything() {
    std::lock_guard lock(mu_);
    all_ = true;
    cv_.notify_all();
  }
  bool isOpen(const std::string& gate) {
    std::lock_guard lock(mu_);
    return all_ || open_.count(gate) > 0;
  }
  void waitOpen(const std::string& gate) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return all_ || open_.count(gate) > 0; });
  }
  void mark(const std::string& point) {
    std::lock_guard lock(mu_);
    marked_.insert(point);
    cv_.notify_all();
  }
  /// False if `point` was not reached within kHang.
  bool waitMarked(const std::string& point) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kHang, [&] { return marked_.count(point) > 0; });
  }
  std::atomic<uint64_t> emitted{0};  // records the scripted source emitted

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> open_, marked_;  // guarded by mu_
  bool all_ = false;                     // guarded by mu_
};

struct ScriptRelease {
  Script& script;
  ~ScriptRelease() { script.openEverything(); }
};

/// A source whose poll() is a test's step function; its position is the number of
/// records it emitted, in decimal.
class ScriptedSource : public SourceFunction<std::string> {
 public:
  using Step = std::function<PollStatus(ScriptedSource&, SourceOutput<std::string>&)>;
  ScriptedSource(std::shared_ptr<Script> script, Step step) : script_(std::move(script)), step_(std::move(step)) {}
  PollStatus poll(SourceOutput<std::string>& out) override { return step_(*this, out); }
  std::string snapshotPosition() override { return std::to_string(emitted); }

  void emit(SourceOutput<std::string>& out, const std::string& record) {
    out.emit(record);
    ++emitted;
    script_->emitted.fetch_add(1);
  }
  /// Nothing to emit now: as the SDK asks of a source, wait a little.
  static PollStatus idle() {
    std::this_thread::sleep_for(1ms);
    return PollStatus::kIdle;
  }
  Script& script() { return *script_; }

  int phase = 0;
  uint64_t emitted = 0;

 private:
  std::shared_ptr<Script> script_;
  Step step_;
};

DataStream<std::string> scriptedSource(StreamEnvironment& env, std::shared_ptr<Script> script,
                                       ScriptedSource::Step step) {
  return env
      .addSource<std::string>([script, step] { return std::make_unique<ScriptedSource>(script, step); },
                              "Scripted Source")
      .uid("source");
}

std::string latest(const std::string&, const std::string& v) { return v; }
std::string itself(const std::string& s) { return s; }

/// Records every report; waits for them.
class RecordingListener : public CheckpointListener {
 public:
  /// Called on the reporting thread before an acknowledgement is recorded.
  std::function<void(uint64_t, const TaskSnapshot&)> onAcknowledge;

  void acknowledge(uint64_t id, TaskSnapshot snapshot) override {
    if (onAcknowledge) onAcknowledge(id, snapshot);
    std::lock_guard lock(mu_);
    acks_[id].push_back(std::move(snapshot));
    cv_.notify_all();
  }
  void decline(uint64_t id, CheckpointFailureReason why, const state::Status& reason) override {
    std::lock_guard lock(mu_);
    declines_[id].push_back(std::string(checkpointFailureName(why)) + ": " + reason.toString());
    cv_.notify_all();
  }
  /// False if fewer than n tasks acknowledged `id` within kHang.
  bool waitAcks(uint64_t id, size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kHang, [&] { return acks_[id].size() >= n; });
  }
  bool waitDeclines(uint64_t id, size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kHang, [&] { return declines_[id].size() >= n; });
  }
  std::vector<TaskSnapshot> acks(uint64_t id) {
    std::lock_guard lock(mu_);
    return acks_[id];
  }
  std::vector<std::string> declines(uint64_t id) {
    std::lock_guard lock(mu_);
    return declines_[id];
  }
  const TaskSnapshot* ackOf(const std::vector<TaskSnapshot>& acks, int taskIndex) {
    for (const auto& a : acks)
      if (a.taskIndex == taskIndex) return &a;
    return nullptr;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, std::vector<TaskSnapshot>> acks_;      // guarded by mu_
  std::map<uint64_t, std::vector<std::string>> declines_;  // guarded by mu_
};

class JobExecutionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // Unique per run of a test (also with --gtest_repeat): the process keeps one line
    // writer per output path for its whole life.
    static std::atomic<int> runs{0};
    root_ = fs::temp_directory_path() / ("jobhost-exec-test-" + std::to_string(::getpid()) + "-" + info->name() + "-" +
                                         std::to_string(++runs));
    fs::remove_all(root_);
    fs::create_directories(root_);
    auto s = state::openStorage((root_ / "checkpoints").string());
    ASSERT_TRUE(s.ok()) << s.status();
    storage_ = std::move(*s);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  ExecutionConfig config(int parallelism, state::BackendType backend = state::BackendType::kHashMap,
                         bool incremental = false) {
    ExecutionConfig c;
    c.parallelism = parallelism;
    c.backend = backend;
    c.incremental = incremental;
    c.localStateDir = (root_ / "local").string();
    return c;
  }
  CheckpointTarget target(uint64_t id, bool stopSources = false,
                          std::shared_ptr<state::CheckpointStorage> storage = nullptr) {
    CheckpointTarget t;
    t.checkpointId = id;
    t.storage = storage ? storage : storage_;
    t.exclusiveDir = "chk-" + std::to_string(id);
    t.sharedDir = "shared";
    t.stopSources = stopSources;
    return t;
  }
  std::vector<std::string> filesUnder(const std::string& dir) {
    std::vector<state::FileEntry> files;
    EXPECT_TRUE(storage_->list(dir, &files).ok());
    std::vector<std::string> out;
    for (const auto& f : files) out.push_back(f.path);
    return out;
  }
  fs::path root_;
  std::shared_ptr<state::CheckpointStorage> storage_;
};

// ---------------------------------------------------------------------------------------
// Barrier alignment

TEST_F(JobExecutionTest, ABarrierWhoseCheckpointWasAbortedDuringAlignmentIsStillForwardedSoTheJobNeverStalls) {
  // Source (1) -> keyBy -> 'first' (2 subtasks) -> keyBy -> 'second' (2 subtasks). One
  // 'first' subtask is held in user code on "hold" with barrier 1 queued behind it, while
  // the other forwards barrier 1: both 'second' subtasks block that channel and wait for
  // barrier 1 from the held one. Checkpoint 1 is aborted; then the held subtask aligns
  // barrier 1. If it does not forward it, the blocked channels fill up, back-pressure
  // stops the source, and neither a later checkpoint nor the end of input ever comes.
  auto script = std::make_shared<Script>();
  constexpr uint64_t kBurst = 60000;  // ~6 MB: far more than the channels hold
  auto sunk = std::make_shared<std::atomic<uint64_t>>(0);
  StreamEnvironment env;
  scriptedSource(env, script,
                 [](ScriptedSource& s, SourceOutput<std::string>& out) {
                   switch (s.phase) {
                     case 0:
                       s.emit(out, "hold");
                       for (int i = 0; i < 100; ++i) s.emit(out, "a" + std::to_string(i));
                       s.phase = 1;
                       s.script().mark("before-barrier");
                       return PollStatus::kIdle;
                     case 1:
                       if (!s.script().isOpen("burst")) return ScriptedSource::idle();
                       s.phase = 2;
                       return PollStatus::kMore;
                     case 2:
                       for (int i = 0; i < 256; ++i)
                         s.emit(out, "b" + std::to_string(s.emitted % 1000) + std::string(100, 'x'));
                       if (s.emitted >= 101 + kBurst) {
                         s.script().mark("burst-emitted");
                         s.phase = 3;
                       }
                       return PollStatus::kMore;
                     default:
                       return s.script().isOpen("finish") ? PollStatus::kEnd : ScriptedSource::idle();
                   }
                 })
      .keyBy(itself)
      .reduce(latest)
      .uid("first")
      .map([script](const std::string& s) {
        if (s == "hold") script->waitOpen("hold");
        return s;
      })
      .keyBy(itself)
      .reduce(latest)
      .uid("second")
      .addSink([sunk](const std::string&) { sunk->fetch_add(1); });
  RecordingListener listener;
  JobExecution exec(env.takePlan(), config(2), &listener);
  ScriptRelease release{*script};  // before exec goes: no job thread stays held
  ASSERT_TRUE(exec.prepare(nullptr).ok());
  exec.start();
  ASSERT_TRUE(script->waitMarked("before-barrier"));
  ASSERT_TRUE(exec.triggerCheckpoint(target(1)));
  // The source and the 'first' subtask without "hold" acknowledge; nothing else can.
  ASSERT_TRUE(listener.waitAcks(1, 2));
  exec.notifyCheckpointAborted(1);
  script->open("hold");
  script->open("burst");
  ASSERT_TRUE(script->waitMarked("burst-emitted"))
      << "stalled: the source is back-pressured by 'second' subtasks still waiting for barrier 1";
  ASSERT_TRUE(exec.triggerCheckpoint(target(2)));
  EXPECT_TRUE(listener.waitAcks(2, static_cast<size_t>(exec.taskCount()))) << "checkpoint 2 did not complete";
  script->open("finish");
  ExecutionResult r = exec.wait();
  EXPECT_EQ(r.kind, ExecutionResult::kFinished) << r.message;
  EXPECT_GE(script->emitted.load(), 101 + kBurst);
  EXPECT_EQ(sunk->load(), script->emitted.load()) << "every record reached the sink";
  EXPECT_EQ(listener.acks(1).size(), 2u) << "only the tasks that snapshotted before the abort report it";
  EXPECT_TRUE(listener.declines(1).empty());
}

// ---------------------------------------------------------------------------------------
// Line sinks

TEST_F(JobExecutionTest, WhenATaskAcknowledgesACheckpointItsTextFileHoldsEveryLineOfTheRecordsBeforeTheBarrier) {
  // The sink's task never goes idle around barrier 1: it is held in user code until the
  // records before the barrier, the barrier and records after it are all queued, and
  // held again by the first record after the barrier; the source then waits too, so
  // nothing else flushes. Only a flush at the barrier puts those lines in the file.
  auto script = std::make_shared<Script>();
  const fs::path out = root_ / "out.txt";
  StreamEnvironment env;
  scriptedSource(env, script,
                 [](ScriptedSource& s, SourceOutput<std::string>& o) {
                   switch (s.phase) {
                     case 0:
                       s.emit(o, "pause-1");
                       s.phase = 1;
                       return PollStatus::kIdle;  // sent on its own
                     case 1:
                       for (int i = 0; i < 100; ++i) s.emit(o, "a-" + std::to_string(i));
                       s.phase = 2;
                       s.script().mark("a-emitted");
                       return PollStatus::kIdle;
                     case 2:
                       // The test triggers checkpoint 1, then opens "triggered": the
                       // source emits barrier 1 before its next poll.
                       if (!s.script().isOpen("triggered")) return ScriptedSource::idle();
                       s.phase = 3;
                       return PollStatus::kMore;
                     case 3:
                       s.emit(o, "pause-2");
                       for (int i = 0; i < 10; ++i) s.emit(o, "b-" + std::to_string(i));
                       s.phase = 4;
                       return PollStatus::kIdle;  // sent after this poll
                     default:
                       s.script().mark("b-sent");
                       s.script().waitOpen("finish");
                       return PollStatus::kEnd;
                   }
                 })
      .keyBy(itself)
      .reduce(latest)
      .uid("latest")
      .map([script](const std::string& s) {
        if (s.rfind("pause-", 0) == 0) script->waitOpen(s);
        return s;
      })
      .writeAsText(out.string());
  RecordingListener listener;
  std::mutex contentMu;
  std::string contentAtAck;
  bool sinkAcked = false;
  listener.onAcknowledge = [&](uint64_t id, const TaskSnapshot& snap) {
    if (id != 1 || snap.taskIndex != 1) return;  // task 1: the sink's
    std::lock_guard lock(contentMu);
    contentAtAck = readFile(out);
    sinkAcked = true;
  };
  JobExecution exec(env.takePlan(), config(1), &listener);
  ScriptRelease release{*script};  // before exec goes: no job thread stays held
  ASSERT_TRUE(exec.prepare(nullptr).ok());
  ASSERT_EQ(exec.taskCount(), 2);
  exec.start();
  ASSERT_TRUE(script->waitMarked("a-emitted"));
  ASSERT_TRUE(exec.triggerCheckpoint(target(1)));
  script->open("triggered");
  ASSERT_TRUE(script->waitMarked("b-sent"));
  script->open("pause-1");
  ASSERT_TRUE(listener.waitAcks(1, 2));
  {
    std::lock_guard lock(contentMu);
    ASSERT_TRUE(sinkAcked);
    std::multiset<std::string> expected = {"pause-1"};
    for (int i = 0; i < 100; ++i) expected.insert("a-" + std::to_string(i));
    EXPECT_EQ(linesOf(contentAtAck), expected) << "the file when the sink's task acknowledged checkpoint 1:\n"
                                                << contentAtAck;
  }
  script->open("pause-2");
  script->open("finish");
  ExecutionResult r = exec.wait();
  EXPECT_EQ(r.kind, ExecutionResult::kFinished) << r.message;
  EXPECT_EQ(linesOf(readFile(out)).size(), 112u);
}

// ---------------------------------------------------------------------------------------
// Atomic stop

/// Emits "0", "1", ... : up to `holdAt` at once, then (once "go" is open) up to `end`,
/// then ends; never more than 64 per poll.
ScriptedSource::Step counting(uint64_t holdAt, uint64_t end) {
  return [holdAt, end](ScriptedSource& s, SourceOutput<std::string>& out) {
    if (s.emitted >= end) return PollStatus::kEnd;
    uint64_t limit = end;
    if (s.emitted >= holdAt) {
      s.script().mark("held");
      if (!s.script().isOpen("go")) return ScriptedSource::idle();
    } else {
      limit = holdAt;
    }
    for (int i = 0; i < 64 && s.emitted < limit; ++i) s.emit(out, std::to_string(s.emitted));
    return PollStatus::kMore;
  };
}

uint64_t sourcePositionIn(const TaskSnapshot* snap) {
  if (!snap) return UINT64_MAX;
  for (const auto& [uid, sub] : snap->operators)
    if (uid == "source") return std::stoull(sub.operatorState);
  return UINT64_MAX;
}

std::multiset<std::string> numbersBelow(uint64_t n) {
  std::multiset<std::string> out;
  for (uint64_t i = 0; i < n; ++i) out.insert(std::to_string(i));
  return out;
}

TEST_F(JobExecutionTest, AStopCheckpointSuspendsTheSourcesSoTheOutputEndsExactlyAtItsBarrier) {
  auto script = std::make_shared<Script>();
  const fs::path out = root_ / "out.txt";
  StreamEnvironment env;
  scriptedSource(env, script, counting(1000, 200000)).keyBy(itself).reduce(latest).uid("latest").writeAsText(out.string());
  RecordingListener listener;
  JobExecution exec(env.takePlan(), config(2), &listener);
  ScriptRelease release{*script};  // before exec goes: no job thread stays held
  ASSERT_TRUE(exec.prepare(nullptr).ok());
  exec.start();
  ASSERT_TRUE(script->waitMarked("held"));
  ASSERT_TRUE(exec.triggerCheckpoint(target(1, /*stopSources=*/true)));
  script->open("go");  // the source runs freely until the stop barrier goes out
  ASSERT_TRUE(listener.waitAcks(1, static_cast<size_t>(exec.taskCount())));
  const uint64_t atBarrier = sourcePositionIn(listener.ackOf(listener.acks(1), 0));
  ASSERT_NE(atBarrier, UINT64_MAX);
  EXPECT_EQ(script->emitted.load(), atBarrier) << "the source emitted records after the stop barrier";
  exec.cancel();  // what the worker does once the stop savepoint is complete
  ExecutionResult r = exec.wait();
  EXPECT_EQ(r.kind, ExecutionResult::kCancelled) << r.message;
  EXPECT_EQ(script->emitted.load(), atBarrier);
  EXPECT_EQ(linesOf(readFile(out)), numbersBelow(atBarrier));
}

// Issue 35: NexmarkQ5 printed a window twice about once in 25 runs. A checkpoint was
// triggered while the bounded source was in its last poll (back-pressured); the source
// then saw the end of its input and declined it, the decline counted as a failed
// checkpoint, tolerable-failed-checkpoints = 0 failed the attempt, and the restart
// replayed lines through the at-least-once print sink. Here the last poll waits for the
// trigger, deterministically: its barrier must follow the last record.
TEST_F(JobExecutionTest, ACheckpointTriggeredDuringTheLastPollOfABoundedSourceFollowsItsLastRecord) {
  auto script = std::make_shared<Script>();
  auto sunk = std::make_shared<std::atomic<uint64_t>>(0);
  StreamEnvironment env;
  scriptedSource(env, script,
                 [](ScriptedSource& s, SourceOutput<std::string>& out) {
                   for (int i = 0; i < 100; ++i) s.emit(out, std::to_string(i));
                   s.script().mark("last-poll");
                   s.script().waitOpen("end");
                   return PollStatus::kEnd;
                 })
      .keyBy(itself)
      .reduce(latest)
      .uid("latest")
      .addSink([sunk](const std::string&) { sunk->fetch_add(1); });
  RecordingListener listener;
  JobExecution exec(env.takePlan(), config(2), &listener);
  ScriptRelease release{*script};  // before exec goes: no job thread stays held
  ASSERT_TRUE(exec.prepare(nullptr).ok());
  exec.start();
  ASSERT_TRUE(script->waitMarked("last-poll"));
  ASSERT_TRUE(exec.triggerCheckpoint(target(1)));
  script->open("end");
  EXPECT_TRUE(listener.waitAcks(1, static_cast<size_t>(exec.taskCount())))
      << "declined: " << (listener.declines(1).empty() ? std::string("-") : listener.declines(1).front());
  EXPECT_TRUE(listener.declines(1).empty());
  EXPECT_EQ(sourcePositionIn(listener.ackOf(listener.acks(1), 0)), 100u) << "the barrier follows the last record";
  ExecutionResult r = exec.wait();
  EXPECT_EQ(r.kind, ExecutionResult::kFinished) << r.message;
  EXPECT_EQ(sunk->load(), 100u);
}

TEST_F(JobExecutionTest, AbortingAStopCheckpointResumesTheSources) {
  auto script = std::make_shared<Script>();
  const fs::path out = root_ / "out.txt";
  StreamEnvironment env;
  scriptedSource(env, script, counting(1000, 5000)).keyBy(itself).reduce(latest).uid("latest").writeAsText(out.string());
  RecordingListener listener;
  JobExecution exec(env.takePlan(), config(2), &listener);
  ScriptRelease release{*script};  // before exec goes: no job thread stays held
  ASSERT_TRUE(exec.prepare(nullptr).ok());
  exec.start();
  ASSERT_TRUE(script->waitMarked("held"));
  ASSERT_TRUE(exec.triggerCheckpoint(target(1, /*stopSources=*/true)));
  script->open("go");
  ASSERT_TRUE(listener.waitAcks(1, static_cast<size_t>(exec.taskCount())));
  const uint64_t atBarrier = sourcePositionIn(listener.ackOf(listener.acks(1), 0));
  EXPECT_EQ(script->emitted.load(), atBarrier) << "the source emitted records after the stop barrier";
  EXPECT_LT(atBarrier, 5000u);
  exec.notifyCheckpointAborted(1);  // e.g. the savepoint's metadata could not be written
  ExecutionResult r = exec.wait();  // the sources resume and the input ends
  EXPECT_EQ(r.kind, ExecutionResult::kFinished) << r.message;
  EXPECT_EQ(linesOf(readFile(out)), numbersBelow(5000));
}

// ---------------------------------------------------------------------------------------
// Checkpoint notifications and reports

/// Emits `n` records at once, marks "emitted", then idles until "finish" opens.
ScriptedSource::Step emitThenIdle(int n) {
  return [n](ScriptedSource& s, SourceOutput<std::string>& out) {
    if (s.phase == 0) {
      for (int i = 0; i < n; ++i) s.emit(out, "k" + std::to_string(i));
      s.phase = 1;
      s.script().mark("emitted");
      return PollStatus::kIdle;
    }
    return s.script().isOpen("finish") ? PollStatus::kEnd : ScriptedSource::idle();
  };
}

/// A transactional sink that discards its records and marks "notified-<id>" when the
/// completion of checkpoint `id` reaches its task: its commit runs in the mail that
/// notifies the task's backends, right after them (subtask_checkpoint.cc's notifyTasks).
/// So a test waits for a notification to reach a backend chained before it, without
/// sleeping.
class NotificationMarkingSink : public TwoPhaseCommitSink<std::string, int64_t> {
 public:
  explicit NotificationMarkingSink(std::shared_ptr<Script> script) : script_(std::move(script)) {}
  int64_t beginTransaction() override { return 0; }
  void invoke(int64_t&, const std::string&, int64_t) override {}
  void preCommit(int64_t&) override {}
  void preCommitForCheckpoint(int64_t& txn, uint64_t checkpointId) override { txn = static_cast<int64_t>(checkpointId); }
  void commit(const int64_t& txn) override { script_->mark("notified-" + std::to_string(txn)); }
  void abort(const int64_t&) override {}

 private:
  std::shared_ptr<Script> script_;
};

/// The job of the checkpoint-base tests, on RocksDB with incremental checkpoints at p=1:
/// a source that emits 500 keys then idles until "finish" opens (task 0), and a keyed
/// reduce chained with a NotificationMarkingSink (task 1).
Plan incrementalReduceJob(const std::shared_ptr<Script>& script) {
  StreamEnvironment env;
  scriptedSource(env, script, emitThenIdle(500))
      .keyBy(itself)
      .reduce(latest)
      .uid("latest")
      .sinkTo(NotificationMarkingSink(script))
      .uid("marks");
  return env.takePlan();
}

/// The shared files of the keyed stage's (task 1's) incremental snapshot in checkpoint `id`.
std::vector<state::SharedFileRef> sharedFilesOf(RecordingListener& listener, uint64_t id) {
  std::vector<TaskSnapshot> acks = listener.acks(id);
  const TaskSnapshot* snap = listener.ackOf(acks, 1);
  if (!snap) return {};
  for (const auto& [uid, op] : snap->operators) {
    if (auto* h = std::get_if<state::IncrementalStateHandle>(&op.keyed)) return h->sharedFiles;
  }
  return {};
}

TEST_F(JobExecutionTest, ACompletedCheckpointReachesTheBackendSoLaterIncrementalCheckpointsReuseItsFiles) {
  // Notifications go to each backend on its task's thread, via the task's mailbox (a
  // task waiting for input is woken for it). Whatever was notified before a checkpoint's
  // reports arrived is applied before the next barrier, so checkpoint 3 of an unchanged
  // state only references files that earlier checkpoints uploaded.
  auto script = std::make_shared<Script>();
  RecordingListener listener;
  JobExecution exec(incrementalReduceJob(script), config(1, state::BackendType::kRocksDb, /*incremental=*/true),
                    &listener);
  ScriptRelease release{*script};  // before exec goes: no job thread stays held
  ASSERT_TRUE(exec.prepare(nullptr).ok());
  exec.start();
  ASSERT_TRUE(script->waitMarked("emitted"));
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_TRUE(exec.triggerCheckpoint(target(id)));
    ASSERT_TRUE(listener.waitAcks(id, 2)) << "checkpoint " << id;
    if (id < 3) exec.notifyCheckpointComplete(id);
  }
  // Checkpoint 2 may or may not have seen the completion of 1 (it raced with the
  // uploader's delivery); checkpoint 3 has seen it, so it uploads nothing of its own.
  const auto first = sharedFilesOf(listener, 1), second = sharedFilesOf(listener, 2), third = sharedFilesOf(listener, 3);
  ASSERT_FALSE(first.empty());
  std::set<std::string> earlier;
  for (const auto* files : {&first, &second})
    for (const auto& f : *files) earlier.insert(f.file.path);
  ASSERT_EQ(third.size(), first.size());
  for (const auto& f : third) {
    EXPECT_LT(f.createdByCheckpoint, 3u) << f.file.path << " was uploaded again";
    EXPECT_TRUE(earlier.count(f.file.path)) << f.file.path;
  }
  script->open("finish");
  EXPECT_EQ(exec.wait().kind, ExecutionResult::kFinished);
}

// The chaos-s3-outages kill loop restored a checkpoint whose shared file was gone: the
// completion of checkpoint 2 had not reached the backend (it goes through the uploader and
// the task's mailbox) when checkpoint 3 was taken, so 3 reused files of checkpoint 1 that
// 2 did not reference, and the coordinator had deleted them when 2 subsumed 1. A
// checkpoint's target names the newest completed one, and the backends take it as their
// base before they snapshot, whether its notification arrived yet or not.
TEST_F(JobExecutionTest, ACheckpointIsBasedOnTheNewestCompletedOneEvenBeforeItsNotificationArrives) {
  auto script = std::make_shared<Script>();
  RecordingListener listener;
  JobExecution exec(incrementalReduceJob(script), config(1, state::BackendType::kRocksDb, /*incremental=*/true),
                    &listener);
  ScriptRelease release{*script};  // before exec goes: no job thread stays held
  ASSERT_TRUE(exec.prepare(nullptr).ok());
  exec.start();
  ASSERT_TRUE(script->waitMarked("emitted"));
  // 1 and 2 both complete before any notification: 2 uploads its own copies.
  ASSERT_TRUE(exec.triggerCheckpoint(target(1)));
  ASSERT_TRUE(listener.waitAcks(1, 2));
  CheckpointTarget second = target(2);
  second.lastCompleted = 1;
  ASSERT_TRUE(exec.triggerCheckpoint(second));
  ASSERT_TRUE(listener.waitAcks(2, 2));
  // The completion of 1 arrives late, and reaches the backend before 3; that of 2 not
  // at all before 3 (2 subsumed 1).
  exec.notifyCheckpointComplete(1);
  ASSERT_TRUE(script->waitMarked("notified-1"));
  CheckpointTarget third = target(3);
  third.lastCompleted = 2;
  ASSERT_TRUE(exec.triggerCheckpoint(third));
  ASSERT_TRUE(listener.waitAcks(3, 2));
  auto paths = [](const std::vector<state::SharedFileRef>& files) {
    std::set<std::string> out;
    for (const auto& f : files) out.insert(f.file.path);
    return out;
  };
  const std::set<std::string> first = paths(sharedFilesOf(listener, 1)), two = paths(sharedFilesOf(listener, 2)),
                              three = paths(sharedFilesOf(listener, 3));
  ASSERT_FALSE(two.empty());
  ASSERT_FALSE(three.empty());
  for (const auto& f : three) {
    EXPECT_TRUE(two.count(f) == 1 || first.count(f) == 0)
        << f << ": checkpoint 3 references a file of checkpoint 1 that checkpoint 2 does not (deleted when 2 subsumed 1)";
  }
  script->open("finish");
  EXPECT_EQ(exec.wait().kind, ExecutionResult::kFinished);
}

TEST_F(JobExecutionTest, EveryKeyedOperatorReportsItsBackendsStatesWithItsSnapshot) {
  auto script = std::make_shared<Script>();
  StreamEnvironment env;
  scriptedSource(env, script, emitThenIdle(20))
      .keyBy(itself)
      .reduce(latest)
      .uid("first")
      .keyBy(itself)
      .reduce(latest)
      .uid("second")
      .addSink([](const std::string&) {});
  RecordingListener listener;
  JobExecution exec(env.takePlan(), config(2), &listener);
  ScriptRelease release{*script};  // before exec goes: no job thread stays held
  ASSERT_TRUE(exec.prepare(nullptr).ok());
  exec.start();
  ASSERT_TRUE(script->waitMarked("emitted"));
  ASSERT_TRUE(exec.triggerCheckpoint(target(1)));
  ASSERT_TRUE(listener.waitAcks(1, 5));
  std::map<std::string, int> tasksPerUid;
  for (const auto& ack : listener.acks(1)) {
    SCOPED_TRACE("task " + std::to_string(ack.taskIndex));
    if (ack.taskIndex == 0) {
      EXPECT_TRUE(ack.states.empty()) << "a source has no keyed state";
      continue;
    }
    ASSERT_EQ(ack.states.size(), 1u);
    const auto& [uid, states] = *ack.states.begin();
    ++tasksPerUid[uid];
    ASSERT_EQ(states.size(), 1u);
    EXPECT_EQ(states[0].name, "reduce");
    EXPECT_EQ(states[0].kind, StateKind::kValue);
    EXPECT_FALSE(states[0].valueSerializer.empty());
  }
  EXPECT_EQ(tasksPerUid, (std::map<std::string, int>{{"first", 2}, {"second", 2}}));
  script->open("finish");
  EXPECT_EQ(exec.wait().kind, ExecutionResult::kFinished);
}

/// Forwards to a real storage; the first create() or putFile() waits at the gate
/// "upload" after marking "upload-started".
class PausingStorage : public state::CheckpointStorage {
 public:
  PausingStorage(std::shared_ptr<state::CheckpointStorage> base, std::shared_ptr<Script> script)
      : base_(std::move(base)), script_(std::move(script)) {}
  state::Result<std::unique_ptr<state::WritableFile>> create(const std::string& path) override {
    pause();
    return base_->create(path);
  }
  state::Status putFile(const std::string& path, const std::string& local) override {
    pause();
    return base_->putFile(path, local);
  }
  state::Status put(const std::string& path, std::string_view bytes) override { return base_->put(path, bytes); }
  state::Result<std::unique_ptr<state::ReadableFile>> open(const std::string& path) override {
    return base_->open(path);
  }
  state::Status get(const std::string& path, std::string* out) override { return base_->get(path, out); }
  state::Status getToLocalFile(const std::string& path, const std::string& dest) override {
    return base_->getToLocalFile(path, dest);
  }
  state::Result<uint64_t> fileSize(const std::string& path) override { return base_->fileSize(path); }
  bool exists(const std::string& path) override { return base_->exists(path); }
  state::Status list(const std::string& dir, std::vector<state::FileEntry>* out) override {
    return base_->list(dir, out);
  }
  state::Status listTemporary(const std::string& dir, std::vector<state::FileEntry>* out) override {
    return base_->listTemporary(dir, out);
  }
  state::Status remove(const std::string& path) override { return base_->remove(path); }
  state::Status removeTemporary(const std::string& path) override { return base_->removeTemporary(path); }
  state::Status removeAll(const std::string& dir) override { return base_->removeAll(dir); }
  std::string describe(const std::string& path) const override { return base_->describe(path); }
  std::string rootUri() const override { return base_->rootUri(); }

 private:
  void pause() {
    if (paused_.exchange(true)) return;
    script_->mark("upload-started");
    script_->waitOpen("upload");
  }
  std::shared_ptr<state::CheckpointStorage> base_;
  std::shared_ptr<Script> script_;
  std::atomic<bool> paused_{false};
};

struct BackendCase {
  std::string name;
  state::BackendType backend;
  bool incremental;
  std::string expected;  // in the decline message
};

TEST_F(JobExecutionTest, AnAbortStopsTheRunningUploadAndItsTaskDeclinesOnceWhileQueuedOnesNeverStart) {
  const std::vector<BackendCase> cases = {
      {"hashmap", state::BackendType::kHashMap, false, "latest-"},
      {"rocksdb full", state::BackendType::kRocksDb, false, "latest-"},
      {"rocksdb incremental", state::BackendType::kRocksDb, true, "(1 of "},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto script = std::make_shared<Script>();
    StreamEnvironment env;
    scriptedSource(env, script, emitThenIdle(200)).keyBy(itself).reduce(latest).uid("latest").addSink([](const std::string&) {});
    RecordingListener listener;
    const std::string dir = "chk-" + c.name.substr(0, 3) + std::to_string(c.incremental);
    auto pausing = std::make_shared<PausingStorage>(storage_, script);
    CheckpointTarget t = target(1, false, pausing);
    t.exclusiveDir = dir;
    ExecutionConfig ec = config(2, c.backend, c.incremental);
    // One transfer thread, so that the RocksDB files behind the paused one wait in the
    // queue and the abort must keep them from starting ("1 of"): with four, all four
    // files of this small checkpoint (one upload batch) would start at once.
    ec.rocksdb.transferThreads = 1;
    JobExecution exec(env.takePlan(), ec, &listener);
    ScriptRelease release{*script};  // before exec goes: no job thread stays held
    ASSERT_TRUE(exec.prepare(nullptr).ok());
    exec.start();
    ASSERT_TRUE(script->waitMarked("emitted"));
    ASSERT_TRUE(exec.triggerCheckpoint(t));
    // One keyed subtask's upload is under way (paused in its first file); the other
    // subtask's part, if it snapshotted already, waits behind it on the uploader.
    ASSERT_TRUE(script->waitMarked("upload-started"));
    exec.notifyCheckpointAborted(1);
    script->open("upload");
    ASSERT_TRUE(listener.waitDeclines(1, 1));
    script->open("finish");
    EXPECT_EQ(exec.wait().kind, ExecutionResult::kFinished);
    // Exactly one report from the keyed subtasks: the decline of the started upload.
    std::vector<std::string> declines = listener.declines(1);
    ASSERT_EQ(declines.size(), 1u);
    EXPECT_TRUE(contains(declines[0], "checkpoint 1 was aborted; stopped writing")) << declines[0];
    EXPECT_TRUE(contains(declines[0], c.expected)) << declines[0];
    // The source (no keyed state) acknowledges if its part ran before the abort; it may
    // also have been queued behind the paused upload, and then never started.
    std::vector<TaskSnapshot> acks = listener.acks(1);
    EXPECT_LE(acks.size(), 1u);
    for (const auto& a : acks) EXPECT_EQ(a.taskIndex, 0) << "a keyed subtask acknowledged the aborted checkpoint";
    EXPECT_EQ(filesUnder(dir), std::vector<std::string>{}) << "the aborted checkpoint wrote files";
  }
}

// ---------------------------------------------------------------------------------------
// Unaligned checkpoints

/// Emits "hold:1" twice (the second reaches the reduce function), then "k<i % 7>:1" up to `total` records, then ends; its position is
/// the number emitted. Marks "emitted-<n>" every 10000 records. After record 20000 it idles
/// until the script opens "source": not blocked in a push, it takes a checkpoint trigger at
/// once, so the barrier reaches the channel while it is full.
class CountingSource : public SourceFunction<std::string> {
 public:
  CountingSource(std::shared_ptr<Script> script, uint64_t total) : script_(std::move(script)), total_(total) {}
  PollStatus poll(SourceOutput<std::string>& out) override {
    if (next_ > 20000 && next_ < total_ && !script_->isOpen("source")) return ScriptedSource::idle();
    for (int i = 0; i < 256 && next_ < total_ && (next_ <= 20000 || script_->isOpen("source")); ++i, ++next_) {
      out.emit(next_ < 2 ? std::string("hold:1") : "k" + std::to_string(next_ % 7) + ":1");
      if (next_ % 10000 == 0) script_->mark("emitted-" + std::to_string(next_));
    }
    return next_ < total_ ? PollStatus::kMore : PollStatus::kEnd;
  }
  std::string snapshotPosition() override { return std::to_string(next_); }
  void restorePosition(std::string_view p) override { next_ = std::stoull(std::string(p)); }

 private:
  std::shared_ptr<Script> script_;
  uint64_t total_;
  uint64_t next_ = 0;
};

/// "k3:5" + "k3:1" -> "k3:6"; holds at "hold" until the script opens "hold".
Plan countingJob(const std::shared_ptr<Script>& script, uint64_t total,
                 const std::shared_ptr<std::map<std::string, long>>& last, const std::shared_ptr<std::mutex>& mu) {
  StreamEnvironment env;
  auto keyOf = [](const std::string& s) { return s.substr(0, s.find(':')); };
  env.addSource<std::string>([script, total] { return std::make_unique<CountingSource>(script, total); }, "Counting")
      .uid("source")
      .keyBy(keyOf)
      .reduce([script, keyOf](const std::string& a, const std::string& b) {
        if (keyOf(b) == "hold" && !script->isOpen("hold")) {
          script->mark("held");
          script->waitOpen("hold");
        }
        return keyOf(a) + ":" + std::to_string(std::stol(a.substr(a.find(':') + 1)) + 1);
      })
      .uid("counts")
      .addSink([last, mu, keyOf](const std::string& s) {
        std::lock_guard lock(*mu);
        long n = std::stol(s.substr(s.find(':') + 1));
        long& have = (*last)[keyOf(s)];
        have = std::max(have, n);
      });
  return env.takePlan();
}

/// The metadata the coordinator writes (assembleMetadata), through a real _metadata file.
state::CheckpointMetadata metadataOf(const JobExecution& exec, const std::vector<TaskSnapshot>& acks, uint64_t id,
                                     const ExecutionConfig& c) {
  state::CheckpointMetadata m;
  m.checkpointId = id;
  m.parallelism = c.parallelism;
  m.maxParallelism = c.maxParallelism;
  m.backend = state::backendTypeName(c.backend);
  m = assembleMetadata(std::move(m), exec.operators(), acks);
  auto bytes = state::serializeMetadata(m, "chk-" + std::to_string(id));
  EXPECT_TRUE(bytes.ok());
  auto parsed = state::parseMetadata(*bytes, "chk-" + std::to_string(id), "test/_metadata");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return *parsed;
}

/// Runs `plan` — a CountingSource into a keyed function that holds at the second "hold"
/// record until the script opens "hold" — until the source has filled the channel, takes
/// unaligned checkpoint `t` (the barrier overtakes the queued records), lets the function
/// go and returns the checkpoint's metadata (empty if something failed; reported).
state::CheckpointMetadata takeUnalignedCheckpoint(Plan plan, ExecutionConfig ec, Script& script,
                                                  const CheckpointTarget& t, bool expectChannelState = true) {
  ec.unalignedCheckpoints = true;
  ec.checkpointing = true;
  RecordingListener listener;
  JobExecution exec(std::move(plan), ec, &listener);
  ScriptRelease release{script};
  if (!exec.prepare(nullptr).ok()) return {};
  exec.start();
  state::CheckpointMetadata m;
  // The source idles after record 20000 (CountingSource): its barrier goes out at once,
  // and with the function held every record after "hold" is still queued for the barrier
  // to overtake. Its acknowledgement (the held task cannot acknowledge) says so.
  if (script.waitMarked("held") && script.waitMarked("emitted-20000")) {
    if (exec.triggerCheckpoint(t) && listener.waitAcks(t.checkpointId, 1)) {
      script.open("hold");
      script.open("source");
      if (listener.waitAcks(t.checkpointId, static_cast<size_t>(exec.taskCount())))
        m = metadataOf(exec, listener.acks(t.checkpointId), t.checkpointId, ec);
    }
  }
  script.openEverything();  // on a failed step too: the held function must let go before wait()
  exec.cancel();
  exec.wait();
  EXPECT_FALSE(m.operators.empty()) << "no checkpoint was taken";
  EXPECT_EQ(m.hasChannelState(), expectChannelState)
      << (expectChannelState ? "no unaligned checkpoint with in-flight records was taken"
                             : "the checkpoint is unaligned");
  return m;
}

struct RescaleCase {
  int from, to;
  state::BackendType backend;
  /// execution.checkpointing.aligned-checkpoint-timeout: 0, unaligned from the start.
  std::chrono::milliseconds alignedTimeout{0};
};

TEST_F(JobExecutionTest, AnUnalignedCheckpointStoresTheRecordsItsBarrierOvertookAndARestoreProcessesThemFirst) {
  // The keyed task is held in user code on the first record while the source fills its
  // channel (512 KiB, debloating off), then checkpoint 1 is triggered and the task let go:
  // the barrier overtakes the queued records, so the snapshot holds a few counts and the
  // checkpoint the rest in flight. A restore (same parallelism, rescaled, other backend)
  // that runs to the end must count every record exactly once: one lost in-flight record
  // (not restored) or one counted twice (processed before the snapshot and restored)
  // changes a total.
  constexpr uint64_t kTotal = 120000;
  const std::vector<RescaleCase> cases = {{1, 1, state::BackendType::kHashMap},
                                          {2, 2, state::BackendType::kRocksDb},
                                          {1, 3, state::BackendType::kHashMap},
                                          {2, 1, state::BackendType::kRocksDb},
                                          // Starts aligned; its barrier waits longer than 1 ms behind the
                                          // held function, so it turns unaligned at the keyed task.
                                          {1, 2, state::BackendType::kHashMap, 1ms}};
  for (const auto& c : cases) {
    SCOPED_TRACE("p=" + std::to_string(c.from) + " -> p=" + std::to_string(c.to) +
                 (c.alignedTimeout.count() ? ", aligned checkpoint timeout 1 ms" : ""));
    auto script = std::make_shared<Script>();
    auto last = std::make_shared<std::map<std::string, long>>();
    auto mu = std::make_shared<std::mutex>();
    CheckpointTarget t = target(1);
    t.exclusiveDir = "chk-1-" + std::to_string(c.from) + std::to_string(c.to);
    ExecutionConfig wc = config(c.from, c.backend);
    wc.alignedCheckpointTimeout = c.alignedTimeout;
    state::CheckpointMetadata m = takeUnalignedCheckpoint(countingJob(script, kTotal, last, mu), wc, *script, t);
    size_t inFlightBuffers = 0;
    EXPECT_TRUE(m.hasChannelState());
    for (const auto& op : m.operators)
      for (const auto& sub : op.subtasks) inFlightBuffers += sub.inputChannels.size();
    EXPECT_GT(inFlightBuffers, 0u) << "the barrier overtook nothing";
    // Restore and run to the end.
    last->clear();
    ExecutionConfig rc = config(c.to, c.backend == state::BackendType::kHashMap ? state::BackendType::kRocksDb
                                                                                : state::BackendType::kHashMap);
    rc.localStateDir += "-restored";
    rc.unalignedCheckpoints = true;
    auto script2 = std::make_shared<Script>();
    script2->openEverything();
    RecordingListener listener;
    JobExecution exec(countingJob(script2, kTotal, last, mu), rc, &listener);
    RestoreSource rs{&m, storage_.get(), false};
    state::Status s = exec.prepare(&rs);
    ASSERT_TRUE(s.ok()) << s;
    exec.start();
    ExecutionResult r = exec.wait();
    ASSERT_EQ(r.kind, ExecutionResult::kFinished) << r.message;
    std::map<std::string, long> expected;
    for (uint64_t i = 2; i < kTotal; ++i) expected["k" + std::to_string(i % 7)]++;
    std::lock_guard lock(*mu);
    last->erase("hold");  // counted before the snapshot, never again
    EXPECT_EQ(*last, expected);
  }
}

// With an aligned checkpoint timeout a checkpoint whose barriers are in time stays
// aligned: the same held function and full channel, but a timeout of an hour.
TEST_F(JobExecutionTest, WithAnAlignedCheckpointTimeoutACheckpointInTimeStaysAligned) {
  auto script = std::make_shared<Script>();
  auto last = std::make_shared<std::map<std::string, long>>();
  auto mu = std::make_shared<std::mutex>();
  ExecutionConfig ec = config(1);
  ec.alignedCheckpointTimeout = std::chrono::hours(1);
  state::CheckpointMetadata m =
      takeUnalignedCheckpoint(countingJob(script, 60000, last, mu), ec, *script, target(1), /*expectChannelState=*/false);
  EXPECT_FALSE(m.operators.empty());
}

// In-flight records of an exchange that was not a keyBy cannot go into one that is (the
// job changed; they carry no key group): the restore is refused at prepare, before any
// task starts, saying what to do. Simulated by rewriting a real checkpoint's keyed
// records as unkeyed ones.
TEST_F(JobExecutionTest, UnkeyedInFlightRecordsForAKeyedExchangeAreRefusedBeforeAnythingStarts) {
  auto script = std::make_shared<Script>();
  auto last = std::make_shared<std::map<std::string, long>>();
  auto mu = std::make_shared<std::mutex>();
  state::CheckpointMetadata m =
      takeUnalignedCheckpoint(countingJob(script, 60000, last, mu), config(1), *script, target(1));
  int rewritten = 0;
  for (auto& op : m.operators)
    for (auto& sub : op.subtasks)
      for (auto& b : sub.inputChannels) {
        std::string unkeyed;
        ByteWriter w(unkeyed);
        ByteReader r(b.data);
        while (!r.atEnd()) {
          r.readFixed<uint16_t>();
          w.writeFixed<uint16_t>(kNoKeyGroup);
          w.writeI64(r.readI64());
          w.writeBytes(r.readBytes());
          w.writeBytes(r.readBytes());
          ++rewritten;
        }
        b.data = unkeyed;
      }
  ASSERT_GT(rewritten, 0);
  auto script2 = std::make_shared<Script>();
  script2->openEverything();
  RecordingListener listener;
  ExecutionConfig rc = config(1);
  rc.localStateDir += "-restored";
  JobExecution exec(countingJob(script2, 60000, last, mu), rc, &listener);
  RestoreSource rs{&m, storage_.get(), false};
  state::Status s = exec.prepare(&rs);
  EXPECT_EQ(s.code(), state::Status::Code::kIncompatible) << s;
  EXPECT_TRUE(contains(s.message(), "cannot restore the in-flight records of exchange '")) << s;
  EXPECT_TRUE(contains(s.message(), "were sent through an exchange that was not a keyBy")) << s;
  EXPECT_TRUE(contains(s.message(), "take an aligned savepoint (jobhost savepoint)")) << s;
}

/// Records the watermark its first element sees; holds at "hold" until the script opens
/// "hold" (as countingJob's reduce).
struct FirstWatermark : KeyedProcessFunction<std::string, std::string, std::string> {
  FirstWatermark(std::shared_ptr<Script> script, std::shared_ptr<std::atomic<int64_t>> first)
      : script_(std::move(script)), first_(std::move(first)) {}
  void processElement(const std::string& s, Context& ctx, Collector<std::string>&) override {
    int64_t unset = INT64_MAX;
    first_->compare_exchange_strong(unset, ctx.timerService().currentWatermark());
    if (s.rfind("hold", 0) == 0 && seen_++ == 1 && !script_->isOpen("hold")) {
      script_->mark("held");
      script_->waitOpen("hold");
    }
  }
  std::shared_ptr<Script> script_;
  std::shared_ptr<std::atomic<int64_t>> first_;
  int seen_ = 0;
};

// An unaligned checkpoint stores the receiving task's input watermark with its in-flight
// records, and a restore processes them at that watermark (a record late then is late
// again: its window may have fired and been committed before the checkpoint). The source
// here emits no watermarks, so the only watermark the first restored record can see is
// the stored one (set by hand to 12345 below): without it, the minimum.
TEST_F(JobExecutionTest, RestoredInFlightRecordsAreProcessedAtTheInputWatermarkStoredWithThem) {
  auto script = std::make_shared<Script>();
  auto first = std::make_shared<std::atomic<int64_t>>(INT64_MAX);
  auto job = [&](const std::shared_ptr<Script>& sc) {
    StreamEnvironment env;
    env.addSource<std::string>([sc] { return std::make_unique<CountingSource>(sc, uint64_t{60000}); }, "Counting")
        .uid("source")
        .keyBy([](const std::string& v) { return v.substr(0, v.find(':')); })
        .template process<FirstWatermark>([sc, first] { return std::make_unique<FirstWatermark>(sc, first); })
        .uid("probe")
        .addSink([](const std::string&) {});
    return env.takePlan();
  };
  state::CheckpointMetadata m = takeUnalignedCheckpoint(job(script), config(1), *script, target(1));
  ASSERT_TRUE(m.hasChannelState()) << "the barrier overtook nothing";
  int withRecords = 0;
  for (auto& op : m.operators)
    for (auto& sub : op.subtasks)
      if (!sub.inputChannels.empty()) {
        EXPECT_EQ(sub.inputWatermark, INT64_MIN) << "no watermark reached the task: none is recorded";
        sub.inputWatermark = 12345;
        ++withRecords;
      }
  ASSERT_EQ(withRecords, 1);
  first->store(INT64_MAX);
  auto script2 = std::make_shared<Script>();
  script2->openEverything();
  ExecutionConfig rc = config(1, state::BackendType::kHashMap);
  rc.localStateDir += "-restored";
  RecordingListener listener;
  JobExecution exec(job(script2), rc, &listener);
  RestoreSource rs{&m, storage_.get(), false};
  ASSERT_TRUE(exec.prepare(&rs).ok());
  exec.start();
  ExecutionResult r = exec.wait();
  ASSERT_EQ(r.kind, ExecutionResult::kFinished) << r.message;
  EXPECT_EQ(first->load(), 12345) << "the first restored in-flight record saw another watermark";
}

// ---------------------------------------------------------------------------------------
// Operator uids

struct UidCase {
  std::string uid;
  std::string why;  // empty: valid; else part of the message
};

// A JobArgumentError thrown while the job runs ends it as a usage error (exit 2, not
// retried) naming the operator that threw it. In a chain (source, two maps, a sink in
// one task) the host named the chain's last operator, the sink, before callUser
// annotated it (OperatorArgumentError).
TEST_F(JobExecutionTest, AJobArgumentErrorWhileRunningNamesTheOperatorThatThrewItNotTheLastOfItsChain) {
  StreamEnvironment env;
  env.fromGenerator<std::string>(100, [](uint64_t i) { return std::to_string(i); })
      .map([](const std::string& s) {
        if (s == "42") throw JobArgumentError("the record 42 needs --allow-42");
        return s;
      })
      .name("Check Records")
      .map([](const std::string& s) { return s + "!"; })
      .name("Exclaim")
      .addSink([](const std::string&) {});
  JobExecution exec(env.takePlan(), config(1), nullptr);
  ASSERT_TRUE(exec.prepare(nullptr).ok());
  exec.start();
  ExecutionResult r = exec.wait();
  EXPECT_EQ(r.kind, ExecutionResult::kFailed) << r.message;
  EXPECT_TRUE(r.usageError) << r.message;
  EXPECT_EQ(r.operatorName, "Check Records") << r.message;
  EXPECT_EQ(r.message, "the record 42 needs --allow-42");
}

TEST(OperatorUidTest, OnlyPlainPathComponentsOfSafeCharactersAreValidUids) {
  const std::vector<UidCase> cases = {
      {"counts", ""},
      {"word-counts_v2.1", ""},
      {std::string(128, 'u'), ""},
      {"../x", "it starts with '.'"},
      {".hidden", "it starts with '.'"},
      {"..", "it starts with '.'"},
      {"", "it is empty"},
      {"a/b", "it contains '/' at position 2"},
      {"/abs", "it contains '/' at position 1"},
      {"with space", "it contains ' ' at position 5"},
      {"tab\tuid", "it contains '\\x09' at position 4"},
      {"caf\xc3\xa9", "it contains '\\xc3' at position 4"},
      {"it's", "it contains a quote at position 3"},
      {std::string(129, 'u'), "it has 129 characters, more than 128"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE("uid '" + c.uid + "'");
    EXPECT_EQ(validateOperatorUid(c.uid), c.why);
    StreamEnvironment env;
    env.fromGenerator<std::string>(10, [](uint64_t i) { return std::to_string(i); })
        .uid("numbers")
        .keyBy(itself)
        .reduce(latest)
        .uid(c.uid)
        .print();
    Plan plan = env.takePlan();
    if (c.why.empty()) {
      EXPECT_NO_THROW(describeOperators(plan, 2));
      continue;
    }
    try {
      describeOperators(plan, 2);
      ADD_FAILURE() << "expected JobArgumentError";
    } catch (const JobArgumentError& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(contains(msg, "of operator 'Keyed Reduce' is not valid: " + c.why)) << msg;
      EXPECT_TRUE(contains(msg, "letters, digits, '.', '_' or '-', not starting with '.'")) << msg;
      if (c.uid.find_first_of("\t\xc3") == std::string::npos) {
        EXPECT_TRUE(contains(msg, "uid '" + c.uid + "'")) << msg;
      }
    }
  }
}

TEST(OperatorUidTest, ADefaultUidMadeFromANameWithOddCharactersIsMadeValid) {
  // Names are free text; the default uid made from one keeps only what a uid may hold.
  auto factory = [] { return std::make_unique<GeneratorSource<std::string>>(5, [](uint64_t i) { return std::to_string(i); }, 0); };
  StreamEnvironment env;
  env.addSource<std::string>(factory, "Numbers/2 (ÄÖ)").print();
  Plan plan = env.takePlan();
  EXPECT_EQ(plan.nodes.at(0).uid.rfind("auto-0-numbers-2", 0), 0u) << plan.nodes.at(0).uid;
  EXPECT_EQ(validateOperatorUid(plan.nodes.at(0).uid), "") << plan.nodes.at(0).uid;
  EXPECT_NO_THROW(describeOperators(plan, 1));
}

TEST(OperatorUidTest, AnExecutionOfAPlanWithAnInvalidUidCannotBeCreated) {
  StreamEnvironment env;
  env.fromGenerator<std::string>(10, [](uint64_t i) { return std::to_string(i); })
      .keyBy(itself)
      .reduce(latest)
      .uid("../escape")
      .print();
  ExecutionConfig c;
  c.backend = state::BackendType::kRocksDb;
  c.localStateDir = (fs::temp_directory_path() / "jobhost-uid-test-local").string();
  EXPECT_THROW(JobExecution(env.takePlan(), c, nullptr), JobArgumentError);
}

}  // namespace
}  // namespace jobhost::host
