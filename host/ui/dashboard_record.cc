// The runtime-directory record of a running `jobhost ui` (see dashboard_record.h).
#include "ui/dashboard_record.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

namespace jobhost::host {

namespace {

constexpr char kPrefix[] = "dashboard-";
constexpr size_t kMaxRecordBytes = 4096;

bool allDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// The record's text: one `key=value` per line.
std::string format(const DashboardRecord& r) {
  return "pid=" + std::to_string(r.pid) + "\nstart=" + std::to_string(r.startTicks) + "\nport=" + std::to_string(r.port) +
         "\nurl=" + r.url + "\n";
}

std::optional<DashboardRecord> parse(const std::string& text) {
  DashboardRecord r;
  std::istringstream in(text);
  std::string line;
  bool pid = false, start = false, port = false;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) return std::nullopt;
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "url") {
      r.url = v;
    } else if (allDigits(v) && v.size() < 20) {
      if (k == "pid") r.pid = static_cast<pid_t>(std::stoll(v)), pid = true;
      if (k == "start") r.startTicks = std::stoull(v), start = true;
      if (k == "port") r.port = std::stoi(v), port = true;
    }
  }
  if (!pid || !start || !port || r.url.rfind("http://", 0) != 0 || r.pid <= 0) return std::nullopt;
  return r;
}

/// The file's content if it is a regular file owned by us (never following a link).
state::Result<std::string> readOwnFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return state::fromErrno("cannot open " + path, errno);
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_size > static_cast<off_t>(kMaxRecordBytes)) {
    close(fd);
    return state::Status::PermissionDenied(path + " is not a small regular file of yours: ignored");
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  ssize_t n = read(fd, out.data(), out.size());
  close(fd);
  if (n < 0) return state::fromErrno("cannot read " + path, errno);
  out.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace

unsigned long long processStartTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  std::vector<std::string> fields;  // from field 3 (state) on
  while (fields.size() < 20 && rest >> field) fields.push_back(field);
  if (fields.size() < 20 || fields[0] == "Z" || fields[0] == "X") return 0;
  return std::stoull(fields[19]);  // field 22: starttime
}

state::Result<std::string> writeDashboardRecord(const std::string& dir, const DashboardRecord& record) {
  const std::string path = dir + "/" + kPrefix + std::to_string(record.pid);
  const std::string tmp = path + ".tmp";
  unlink(tmp.c_str());  // ours from an earlier process with this pid, if anything (the directory is ours alone)
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return state::fromErrno("cannot create " + tmp, errno);
  const std::string text = format(record);
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int err = errno;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) err = errno;
    unlink(tmp.c_str());
    return state::fromErrno("cannot write " + path, err);
  }
  return path;
}

DashboardRecords findDashboardRecords(const std::string& dir) {
  DashboardRecords out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind(kPrefix, 0) == 0 && allDigits(name.substr(sizeof kPrefix - 1))) names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    const std::string path = dir + "/" + name;
    auto text = readOwnFile(path);
    if (!text.ok()) {
      if (text.status().code() != state::Status::Code::kNotFound) out.problems.push_back(text.status().message());
      continue;  // removed meanwhile: a dashboard that stopped
    }
    auto r = parse(*text);
    if (!r) {
      out.problems.push_back(path + " is not a dashboard record: ignored");
      continue;
    }
    r->path = path;
    (processStartTicks(r->pid) == r->startTicks ? out.running : out.stale).push_back(*r);
  }
  auto byStart = [](const DashboardRecord& a, const DashboardRecord& b) { return a.startTicks < b.startTicks; };
  std::sort(out.running.begin(), out.running.end(), byStart);
  return out;
}

}  // namespace jobhost::host
