// Unit tests of host/cli/detach.h: the job's side of the `jobhost run -d` handshake.
#include "cli/detach.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace jobhost::host {
namespace {

/// The read end's whole content until EOF (the write end must be closed).
std::string drain(int fd) {
  std::string out;
  char buf[64];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

class DetachHandshakeTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(pipe(fds_), 0); }
  void TearDown() override {
    unsetenv("JOBHOST_READY_FD");
    close(fds_[0]);
    if (fcntl(fds_[1], F_GETFD) >= 0) close(fds_[1]);
  }
  int fds_[2] = {-1, -1};
};

TEST_F(DetachHandshakeTest, TakingTheFdHidesItFromEveryProcessStartedLater) {
  setenv("JOBHOST_READY_FD", std::to_string(fds_[1]).c_str(), 1);
  DetachHandshake h = DetachHandshake::fromEnvironment();
  EXPECT_TRUE(h.pending());
  EXPECT_EQ(std::getenv("JOBHOST_READY_FD"), nullptr) << "a worker forked later must not see the variable";
  EXPECT_NE(fcntl(fds_[1], F_GETFD) & FD_CLOEXEC, 0) << "nor inherit the fd";
}

TEST_F(DetachHandshakeTest, ReadyWritesTheJobIdOnceAndClosesTheFd) {
  setenv("JOBHOST_READY_FD", std::to_string(fds_[1]).c_str(), 1);
  DetachHandshake h = DetachHandshake::fromEnvironment();
  h.signalReady("3f0c9a");
  EXPECT_FALSE(h.pending());
  h.signalReady("again");  // nothing: already told
  EXPECT_EQ(drain(fds_[0]), "3f0c9a\n") << "EOF after the id: the write end is closed";
}

TEST_F(DetachHandshakeTest, AJobThatNeverRunsClosesThePipeWithoutAnId) {
  setenv("JOBHOST_READY_FD", std::to_string(fds_[1]).c_str(), 1);
  { DetachHandshake h = DetachHandshake::fromEnvironment(); }
  EXPECT_EQ(drain(fds_[0]), "");
}

TEST_F(DetachHandshakeTest, WithoutAUsableVariableNothingHappens) {
  for (const std::string value : {"", "abc", "2", "12x", "99999"}) {
    SCOPED_TRACE("JOBHOST_READY_FD=" + value);
    setenv("JOBHOST_READY_FD", value.c_str(), 1);
    DetachHandshake h = DetachHandshake::fromEnvironment();
    EXPECT_FALSE(h.pending());
    EXPECT_EQ(std::getenv("JOBHOST_READY_FD"), nullptr);
    h.signalReady("id");
  }
  DetachHandshake none = DetachHandshake::fromEnvironment();  // no variable at all
  EXPECT_FALSE(none.pending());
  none.signalReady("id");
  EXPECT_GE(fcntl(fds_[1], F_GETFD), 0) << "an fd that was not handed over is left alone";
}

}  // namespace
}  // namespace jobhost::host
