// jobhost/sinks.h — exactly-once output: two-phase-commit sinks tied to checkpoints, and
// the transactional file sink (Flink's FileSink, row format).
//
//   counts.sinkTo(jobhost::FileSink<std::pair<std::string, int64_t>>("/data/out")).uid("files");
//
// State is exactly-once; a sink that writes immediately (print, writeAsText) is not: after
// a restore the records since the last checkpoint are written again. A two-phase-commit
// sink keeps a transaction open between checkpoint barriers. At a barrier it pre-commits
// the transaction (flushes it, makes it durable, still invisible) and records it in the
// checkpoint; when the checkpoint is complete it commits it (makes it visible). After a
// restore it commits the transactions the restored checkpoint recorded (a commit that
// already happened is no error) and discards whatever was begun after that checkpoint.
// So a reader sees each record exactly once, at the completion of the checkpoint after
// it: the latency of the output is about the checkpoint interval. A bounded job ends with
// a final checkpoint, so its last records are committed too (without checkpointing,
// execution.checkpointing.interval = 0, a sink commits at the end of its input, and a
// failure may lose or repeat what was not committed).
//
// Thread-safety: one sink object per subtask, used by that subtask's thread only.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobhost/detail/named_op.h"
#include "jobhost/errors.h"
#include "jobhost/format.h"
#include "jobhost/operator.h"
#include "jobhost/serializer.h"

namespace jobhost {

/// Base class of an exactly-once sink of records T whose transactions are Txn values
/// (with a Serializer: they are stored in checkpoints). Subclass it and hand an instance
/// to DataStream::sinkTo(); it is copied once per subtask before open(). As Flink's
/// TwoPhaseCommitSinkFunction. Every method may throw: the task fails, and the restart
/// strategy restores the latest checkpoint.
template <class T, class Txn>
class TwoPhaseCommitSink {
 public:
  using InputType = T;
  using TransactionType = Txn;
  virtual ~TwoPhaseCommitSink() = default;
  /// Once per subtask, before anything else (ctx: subtask index, parallelism, uid).
  virtual void open(OperatorContext& ctx) {}
  /// A new, empty transaction.
  virtual Txn beginTransaction() = 0;
  /// Writes `value` (event timestamp `timestamp`, kNoTimestamp if none) into `txn`.
  virtual void invoke(Txn& txn, const T& value, int64_t timestamp) = 0;
  /// At a checkpoint barrier: flushes `txn` and makes it durable, still invisible.
  virtual void preCommit(Txn& txn) = 0;
  /// What is called at the barrier of checkpoint `checkpointId` (kEndOfInput: the end of
  /// an input without checkpointing): override it instead of preCommit(txn) to name a
  /// transaction after its checkpoint (PostgresSink). Default: preCommit(txn).
  virtual void preCommitForCheckpoint(Txn& txn, uint64_t checkpointId) { preCommit(txn); }
  static constexpr uint64_t kEndOfInput = UINT64_MAX;
  /// Makes a pre-committed transaction visible. Must be idempotent: after a failure it
  /// may be called again for a transaction that is committed already.
  virtual void commit(const Txn& txn) = 0;
  /// Discards a transaction that will never be committed. Idempotent.
  virtual void abort(const Txn& txn) = 0;
  /// After a restore, before the restored transactions are committed: discards every
  /// transaction that any subtask index s with s % parallelism == subtask began — in the
  /// job that wrote the snapshot or in a later run that failed before its own checkpoint,
  /// whatever their parallelism — except those in `keep` (the restored checkpoint's, to
  /// be committed next). What is discarded was written after the restored checkpoint; a
  /// restore replays its records. (One job writes to a sink's destination.)
  virtual void abortStrays(int subtask, int parallelism, const std::vector<Txn>& keep) {}
  /// After a restore, before abortStrays(): the id of the checkpoint (or savepoint)
  /// restored, and the highest parallelism of the sink subtasks that wrote it. For sinks
  /// that name transactions after checkpoints (KafkaSink): what began after it is
  /// named after a later id. Not called on a start without state. Default: nothing.
  virtual void recoverFrom(uint64_t checkpointId, int writerParallelism) {}
  virtual void close() {}
};

namespace detail {

/// Runs a TwoPhaseCommitSink (PlanNode::twoPhaseCommit). Its operator state: the
/// pre-committed transactions not yet known to be committed, with the checkpoint each
/// was pre-committed for, and the writing subtask's index and parallelism (so that after
/// rescaling each former subtask's transactions are recovered by exactly one subtask).
template <class S>
class TwoPhaseCommitSinkOp : public NamedOp, public Collector<typename S::InputType> {
 public:
  using T = typename S::InputType;
  using Txn = typename S::TransactionType;
  explicit TwoPhaseCommitSinkOp(std::unique_ptr<S> sink) : sink_(std::move(sink)) {}
  void* input() override { return static_cast<Collector<T>*>(this); }

  void open(OperatorContext& ctx) override {
    NamedOp::open(ctx);
    ctx_ = &ctx;
    invoke([&] { sink_->open(ctx); });
    if (!restored_.empty()) {
      // Every restored state holds the transaction of the checkpoint it was taken at (the
      // last pre-committed one): the largest id is the restored checkpoint's.
      uint64_t checkpoint = 0;
      int writers = 0;
      for (const auto& r : restored_) {
        writers = std::max(writers, r.parallelism);
        for (const auto& p : r.pending) checkpoint = std::max(checkpoint, p.first);
      }
      invoke([&] { sink_->recoverFrom(checkpoint, writers); });
      // This subtask recovers the former subtasks s with s % parallelism == its index.
      std::vector<std::pair<uint64_t, Txn>> recovered;
      for (const auto& r : restored_)
        if (r.subtask % ctx.parallelism() == ctx.subtaskIndex())
          recovered.insert(recovered.end(), r.pending.begin(), r.pending.end());
      std::vector<Txn> keep;
      for (const auto& p : recovered) keep.push_back(p.second);
      invoke([&] { sink_->abortStrays(ctx.subtaskIndex(), ctx.parallelism(), keep); });
      for (const auto& p : recovered) invoke([&] { sink_->commit(p.second); });
      restored_.clear();
    }
    current_ = invoke([&] { return sink_->beginTransaction(); });
  }
  void collect(const T& v) override {
    invoke([&] { sink_->invoke(current_, v, ctx_->currentTimestamp()); });
    written_ = true;
  }
  void beforeSnapshot(uint64_t checkpointId) override {
    invoke([&] { sink_->preCommitForCheckpoint(current_, checkpointId); });
    pending_.emplace_back(checkpointId, std::move(current_));
    current_ = invoke([&] { return sink_->beginTransaction(); });
    written_ = false;
  }
  std::string snapshotState() override {
    std::string out;
    ByteWriter w(out);
    w.writeU8(kStateFormat);
    w.writeVarint(static_cast<uint64_t>(ctx_->subtaskIndex()));
    w.writeVarint(static_cast<uint64_t>(ctx_->parallelism()));
    w.writeVarint(pending_.size());
    for (const auto& [id, txn] : pending_) {
      w.writeVarint(id);
      Serializer<Txn>::write(w, txn);
    }
    return out;
  }
  void restoreState(std::string_view state) override {
    if (state.empty()) return;
    ByteReader r(state);
    if (uint8_t f = r.readU8(); f != kStateFormat)
      throw SerializationError("the state of this two-phase-commit sink has format " + std::to_string(f) +
                               ", this SDK reads format " + std::to_string(kStateFormat));
    Restored rs;
    rs.subtask = static_cast<int>(r.readVarint());
    rs.parallelism = static_cast<int>(r.readVarint());
    for (uint64_t n = r.readVarint(); n > 0; --n) {
      uint64_t id = r.readVarint();
      rs.pending.emplace_back(id, Serializer<Txn>::read(r));
    }
    restored_.push_back(std::move(rs));
  }
  void notifyCheckpointComplete(uint64_t checkpointId) override {
    // Everything pre-committed for this checkpoint or an earlier one is in a complete one.
    size_t done = 0;
    while (done < pending_.size() && pending_[done].first <= checkpointId) {
      invoke([&] { sink_->commit(pending_[done].second); });
      ++done;
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
  }
  void endInput() override {
    // Without checkpoints nothing else commits: the end of the input does. (With them, the
    // final checkpoint committed everything, and the current transaction is empty.)
    if (!written_ && pending_.empty()) return;
    if (written_) {
      invoke([&] { sink_->preCommitForCheckpoint(current_, S::kEndOfInput); });
      pending_.emplace_back(S::kEndOfInput, std::move(current_));
      current_ = invoke([&] { return sink_->beginTransaction(); });
      written_ = false;
    }
    for (const auto& p : pending_) invoke([&] { sink_->commit(p.second); });
    pending_.clear();
  }
  void close() override {
    // Whatever the current transaction holds is after the last checkpoint: a restore
    // writes it again. Pre-committed ones stay for the recovery to commit.
    invoke([&] { sink_->abort(current_); });
    invoke([&] { sink_->close(); });
  }

 private:
  static constexpr uint8_t kStateFormat = 1;
  struct Restored {
    int subtask = 0;
    int parallelism = 1;  // of the sink that wrote it
    std::vector<std::pair<uint64_t, Txn>> pending;
  };
  std::unique_ptr<S> sink_;
  OperatorContext* ctx_ = nullptr;
  Txn current_{};
  bool written_ = false;
  std::vector<std::pair<uint64_t, Txn>> pending_;
  std::vector<Restored> restored_;
};

/// "what (path): strerror" as a runtime_error.
[[noreturn]] inline void throwErrno(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

inline void fsyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throwErrno("cannot open", path);
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    throwErrno("cannot fsync", path);
  }
  ::close(fd);
}

/// A file sink's hold on its output directory. Two writers of one directory would replace
/// each other's committed part files (the same `part-<subtask>-<counter>` names) and delete
/// each other's pending ones at recovery: a helper lost 175 k of 600 k lines to two jobs
/// given one --output. So a directory has one writer at a time: a job (one process: all its
/// subtasks share one claim) holds an flock(2) on `<dir>/.jobhost-output.lock` while its
/// sink is open, and the kernel releases it when the process ends, however it ends (a
/// restarted attempt is a new process, started after the old one is gone). Within a
/// process, two different sinks (operator uids) of one directory are refused as well.
/// Flink avoids the collision with a random id in every part file's name; a lock says
/// which job holds the directory instead of mixing two jobs' output in it.
struct OutputClaim {
  int fd = -1;
  std::string path;       // the lock file, removed at release (a killed job leaves it: harmless)
  std::string uid, name;  // of the sink that holds it
  ~OutputClaim() {
    if (fd < 0) return;
    ::unlink(path.c_str());  // while still locked: see claimOutputDirectory's loop
    ::close(fd);
  }
};

/// Claims `dir` (an existing directory) for the sink `uid` (shown as `name`): the same
/// claim for every subtask of that sink in this process. Throws JobArgumentError (the job
/// cannot run as configured: exit 2, not retried) if another process or another sink
/// holds it. A file system without flock (ENOLCK, EOPNOTSUPP) is not locked.
inline std::shared_ptr<OutputClaim> claimOutputDirectory(const std::string& dir, const std::string& uid,
                                                         const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<OutputClaim>> claims;
  std::error_code ec;
  std::string key = std::filesystem::canonical(dir, ec).string();
  if (ec) key = dir;
  std::lock_guard lock(mu);
  if (auto it = claims.find(key); it != claims.end()) {
    auto held = it->second.lock();
    if (!held) {
      claims.erase(it);  // released since: forgotten
    } else if (held->uid == uid) {
      return held;
    } else {
      throw JobArgumentError("the sinks '" + held->name + "' and '" + name + "' of this job both write to " + dir +
                             ": each would replace the other's part files; give each sink its own output directory");
    }
  }
  auto claim = std::make_shared<OutputClaim>();
  claim->uid = uid;
  claim->name = name;
  claim->path = key + "/.jobhost-output.lock";
  // The holder removes the file as it releases it, so a job that ended leaves nothing in
  // the directory. Whoever opened the file before that removal may lock the removed file:
  // the lock counts only if the path still names the locked file (else open it again).
  for (;;) {
    claim->fd = ::open(claim->path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (claim->fd < 0) throwErrno("cannot open the output directory's lock file", claim->path);
    if (::flock(claim->fd, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      if (e == ENOLCK || e == EOPNOTSUPP) {  // not lockable here: written without the check
        ::close(claim->fd);
        claim->fd = -1;
        claims[key] = claim;
        return claim;
      }
      std::string holder(256, '\0');
      ssize_t n = ::pread(claim->fd, holder.data(), holder.size(), 0);
      ::close(claim->fd);
      claim->fd = -1;
      errno = e;
      if (e != EWOULDBLOCK) throwErrno("cannot lock the output directory", claim->path);
      holder.resize(n > 0 ? static_cast<size_t>(n) : 0);
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
      throw JobArgumentError("the output directory " + dir + " is being written by another job" +
                             (holder.empty() ? std::string() : " (" + holder + ")") +
                             ": two jobs in one directory replace each other's part files; give each job its own "
                             "output directory, or end the other job first");
    }
    struct stat locked {}, named {};
    if (::fstat(claim->fd, &locked) == 0 && ::stat(claim->path.c_str(), &named) == 0 &&
        locked.st_dev == named.st_dev && locked.st_ino == named.st_ino)
      break;
    ::close(claim->fd);  // removed (or replaced) by its last holder meanwhile
    claim->fd = -1;
  }
  std::string who = "jobhost worker pid " + std::to_string(::getpid());
  if (const char* supervisor = std::getenv("JOBHOST_SUPERVISOR_PID")) who += ", jobhost run pid " + std::string(supervisor);
  who += ", sink '" + name + "'\n";
  // Only names the holder in another job's refusal: the lock holds without it.
  if (::ftruncate(claim->fd, 0) == 0) [[maybe_unused]] ssize_t written = ::pwrite(claim->fd, who.data(), who.size(), 0);
  claims[key] = claim;
  return claim;
}

}  // namespace detail

/// Which bucket directory under the output directory a record's part file goes to.
enum class BucketAssigner {
  kNone,            // every part file directly in the output directory (default)
  kEventHour,       // "YYYY-MM-DD--HH" (UTC) of the record's event timestamp
  kProcessingHour,  // "YYYY-MM-DD--HH" (UTC) of the wall clock when it is written
};

/// The part files of one transaction: their paths relative to the output directory,
/// hidden names ("<bucket>/.part-<subtask>-<counter>.inprogress.<uuid>") until committed
/// as "<bucket>/part-<subtask>-<counter>".
struct FileTransaction {
  std::vector<std::string> parts;
};

template <>
struct Serializer<FileTransaction> {
  static std::string id() { return "FileTransaction"; }
  static uint32_t version() { return 1; }
  static void write(ByteWriter& w, const FileTransaction& t) { Serializer<std::vector<std::string>>::write(w, t.parts); }
  static FileTransaction read(ByteReader& r) { return {Serializer<std::vector<std::string>>::read(r)}; }
};

/// Exactly-once line files, with Flink's FileSink semantics: each record is one line (its
/// text as print() shows it, without a subtask prefix) in a part file of its subtask.
/// Part files are hidden while written and pre-committed, and renamed to
/// `part-<subtask>-<counter>` when the checkpoint after them is complete; a part rolls at
/// every checkpoint, and also when it reaches `withMaxPartSize` (default 128 MiB) or is
/// older than `withRolloverInterval` (default 60 s). Readers should ignore files whose
/// names start with '.'. Recovery deletes the hidden files written after the restored
/// checkpoint.
template <class T>
class FileSink : public TwoPhaseCommitSink<T, FileTransaction> {
 public:
  explicit FileSink(std::string directory) : dir_(std::move(directory)) {
    if (dir_.empty()) throw JobArgumentError("FileSink needs an output directory");
  }
  FileSink& withBucketAssigner(BucketAssigner b) {
    buckets_ = b;
    return *this;
  }
  FileSink& withMaxPartSize(uint64_t bytes) {
    if (bytes == 0) throw JobArgumentError("FileSink::withMaxPartSize must be positive");
    maxPartBytes_ = bytes;
    return *this;
  }
  FileSink& withRolloverInterval(std::chrono::milliseconds interval) {
    if (interval.count() <= 0) throw JobArgumentError("FileSink::withRolloverInterval must be positive");
    rollover_ = interval;
    return *this;
  }
  const std::string& directory() const { return dir_; }

  void open(OperatorContext& ctx) override {
    subtask_ = ctx.subtaskIndex();
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec || !std::filesystem::is_directory(dir_))
      throw std::runtime_error("cannot create the file sink's output directory " + dir_ + ": " +
                               (ec ? ec.message() : std::string("it is not a directory")));
    claim_ = detail::claimOutputDirectory(dir_, ctx.uid(), ctx.operatorName());
    // Part numbers continue after every part of this subtask index already there (also
    // those other subtasks of an earlier parallelism left: names never repeat).
    for (const auto& f : listParts())
      if (f.subtask == subtask_ && f.counter >= counter_) counter_ = f.counter + 1;
    std::random_device rd;
    rng_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
  }
  FileTransaction beginTransaction() override { return {}; }
  void invoke(FileTransaction& txn, const T& value, int64_t timestamp) override {
    std::string bucket = bucketOf(timestamp);
    if (open_ && (open_->bucket != bucket || open_->bytes >= maxPartBytes_ ||
                  coarseNow() - open_->opened >= rollover_))
      closePart();  // rolls: the closed part stays in `txn`, pre-committed with it
    if (!open_) openPart(txn, bucket);
    const size_t before = buffer_.size();
    appendText(buffer_, value);
    buffer_ += '\n';
    open_->bytes += buffer_.size() - before;
    if (buffer_.size() >= kBufferBytes) flushBuffer();
  }
  void preCommit(FileTransaction& txn) override {
    closePart();
    std::set<std::string> dirs;
    for (const auto& p : txn.parts) dirs.insert(parentOf(absolute(p)));
    for (const auto& d : dirs) detail::fsyncPath(d, true);  // the hidden names are durable
  }
  void commit(const FileTransaction& txn) override {
    std::set<std::string> dirs;
    for (const auto& p : txn.parts) {
      std::string from = absolute(p), to = absolute(committedName(p));
      if (::rename(from.c_str(), to.c_str()) != 0) {
        if (errno == ENOENT && ::access(to.c_str(), F_OK) == 0) continue;  // committed before a failure
        if (errno == ENOENT)  // neither name: not a failure that a retry cures, say what is lost
          throw std::runtime_error("the pre-committed part file " + from + " is gone and was never committed as " +
                                   to + ": its records are lost (was the output directory " + dir_ +
                                   " removed or cleaned while the job ran?). Every restore of this checkpoint "
                                   "commits it again; to go on without it, give the sink a new uid in the job's "
                                   "code and restore with --allow-non-restored-state, or start without -s");
        detail::throwErrno("cannot commit part file (rename to " + to + ")", from);
      }
      dirs.insert(parentOf(to));
    }
    for (const auto& d : dirs) detail::fsyncPath(d, true);
  }
  void abort(const FileTransaction& txn) override {
    if (open_ && std::find(txn.parts.begin(), txn.parts.end(), open_->relative) != txn.parts.end()) {
      ::close(open_->fd);
      open_.reset();
      buffer_.clear();
    }
    for (const auto& p : txn.parts) ::unlink(absolute(p).c_str());
  }
  void abortStrays(int subtask, int parallelism, const std::vector<FileTransaction>& keep) override {
    std::set<std::string> kept;
    for (const auto& t : keep) kept.insert(t.parts.begin(), t.parts.end());
    for (const auto& f : listParts())
      if (f.hidden && f.subtask % parallelism == subtask && !kept.count(f.relative))
        ::unlink(absolute(f.relative).c_str());
  }
  void close() override {
    if (open_) {
      ::close(open_->fd);
      open_.reset();
      buffer_.clear();
    }
    claim_.reset();  // the last subtask of the process to close releases the directory
  }

 private:
  struct OpenPart {
    int fd = -1;
    std::string relative, bucket;
    uint64_t bytes = 0;
    uint64_t writebackFrom = 0;  // bytes before this offset are handed to writeback
    std::chrono::steady_clock::time_point opened;
  };
  struct PartName {
    std::string relative;
    int subtask = 0;
    uint64_t counter = 0;
    bool hidden = false;
  };

  std::string absolute(const std::string& relative) const { return dir_ + "/" + relative; }
  static std::string parentOf(const std::string& path) { return std::filesystem::path(path).parent_path().string(); }
  /// ".part-3-7.inprogress.ab12" -> "part-3-7", in the same directory.
  static std::string committedName(const std::string& hidden) {
    auto slash = hidden.rfind('/');
    std::string dir = slash == std::string::npos ? "" : hidden.substr(0, slash + 1);
    std::string name = hidden.substr(dir.size() + 1);  // without the leading '.'
    return dir + name.substr(0, name.find(".inprogress."));
  }
  std::string bucketOf(int64_t timestamp) const {
    if (buckets_ == BucketAssigner::kNone) return "";
    int64_t ms = timestamp;
    if (buckets_ == BucketAssigner::kProcessingHour || timestamp == kNoTimestamp)
      ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
               .count();
    std::time_t secs = static_cast<std::time_t>(ms / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d--%H", &tm);
    return buf;
  }
  void openPart(FileTransaction& txn, const std::string& bucket) {
    std::string dir = bucket.empty() ? dir_ : dir_ + "/" + bucket;
    if (!bucket.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) throw std::runtime_error("cannot create bucket directory " + dir + ": " + ec.message());
    }
    char uuid[17];
    std::snprintf(uuid, sizeof uuid, "%016llx", static_cast<unsigned long long>(rng_()));
    OpenPart p;
    p.relative = (bucket.empty() ? "" : bucket + "/") + ".part-" + std::to_string(subtask_) + "-" +
                 std::to_string(counter_++) + ".inprogress." + uuid;
    p.bucket = bucket;
    p.opened = coarseNow();
    p.fd = ::open(absolute(p.relative).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (p.fd < 0) detail::throwErrno("cannot create part file", absolute(p.relative));
    txn.parts.push_back(p.relative);
    open_ = std::move(p);
  }
  /// The monotonic clock at a jiffy's resolution, plenty for a rollover interval: read for
  /// every record, steady_clock::now() (the precise clock; ~27 ns in a VM whose vDSO reads
  /// a paravirtual clock) cost the file sink a tenth of WordCount's time.
  static std::chrono::steady_clock::time_point coarseNow() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return std::chrono::steady_clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
  }
  /// Writes the buffered lines to the open part file.
  void flushBuffer() {
    std::string_view bytes = buffer_;
    while (!bytes.empty()) {
      ssize_t n = ::write(open_->fd, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) detail::throwErrno("cannot write part file", absolute(open_->relative));
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    buffer_.clear();
    // Start writing the part to disk in the background every few MiB, so that the fsync
    // at the next checkpoint (on the task's thread) waits only for the last few: without
    // it the page cache holds a whole interval's lines and the fsync writes them all
    // while the task stands still. Advisory: an error here shows again at the fsync.
    if (open_->bytes - open_->writebackFrom >= kWritebackBytes) {
      ::sync_file_range(open_->fd, static_cast<off_t>(open_->writebackFrom),
                        static_cast<off_t>(open_->bytes - open_->writebackFrom), SYNC_FILE_RANGE_WRITE);
      open_->writebackFrom = open_->bytes;
    }
  }
  void closePart() {
    if (!open_) return;
    flushBuffer();
    int fd = open_->fd;
    std::string path = absolute(open_->relative);
    open_.reset();
    if (::fsync(fd) != 0) {
      int e = errno;
      ::close(fd);
      errno = e;
      detail::throwErrno("cannot fsync part file", path);
    }
    if (::close(fd) != 0) detail::throwErrno("cannot close part file", path);
  }
  /// Every part file (hidden or committed) under the output directory and its buckets.
  std::vector<PartName> listParts() const {
    std::vector<PartName> out;
    std::error_code ec;
    auto visit = [&](const std::filesystem::path& dir, const std::string& prefix) {
      for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        std::string name = e.path().filename().string();
        PartName p;
        std::string rest;
        if (name.rfind(".part-", 0) == 0 && name.find(".inprogress.") != std::string::npos) {
          p.hidden = true;
          rest = name.substr(6, name.find(".inprogress.") - 6);
        } else if (name.rfind("part-", 0) == 0) {
          rest = name.substr(5);
        } else {
          continue;
        }
        auto dash = rest.find('-');
        if (dash == std::string::npos) continue;
        try {
          p.subtask = std::stoi(rest.substr(0, dash));
          p.counter = std::stoull(rest.substr(dash + 1));
        } catch (const std::exception&) {
          continue;
        }
        p.relative = prefix + name;
        out.push_back(p);
      }
    };
    visit(dir_, "");
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec))
      if (e.is_directory()) visit(e.path(), e.path().filename().string() + "/");
    return out;
  }

  std::string dir_;
  std::shared_ptr<detail::OutputClaim> claim_;  // held from open() to close()
  BucketAssigner buckets_ = BucketAssigner::kNone;
  uint64_t maxPartBytes_ = 128ull << 20;
  std::chrono::milliseconds rollover_{std::chrono::seconds(60)};
  int subtask_ = 0;
  uint64_t counter_ = 0;
  std::mt19937_64 rng_;
  static constexpr size_t kBufferBytes = 64 * 1024;
  static constexpr uint64_t kWritebackBytes = 4 << 20;
  std::optional<OpenPart> open_;
  std::string buffer_;  // lines not yet written to the open part (at most kBufferBytes)
};

}  // namespace jobhost
