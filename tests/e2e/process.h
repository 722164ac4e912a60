// tests/e2e/process.h — runs the real jobhost binary as a user would: real processes,
// real files, exit codes, stdout and stderr captured to files.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace e2e {

namespace fs = std::filesystem;

inline std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void writeFile(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

/// A fresh directory removed at destruction.
struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("jobhost-e2e-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path operator/(const std::string& s) const { return path / s; }
};

struct Result {
  int exitCode = -1;  // 128 + signal if killed
  std::string out, err;
};

/// A running jobhost process.
class Process {
 public:
  Process(const std::vector<std::string>& args, const fs::path& outFile, const fs::path& errFile)
      : out_(outFile), err_(errFile) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      int o = open(outFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int e = open(errFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int in = open("/dev/null", O_RDONLY);
      dup2(in, 0);
      dup2(o, 1);
      dup2(e, 2);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Process() {
    if (pid_ > 0 && !done_) {
      kill(pid_, SIGKILL);
      wait();
    }
  }
  /// Sends `sig` to the jobhost process only (its worker follows on its own).
  void signal(int sig) {
    if (sig == SIGKILL) return killTree();
    kill(pid_, sig);
  }
  /// kill -9 of the whole process tree (supervisor and worker), and waits until every
  /// process of the group is gone, so nothing writes checkpoints any more.
  void killTree() {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    for (int i = 0; i < 500; ++i) {
      bool alive = running();  // reaps the supervisor: a zombie would still count in the group
      if (!alive && kill(-pid_, 0) != 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  /// Waits up to `timeout`; kills the process if it is still running then.
  Result wait(std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
    auto until = std::chrono::steady_clock::now() + timeout;
    int status = status_;
    while (!done_) {
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        done_ = true;
        break;
      }
      if (std::chrono::steady_clock::now() > until) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        done_ = true;
        timedOut_ = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Result res;
    res.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (timedOut_) res.exitCode = -2;
    res.out = readFile(out_);
    res.err = readFile(err_);
    return res;
  }
  pid_t pid() const { return pid_; }
  bool running() {
    if (done_) return false;
    if (waitpid(pid_, &status_, WNOHANG) == pid_) done_ = true;  // reaped here: keep the status
    return !done_;
  }

 private:
  pid_t pid_ = -1;
  fs::path out_, err_;
  bool done_ = false;
  bool timedOut_ = false;
  int status_ = 0;
};

inline Result run(const std::vector<std::string>& args, const fs::path& dir,
                  std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  static int n = 0;
  ++n;
  Process p(args, dir / ("out-" + std::to_string(n) + ".txt"), dir / ("err-" + std::to_string(n) + ".txt"));
  return p.wait(timeout);
}

/// Final count per word from word-count output ("(w,3)" or "2> (w,3)" lines): the largest.
inline std::map<std::string, long> finalCounts(const std::string& output) {
  std::map<std::string, long> counts;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    auto open = line.find('(');
    auto comma = line.rfind(',');
    auto close = line.rfind(')');
    if (open == std::string::npos || comma == std::string::npos || close == std::string::npos || comma < open) continue;
    std::string w = line.substr(open + 1, comma - open - 1);
    long c = std::stol(line.substr(comma + 1, close - comma - 1));
    counts[w] = std::max(counts[w], c);
  }
  return counts;
}

/// The word counts a correct run must produce: whitespace tokens, lower-cased.
inline std::map<std::string, long> expectedCounts(const std::string& text) {
  std::map<std::string, long> counts;
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    for (auto& c : w) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    ++counts[w];
  }
  return counts;
}

/// A listening TCP socket on a free loopback port; *port receives the port.
inline int listenOnLoopback(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  listen(fd, 4);
  return fd;
}

/// Checksums of every file under `dir` (path -> content hash).
inline std::map<std::string, size_t> treeChecksums(const fs::path& dir) {
  std::map<std::string, size_t> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = std::hash<std::string>{}(readFile(e.path()));
  return out;
}

}  // namespace e2e
