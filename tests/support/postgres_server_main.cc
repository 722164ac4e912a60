// jobhost-test-postgres — tests/support/postgres_server.h for shell scripts
// (tests/chaos/exactly_once_postgres.sh):
//
//   jobhost-test-postgres check                 exit 0 if a server can run here, else 77 and why
//   jobhost-test-postgres start [--max-prepared N] [--durable]
//                                               starts one, prints its directory
//   jobhost-test-postgres conninfo DIR [DB]     its libpq connection string
//   jobhost-test-postgres sql DIR DB SQL        runs SQL, prints the rows (tab-separated)
//   jobhost-test-postgres remove DIR            stops it and removes DIR
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "support/postgres_server.h"

using jobhost_test::PostgresServer;

namespace {
int usage() {
  std::fprintf(stderr,
               "usage: jobhost-test-postgres check | start [--max-prepared N] [--durable] | conninfo DIR [DB] | "
               "sql DIR DB SQL | remove DIR\n");
  return 2;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  try {
    if (cmd == "check") {
      std::string why = PostgresServer::unavailable();
      if (why.empty()) return 0;
      std::printf("%s\n", why.c_str());
      return 77;
    }
    if (cmd == "start") {
      jobhost_test::PostgresServerOptions o;
      for (int i = 2; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--max-prepared") && i + 1 < argc) o.maxPreparedTransactions = std::stoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--durable")) o.durable = true;
        else return usage();
      }
      std::string why;
      auto s = PostgresServer::start(o, &why);
      if (!s) {
        std::fprintf(stderr, "cannot start a PostgreSQL server: %s\n", why.c_str());
        return 1;
      }
      std::printf("%s\n", s->dir().c_str());
      s->release();
      return 0;
    }
    if (cmd == "conninfo" && (argc == 3 || argc == 4)) {
      std::printf("%s\n", PostgresServer::attach(argv[2])->conninfo(argc == 4 ? argv[3] : "postgres").c_str());
      return 0;
    }
    if (cmd == "sql" && argc == 5) {
      auto s = PostgresServer::attach(argv[2]);
      for (const auto& row : s->query(argv[4], argv[3])) {
        std::string line;
        for (size_t i = 0; i < row.size(); ++i) line += (i ? "\t" : "") + row[i];
        std::printf("%s\n", line.c_str());
      }
      return 0;
    }
    if (cmd == "remove" && argc == 3) {
      PostgresServer::attach(argv[2])->remove();
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jobhost-test-postgres %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  return usage();
}
