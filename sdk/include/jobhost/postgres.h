// jobhost/postgres.h — exactly-once output into a PostgreSQL table: rows appended or
// upserted through prepared transactions (two-phase commit) tied to checkpoints.
//
//   counts.sinkTo(jobhost::PostgresSink<Count>("host=/run/pg dbname=app", "word_counts", {"word", "count"},
//                                               [](const Count& c) {
//                                                 return std::vector<std::string>{c.first, std::to_string(c.second)};
//                                               })
//                     .upsertOn({"word"}),
//                 "PostgreSQL Sink")
//       .uid("postgres");
//
// Not part of jobhost.h: a plugin that includes this header links libpq (Debian:
// libpq-dev) — in CMake, target_link_libraries(<plugin> PRIVATE jobhost::postgres), which
// brings it (find_package(jobhost REQUIRED COMPONENTS postgres) out of tree). The libpq
// code is in jobhost/detail/postgres_writer.h, compiled into the plugin like the rest of
// the header-only SDK.
//
// How it is exactly-once. Each subtask holds two connections. The rows it receives
// between two checkpoint barriers go into one database transaction: buffered (upserted rows
// folded to one per key) and written withBatchSize rows at a time in one statement — a
// COPY, or one INSERT ... SELECT ... FROM unnest(...) ON CONFLICT (keys) DO UPDATE — that
// the server runs while the task goes on. At the barrier the sink
// prepares it — `PREPARE TRANSACTION 'jobhost-<job>-<uid>-<subtask>-<checkpoint>'`: durable
// on the server, invisible to readers — and the checkpoint records that name. When the
// checkpoint is complete, `COMMIT PREPARED` makes the rows visible: readers see each
// record's row once, about one checkpoint interval after it. After a failure the job
// restores its latest checkpoint and the sink first rolls back (`ROLLBACK PREPARED`) every
// prepared transaction of its name that the checkpoint does not record (written after it:
// the restore replays those records), then commits the ones it records. A commit that
// already happened before the failure is no error: the name is gone from
// pg_prepared_xacts and the server reports the transaction (by its id, kept with the
// name) as committed. Prepared transactions named `jobhost-...` that are not this sink's
// are listed on stderr, so that leftovers of a job that is gone can be rolled back by hand.
//
// <job> is the sink's job name (withJobName; default: the table name): the job id of
// `jobhost run` changes with every run and restore, and plugin code does not see it,
// while the recovery must find the transactions a killed run prepared. So one job (one
// job name) per table, or each its own withJobName. A fresh start (no restored state) rolls
// back what an earlier run of the same name and uid left prepared.
//
// A prepared transaction keeps its row locks until it is committed. A subtask therefore
// writes nothing (it buffers rows in memory) from a barrier until the transaction of that
// checkpoint is committed; if the next barrier comes first (a checkpoint aborted with
// execution.checkpointing.tolerable-failed-checkpoints > 0, or a late notification), the
// rows of that interval are kept in the checkpoint itself and written when it completes.
//
// The server must allow prepared transactions: max_prepared_transactions > 0 (the
// default is 0), at least two per sink subtask. The table must exist, with the columns,
// and for upsertOn a primary key or unique index on exactly the key columns; the sink
// checks all of that when it opens and says what is missing. A lost connection (server
// restart, pg_terminate_backend) is a task failure: the restart strategy restores the
// latest checkpoint, and the recovery above makes the output exact again.
//
// Thread-safety: one sink object per subtask, used by that subtask's thread only.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "jobhost/detail/postgres_writer.h"
#include "jobhost/errors.h"
#include "jobhost/operator.h"
#include "jobhost/sinks.h"

namespace jobhost {

/// Exactly-once rows of records T into a PostgreSQL table (see the file comment). The
/// row function gives each record's column values, in the order of `columns`, as text in
/// PostgreSQL's input format (the server converts them to the columns' types). Appends by
/// default; upsertOn(keys) makes it INSERT ... ON CONFLICT (keys) DO UPDATE the other columns
/// (DO NOTHING if there are none). Constructor and options throw JobArgumentError for bad
/// arguments; everything else throws std::runtime_error with what failed, where and how
/// to fix it: a task failure, retried by the restart strategy.
template <class T>
class PostgresSink : public TwoPhaseCommitSink<T, PostgresTransaction> {
 public:
  using RowFunction = std::function<std::vector<std::string>(const T&)>;
  static_assert(detail::PostgresWriter::kEndOfInput == TwoPhaseCommitSink<T, PostgresTransaction>::kEndOfInput);

  /// `conninfo`: a libpq connection string or URI ("host=/tmp/pg dbname=app",
  /// "postgresql://user@db.example.com/app"); `table`: "name" or "schema.name", as
  /// stored in the catalog (quoted: case-sensitive).
  PostgresSink(std::string conninfo, std::string table, std::vector<std::string> columns, RowFunction row)
      : writer_(std::move(conninfo), std::move(table), std::move(columns)), row_(std::move(row)) {
    if (!row_) throw JobArgumentError("PostgresSink into '" + writer_.table() + "' needs a row function");
  }
  /// Upsert: rows with equal values in `keyColumns` (a subset of the columns, covered by
  /// a primary key or unique index of the table) replace each other.
  PostgresSink& upsertOn(std::vector<std::string> keyColumns) {
    writer_.upsertOn(std::move(keyColumns));
    return *this;
  }
  /// The <job> part of the transaction names: letters, digits and '_' only, at most 63
  /// characters. Default: the table name, other characters as '_'. Two jobs writing into
  /// one table need different names (each recovery rolls back the other's otherwise).
  PostgresSink& withJobName(std::string name) {
    writer_.withJobName(std::move(name));
    return *this;
  }
  /// Rows buffered before they are written (one statement), at most. Default 262144;
  /// with upsertOn the buffer holds one row per key, so an interval with fewer keys is
  /// written once, at its barrier.
  PostgresSink& withBatchSize(size_t rows) {
    writer_.withBatchSize(rows);
    return *this;
  }
  /// How long a statement waits for a row lock held by another transaction (e.g. a
  /// prepared transaction nobody commits) before the task fails saying so. Default 30 s.
  PostgresSink& withLockTimeout(std::chrono::milliseconds timeout) {
    writer_.withLockTimeout(timeout);
    return *this;
  }
  const std::string& table() const { return writer_.table(); }
  const std::string& jobName() const { return writer_.jobName(); }
  /// "jobhost-<job>-<uid>-": the start of this sink's transaction names (after open()).
  const std::string& transactionPrefix() const { return writer_.transactionPrefix(); }

  void open(OperatorContext& ctx) override { writer_.open(ctx); }
  PostgresTransaction beginTransaction() override { return writer_.beginTransaction(); }
  void invoke(PostgresTransaction&, const T& value, int64_t) override { writer_.add(row_(value)); }
  void preCommit(PostgresTransaction& txn) override { writer_.preCommit(txn, this->kEndOfInput); }
  void preCommitForCheckpoint(PostgresTransaction& txn, uint64_t checkpointId) override {
    writer_.preCommit(txn, checkpointId);
  }
  void commit(const PostgresTransaction& txn) override { writer_.commit(txn); }
  void abort(const PostgresTransaction& txn) override { writer_.abort(txn); }
  void abortStrays(int subtask, int parallelism, const std::vector<PostgresTransaction>& keep) override {
    writer_.abortStrays(subtask, parallelism, keep);
  }
  void close() override { writer_.close(); }

 private:
  detail::PostgresWriter writer_;
  RowFunction row_;
};

}  // namespace jobhost
