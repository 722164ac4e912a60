// tests/support/postgres_server.cc — see postgres_server.h.
#include "support/postgres_server.h"

#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace jobhost_test {
namespace {

constexpr const char* kRole = "jobhost";
constexpr const char* kCreatedUser = "jobhost-pg-test";

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string tail(const std::string& s, size_t n = 1500) { return s.size() > n ? "..." + s.substr(s.size() - n) : s; }

/// The directory holding initdb and pg_ctl: PATH first, then Debian's
/// /usr/lib/postgresql/<version>/bin (highest version); "" if none.
std::string findBinDir() {
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string d; std::getline(ss, d, ':');)
      if (!d.empty() && ::access((d + "/initdb").c_str(), X_OK) == 0 && ::access((d + "/pg_ctl").c_str(), X_OK) == 0)
        return d;
  }
  std::error_code ec;
  std::vector<std::pair<int, std::string>> found;
  for (const auto& e : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    std::string bin = e.path().string() + "/bin";
    if (::access((bin + "/initdb").c_str(), X_OK) != 0) continue;
    try {
      found.emplace_back(std::stoi(e.path().filename().string()), bin);
    } catch (const std::exception&) {
    }
  }
  if (found.empty()) return "";
  return std::max_element(found.begin(), found.end())->second;
}

struct Ran {
  int exitCode = -1;
  std::string output;
};

/// Runs argv (argv[0] an absolute path) with stdout+stderr to a file, in `cwd`, as
/// uid/gid when `asOther`. Everything the child needs is prepared before fork().
Ran runCommand(const std::vector<std::string>& argv, const std::string& cwd, bool asOther, unsigned uid, unsigned gid) {
  std::string outPath = cwd + "/.command-output";
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out = ::open(outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (out < 0) return {-1, "cannot create " + outPath + ": " + std::strerror(errno)};
  if (asOther && ::fchown(out, uid, gid) != 0) {
    ::close(out);
    return {-1, "cannot chown " + outPath + ": " + std::strerror(errno)};
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    ::close_range(3, ~0U, 0);  // a daemonised server must not hold the caller's pipes open
    if (asOther && (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0)) _exit(126);
    if (::chdir(cwd.c_str()) != 0) _exit(126);
    ::execv(args[0], args.data());
    _exit(127);
  }
  ::close(out);
  if (pid < 0) return {-1, std::string("fork failed: ") + std::strerror(errno)};
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  Ran r;
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.output = readAll(outPath);
  ::unlink(outPath.c_str());
  return r;
}

/// As root: the unprivileged user to run the server as (creating one if needed).
bool serverUser(unsigned* uid, unsigned* gid, std::string* why) {
  struct passwd* pw = ::getpwnam("postgres");
  if (pw == nullptr) pw = ::getpwnam(kCreatedUser);
  if (pw == nullptr) {
    std::string cmd = std::string("useradd --system --no-create-home --shell /usr/sbin/nologin ") + kCreatedUser +
                      " >/dev/null 2>&1";
    int rc = std::system(cmd.c_str());
    pw = ::getpwnam(kCreatedUser);
    if (pw == nullptr) {
      *why = "running as root, initdb needs an unprivileged user: there is no 'postgres' user and useradd " +
             std::string(kCreatedUser) + " failed (exit " + std::to_string(rc) + ")";
      return false;
    }
  }
  *uid = pw->pw_uid;
  *gid = pw->pw_gid;
  return true;
}

std::string quoteConn(const std::string& v) {
  std::string o = "'";
  for (char c : v) {
    if (c == '\'' || c == '\\') o += '\\';
    o += c;
  }
  return o + "'";
}

}  // namespace

std::string PostgresServer::unavailable() {
  if (findBinDir().empty())
    return "PostgreSQL's initdb/pg_ctl are not installed (not on PATH, not in /usr/lib/postgresql/*/bin): "
           "apt-get install postgresql";
  return "";
}

bool PostgresServer::required() {
  const char* v = std::getenv("JOBHOST_REQUIRE_POSTGRES");
  return v != nullptr && std::string(v) == "1";
}

std::unique_ptr<PostgresServer> PostgresServer::start(const PostgresServerOptions& options, std::string* why) {
  std::unique_ptr<PostgresServer> s(new PostgresServer());
  s->bin_ = findBinDir();
  if (s->bin_.empty()) {
    *why = unavailable();
    return nullptr;
  }
  if (::geteuid() == 0) {
    if (!serverUser(&s->uid_, &s->gid_, why)) return nullptr;
    s->asOther_ = true;
  }
  // Directly under /tmp: the server's user must reach it, and a socket path has at most
  // 107 characters.
  std::string templ = "/tmp/jobhost-pg-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    *why = "cannot create a directory under /tmp: " + std::string(std::strerror(errno));
    return nullptr;
  }
  s->dir_ = templ;
  if (s->asOther_ && ::chown(s->dir_.c_str(), s->uid_, s->gid_) != 0) {
    *why = "cannot chown " + s->dir_ + ": " + std::strerror(errno);
    return nullptr;  // the destructor removes the directory
  }
  Ran init = runCommand({s->bin_ + "/initdb", "-D", s->dir_ + "/data", "-U", kRole, "--auth=trust", "--no-sync", "-E",
                         "UTF8", "--locale=C"},
                        s->dir_, s->asOther_, s->uid_, s->gid_);
  if (init.exitCode != 0) {
    *why = "initdb failed (exit " + std::to_string(init.exitCode) + "): " + tail(init.output);
    return nullptr;
  }
  std::string o = "-k " + s->dir_ + " -c listen_addresses='' -c max_prepared_transactions=" +
                  std::to_string(options.maxPreparedTransactions) + " -c max_connections=50";
  if (!options.durable) o += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off";
  for (const auto& kv : options.settings) o += " -c " + kv;
  s->startOptions_ = o;
  // For attach(): what stop and start need.
  {
    std::ofstream conf(s->dir_ + "/helper.conf");
    conf << s->bin_ << "\n" << s->uid_ << "\n" << s->gid_ << "\n" << (s->asOther_ ? 1 : 0) << "\n" << o << "\n";
  }
  if (!s->startAgain(why)) return nullptr;
  return s;
}

std::unique_ptr<PostgresServer> PostgresServer::attach(const std::string& dir) {
  std::ifstream conf(dir + "/helper.conf");
  if (!conf) throw std::runtime_error("no PostgreSQL test server in " + dir + " (no helper.conf)");
  std::unique_ptr<PostgresServer> s(new PostgresServer());
  s->dir_ = dir;
  int other = 0;
  conf >> s->bin_ >> s->uid_ >> s->gid_ >> other;
  conf.ignore();
  std::getline(conf, s->startOptions_);
  s->asOther_ = other != 0;
  s->released_ = true;
  return s;
}

PostgresServer::~PostgresServer() {
  if (!released_) remove();
}

void PostgresServer::remove() {
  if (dir_.empty()) return;
  if (fs::exists(dir_ + "/data/postmaster.pid"))
    runCommand({bin_ + "/pg_ctl", "-D", dir_ + "/data", "-m", "immediate", "-w", "stop"}, dir_, asOther_, uid_, gid_);
  std::error_code ec;
  fs::remove_all(dir_, ec);
  dir_.clear();
}

bool PostgresServer::startAgain(std::string* why) {
  Ran r = runCommand({bin_ + "/pg_ctl", "-D", dir_ + "/data", "-l", dir_ + "/server.log", "-w", "-t", "60", "-o",
                      startOptions_, "start"},
                     dir_, asOther_, uid_, gid_);
  if (r.exitCode != 0) {
    *why = "pg_ctl start failed (exit " + std::to_string(r.exitCode) + "): " + tail(r.output) +
           "; server log: " + tail(readAll(dir_ + "/server.log"));
    return false;
  }
  return true;
}

bool PostgresServer::stop(std::string* why) {
  Ran r = runCommand({bin_ + "/pg_ctl", "-D", dir_ + "/data", "-m", "fast", "-w", "-t", "60", "stop"}, dir_, asOther_,
                     uid_, gid_);
  if (r.exitCode != 0) {
    *why = "pg_ctl stop failed (exit " + std::to_string(r.exitCode) + "): " + tail(r.output);
    return false;
  }
  return true;
}

std::string PostgresServer::conninfo(const std::string& db) const {
  return "host=" + quoteConn(dir_) + " port=5432 user=" + kRole + " dbname=" + quoteConn(db);
}

std::vector<std::vector<std::string>> PostgresServer::query(const std::string& sql, const std::string& db) const {
  PGconn* c = PQconnectdb(conninfo(db).c_str());
  if (PQstatus(c) != CONNECTION_OK) {
    std::string e = PQerrorMessage(c);
    PQfinish(c);
    throw std::runtime_error("cannot connect to the test server in " + dir_ + ": " + e);
  }
  PQsetNoticeProcessor(c, [](void*, const char*) {}, nullptr);  // "... does not exist, skipping"
  PGresult* r = PQexec(c, sql.c_str());
  ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    std::string e = PQresultErrorMessage(r);
    PQclear(r);
    PQfinish(c);
    throw std::runtime_error("'" + sql + "' failed: " + e);
  }
  std::vector<std::vector<std::string>> rows;
  for (int i = 0; i < PQntuples(r); ++i) {
    std::vector<std::string> row;
    for (int j = 0; j < PQnfields(r); ++j) row.push_back(PQgetisnull(r, i, j) ? "\\N" : PQgetvalue(r, i, j));
    rows.push_back(std::move(row));
  }
  PQclear(r);
  PQfinish(c);
  return rows;
}

std::vector<std::string> PostgresServer::column(const std::string& sql, const std::string& db) const {
  std::vector<std::string> out;
  for (auto& row : query(sql, db)) out.push_back(row.empty() ? "" : row[0]);
  return out;
}

void PostgresServer::createDatabase(const std::string& db) const {
  query("DROP DATABASE IF EXISTS \"" + db + "\" WITH (FORCE)");
  query("CREATE DATABASE \"" + db + "\"");
}

}  // namespace jobhost_test
