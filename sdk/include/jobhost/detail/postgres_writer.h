// jobhost/detail/postgres_writer.h — the part of PostgresSink (jobhost/postgres.h) that
// does not depend on the record type: connections, statements, the prepared transactions
// and their recovery (internal; include jobhost/postgres.h). How it is exactly-once: see
// jobhost/postgres.h.
//
// Thread-safety: one writer per sink subtask, used by that subtask's thread only. Copies
// of an unopened writer share nothing that open() changes.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#if __has_include(<libpq-fe.h>)
#include <libpq-fe.h>
#elif __has_include(<postgresql/libpq-fe.h>)
#include <postgresql/libpq-fe.h>  // Debian's libpq-dev without -I/usr/include/postgresql
#else
#error "jobhost/postgres.h needs libpq's libpq-fe.h: install libpq-dev (Debian) and link libpq (CMake: find_package(PostgreSQL REQUIRED), PostgreSQL::PostgreSQL)"
#endif

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jobhost/errors.h"
#include "jobhost/operator.h"
#include "jobhost/serializer.h"

namespace jobhost {

/// One pre-committed transaction of a PostgresSink: the prepared transaction's name and
/// server transaction id (txid_current(), to tell a commit that already happened from a
/// rollback), and rows the transaction carries itself (written when it is committed;
/// only when its barrier came before the previous transaction was committed). An empty
/// gid: nothing was written.
struct PostgresTransaction {
  std::string gid;
  uint64_t xid = 0;
  std::vector<std::vector<std::string>> carried;
};

template <>
struct Serializer<PostgresTransaction> {
  static std::string id() { return "PostgresTransaction"; }
  static uint32_t version() { return 1; }
  static void write(ByteWriter& w, const PostgresTransaction& t) {
    w.writeBytes(t.gid);
    w.writeVarint(t.xid);
    Serializer<std::vector<std::vector<std::string>>>::write(w, t.carried);
  }
  static PostgresTransaction read(ByteReader& r) {
    PostgresTransaction t;
    t.gid = std::string(r.readBytes());
    t.xid = r.readVarint();
    t.carried = Serializer<std::vector<std::vector<std::string>>>::read(r);
    return t;
  }
};

namespace detail {

struct PgConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct PgResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, PgResultDeleter>;

/// `"name"`, or `"schema"."name"` for "schema.name": identifiers as stored (case-sensitive).
inline std::string quotePgName(std::string_view name) {
  std::string out;
  size_t start = 0;
  for (;;) {
    size_t dot = name.find('.', start);
    std::string_view part = name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    out += '"';
    for (char c : part) {
      if (c == '"') out += '"';
      out += c;
    }
    out += '"';
    if (dot == std::string_view::npos) return out;
    out += '.';
    start = dot + 1;
  }
}

/// libpq's parse of a connection string (free with PQconninfoFree), or null and *why.
inline PQconninfoOption* parseConninfo(const std::string& conninfo, std::string* why) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (opts == nullptr) {
    *why = err ? err : "cannot parse it";
    PQfreemem(err);
    while (!why->empty() && why->back() == '\n') why->pop_back();
  }
  return opts;
}

/// A connection string's settings without the password, for messages.
inline std::string describeConninfo(const std::string& conninfo) {
  std::string why;
  PQconninfoOption* opts = parseConninfo(conninfo, &why);
  if (opts == nullptr) return "'" + conninfo + "' (" + why + ")";
  std::string out;
  for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    if (o->val == nullptr || *o->val == '\0' || std::strcmp(o->keyword, "password") == 0) continue;
    out += (out.empty() ? "" : " ") + std::string(o->keyword) + "=" + o->val;
  }
  PQconninfoFree(opts);
  return out.empty() ? "(libpq's defaults)" : out;
}

/// The rows of one checkpoint interval not yet written. Appending: every row, in arrival
/// order. Upserting (key columns): one row per key, a later row replacing an earlier one
/// (an upsert of both is an upsert of the later); the order of the rows taken out is
/// unspecified (one statement upserts them all, and it may not touch a key twice).
///
/// An upsert's row lives in its index entry: the key columns encoded as the map's key,
/// the other columns as its value, both short enough for the small-string buffer in the
/// common case. A record then costs one hash lookup and, for a key seen before, an
/// assignment inside the entry it found; a row vector per key, replaced through an index,
/// cost three dependent cache misses per record (issue 33, P1: with ~80k keys, 46 % of
/// WordCountToPostgres's task thread was this buffer).
class PgRowBuffer {
 public:
  /// `columns`: the number of columns of every row; `keyIndexes`: the key columns (none:
  /// appending).
  explicit PgRowBuffer(size_t columns = 0, std::vector<size_t> keyIndexes = {})
      : keys_(std::move(keyIndexes)), columns_(columns) {
    for (size_t c = 0; c < columns_; ++c)
      if (std::find(keys_.begin(), keys_.end(), c) == keys_.end()) others_.push_back(c);
  }
  /// `row` has the buffer's number of columns (PostgresWriter::add checks).
  void add(std::vector<std::string> row) {
    if (keys_.empty()) {
      rows_.push_back(std::move(row));
      return;
    }
    key_.clear();
    for (size_t k : keys_) appendField(key_, row[k]);
    value_.clear();
    for (size_t c : others_) appendField(value_, row[c]);
    auto [it, fresh] = upserts_.try_emplace(key_, value_);
    if (!fresh) it->second.assign(value_);
  }
  void clear() {
    rows_.clear();
    upserts_.clear();
  }
  size_t size() const { return keys_.empty() ? rows_.size() : upserts_.size(); }
  bool empty() const { return size() == 0; }
  /// The rows, each in the order of the columns; the buffer is empty afterwards.
  std::vector<std::vector<std::string>> take() {
    std::vector<std::vector<std::string>> out;
    if (keys_.empty()) {
      out.swap(rows_);
      return out;
    }
    out.reserve(upserts_.size());
    for (const auto& [key, value] : upserts_) {
      std::vector<std::string>& row = out.emplace_back(columns_);
      readFields(key, keys_, row);
      readFields(value, others_, row);
    }
    upserts_.clear();
    return out;
  }

 private:
  // A field: its length (4 bytes, host order: the encoding never leaves the process),
  // then its bytes.
  static void appendField(std::string& out, const std::string& v) {
    const auto n = static_cast<uint32_t>(v.size());
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out += v;
  }
  static void readFields(const std::string& in, const std::vector<size_t>& columns, std::vector<std::string>& row) {
    size_t at = 0;
    for (size_t c : columns) {
      uint32_t n = 0;
      std::memcpy(&n, in.data() + at, sizeof n);
      at += sizeof n;
      row[c].assign(in, at, n);
      at += n;
    }
  }

  std::vector<size_t> keys_;    // the key columns (empty: appending)
  size_t columns_;
  std::vector<size_t> others_;  // the other columns, when upserting
  std::vector<std::vector<std::string>> rows_;            // appending
  std::unordered_map<std::string, std::string> upserts_;  // upserting: key fields -> other fields
  std::string key_, value_;
};


/// The rows of a PostgresSink into one table (see jobhost/postgres.h). Constructor and
/// options throw JobArgumentError for bad arguments; everything else throws
/// std::runtime_error with what failed, where and how to fix it.
class PostgresWriter {
 public:
  /// TwoPhaseCommitSink's checkpoint id of the end of an input without checkpointing.
  static constexpr uint64_t kEndOfInput = UINT64_MAX;

  /// `conninfo`: a libpq connection string or URI ("host=/tmp/pg dbname=app",
  /// "postgresql://user@db.example.com/app"); `table`: "name" or "schema.name", as
  /// stored in the catalog (quoted: case-sensitive).
  PostgresWriter(std::string conninfo, std::string table, std::vector<std::string> columns)
      : conninfo_(std::move(conninfo)), table_(std::move(table)), columns_(std::move(columns)) {
    if (table_.empty()) throw JobArgumentError("PostgresSink needs a table name");
    if (columns_.empty()) throw JobArgumentError("PostgresSink into '" + table_ + "' needs at least one column");
    std::set<std::string> seen;
    for (const auto& c : columns_)
      if (c.empty() || !seen.insert(c).second)
        throw JobArgumentError("PostgresSink into '" + table_ + "': column names must be non-empty and distinct, got '" +
                               c + "' twice or empty");
    std::string why;
    PQconninfoOption* opts = detail::parseConninfo(conninfo_, &why);
    if (opts == nullptr) {
      throw JobArgumentError("PostgresSink: the connection string '" + conninfo_ + "' is invalid: " + why +
                             " (libpq's form: \"host=/tmp/pg port=5432 dbname=app\" or postgresql://user@host/db)");
    }
    PQconninfoFree(opts);
    jobName_.clear();
    for (char c : table_) jobName_ += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  }
  /// Upsert: rows with equal values in `keyColumns` (a subset of the columns, covered by
  /// a primary key or unique index of the table) replace each other.
  PostgresWriter& upsertOn(std::vector<std::string> keyColumns) {
    if (keyColumns.empty()) throw JobArgumentError("PostgresSink::upsertOn needs at least one key column");
    keyIndexes_.clear();
    for (const auto& k : keyColumns) {
      auto it = std::find(columns_.begin(), columns_.end(), k);
      if (it == columns_.end())
        throw JobArgumentError("PostgresSink::upsertOn: key column '" + k + "' is not one of the sink's columns");
      keyIndexes_.push_back(static_cast<size_t>(it - columns_.begin()));
    }
    keys_ = std::move(keyColumns);
    return *this;
  }
  /// The <job> part of the transaction names: letters, digits and '_' only, at most 63
  /// characters. Default: the table name, other characters as '_'. Two jobs writing into
  /// one table need different names (each recovery rolls back the other's otherwise).
  PostgresWriter& withJobName(std::string name) {
    if (name.empty() || name.size() > 63)
      throw JobArgumentError("PostgresSink::withJobName: the name must have 1 to 63 characters, got '" + name + "'");
    for (char c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
        throw JobArgumentError("PostgresSink::withJobName: '" + name +
                               "' may hold letters, digits and '_' only (it is part of transaction names)");
    jobName_ = std::move(name);
    return *this;
  }
  /// Rows buffered before they are written, at most (one COPY, or one INSERT ... ON
  /// CONFLICT statement, which the server runs while the task goes on). Default 262144.
  PostgresWriter& withBatchSize(size_t rows) {
    if (rows == 0) throw JobArgumentError("PostgresSink::withBatchSize must be positive");
    batch_ = rows;
    return *this;
  }
  /// How long a statement waits for a row lock held by another transaction (e.g. a
  /// prepared transaction nobody commits) before the task fails saying so. Default 30 s.
  PostgresWriter& withLockTimeout(std::chrono::milliseconds timeout) {
    if (timeout.count() <= 0) throw JobArgumentError("PostgresSink::withLockTimeout must be positive");
    lockTimeout_ = timeout;
    return *this;
  }
  const std::string& table() const { return table_; }
  const std::string& jobName() const { return jobName_; }
  /// "jobhost-<job>-<uid>-": the start of this sink's transaction names (after open()).
  const std::string& transactionPrefix() const { return prefix_; }

  void open(OperatorContext& ctx) {
    subtask_ = ctx.subtaskIndex();
    parallelism_ = ctx.parallelism();
    uid_ = ctx.uid();
    where_ = "PostgresSink into " + table_ + " (job name " + jobName_ + ", uid " + uid_ + ", subtask " +
             std::to_string(subtask_ + 1) + "/" + std::to_string(parallelism_) + ")";
    prefix_ = "jobhost-" + jobName_ + "-" + uid_ + "-";
    if (gidFor(subtask_, 99999999999999ull).size() + 8 > 199)
      throw std::runtime_error(where_ + ": the transaction names would exceed PostgreSQL's 199 characters; use a "
                               "shorter uid or withJobName");
    buffer_ = detail::PgRowBuffer(columns_.size(), keyIndexes_);
    data_ = connect("data");
    control_ = connect("control");
    checkServer();
    buildStatements();
    checkTable();
    loadColumnTypes();
  }

  PostgresTransaction beginTransaction() {
    if (!recoveryDone_) {
      recoveryDone_ = true;
      // A fresh start: what an earlier run of this name and uid left prepared was written
      // after whatever that run committed; nothing will commit it (and it holds locks).
      if (!recovered_) cleanUp(subtask_, parallelism_, {}, "an earlier run that was not restored");
    }
    return {};
  }

  /// One record's row, in the order of the columns.
  void add(std::vector<std::string> row) {
    if (row.size() != columns_.size())
      throw std::runtime_error(where_ + ": the row function returned " + std::to_string(row.size()) +
                               " values for the " + std::to_string(columns_.size()) + " columns (" + columnList() +
                               ")");
    for (const auto& v : row)
      if (std::memchr(v.data(), '\0', v.size()) != nullptr)
        throw std::runtime_error(where_ + ": a row value holds a NUL byte, which PostgreSQL text cannot store");
    buffer_.add(std::move(row));
    if (unfinished_.empty() && buffer_.size() >= batchRows()) flush();
  }

  void preCommit(PostgresTransaction& txn, uint64_t checkpointId) {
    const std::string gid = gidFor(subtask_, checkpointId);
    if (unfinished_.empty()) {
      flush();
      if (!inTransaction_) return;  // nothing written since the last barrier
    } else {
      // The previous transaction is not committed yet and holds its row locks: writing
      // now could wait for them on this thread, which must commit it. The rows travel in
      // the checkpoint instead, and an empty prepared transaction marks their commit.
      if (buffer_.empty()) return;
      txn.carried = buffer_.take();
      begin(data_.get(), "data");
    }
    prepare(data_.get(), gid, checkpointId);
    txn.gid = gid;
    txn.xid = xid_;
    inTransaction_ = false;
    unfinished_.insert(gid);
  }

  void commit(const PostgresTransaction& txn) {
    if (txn.gid.empty()) return;
    if (txn.carried.empty()) {
      commitPrepared(txn.gid, txn.xid);
    } else {
      // The marker's state says whether the carried rows were written: while it is
      // prepared they may be (prepared as <gid>-carried) or not; once it is committed,
      // they were prepared before.
      const std::string rowsGid = txn.gid + "-carried";
      const bool marker = isPrepared(txn.gid);
      bool rows = isPrepared(rowsGid);
      if (marker && !rows) {
        begin(control_.get(), "control");
        writeRows(control_.get(), txn.carried, "control");
        prepare(control_.get(), rowsGid, 0);
        rows = true;
      }
      commitPrepared(txn.gid, txn.xid);
      if (rows) commitPrepared(rowsGid, 0);
    }
    unfinished_.erase(txn.gid);
  }

  void abort(const PostgresTransaction& txn) {
    if (txn.gid.empty()) {  // the open transaction: its rows are not prepared
      buffer_.clear();
      discardInFlight();
      if (inTransaction_ && data_ && PQstatus(data_.get()) == CONNECTION_OK) detail::PgResult(PQexec(data_.get(), "ROLLBACK"));
      inTransaction_ = false;
      return;
    }
    for (const std::string& g : {txn.gid, txn.gid + "-carried"}) rollbackPrepared(g, /*quiet=*/true);
    unfinished_.erase(txn.gid);
  }

  void abortStrays(int subtask, int parallelism, const std::vector<PostgresTransaction>& keep) {
    recovered_ = true;
    std::set<std::string> kept;
    for (const auto& t : keep)
      if (!t.gid.empty()) kept.insert({t.gid, t.gid + "-carried"});
    cleanUp(subtask, parallelism, kept, "the run that wrote the restored checkpoint or a later one");
  }

  void close() {
    discardInFlight();
    if (inTransaction_ && data_ && PQstatus(data_.get()) == CONNECTION_OK) detail::PgResult(PQexec(data_.get(), "ROLLBACK"));
    inTransaction_ = false;
    data_.reset();
    control_.reset();
  }

 private:
  using Conn = std::shared_ptr<PGconn>;  // shared: the sink is copied (unopened) per subtask

  size_t batchRows() const { return batch_; }
  std::string columnList() const {
    std::string s;
    for (const auto& c : columns_) s += (s.empty() ? "" : ", ") + c;
    return s;
  }
  std::string gidFor(int subtask, uint64_t checkpointId) const {
    return prefix_ + std::to_string(subtask) + "-" +
           (checkpointId == kEndOfInput ? std::string("end") : std::to_string(checkpointId));
  }
  /// For a name of this sink (prefix, "<subtask>-<checkpoint|end>", optionally
  /// "-carried"): the subtask index; -1 for any other name.
  int subtaskOf(const std::string& gid) const {
    if (gid.rfind(prefix_, 0) != 0) return -1;
    std::string rest = gid.substr(prefix_.size());
    if (rest.size() > 8 && rest.compare(rest.size() - 8, 8, "-carried") == 0) rest.resize(rest.size() - 8);
    size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos) return -1;
    std::string s = rest.substr(0, dash), c = rest.substr(dash + 1);
    auto digits = [](const std::string& x) {
      return !x.empty() && x.size() <= 19 && std::all_of(x.begin(), x.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    };
    if (!digits(s) || s.size() > 9 || !(digits(c) || c == "end")) return -1;
    return std::stoi(s);
  }

  Conn connect(const char* role) {
    const std::string app = ("jobhost " + jobName_ + " " + uid_ + " " + std::to_string(subtask_) + " " + role).substr(0, 63);
    // Later entries override earlier ones: the user's connection string wins.
    const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
    const char* values[] = {"10", app.c_str(), conninfo_.c_str(), nullptr};
    Conn c(PQconnectdbParams(keys, values, /*expand_dbname=*/1), detail::PgConnDeleter());
    if (!c) throw std::runtime_error(where_ + ": libpq could not allocate a connection");
    if (PQstatus(c.get()) != CONNECTION_OK) {
      const std::string why = trimmed(PQerrorMessage(c.get()));
      // The server answered and refused (a wrong password, a missing database): a
      // configuration error, for the restart strategy. No answer (refused, no socket, a
      // time-out) or a server starting up or shutting down: waited out.
      const bool answered = why.find("FATAL:") != std::string::npos &&
                            why.find("starting up") == std::string::npos &&
                            why.find("shutting down") == std::string::npos &&
                            why.find("recovery mode") == std::string::npos;
      if (!answered)
        throw DependencyUnavailable(where_ + ": cannot connect to PostgreSQL (" +
                                    detail::describeConninfo(conninfo_) + "): " + why +
                                    ". The job waits for the server and restores the latest checkpoint when it answers.");
      throw std::runtime_error(where_ + ": cannot connect to PostgreSQL (" + detail::describeConninfo(conninfo_) +
                               "): " + why + ". Check the connection string; the restart strategy retries.");
    }
    return c;
  }

  std::string server(PGconn* c) const {
    return std::string("the PostgreSQL server at ") + PQhost(c) + ":" + PQport(c) + ", database " + PQdb(c) +
           " (user " + PQuser(c) + ")";
  }
  /// libpq's message on one line, without its final period (the sink's text goes on).
  static std::string trimmed(const char* s) {
    std::string m;
    for (const char* p = s ? s : ""; *p; ++p) {
      const char ch = (*p == '\n' || *p == '\t') ? ' ' : *p;
      if (ch == ' ' && (m.empty() || m.back() == ' ')) continue;
      m += ch;
    }
    while (!m.empty() && (m.back() == ' ' || m.back() == '.')) m.pop_back();
    return m;
  }
  static std::string sqlstate(const PGresult* r) {
    const char* s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
    return s ? s : "";
  }
  /// True if the failure of `r` on `c` is a lost connection (the task must restart).
  static bool connectionLost(PGconn* c, const PGresult* r) {
    const std::string st = sqlstate(r);
    return PQstatus(c) == CONNECTION_BAD || st.rfind("08", 0) == 0 || st == "57P01" || st == "57P02" || st == "57P03";
  }
  /// Throws the error of `r` (a failed `what` on connection `c`), classified.
  [[noreturn]] void fail(PGconn* c, const PGresult* r, const std::string& what) const {
    std::string msg = trimmed(r ? PQresultErrorMessage(r) : PQerrorMessage(c));
    if (msg.empty()) msg = trimmed(PQerrorMessage(c));
    const char* hint = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_HINT) : nullptr;
    if (hint) msg += " (hint: " + trimmed(hint) + ")";
    const std::string st = sqlstate(r);
    if (connectionLost(c, r))
      throw DependencyUnavailable(where_ + ": lost the connection to PostgreSQL (" + detail::describeConninfo(conninfo_) +
                               ") while " + what + ": " + msg +
                                  ". The job waits for the server, then restores the latest checkpoint and reconnects; "
                                  "the recovery commits what that checkpoint pre-committed and rolls back the rest.");
    if (st == "55P03")
      throw std::runtime_error(where_ + ": waited more than " + std::to_string(lockTimeout_.count()) +
                               " ms for a row lock while " + what + " on " + server(c) + ": " + msg +
                               ". Another transaction holds rows of " + table_ +
                               "; prepared transactions hold theirs until committed: " + preparedList(control_.get()) +
                               ". Roll back one that no running job will commit with ROLLBACK PREPARED '<gid>'.");
    throw std::runtime_error(where_ + ": " + what + " failed on " + server(c) + ": " + msg +
                             (st.empty() ? std::string() : " (SQLSTATE " + st + ")"));
  }
  /// Throws the failure of sending on `c` (libpq's message): DependencyUnavailable when
  /// the connection is gone.
  [[noreturn]] void failSend(PGconn* c, const std::string& what) const {
    const std::string msg = where_ + ": " + what + " failed: " + trimmed(PQerrorMessage(c));
    if (PQstatus(c) == CONNECTION_BAD) throw DependencyUnavailable(msg + " (the connection to PostgreSQL is lost)");
    throw std::runtime_error(msg);
  }
  detail::PgResult exec(PGconn* c, const std::string& sql, const std::string& what) {
    detail::PgResult r(PQexec(c, sql.c_str()));
    ExecStatusType s = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) fail(c, r.get(), what);
    return r;
  }
  detail::PgResult execParams(PGconn* c, const std::string& sql, const std::vector<const char*>& params,
                              const std::string& what) {
    detail::PgResult r(PQexecParams(c, sql.c_str(), static_cast<int>(params.size()), nullptr, params.data(), nullptr,
                                    nullptr, 0));
    ExecStatusType s = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) fail(c, r.get(), what);
    return r;
  }
  std::string literal(PGconn* c, const std::string& s) const {
    char* e = PQescapeLiteral(c, s.data(), s.size());
    if (e == nullptr) throw std::runtime_error(where_ + ": cannot quote '" + s + "': " + trimmed(PQerrorMessage(c)));
    std::string out(e);
    PQfreemem(e);
    return out;
  }

  void checkServer() {
    PGconn* c = control_.get();
    auto r = exec(c, "SHOW max_prepared_transactions", "reading max_prepared_transactions");
    const std::string max = PQgetvalue(r.get(), 0, 0);
    if (max == "0")
      throw std::runtime_error(
          where_ + ": " + server(c) +
          " refuses prepared transactions (max_prepared_transactions = 0), and exactly-once output needs them: "
          "PREPARE TRANSACTION at every checkpoint, COMMIT PREPARED when it completes. Set max_prepared_transactions "
          "to at least 2 per sink subtask (" +
          std::to_string(2 * parallelism_) +
          " here) plus what other clients use — in postgresql.conf, or ALTER SYSTEM SET max_prepared_transactions = " +
          std::to_string(std::max(10, 2 * parallelism_)) + " — and restart the server.");
    for (PGconn* x : {data_.get(), control_.get()})
      exec(x, "SET lock_timeout = " + std::to_string(lockTimeout_.count()), "setting lock_timeout");
  }

  void buildStatements() {
    std::string head = "INSERT INTO " + detail::quotePgName(table_) + " (";
    for (size_t i = 0; i < columns_.size(); ++i) head += (i ? ", " : "") + detail::quotePgName(columns_[i]);
    head += ") VALUES ";
    conflict_.clear();
    if (!keys_.empty()) {
      conflict_ = " ON CONFLICT (";
      for (size_t i = 0; i < keys_.size(); ++i) conflict_ += (i ? ", " : "") + detail::quotePgName(keys_[i]);
      conflict_ += ") DO ";
      std::string set;
      for (size_t i = 0; i < columns_.size(); ++i) {
        if (std::find(keyIndexes_.begin(), keyIndexes_.end(), i) != keyIndexes_.end()) continue;
        const std::string q = detail::quotePgName(columns_[i]);
        set += (set.empty() ? "" : ", ") + q + " = EXCLUDED." + q;
      }
      conflict_ += set.empty() ? "NOTHING" : "UPDATE SET " + set;
    }
    insertHead_ = head;
  }
  /// The statement for one row of parameters (checkTable plans it).
  std::string insertOneRowSql() const {
    std::string sql = insertHead_ + "(";
    for (size_t c = 0; c < columns_.size(); ++c) sql += (c ? ",$" : "$") + std::to_string(c + 1);
    return sql + ")" + conflict_;
  }

  /// Plans (EXPLAIN: nothing runs) one row of the statement, so that a missing table or
  /// column, a missing unique index for the upsert or a missing privilege shows now.
  void checkTable() {
    PGconn* c = control_.get();
    std::vector<const char*> nulls(columns_.size(), nullptr);
    detail::PgResult r(PQexecParams(c, ("EXPLAIN " + insertOneRowSql()).c_str(), static_cast<int>(nulls.size()), nullptr,
                                    nulls.data(), nullptr, nullptr, 0));
    if (r && PQresultStatus(r.get()) == PGRES_TUPLES_OK) return;
    const std::string st = sqlstate(r.get());
    const std::string msg = trimmed(r ? PQresultErrorMessage(r.get()) : PQerrorMessage(c));
    std::string ddl = "CREATE TABLE " + table_ + " (";
    for (const auto& col : columns_) ddl += col + " <type>, ";
    ddl += keys_.empty() ? "..." : "PRIMARY KEY (" + join(keys_) + ")";
    ddl += ")";
    if (st == "42P01" || st == "3F000")
      throw std::runtime_error(where_ + ": table " + table_ + " does not exist in " + server(c) + " (" + msg +
                               "). Create it before the job starts, e.g. " + ddl +
                               ", or give the sink the right table name (\"schema.name\" as stored; names are "
                               "case-sensitive).");
    if (st == "42703")
      throw std::runtime_error(where_ + ": table " + table_ + " in " + server(c) + " lacks a column the sink writes (" +
                               msg + "); the sink writes " + columnList() + ": add the column or change the sink's columns.");
    if (st == "42P10")
      throw std::runtime_error(where_ + ": table " + table_ + " in " + server(c) +
                               " has no primary key or unique index on exactly (" + join(keys_) +
                               "), which the upsert (ON CONFLICT) needs (" + msg + "): e.g. ALTER TABLE " + table_ +
                               " ADD PRIMARY KEY (" + join(keys_) + ").");
    if (st == "42501")
      throw std::runtime_error(where_ + ": user " + PQuser(c) + " may not insert into " + table_ + " in " + server(c) +
                               " (" + msg + "): GRANT INSERT" + (keys_.empty() ? "" : ", UPDATE") + " ON " + table_ +
                               " TO " + PQuser(c) + ".");
    fail(c, r.get(), "checking the INSERT statement into " + table_);
  }
  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  }

  void begin(PGconn* c, const char* role) {
    if (c == data_.get()) awaitData();
    auto r = exec(c, "BEGIN; SELECT txid_current()", std::string("beginning a transaction (") + role + " connection)");
    xid_ = std::stoull(PQgetvalue(r.get(), 0, 0));
    if (c == data_.get()) inTransaction_ = true;
  }
  void flush() {
    if (buffer_.empty()) return;
    if (!inTransaction_) begin(data_.get(), "data");
    writeRows(data_.get(), buffer_.take(), "data", /*async=*/true);
  }
  /// Writes `rows` in the open transaction of `c`, in one round trip (issue 33, P1: the
  /// 1000-row INSERTs of before ran at 0.05 of a COPY). Appending: one COPY into the
  /// table. Upserting: one INSERT ... SELECT ... FROM unnest($1::text[], ...) ON CONFLICT,
  /// a text array per column cast to the column's type; a statement may not touch a row
  /// twice, and the buffer holds one row per key. (The cheaper-looking COPY into a
  /// temporary table and INSERT from it is refused: PostgreSQL cannot PREPARE a
  /// transaction that has touched a temporary table.)
  ///
  /// `async` (the data connection only): the statement is sent and its result read later
  /// (awaitData), so the server writes while the task goes on; one at a time.
  void writeRows(PGconn* c, const std::vector<std::vector<std::string>>& rows, const char* role, bool async = false) {
    if (rows.empty()) return;
    if (c == data_.get()) awaitData();
    const std::string what =
        "writing " + std::to_string(rows.size()) + " rows into " + table_ + " (" + role + " connection)";
    if (keys_.empty()) {
      copyRows(c, rows, what, async);
      return;
    }
    bool& ready = c == data_.get() ? dataPrepared_ : controlPrepared_;
    if (!ready) {
      detail::PgResult p(PQprepare(c, "jobhost_upsert", upsertSql().c_str(), static_cast<int>(columns_.size()), nullptr));
      if (!p || PQresultStatus(p.get()) != PGRES_COMMAND_OK) fail(c, p.get(), "preparing the upsert into " + table_);
      ready = true;
    }
    std::vector<std::string> arrays(columns_.size());
    for (size_t col = 0; col < columns_.size(); ++col) {
      std::string& a = arrays[col];
      a.reserve(rows.size() * 16);
      a += '{';
      for (size_t i = 0; i < rows.size(); ++i) {
        if (i) a += ',';
        appendArrayElement(a, rows[i][col]);
      }
      a += '}';
    }
    std::vector<const char*> params;
    for (const auto& a : arrays) params.push_back(a.c_str());
    if (async) {
      if (PQsendQueryPrepared(c, "jobhost_upsert", static_cast<int>(params.size()), params.data(), nullptr, nullptr,
                              0) != 1)
        fail(c, nullptr, what);
      inFlight_ = what;
      return;
    }
    detail::PgResult r(
        PQexecPrepared(c, "jobhost_upsert", static_cast<int>(params.size()), params.data(), nullptr, nullptr, 0));
    if (!r || PQresultStatus(r.get()) != PGRES_COMMAND_OK) fail(c, r.get(), what);
  }
  /// INSERT INTO t (a, b) SELECT u.a::<type of a>, u.b::<type of b> FROM unnest($1::text[],
  /// $2::text[]) AS u(a, b) ON CONFLICT (keys) DO ...
  std::string upsertSql() const {
    std::string cols, casts, params, names;
    for (size_t i = 0; i < columns_.size(); ++i) {
      const std::string q = detail::quotePgName(columns_[i]);
      const std::string n = "c" + std::to_string(i + 1);
      cols += (i ? ", " : "") + q;
      casts += (i ? ", u." : "u.") + n + "::" + columnTypes_[i];
      params += (i ? ", $" : "$") + std::to_string(i + 1) + "::text[]";
      names += (i ? ", " : "") + n;
    }
    return "INSERT INTO " + detail::quotePgName(table_) + " (" + cols + ") SELECT " + casts + " FROM unnest(" + params +
           ") AS u(" + names + ")" + conflict_;
  }
  /// `v` as an element of a text array literal: quoted, with '"' and '\\' escaped.
  static void appendArrayElement(std::string& out, const std::string& v) {
    out += '"';
    for (char ch : v) {
      if (ch == '"' || ch == '\\') out += '\\';
      out += ch;
    }
    out += '"';
  }
  /// COPY ... FROM STDIN in text format: tab-separated, with '\\', tab, newline and
  /// carriage return escaped (so a value "\\N" is text, not NULL).
  void copyRows(PGconn* c, const std::vector<std::vector<std::string>>& rows, const std::string& what, bool async) {
    std::string sql = "COPY " + detail::quotePgName(table_) + " (";
    for (size_t i = 0; i < columns_.size(); ++i) sql += (i ? ", " : "") + detail::quotePgName(columns_[i]);
    sql += ") FROM STDIN";
    detail::PgResult start(PQexec(c, sql.c_str()));
    if (!start || PQresultStatus(start.get()) != PGRES_COPY_IN) fail(c, start.get(), what);
    std::string data;
    auto send = [&] {
      if (!data.empty() && PQputCopyData(c, data.data(), static_cast<int>(data.size())) != 1)
        failSend(c, what);
      data.clear();
    };
    for (const auto& row : rows) {
      for (size_t col = 0; col < row.size(); ++col) {
        if (col) data += '\t';
        for (char ch : row[col]) {
          switch (ch) {
            case '\\': data += "\\\\"; break;
            case '\t': data += "\\t"; break;
            case '\n': data += "\\n"; break;
            case '\r': data += "\\r"; break;
            default: data += ch;
          }
        }
      }
      data += '\n';
      if (data.size() >= (1u << 20)) send();
    }
    send();
    if (PQputCopyEnd(c, nullptr) != 1) failSend(c, what);
    if (async) {
      inFlight_ = what;
      return;
    }
    detail::PgResult r(PQgetResult(c));
    const bool ok = r && PQresultStatus(r.get()) == PGRES_COMMAND_OK;
    while (PGresult* more = PQgetResult(c)) PQclear(more);  // the protocol ends with a null result
    if (!ok) fail(c, r.get(), what);
  }
  /// The columns' types as the catalog names them (format_type: "bigint",
  /// "character varying(20)", ...), for the upsert's casts from text.
  void loadColumnTypes() {
    PGconn* c = control_.get();
    const std::string t = detail::quotePgName(table_);
    const char* p[] = {t.c_str()};
    detail::PgResult r(PQexecParams(c,
                                    "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                                    "WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped",
                                    1, nullptr, p, nullptr, nullptr, 0));
    if (!r || PQresultStatus(r.get()) != PGRES_TUPLES_OK) fail(c, r.get(), "reading the column types of " + table_);
    columnTypes_.assign(columns_.size(), "");
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      auto it = std::find(columns_.begin(), columns_.end(), PQgetvalue(r.get(), i, 0));
      if (it != columns_.end()) columnTypes_[static_cast<size_t>(it - columns_.begin())] = PQgetvalue(r.get(), i, 1);
    }
    for (size_t i = 0; i < columns_.size(); ++i)
      if (columnTypes_[i].empty())
        throw std::runtime_error(where_ + ": table " + table_ + " in " + server(c) + " has no column " + columns_[i] +
                                 "; the sink writes " + columnList() + ": add the column or change the sink's columns.");
  }
  /// Reads the result of the statement in flight on the data connection, if any; throws
  /// its error.
  void awaitData() {
    if (inFlight_.empty()) return;
    const std::string what = std::move(inFlight_);
    inFlight_.clear();
    detail::PgResult r(PQgetResult(data_.get()));
    const bool ok = r && PQresultStatus(r.get()) == PGRES_COMMAND_OK;
    while (PGresult* more = PQgetResult(data_.get())) PQclear(more);  // the protocol ends with a null result
    if (!ok) fail(data_.get(), r.get(), what);
  }
  /// Drops the statement in flight, if any (its transaction is being rolled back).
  void discardInFlight() {
    if (inFlight_.empty()) return;
    inFlight_.clear();
    if (data_)
      while (PGresult* r = PQgetResult(data_.get())) PQclear(r);
  }
  void prepare(PGconn* c, const std::string& gid, uint64_t checkpointId) {
    if (c == data_.get()) awaitData();
    detail::PgResult r(PQexec(c, ("PREPARE TRANSACTION " + literal(c, gid)).c_str()));
    if (c == data_.get()) inTransaction_ = false;  // prepared or rolled back: the session is free
    if (r && PQresultStatus(r.get()) == PGRES_COMMAND_OK) return;
    const std::string st = sqlstate(r.get());
    const std::string what = "preparing transaction '" + gid + "'" +
                             (checkpointId ? " for checkpoint " + std::to_string(checkpointId) : std::string());
    const std::string msg = trimmed(r ? PQresultErrorMessage(r.get()) : PQerrorMessage(c));
    if (st == "55000")
      throw std::runtime_error(where_ + ": " + server(c) + " refuses prepared transactions (" + msg +
                               "): set max_prepared_transactions to at least " + std::to_string(2 * parallelism_) +
                               " and restart the server.");
    if (st == "53400")
      throw std::runtime_error(where_ + ": " + server(c) + " has no prepared transaction slot left (" + msg +
                               "; in use: " + preparedList(control_.get()) +
                               "): raise max_prepared_transactions, or roll back leftovers with ROLLBACK PREPARED.");
    if (st == "42710")
      throw std::runtime_error(where_ + ": a prepared transaction named '" + gid + "' exists already on " + server(c) +
                               " (" + msg + "): another job writes with the same job name and uid; give each job "
                               "its own withJobName.");
    fail(c, r.get(), what);
  }
  bool isPrepared(const std::string& gid) {
    const char* p[] = {gid.c_str()};
    detail::PgResult r(PQexecParams(control_.get(), "SELECT 1 FROM pg_prepared_xacts WHERE gid = $1", 1, nullptr, p,
                                    nullptr, nullptr, 0));
    if (!r || PQresultStatus(r.get()) != PGRES_TUPLES_OK) fail(control_.get(), r.get(), "looking up '" + gid + "'");
    return PQntuples(r.get()) > 0;
  }
  /// COMMIT PREPARED; a name that is gone is fine if the server says its transaction
  /// committed (a commit before a failure), and an error if it was rolled back.
  void commitPrepared(const std::string& gid, uint64_t xid) {
    PGconn* c = control_.get();
    detail::PgResult r(PQexec(c, ("COMMIT PREPARED " + literal(c, gid)).c_str()));
    if (r && PQresultStatus(r.get()) == PGRES_COMMAND_OK) return;
    if (sqlstate(r.get()) != "42704") fail(c, r.get(), "committing prepared transaction '" + gid + "'");
    if (xid == 0) return;  // a <gid>-carried: prepared before its marker was committed
    const std::string x = std::to_string(xid);
    const char* p[] = {x.c_str()};
    detail::PgResult s(PQexecParams(c, "SELECT txid_status($1::bigint)", 1, nullptr, p, nullptr, nullptr, 0));
    if (!s || PQresultStatus(s.get()) != PGRES_TUPLES_OK) fail(c, s.get(), "looking up transaction " + x);
    if (PQgetisnull(s.get(), 0, 0)) return;  // too old for the server to tell: only ever committed by us
    const std::string status = PQgetvalue(s.get(), 0, 0);
    if (status == "committed") return;
    throw std::runtime_error(where_ + ": prepared transaction '" + gid + "' (transaction " + x + ") is gone from " +
                             server(c) + " and was not committed (" + status +
                             "): someone rolled it back (ROLLBACK PREPARED), and its rows are lost. The output "
                             "is no longer exactly once; restore a checkpoint or savepoint taken before those rows "
                             "(or accept the loss by starting without state).");
  }
  void rollbackPrepared(const std::string& gid, bool quiet) {
    if (quiet && (!control_ || PQstatus(control_.get()) != CONNECTION_OK)) return;
    PGconn* c = control_.get();
    detail::PgResult r(PQexec(c, ("ROLLBACK PREPARED " + literal(c, gid)).c_str()));
    if ((r && PQresultStatus(r.get()) == PGRES_COMMAND_OK) || sqlstate(r.get()) == "42704" || quiet) return;
    fail(c, r.get(), "rolling back prepared transaction '" + gid + "'");
  }
  /// "gid (database, prepared at), ..." of every prepared transaction on the server.
  std::string preparedList(PGconn* c) const {
    detail::PgResult r(PQexec(c, "SELECT gid, database, prepared FROM pg_prepared_xacts ORDER BY prepared"));
    if (!r || PQresultStatus(r.get()) != PGRES_TUPLES_OK) return "(cannot list them)";
    std::string s;
    for (int i = 0; i < PQntuples(r.get()); ++i)
      s += (i ? ", '" : "'") + std::string(PQgetvalue(r.get(), i, 0)) + "' (database " + PQgetvalue(r.get(), i, 1) +
           ", prepared " + PQgetvalue(r.get(), i, 2) + ")";
    return s.empty() ? "none" : s;
  }

  /// Rolls back the prepared transactions of this sink's former subtasks s with
  /// s % parallelism == subtask that are not in `kept`, and lists on stderr what it
  /// rolled back and, once per sink (subtask 0), the `jobhost-` ones it cannot attribute.
  void cleanUp(int subtask, int parallelism, const std::set<std::string>& kept, const std::string& whose) {
    PGconn* c = control_.get();
    auto r = exec(c,
                  "SELECT gid, database, prepared, database = current_database() FROM pg_prepared_xacts "
                  "WHERE gid LIKE 'jobhost-%' ORDER BY prepared",
                  "listing prepared transactions");
    std::vector<std::string> rolledBack, elsewhere, foreign;
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      const std::string gid = PQgetvalue(r.get(), i, 0), db = PQgetvalue(r.get(), i, 1), at = PQgetvalue(r.get(), i, 2);
      const bool here = std::string(PQgetvalue(r.get(), i, 3)) == "t";
      const int s = subtaskOf(gid);
      if (s < 0) {
        foreign.push_back("'" + gid + "' (database " + db + ", prepared " + at + ")");
        continue;
      }
      if (s % parallelism != subtask || kept.count(gid)) continue;
      if (!here) {
        elsewhere.push_back("'" + gid + "' (database " + db + ")");
        continue;
      }
      rollbackPrepared(gid, /*quiet=*/false);
      rolledBack.push_back(gid);
    }
    if (!rolledBack.empty()) {
      std::string s;
      for (const auto& g : rolledBack) s += (s.empty() ? "" : ", ") + g;
      std::fprintf(stderr, "%s: rolled back %zu prepared transaction(s) of %s: %s\n", where_.c_str(), rolledBack.size(),
                   whose.c_str(), s.c_str());
    }
    if (!elsewhere.empty()) {
      std::string s;
      for (const auto& g : elsewhere) s += (s.empty() ? "" : ", ") + g;
      std::fprintf(stderr,
                   "%s: WARNING: prepared transactions of this sink in another database cannot be rolled back from "
                   "here (connect to that database and ROLLBACK PREPARED them): %s\n",
                   where_.c_str(), s.c_str());
    }
    if (subtask == 0 && !foreign.empty()) {
      std::string s;
      for (const auto& g : foreign) s += (s.empty() ? "" : ", ") + g;
      std::fprintf(stderr,
                   "%s: prepared transactions named jobhost-... that are not this sink's (other jobs or sinks; if "
                   "none of them is running, ROLLBACK PREPARED '<gid>' discards them): %s\n",
                   where_.c_str(), s.c_str());
    }
  }

  std::string conninfo_, table_;
  std::vector<std::string> columns_, keys_;
  std::vector<size_t> keyIndexes_;
  std::string jobName_;
  size_t batch_ = 262144;
  std::chrono::milliseconds lockTimeout_{std::chrono::seconds(30)};

  // After open():
  int subtask_ = 0, parallelism_ = 1;
  std::string uid_, where_, prefix_, insertHead_, conflict_;
  Conn data_, control_;            // data_: the open transaction; control_: commits, rollbacks, checks
  bool dataPrepared_ = false, controlPrepared_ = false;  // "jobhost_upsert" prepared on the connection
  std::vector<std::string> columnTypes_;  // format_type() of each column, for the upsert's casts
  std::string inFlight_;  // the data connection's statement whose result is not read yet (what it does); empty: none
  bool inTransaction_ = false;     // data_ has an open transaction (BEGIN sent)
  uint64_t xid_ = 0;               // of the last transaction begun
  detail::PgRowBuffer buffer_;     // rows not yet written
  std::set<std::string> unfinished_;  // pre-committed here, not yet committed: nothing is written meanwhile
  bool recovered_ = false, recoveryDone_ = false;
};


}  // namespace detail
}  // namespace jobhost
