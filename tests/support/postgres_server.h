// tests/support/postgres_server.h — a private PostgreSQL server for tests and benchmarks:
// `initdb` into a new directory under /tmp, `pg_ctl start` with the server listening on a
// Unix socket in that directory only (listen_addresses = '', no TCP port), stopped and
// removed by the destructor. As root, initdb refuses to run, so the server runs as an
// unprivileged user: Debian's `postgres` if it exists, else `jobhost-pg-test`, created
// with useradd (as the lockdown tests create their second user).
//
// Connections use the superuser role `jobhost` (trust authentication: only the socket,
// in a directory of mode 0700, reaches the server).
//
// Tests skip when PostgreSQL is not installed (unavailable() says why and how to install
// it) unless JOBHOST_REQUIRE_POSTGRES=1, as .ci/run sets: then they fail (required()).
//
// Thread-safety: none; one thread uses a server object.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace jobhost_test {

struct PostgresServerOptions {
  int maxPreparedTransactions = 10;  // the server's max_prepared_transactions (0 refuses PREPARE)
  bool durable = false;              // fsync on; off: faster, and tests never crash the server
  std::vector<std::string> settings;  // more "name=value" server settings
};

class PostgresServer {
 public:
  /// Runs initdb and starts a server; nullptr and `*why` (what failed, and the server's
  /// log) when it cannot.
  static std::unique_ptr<PostgresServer> start(const PostgresServerOptions& options, std::string* why);
  /// A server an earlier start() left running in `dir` (the command-line helper); released:
  /// its destruction leaves the server running.
  static std::unique_ptr<PostgresServer> attach(const std::string& dir);
  /// remove()s the server, unless release()d.
  ~PostgresServer();
  /// Stops the server (immediate shutdown) and removes its directory.
  void remove();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  /// "" if a server can run here, else why not ("initdb is not installed: apt-get install
  /// postgresql"), for a test to skip with.
  static std::string unavailable();
  /// JOBHOST_REQUIRE_POSTGRES=1: a test that cannot start a server fails instead of skipping.
  static bool required();

  /// The directory: data in `data/`, the socket, the log in `server.log`.
  const std::string& dir() const { return dir_; }
  /// A libpq connection string for database `db`.
  std::string conninfo(const std::string& db = "postgres") const;
  /// pg_ctl stop -m fast / start again (same data). False and `*why` on failure.
  bool stop(std::string* why);
  bool startAgain(std::string* why);
  /// Leaves the server running at destruction (the command-line helper's `start`).
  void release() { released_ = true; }

  /// Runs `sql` (one or more statements) in `db`; the rows of the last one, as text (NULL
  /// as "\N"). Throws std::runtime_error with the server's message on failure.
  std::vector<std::vector<std::string>> query(const std::string& sql, const std::string& db = "postgres") const;
  /// The first column of query()'s rows.
  std::vector<std::string> column(const std::string& sql, const std::string& db = "postgres") const;
  /// Creates database `db` (dropping it first if it exists).
  void createDatabase(const std::string& db) const;

 private:
  PostgresServer() = default;
  std::string dir_, bin_;  // bin_: the directory of initdb and pg_ctl
  unsigned uid_ = 0, gid_ = 0;
  bool asOther_ = false, released_ = false;
  std::string startOptions_;
};

}  // namespace jobhost_test
