// http_request_fuzz.cc — libFuzzer target for the HTTP request handler of `jobhost ui`:
// kj-http's parser, DashboardAccess (Host, Origin, cookie, Bearer token, the ?token= login)
// and Dashboard's routing, exactly as serveDashboard() stacks them (DashboardHttpServer),
// fed the input as the bytes of one connection (any number of pipelined requests) through
// an in-memory pipe. No jobs run: the runtime and checkpoint directories are empty.
//
// Beyond "no crash, hang, leak or undefined behaviour" it checks what the access rules
// promise, on the responses:
//  - a 2xx JSON answer (the API) or a Set-Cookie only if the input holds the token;
//  - a redirect only to one of the page's own paths (no open redirect);
//  - nothing from the file system (no line of /etc/passwd that the input did not hold:
//    refusals quote a request's Host or Origin).
// Seeds in tests/fuzz/corpus/http_request/ hold the token, so the fuzzer starts from
// requests that get past the checks.
#include <kj/async-io.h>
#include <kj/compat/http.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "ui/dashboard.h"
#include "ui/dashboard_access.h"
#include "ui/http_server.h"

namespace {

using namespace jobhost::host;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

[[noreturn]] void fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "http_request_fuzz invariant violated: %s\n%s\n", what, detail.substr(0, 2000).c_str());
  std::abort();
}

std::string makeDir(const char* what) {
  std::string tmpl = std::string(P_tmpdir) + "/jobhost-http-fuzz-" + what + "-XXXXXX";
  if (!mkdtemp(tmpl.data())) fail("mkdtemp");
  chmod(tmpl.c_str(), 0700);
  return tmpl;
}

struct Fixture {
  Fixture() {
    spdlog::set_level(spdlog::level::off);
    setenv("XDG_RUNTIME_DIR", makeDir("runtime").c_str(), 1);  // no running jobs
    dashboard = std::make_shared<Dashboard>(Dashboard::Options{makeDir("checkpoints"), false});
    http = std::make_unique<DashboardHttpServer>(io.provider->getTimer(), dashboard,
                                                 DashboardAccess({"127.0.0.1", 8081, {"fuzz.example"}, kToken}));
  }
  kj::AsyncIoContext io = kj::setupAsyncIo();
  std::shared_ptr<Dashboard> dashboard;
  std::unique_ptr<DashboardHttpServer> http;
};

/// Checks each response in `out` (one connection's answers, in order). The responses are
/// parsed one after the other, skipping each body by its Content-Length (or chunks), so
/// text a refusal quotes from the request (its Host, say, which may itself read
/// "HTTP/1.1 200 …Set-Cookie:") is never mistaken for a response's head.
void checkResponses(const std::string& out, std::string_view input) {
  const bool hasToken = input.find(kToken) != std::string_view::npos;
  constexpr std::string_view kPasswd = "root:x:0:0:";
  if (out.find(kPasswd) != std::string::npos && input.find(kPasswd) == std::string_view::npos)
    fail("a file's content in a response", out);
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  size_t pos = 0;
  while (pos < out.size()) {
    if (out.compare(pos, 9, "HTTP/1.1 ") != 0) fail("bytes that are not a response where one must start", out.substr(pos));
    size_t end = out.find("\r\n\r\n", pos);
    if (end == std::string::npos) break;  // the connection ended inside a head
    const std::string head = out.substr(pos, end - pos + 2);
    const std::string headLower = lower(head);
    pos = end + 4;
    const int status = std::atoi(head.substr(9, 3).c_str());
    if (status >= 200 && status < 300 && headLower.find("\r\ncontent-type: application/json") != std::string::npos &&
        !hasToken)
      fail("an API answer without the token", head);
    if (headLower.find("\r\nset-cookie:") != std::string::npos && !hasToken) fail("a cookie without the token", head);
    if (auto loc = headLower.find("\r\nlocation: "); loc != std::string::npos) {
      std::string target = head.substr(loc + 12, head.find("\r\n", loc + 12) - loc - 12);
      if (target != "/" && target != "/index.html" && target != "/app.js" && target != "/app.css")
        fail("a redirect off the page", head);
    }
    // Skip the body. A HEAD request's answer announces a length but sends none: the next
    // response's status line follows at once (no body of ours starts with "HTTP/1.1 ").
    if (out.compare(pos, 9, "HTTP/1.1 ") == 0) continue;
    if (auto cl = headLower.find("\r\ncontent-length: "); cl != std::string::npos) {
      pos += std::strtoull(head.c_str() + cl + 18, nullptr, 10);
    } else if (headLower.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
      while (pos < out.size()) {
        size_t lineEnd = out.find("\r\n", pos);
        if (lineEnd == std::string::npos) return;
        const size_t n = std::strtoull(out.c_str() + pos, nullptr, 16);
        pos = lineEnd + 2 + n + 2;
        if (n == 0) break;
      }
    } else {
      return;  // a body up to the end of the connection
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* f = new Fixture();  // one event loop for the process (kj allows one per thread)
  auto& ws = f->io.waitScope;
  auto pipe = kj::newTwoWayPipe();
  auto client = kj::mv(pipe.ends[1]);
  auto served = f->http->server()
                    .listenHttp(kj::mv(pipe.ends[0]))
                    .catch_([](kj::Exception&&) {})  // a connection the server gives up on
                    .eagerlyEvaluate(nullptr);
  auto written = client->write(data, size)
                     .then([&] { client->shutdownWrite(); })
                     .catch_([](kj::Exception&&) {})  // the server closed first (a protocol error)
                     .eagerlyEvaluate(nullptr);
  std::string out;
  auto read = client->readAllText(1 << 22)
                  .then([&](kj::String s) { out.assign(s.cStr(), s.size()); })
                  .catch_([](kj::Exception&&) {});
  read.wait(ws);
  written.wait(ws);
  served.wait(ws);
  f->http->drain(std::chrono::seconds(30));
  checkResponses(out, std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
