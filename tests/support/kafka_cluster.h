// tests/support/kafka_cluster.h — a mock Kafka cluster for a test (jobhost-test-kafka, a
// process of its own on 127.0.0.1 ports, stopped with the object) and kcat, Debian's Kafka
// client, as the independent client that produces the input and reads the output.
//
// Without kcat the tests skip and say so, unless JOBHOST_REQUIRE_KAFKA=1 (.ci/run): then
// they fail (required()).
//
// Thread-safety: one object per test thread.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace jobhost_test {

/// What a finished command printed.
struct CommandResult {
  int exitCode = -1;  // 128 + signal if killed, -2 on timeout
  std::string out, err;
};

/// Runs `args` (argv[0] a path, or a name looked up in PATH) with `input` on stdin.
inline CommandResult runCommand(const std::vector<std::string>& args, const std::string& input = "",
                                std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  namespace fs = std::filesystem;
  static int n = 0;
  fs::path dir = fs::temp_directory_path() / ("jobhost-kafka-cmd-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string id = std::to_string(++n);
  fs::path in = dir / ("in" + id), out = dir / ("out" + id), err = dir / ("err" + id);
  {
    std::ofstream f(in, std::ios::binary);
    f << input;
  }
  pid_t pid = fork();
  if (pid == 0) {
    int i = open(in.c_str(), O_RDONLY), o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600),
        e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(i, 0);
    dup2(o, 1);
    dup2(e, 2);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  CommandResult r;
  int status = 0;
  auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.exitCode = -2;
      break;
    }
    usleep(5000);
  }
  auto slurp = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  r.out = slurp(out);
  r.err = slurp(err);
  std::error_code ec;
  fs::remove(in, ec);
  fs::remove(out, ec);
  fs::remove(err, ec);
  return r;
}

/// Whether kcat can be run (Debian: apt-get install kcat).
inline bool haveKcat() { return runCommand({"kcat", "-V"}, "", std::chrono::seconds(10)).exitCode == 0; }

class KafkaCluster {
 public:
  /// JOBHOST_REQUIRE_KAFKA=1: a test that cannot run fails instead of skipping.
  static bool required() {
    const char* v = std::getenv("JOBHOST_REQUIRE_KAFKA");
    return v != nullptr && std::string(v) == "1";
  }

  /// Starts a cluster with `topics` ("name:partitions"); null and *why if that fails or
  /// kcat is missing.
  static std::unique_ptr<KafkaCluster> start(const std::vector<std::string>& topics, std::string* why, int brokers = 1) {
    if (!haveKcat()) {
      *why = "kcat is not installed (apt-get install kcat): it is the independent client these tests check with";
      return nullptr;
    }
    std::unique_ptr<KafkaCluster> c(new KafkaCluster());
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) {
      *why = "pipe() failed";
      return nullptr;
    }
    std::vector<std::string> args = {JOBHOST_TEST_KAFKA, "--brokers", std::to_string(brokers)};
    for (const auto& t : topics) args.insert(args.end(), {"--topic", t});
    c->pid_ = fork();
    if (c->pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      int devnull = open("/dev/null", O_WRONLY);
      if (!std::getenv("JOBHOST_KAFKA_DEBUG")) dup2(devnull, 2);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    c->to_ = in[1];
    c->from_ = out[0];
    std::string first = c->readLine(std::chrono::seconds(20));
    if (first.rfind("BOOTSTRAP=", 0) != 0) {
      *why = "jobhost-test-kafka did not start a mock cluster (it printed '" + first + "')";
      return nullptr;
    }
    c->bootstrap_ = first.substr(10);
    return c;
  }

  ~KafkaCluster() {
    if (to_ >= 0) {
      (void)!write(to_, "quit\n", 5);
      close(to_);
    }
    if (pid_ > 0) {
      int status = 0;
      for (int i = 0; i < 400 && waitpid(pid_, &status, WNOHANG) == 0; ++i) usleep(5000);
      if (kill(pid_, 0) == 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
      }
    }
    if (from_ >= 0) close(from_);
  }

  const std::string& bootstrap() const { return bootstrap_; }

  /// A command of jobhost-test-kafka (see support/kafka_cluster_main.cc); its answer,
  /// "ok" or "error: ...".
  std::string command(const std::string& line) {
    std::string l = line + "\n";
    if (write(to_, l.data(), l.size()) != static_cast<ssize_t>(l.size())) return "error: the mock cluster is gone";
    return readLine(std::chrono::seconds(20));
  }

  /// kcat against this cluster: `kcat -b <bootstrap> args...` with `input` on stdin.
  CommandResult kcat(std::vector<std::string> args, const std::string& input = "") const {
    args.insert(args.begin(), {"kcat", "-b", bootstrap_});
    return runCommand(args, input);
  }
  /// Produces `lines` (one record each, value = line) into topic[partition].
  bool produce(const std::string& topic, int partition, const std::string& lines) const {
    return kcat({"-P", "-t", topic, "-p", std::to_string(partition)}, lines).exitCode == 0;
  }
  /// Every record of `topic` as "<partition> <offset> <key>\t<value>" lines.
  std::string consumeAll(const std::string& topic) const {
    return kcat({"-C", "-t", topic, "-e", "-q", "-f", "%p %o %k\t%s\n"}).out;
  }
  /// The end offset (high watermark) of topic[partition].
  long endOffset(const std::string& topic, int partition) const {
    auto r = kcat({"-Q", "-t", topic + ":" + std::to_string(partition) + ":-1"});
    // "words [3] offset 42"
    auto pos = r.out.find("offset ");
    return pos == std::string::npos ? -1 : std::stol(r.out.substr(pos + 7));
  }

 private:
  KafkaCluster() = default;
  std::string readLine(std::chrono::milliseconds timeout) {
    auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "error: no answer from the mock cluster";
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      ssize_t n = read(from_, buf, sizeof buf);
      if (n <= 0) return "error: the mock cluster is gone";
      buffer_.append(buf, static_cast<size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buffer_;
  std::string bootstrap_;
};

}  // namespace jobhost_test
