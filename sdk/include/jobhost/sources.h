// jobhost/sources.h — source functions: text file, socket, generator, and the base
// class for your own.
//
// A source is polled by the host on its own thread. Each poll() emits a few records and
// returns; between two polls the host may take a checkpoint, asking the source for its
// position (snapshotPosition) so that a restore continues exactly there.
//
// Thread-safety: a source instance is used by one thread.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "jobhost/operator.h"
#include "jobhost/serializer.h"

namespace jobhost {

template <class T>
class SourceOutput {
 public:
  virtual ~SourceOutput() = default;
  virtual void emit(const T& value) = 0;
};

/// Base class of sources. poll() should return within ~100 ms; when nothing is
/// available it should wait a little (up to ~50 ms) and return PollStatus::kIdle.
template <class T>
class SourceFunction {
 public:
  virtual ~SourceFunction() = default;
  /// Called after restorePosition() (if restoring). May throw to fail the job.
  virtual void open(OperatorContext& ctx) {}
  virtual PollStatus poll(SourceOutput<T>& out) = 0;
  virtual void close() {}
  /// Encodes the position after the last emitted record. Default: not replayable.
  virtual std::string snapshotPosition() { return {}; }
  virtual void restorePosition(std::string_view position) {}
};

namespace detail {
/// Paces a source at `perSecond` records (0 = unthrottled).
class Throttle {
 public:
  explicit Throttle(double perSecond) : perSecond_(perSecond) {}
  void start() { start_ = std::chrono::steady_clock::now(); }
  /// How many more records may be emitted now; 0 after a short sleep if none.
  uint64_t allowance(uint64_t emittedSinceStart) {
    if (perSecond_ <= 0) return 256;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    double allowed = elapsed * perSecond_ + 1;
    if (allowed > static_cast<double>(emittedSinceStart)) {
      return std::min<uint64_t>(256, static_cast<uint64_t>(allowed) - emittedSinceStart);
    }
    double wait = (static_cast<double>(emittedSinceStart) + 1 - allowed) / perSecond_;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(wait, 0.05)));
    return 0;
  }

 private:
  double perSecond_;
  std::chrono::steady_clock::time_point start_;
};
/// Reads the next line of `f` into `line` (without "\n" or "\r\n"). Returns the bytes it
/// consumed (0 at the end of the file); throws naming `path` on a read error.
inline uint64_t readLine(FILE* f, std::string& line, const std::string& path) {
  line.clear();
  int c;
  bool any = false;
  while ((c = getc_unlocked(f)) != EOF) {  // one thread per source: no lock per byte
    any = true;
    if (c == '\n') break;
    line.push_back(static_cast<char>(c));
  }
  if (!any) {
    if (std::ferror(f)) throw std::runtime_error("cannot read '" + path + "': " + std::strerror(errno));
    return 0;
  }
  uint64_t consumed = line.size() + (c == '\n' ? 1 : 0);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return consumed;
}
}  // namespace detail

/// Lines of a file. Position: the byte offset after the last emitted line.
class TextFileSource : public SourceFunction<std::string> {
 public:
  TextFileSource(std::string path, double linesPerSecond)
      : path_(std::move(path)), throttle_(linesPerSecond) {}
  ~TextFileSource() override { close(); }
  void open(OperatorContext&) override {
    file_ = std::fopen(path_.c_str(), "rb");
    if (!file_) throw std::runtime_error("cannot open input file '" + path_ + "': " + std::strerror(errno));
    if (offset_ > 0 && std::fseek(file_, static_cast<long>(offset_), SEEK_SET) != 0)
      throw std::runtime_error("cannot seek to " + std::to_string(offset_) + " in '" + path_ + "'");
    throttle_.start();
  }
  PollStatus poll(SourceOutput<std::string>& out) override {
    uint64_t n = throttle_.allowance(emitted_);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t consumed = detail::readLine(file_, line_, path_);
      if (consumed == 0) return PollStatus::kEnd;
      offset_ += consumed;
      ++emitted_;
      out.emit(line_);
    }
    return n == 0 ? PollStatus::kIdle : PollStatus::kMore;
  }
  void close() override {
    if (file_) std::fclose(file_);
    file_ = nullptr;
  }
  std::string snapshotPosition() override {
    std::string s;
    ByteWriter w(s);
    w.writeFixed<uint64_t>(offset_);
    return s;
  }
  void restorePosition(std::string_view p) override {
    if (p.empty()) return;  // written by a source without a position: start at the beginning
    ByteReader r(p);
    uint64_t offset = r.readFixed<uint64_t>();
    if (!r.atEnd()) throw SerializationError("the file position has trailing bytes");
    // The position must fit the file: a shorter or other file, or a garbled position, is a
    // restore error (reported at once), not something a restart could fix.
    if (FILE* f = std::fopen(path_.c_str(), "rb")) {
      std::fseek(f, 0, SEEK_END);
      long size = std::ftell(f);
      std::fclose(f);
      if (size >= 0 && offset > static_cast<uint64_t>(size))
        throw SerializationError("the saved position " + std::to_string(offset) + " is beyond the end of '" + path_ +
                                 "' (" + std::to_string(size) + " bytes); is it the same input file?");
    }
    offset_ = offset;
  }

 private:
  std::string path_;
  detail::Throttle throttle_;
  FILE* file_ = nullptr;
  uint64_t offset_ = 0;
  uint64_t emitted_ = 0;
  std::string line_;
};

/// Lines of every file in a directory, each file exactly once, in name order (Flink's
/// FileSource over a directory; the listing is its split enumerator). Files whose names
/// start with '.' or '_' are skipped (in-progress files of writers). With a monitor
/// interval > 0 the source is unbounded: it lists the directory again every interval and
/// reads the files that appeared; without, it reads the files there at the start and
/// ends. A file is read once it is listed, to its end: give it its final name only when
/// it is complete (write to a hidden name, then rename). Position: the names of the files
/// finished and the byte offset in the current one — a file that appeared while the job
/// was down is read after the restore.
class DirectorySource : public SourceFunction<std::string> {
 public:
  DirectorySource(std::string dir, std::chrono::milliseconds monitorInterval, double linesPerSecond)
      : dir_(std::move(dir)), interval_(monitorInterval), throttle_(linesPerSecond) {}
  ~DirectorySource() override { close(); }
  void open(OperatorContext&) override { throttle_.start(); }
  PollStatus poll(SourceOutput<std::string>& out) override {
    if (!file_ && !openNext()) {
      if (interval_.count() == 0 && scanned_) return PollStatus::kEnd;  // bounded: every file read
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(50, std::max<int64_t>(1, interval_.count()))));
      return PollStatus::kIdle;
    }
    uint64_t n = throttle_.allowance(emitted_);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t consumed = detail::readLine(file_, line_, currentPath());
      if (consumed == 0) {
        std::fclose(file_);
        file_ = nullptr;
        finished_.push_back(current_);
        current_.clear();
        offset_ = 0;
        return PollStatus::kMore;
      }
      offset_ += consumed;
      ++emitted_;
      out.emit(line_);
    }
    return n == 0 ? PollStatus::kIdle : PollStatus::kMore;
  }
  void close() override {
    if (file_) std::fclose(file_);
    file_ = nullptr;
  }
  std::string snapshotPosition() override {
    std::string s;
    ByteWriter w(s);
    w.writeU8('D');  // a directory's position (a single file's is 8 bytes)
    w.writeU8(1);
    w.writeVarint(finished_.size());
    for (const auto& f : finished_) w.writeBytes(f);
    w.writeBytes(current_);
    w.writeFixed<uint64_t>(offset_);
    return s;
  }
  void restorePosition(std::string_view p) override {
    if (p.empty()) return;
    ByteReader r(p);
    if (p.size() < 2 || r.readU8() != 'D' || r.readU8() != 1)
      throw SerializationError("the saved position is not a directory source's (did a single file source write it?)");
    finished_.clear();
    for (uint64_t n = r.readVarint(); n > 0; --n) finished_.emplace_back(r.readBytes());
    current_ = std::string(r.readBytes());
    offset_ = r.readFixed<uint64_t>();
    if (!r.atEnd()) throw SerializationError("the directory position has trailing bytes");
  }

 private:
  std::string currentPath() const { return dir_ + "/" + current_; }
  /// Opens the current file (after a restore) or the next new one; false if there is none
  /// (yet: the next listing is not due).
  bool openNext() {
    if (current_.empty()) {
      if (pending_.empty()) {
        auto now = std::chrono::steady_clock::now();
        if (scanned_ && (interval_.count() == 0 || now < nextScan_)) return false;
        scan();
        nextScan_ = now + interval_;
        if (pending_.empty()) return false;
      }
      current_ = pending_.front();
      pending_.erase(pending_.begin());
      offset_ = 0;
    }
    file_ = std::fopen(currentPath().c_str(), "rb");
    if (!file_) throw std::runtime_error("cannot open input file '" + currentPath() + "': " + std::strerror(errno));
    if (offset_ > 0 && std::fseek(file_, static_cast<long>(offset_), SEEK_SET) != 0)
      throw std::runtime_error("cannot seek to " + std::to_string(offset_) + " in '" + currentPath() + "'");
    return true;
  }
  /// The files not read yet, in name order.
  void scan() {
    scanned_ = true;
    std::error_code ec;
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
      std::string name = e.path().filename().string();
      if (name.empty() || name[0] == '.' || name[0] == '_' || !e.is_regular_file(ec)) continue;
      names.push_back(name);
    }
    if (ec) throw std::runtime_error("cannot list input directory '" + dir_ + "': " + ec.message());
    std::sort(names.begin(), names.end());
    std::sort(finished_.begin(), finished_.end());
    pending_.clear();
    for (const auto& n : names)
      if (!std::binary_search(finished_.begin(), finished_.end(), n)) pending_.push_back(n);
  }

  std::string dir_;
  std::chrono::milliseconds interval_;
  detail::Throttle throttle_;
  FILE* file_ = nullptr;
  std::vector<std::string> finished_;  // sorted at each scan
  std::vector<std::string> pending_;   // listed, not started
  std::string current_;
  uint64_t offset_ = 0;
  uint64_t emitted_ = 0;
  bool scanned_ = false;
  std::chrono::steady_clock::time_point nextScan_{};
  std::string line_;
};

/// Lines from a TCP connection. Not replayable: its position is empty.
class SocketTextSource : public SourceFunction<std::string> {
 public:
  SocketTextSource(std::string host, int port) : host_(std::move(host)), port_(port) {}
  ~SocketTextSource() override { close(); }
  void open(OperatorContext&) override {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    std::string where = host_ + ":" + std::to_string(port_);
    if (int rc = getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &res); rc != 0)
      throw std::runtime_error("cannot resolve " + where + ": " + gai_strerror(rc));
    int lastErr = 0;
    for (addrinfo* a = res; a; a = a->ai_next) {
      fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd_ < 0) continue;
      if (::connect(fd_, a->ai_addr, a->ai_addrlen) == 0) break;
      lastErr = errno;
      ::close(fd_);
      fd_ = -1;
    }
    freeaddrinfo(res);
    if (fd_ < 0)
      throw std::runtime_error("cannot connect to " + where + ": " + std::strerror(lastErr) +
                               " (is a server listening there? e.g. `nc -lk " + std::to_string(port_) + "`)");
  }
  PollStatus poll(SourceOutput<std::string>& out) override {
    if (eof_) return PollStatus::kEnd;
    pollfd p{fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, 50);
    if (rc < 0 && errno != EINTR) throw std::runtime_error(std::string("socket poll failed: ") + std::strerror(errno));
    if (rc <= 0) return PollStatus::kIdle;
    char buf[16384];
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) return PollStatus::kIdle;
      throw std::runtime_error(std::string("socket read failed: ") + std::strerror(errno));
    }
    if (n == 0) {
      eof_ = true;
      if (!pending_.empty()) out.emit(pending_);
      pending_.clear();
      return PollStatus::kEnd;
    }
    pending_.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
      line_.assign(pending_, start, nl - start);
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      out.emit(line_);
    }
    pending_.erase(0, start);
    return PollStatus::kMore;
  }
  void close() override {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  std::string host_;
  int port_;
  int fd_ = -1;
  bool eof_ = false;
  std::string pending_, line_;
};

/// fn(0), fn(1), ... fn(count-1) (count 0 = unbounded). Position: the next sequence number.
template <class T>
class GeneratorSource : public SourceFunction<T> {
 public:
  GeneratorSource(uint64_t count, std::function<T(uint64_t)> fn, double perSecond)
      : count_(count), fn_(std::move(fn)), throttle_(perSecond) {}
  void open(OperatorContext&) override { throttle_.start(); }
  PollStatus poll(SourceOutput<T>& out) override {
    uint64_t n = throttle_.allowance(emitted_);
    for (uint64_t i = 0; i < n; ++i) {
      if (count_ != 0 && next_ >= count_) return PollStatus::kEnd;
      out.emit(fn_(next_++));
      ++emitted_;
    }
    if (count_ != 0 && next_ >= count_) return PollStatus::kEnd;
    return n == 0 ? PollStatus::kIdle : PollStatus::kMore;
  }
  std::string snapshotPosition() override {
    std::string s;
    ByteWriter w(s);
    w.writeFixed<uint64_t>(next_);
    return s;
  }
  void restorePosition(std::string_view p) override {
    if (p.empty()) return;
    ByteReader r(p);
    next_ = r.readFixed<uint64_t>();
  }

 private:
  uint64_t count_;
  std::function<T(uint64_t)> fn_;
  detail::Throttle throttle_;
  uint64_t next_ = 0;
  uint64_t emitted_ = 0;
};

}  // namespace jobhost
