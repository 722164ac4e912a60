// jobhost::FileSink (sdk/include/jobhost/sinks.h) driven directly, outside a job: rolling
// a part by age and writing parts larger than its background writeback step. The
// end-to-end behaviour (hidden parts, commits at checkpoints, restores) is in
// tests/e2e/sink_test.cc.
#include <gtest/gtest.h>

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

}  // namespace
