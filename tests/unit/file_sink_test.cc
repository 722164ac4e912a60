// jobhost::FileSink (sdk/include/jobhost/sinks.h) driven directly, outside a job: rolling
// a part by age and writing parts larger than its background writeback step. The
// end-to-end behaviour (hidden parts, commits at checkpoints, restores) is in
// tests/e2e/sink_test.cc.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "jobhost/sinks.h"
#include "support/fake_operator_context.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class FileSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("jobhost-file-sink-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  fs::path dir_;
  jobhost_test::FakeOperatorContext ctx_{0, 1};
};

TEST_F(FileSinkTest, APartOlderThanTheRolloverIntervalIsClosedAtTheNextRecord) {
  jobhost::FileSink<std::string> sink(dir_.string());
  sink.withRolloverInterval(300ms);
  sink.open(ctx_);
  auto txn = sink.beginTransaction();
  const auto start = std::chrono::steady_clock::now();
  sink.invoke(txn, "a", jobhost::kNoTimestamp);
  sink.invoke(txn, "b", jobhost::kNoTimestamp);
  // The part opened after `start`: if less than the interval has passed, it cannot have
  // rolled (a machine that stalled for the interval between the two proves nothing).
  if (std::chrono::steady_clock::now() - start >= 300ms) GTEST_SKIP() << "the machine stalled 300 ms between two records";
  EXPECT_EQ(txn.parts.size(), 1u) << "a part rolled before its interval";
  std::this_thread::sleep_for(400ms);
  sink.invoke(txn, "c", jobhost::kNoTimestamp);
  ASSERT_EQ(txn.parts.size(), 2u) << "a part older than its rollover interval was not rolled";
  sink.preCommit(txn);
  sink.commit(txn);
  EXPECT_EQ(read(dir_ / "part-0-0"), "a\nb\n");
  EXPECT_EQ(read(dir_ / "part-0-1"), "c\n");
}

TEST_F(FileSinkTest, APartMuchLargerThanTheWritebackStepIsWrittenWhole) {
  // 12 MiB in lines of 100 bytes: three steps of background writeback, then the fsync.
  jobhost::FileSink<std::string> sink(dir_.string());
  sink.open(ctx_);
  auto txn = sink.beginTransaction();
  const std::string line(99, 'x');
  std::string expected;
  for (int i = 0; i < 12 * 1024 * 1024 / 100; ++i) {
    std::string v = line;
    v.replace(0, std::to_string(i).size(), std::to_string(i));
    sink.invoke(txn, v, jobhost::kNoTimestamp);
    expected += v + "\n";
  }
  sink.preCommit(txn);
  sink.commit(txn);
  ASSERT_EQ(txn.parts.size(), 1u);
  const std::string got = read(dir_ / "part-0-0");
  EXPECT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected) << "the part's content differs from what was written";
}


// Two writers of one output directory replace each other's committed part files and delete
// each other's pending ones (a helper lost 175 k of 600 k lines to two jobs given one
// --output): one process (job) at a time holds a directory, all its subtasks of one sink
// share the hold, a second sink of the job or another process is refused by name, and the
// hold ends with the sink (or the process) that took it.
TEST_F(FileSinkTest, OneOutputDirectoryHasOneWriterAtATime) {
  jobhost_test::FakeOperatorContext second{1, 2}, otherSink{0, 1, "Audit", "audit"};
  {
    jobhost::FileSink<std::string> a(dir_.string()), b(dir_.string()), c(dir_.string());
    a.open(ctx_);
    b.open(second);  // another subtask of the same sink: the same hold
    try {
      c.open(otherSink);
      FAIL() << "a second sink of the job opened the same output directory";
    } catch (const jobhost::JobArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("'Sink' and 'Audit'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(dir_.string()), std::string::npos) << e.what();
    }
    a.close();
    try {
      c.open(otherSink);
      FAIL() << "the hold ended while subtask 1 of the sink still had it open";
    } catch (const jobhost::JobArgumentError&) {
    }
  }
  // Both closed (destroyed): another sink may write there now.
  {
    jobhost::FileSink<std::string> c(dir_.string());
    EXPECT_NO_THROW(c.open(otherSink));
  }

  // Another process holds it: refused, naming that process; free again once it has ended.
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    ::close(release[1]);
    jobhost::FileSink<std::string> held(dir_.string());
    char x = 'x';
    try {
      held.open(ctx_);
    } catch (...) {
      x = 'e';
    }
    [[maybe_unused]] ssize_t w = ::write(ready[1], &x, 1);
    [[maybe_unused]] ssize_t r = ::read(release[0], &x, 1);  // until the parent closes its end
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(release[0]);
  char x = 0;
  ASSERT_EQ(::read(ready[0], &x, 1), 1);
  ASSERT_EQ(x, 'x') << "the other process could not open the sink";
  {
    jobhost::FileSink<std::string> mine(dir_.string());
    try {
      mine.open(ctx_);
      ADD_FAILURE() << "the output directory of another process was opened";
    } catch (const jobhost::JobArgumentError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("being written by another job"), std::string::npos) << m;
      EXPECT_NE(m.find("pid " + std::to_string(child)), std::string::npos) << m;
      EXPECT_NE(m.find("give each job its own output directory"), std::string::npos) << m;
    }
  }
  ::close(release[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(ready[0]);
  jobhost::FileSink<std::string> after(dir_.string());
  EXPECT_NO_THROW(after.open(ctx_)) << "the hold outlived the process that took it";
}

}  // namespace
