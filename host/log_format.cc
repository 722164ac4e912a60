// Log line formats: see log_format.h.
#include "log_format.h"

#include <spdlog/details/log_msg.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>

namespace jobhost::host {

namespace {

std::mutex gJobMu;
std::string gJobId;   // guarded by gJobMu
int gAttempt = 0;     // guarded by gJobMu
std::atomic<LogFormat> gFormat{LogFormat::kText};

// JSON string escaping, by hand: spdlog and fmt have none, and the libraries that do
// (capnp-json) need a schema for every object; a log line is one flat object.
void appendJsonString(std::string_view s, spdlog::memory_buf_t& out) {
  static const char* kHex = "0123456789abcdef";
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out.append(std::string_view("\\\"")); break;
      case '\\': out.append(std::string_view("\\\\")); break;
      case '\n': out.append(std::string_view("\\n")); break;
      case '\r': out.append(std::string_view("\\r")); break;
      case '\t': out.append(std::string_view("\\t")); break;
      default:
        if (c < 0x20) {
          const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
          out.append(esc, esc + sizeof esc);
        } else {
          out.push_back(static_cast<char>(c));  // UTF-8 passes through as is
        }
    }
  }
  out.push_back('"');
}

class JsonFormatter final : public spdlog::formatter {
 public:
  explicit JsonFormatter(std::string process) : process_(std::move(process)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& out) override {
    using namespace std::chrono;
    const auto since = msg.time.time_since_epoch();
    const std::time_t secs = static_cast<std::time_t>(duration_cast<seconds>(since).count());
    const int millis = static_cast<int>(duration_cast<milliseconds>(since).count() % 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char when[64];  // room for any int the fields could hold (-Wformat-truncation)
    std::snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                  tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
    std::string jobId;
    int attempt = 0;
    {
      std::lock_guard lock(gJobMu);
      jobId = gJobId;
      attempt = gAttempt;
    }
    out.append(std::string_view("{\"time\":\""));
    out.append(std::string_view(when));
    out.append(std::string_view("\",\"level\":"));
    const auto level = spdlog::level::to_string_view(msg.level);
    appendJsonString(std::string_view(level.data(), level.size()), out);
    out.append(std::string_view(",\"job_id\":"));
    if (jobId.empty()) out.append(std::string_view("null"));
    else appendJsonString(jobId, out);
    out.append(std::string_view(",\"attempt\":"));
    if (attempt <= 0) out.append(std::string_view("null"));
    else out.append(std::to_string(attempt));
    out.append(std::string_view(",\"message\":"));
    appendJsonString(std::string_view(msg.payload.data(), msg.payload.size()), out);
    out.append(std::string_view(",\"fields\":{\"process\":"));
    appendJsonString(process_, out);
    out.append(",\"pid\":" + std::to_string(::getpid()) + ",\"thread\":" + std::to_string(msg.thread_id) +
               ",\"logger\":");
    appendJsonString(std::string_view(msg.logger_name.data(), msg.logger_name.size()), out);
    out.append(std::string_view("}}\n"));
  }

  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(process_); }

 private:
  std::string process_;
};

}  // namespace

bool parseLogFormat(const std::string& name, LogFormat* out) {
  if (name == "text") *out = LogFormat::kText;
  else if (name == "json") *out = LogFormat::kJson;
  else return false;
  return true;
}

std::unique_ptr<spdlog::formatter> newJsonLogFormatter(const std::string& process) {
  return std::make_unique<JsonFormatter>(process);
}

void configureLogging(LogFormat format, const std::string& process) {
  gFormat.store(format);
  if (format == LogFormat::kJson) spdlog::set_formatter(newJsonLogFormatter(process));
  else spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ %v");
}

LogFormat currentLogFormat() { return gFormat.load(); }

void setLogJob(const std::string& jobId, int attempt) {
  std::lock_guard lock(gJobMu);
  gJobId = jobId;
  gAttempt = attempt;
}

}  // namespace jobhost::host
