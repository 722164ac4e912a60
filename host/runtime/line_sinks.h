// host/runtime/line_sinks.h — process-wide line outputs for the print and text sinks.
//
// Lines from all subtasks go through one buffered writer per destination, so lines are
// never interleaved mid-line. Each task flushes the sinks its operators opened (see
// JobExecution): when it goes idle, before it forwards a checkpoint barrier or reports
// its snapshot, and when it ends; the execution flushes every sink when it is over.
// Hence, once checkpoint N is complete, every line of a record before barrier N has been
// handed to the OS (fflush, not fsync). Lines of records after the barrier may be written
// too; a restore from N replays those records, so the guarantee is at-least-once.
//
// Thread-safety: thread-safe (one mutex per sink).
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "jobhost/operator.h"

namespace jobhost::host {

class BufferedLineSink : public LineSink {
 public:
  BufferedLineSink(FILE* f, bool owned) : file_(f), owned_(owned) {}
  ~BufferedLineSink() override {
    flush();
    if (owned_ && file_) std::fclose(file_);
  }
  void writeLine(std::string_view line) override {
    std::lock_guard lock(mu_);
    buffer_.append(line);
    buffer_.push_back('\n');
    if (buffer_.size() > (64 << 10)) flushLocked();
  }
  void flush() {
    std::lock_guard lock(mu_);
    flushLocked();
  }

 private:
  void flushLocked() {
    if (!buffer_.empty() && file_) {
      std::fwrite(buffer_.data(), 1, buffer_.size(), file_);
      std::fflush(file_);
    }
    buffer_.clear();
  }
  std::mutex mu_;
  FILE* file_;
  bool owned_;
  std::string buffer_;  // guarded by mu_
};

class LineSinks {
 public:
  static LineSinks& instance() {
    static LineSinks sinks;
    return sinks;
  }
  BufferedLineSink& stdoutSink() { return stdout_; }
  /// Appends to `path`; throws std::runtime_error if it cannot be opened. One writer per
  /// path for the life of the process.
  BufferedLineSink& fileSink(const std::string& path) {
    std::lock_guard lock(mu_);
    auto it = files_.find(path);
    if (it != files_.end()) return *it->second;
    FILE* f = std::fopen(path.c_str(), "ab");
    if (!f) throw std::runtime_error("cannot open output file '" + path + "'");
    return *files_.emplace(path, std::make_unique<BufferedLineSink>(f, true)).first->second;
  }
  void flush() {
    stdout_.flush();
    std::lock_guard lock(mu_);
    for (auto& [p, s] : files_) s->flush();
  }

 private:
  LineSinks() : stdout_(stdout, false) {}
  BufferedLineSink stdout_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<BufferedLineSink>> files_;  // guarded by mu_
};

}  // namespace jobhost::host
