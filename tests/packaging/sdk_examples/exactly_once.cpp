// example: sdk_examples/exactly_once.cpp
#include <jobhost/jobhost.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

using Count = std::pair<std::string, int64_t>;

// Word counts written exactly once by the file sink: part files in --output DIR,
// committed when the checkpoint after their records completes.
class CountsToFiles : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override { c.checkpointInterval(std::chrono::milliseconds(200)); }
  void build(jobhost::StreamEnvironment& env) override {
    auto lines = env.readTextFile(env.args().get("--input").value());
    lines.uid("lines");
    auto counts = lines.map([](const std::string& w) { return Count{w, 1}; })
                      .keyBy([](const Count& c) { return c.first; })
                      .sum<1>();
    counts.uid("counts");
    counts.sinkTo(jobhost::FileSink<Count>(env.args().get("--output").value())).uid("files");
  }
};
JOBHOST_JOB(CountsToFiles, "Word counts, exactly once, into part files", "hashmap")

// A sink of your own: each transaction is one file, written under a hidden name and
// renamed into --output DIR when its checkpoint completes. The transaction handle (the
// file's two names) is what the checkpoint stores, so it needs a Serializer.
struct Batch {
  std::string hidden, visible;
};
template <>
struct jobhost::Serializer<Batch> {
  static std::string id() { return "example.Batch"; }
  static uint32_t version() { return 1; }
  static void write(ByteWriter& w, const Batch& b) {
    w.writeBytes(b.hidden);
    w.writeBytes(b.visible);
  }
  static Batch read(ByteReader& r) {
    Batch b;
    b.hidden = std::string(r.readBytes());
    b.visible = std::string(r.readBytes());
    return b;
  }
};

class BatchFileSink : public jobhost::TwoPhaseCommitSink<Count, Batch> {
 public:
  explicit BatchFileSink(std::string dir) : dir_(std::move(dir)) {}
  void open(jobhost::OperatorContext& ctx) override {
    ::mkdir(dir_.c_str(), 0755);
    subtask_ = ctx.subtaskIndex();
  }
  Batch beginTransaction() override {
    // Unique names per subtask and transaction; a real sink would also survive restarts
    // (the file sink scans for the highest number in use).
    std::string n = std::to_string(subtask_) + "-" + std::to_string(next_++) + "-" + std::to_string(::getpid());
    return {dir_ + "/.batch-" + n, dir_ + "/batch-" + n};
  }
  void invoke(Batch& b, const Count& c, int64_t) override {
    std::ofstream(b.hidden, std::ios::app) << c.first << " " << c.second << "\n";
  }
  void preCommit(Batch& b) override {
    std::ofstream(b.hidden, std::ios::app).flush();  // (a real sink fsyncs here)
  }
  void commit(const Batch& b) override {
    if (std::rename(b.hidden.c_str(), b.visible.c_str()) != 0 && errno != ENOENT)
      throw std::runtime_error("cannot commit " + b.hidden);
  }
  void abort(const Batch& b) override { std::remove(b.hidden.c_str()); }

 private:
  std::string dir_;
  int subtask_ = 0;
  uint64_t next_ = 0;
};

class CountsToBatches : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override { c.checkpointInterval(std::chrono::milliseconds(200)); }
  void build(jobhost::StreamEnvironment& env) override {
    auto lines = env.readTextFile(env.args().get("--input").value());
    lines.uid("lines");
    auto counts = lines.map([](const std::string& w) { return Count{w, 1}; })
                      .keyBy([](const Count& c) { return c.first; })
                      .sum<1>();
    counts.uid("counts");
    counts.sinkTo(BatchFileSink(env.args().get("--output").value())).uid("batches");
  }
};
JOBHOST_JOB(CountsToBatches, "Word counts through a two-phase-commit sink of its own", "hashmap")
