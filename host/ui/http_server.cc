// `jobhost ui`'s HTTP server: kj-http (Cap'n Proto's HTTP library) on the main thread's
// event loop, in front of DashboardAccess (Host, Origin, token) and Dashboard. Requests that need a job run on worker
// threads (each job RPC runs its own kj event loop there, see control_client.h); their
// replies come back through cross-thread fulfillers, so the page and quick answers never
// wait behind a savepoint.
#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <kj/compat/http.h>
#include <signal.h>
#include <spdlog/spdlog.h>

// GCC 12 reports a false -Wmaybe-uninitialized inside kj promise templates.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <atomic>
#include <functional>
#include <iostream>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#include "control/control_server.h"
#include "exit_codes.h"
#include "ui/dashboard.h"
#include "ui/dashboard_access.h"
#include "ui/dashboard_record.h"
#include "ui/http_server.h"
#include "ui/http_serving.h"

namespace jobhost::host {

// Named, not anonymous: DashboardHttpServer::Impl (a member of a class with external
// linkage) holds an Offloader and a DashboardService (-Wsubobject-linkage).
namespace dashboard_http {

constexpr size_t kMaxBodyBytes = 4096;
constexpr size_t kMaxRequestsInFlight = 16;
constexpr size_t kMaxHttpConnections = 64;

HttpReply jsonError(int status, const std::string& message) { return jsonErrorReply(status, message); }

/// Runs blocking calls on worker threads, at most kMaxRequestsInFlight at once.
class Offloader {
 public:
  ~Offloader() { drain(std::chrono::seconds(10)); }

  /// nullopt when too many requests are in flight.
  std::optional<kj::Promise<HttpReply>> run(std::function<HttpReply()> fn) {
    std::lock_guard lock(mu_);
    reapLocked();
    if (workers_.size() >= kMaxRequestsInFlight) return std::nullopt;
    auto paf = kj::newPromiseAndCrossThreadFulfiller<HttpReply>();
    auto done = std::make_shared<std::atomic<bool>>(false);
    auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<HttpReply>>>(kj::mv(paf.fulfiller));
    std::thread t([fn = std::move(fn), fulfiller, done]() mutable {
      HttpReply reply;
      try {
        reply = fn();
      } catch (const std::exception& e) {
        reply = jsonError(500, "internal error");
        spdlog::warn("dashboard request failed: {}", e.what());
      } catch (...) {
        reply = jsonError(500, "internal error");
      }
      (*fulfiller)->fulfill(kj::mv(reply));
      fulfiller.reset();
      done->store(true);
    });
    workers_.push_back(Worker{std::move(t), std::move(done)});
    return kj::mv(paf.promise);
  }

  /// Waits up to `timeout` for requests in flight; detaches what still runs (a savepoint).
  void drain(std::chrono::milliseconds timeout) {
    std::list<Worker> workers;
    {
      std::lock_guard lock(mu_);
      workers.swap(workers_);
    }
    auto until = std::chrono::steady_clock::now() + timeout;
    for (auto& w : workers) {
      while (!w.done->load() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (w.done->load()) w.thread.join();
      else w.thread.detach();
    }
  }

 private:
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  void reapLocked() {
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::mutex mu_;
  std::list<Worker> workers_;  // guarded by mu_
};

class DashboardService final : public kj::HttpService {
 public:
  DashboardService(std::shared_ptr<Dashboard> dashboard, Offloader& offloader, const kj::HttpHeaderTable& table,
                   DashboardAccess access)
      : dashboard_(std::move(dashboard)), offloader_(offloader), table_(table), access_(std::move(access)) {}

  kj::Promise<void> request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders& headers,
                            kj::AsyncInputStream& requestBody, Response& response) override {
    // url and headers die at the first read of the body: copy what we need.
    DashboardAccess::Request req;
    req.method = kj::str(method).cStr();
    req.target = std::string(url.cStr(), url.size());
    headers.forEach([&](kj::StringPtr name, kj::StringPtr value) {
      req.headers.push_back(HttpHeader{std::string(name.cStr(), name.size()), std::string(value.cStr(), value.size())});
    });
    if (auto refused = access_.check(req)) {
      if (refused->status >= 400)
        spdlog::debug("dashboard: {} {} refused with {}: {}", req.method, req.target.substr(0, 200), refused->status,
                      refused->body);
      return send(response, kj::mv(*refused));
    }
    const std::string& m = req.method;
    const std::string& target = req.target;
    std::string type =
        headers.get(kj::HttpHeaderId::CONTENT_TYPE).map([](kj::StringPtr s) { return std::string(s.cStr()); }).orDefault("");
    // A foreign page can make a browser POST a form, but not with a JSON content type
    // (that needs CORS, which we never grant); DashboardAccess has checked the Origin.
    if (m == "POST" && type.rfind("application/json", 0) != 0)
      return send(response, jsonError(415, "POST requests must have Content-Type: application/json"));
    if (auto quick = dashboard_->quick(m, target)) return send(response, kj::mv(*quick));
    std::string length =
        headers.get(kj::HttpHeaderId::CONTENT_LENGTH).map([](kj::StringPtr s) { return std::string(s.cStr()); }).orDefault("");
    if (length.size() > 9 || (!length.empty() && std::stoul("0" + length) > kMaxBodyBytes))
      return send(response, jsonError(413, "request body too large"));
    return requestBody.readAllText(kMaxBodyBytes + 1)
        .then(
            [this, m, target, &response](kj::String body) -> kj::Promise<void> {
              if (body.size() > kMaxBodyBytes) return send(response, jsonError(413, "request body too large"));
              auto dashboard = dashboard_;
              auto promise = offloader_.run([dashboard, m, target, b = std::string(body.cStr(), body.size())] {
                return dashboard->handle(m, target, b);
              });
              if (!promise) return send(response, jsonError(503, "too many requests in flight; try again"));
              return promise->then([this, &response](HttpReply r) { return send(response, kj::mv(r)); });
            },
            [this, &response](kj::Exception&& e) -> kj::Promise<void> {
              if (e.getType() == kj::Exception::Type::DISCONNECTED) return kj::mv(e);
              return send(response, jsonError(413, "request body too large"));  // readAllText's limit
            });
  }

 private:
  kj::Promise<void> send(Response& response, HttpReply reply) {
    static const std::vector<std::pair<std::string, std::string>> kSecurityHeaders = {
        {"Cache-Control", "no-store"},
        {"X-Content-Type-Options", "nosniff"},
        {"X-Frame-Options", "DENY"},
        {"Referrer-Policy", "no-referrer"},
        {"Content-Security-Policy",
         "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
         "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
    };
    if (reply.status == 405) reply.headers.emplace_back("Allow", "GET, HEAD, POST");
    return sendHttpReply(response, table_, kj::mv(reply), kSecurityHeaders);
  }

  std::shared_ptr<Dashboard> dashboard_;
  Offloader& offloader_;
  const kj::HttpHeaderTable& table_;
  DashboardAccess access_;
};

}  // namespace dashboard_http

using dashboard_http::DashboardService;
using dashboard_http::Offloader;
using dashboard_http::kMaxHttpConnections;

struct DashboardHttpServer::Impl {
  Impl(kj::Timer& timer, std::shared_ptr<Dashboard> dashboard, DashboardAccess access)
      : table(kj::HttpHeaderTable::Builder().build()),
        service(std::move(dashboard), offloader, *table, std::move(access)),
        server(timer, *table, service, settings()) {}
  kj::HttpServerSettings settings() {
    kj::HttpServerSettings s;
    s.errorHandler = errors;
    return s;
  }
  kj::Own<kj::HttpHeaderTable> table;
  Offloader offloader;  // before service: requests in flight end before the service goes
  QuietHttpErrors errors{"dashboard"};
  DashboardService service;
  kj::HttpServer server;
};

DashboardHttpServer::DashboardHttpServer(kj::Timer& timer, std::shared_ptr<Dashboard> dashboard, DashboardAccess access)
    : impl_(std::make_unique<Impl>(timer, std::move(dashboard), std::move(access))) {}
DashboardHttpServer::~DashboardHttpServer() = default;
kj::HttpServer& DashboardHttpServer::server() { return impl_->server; }
void DashboardHttpServer::drain(std::chrono::milliseconds timeout) { impl_->offloader.drain(timeout); }

int serveDashboard(const DashboardOptions& o) {
  const bool loopback = isLoopbackAddress(o.address);
  if (!o.auth && !loopback) {
    std::cerr << "error: --no-auth is allowed only with a loopback --address (127.0.0.1, ::1, localhost), not "
              << o.address << ": anyone who can reach " << o.address << " could use the dashboard\n";
    return kExitUsage;
  }
  for (const auto& h : o.allowedHosts)
    if (auto problem = allowedHostProblem(h)) {
      std::cerr << "error: --allowed-host '" << h << "': " << *problem << "\n";
      return kExitUsage;
    }
  auto runtimeDir = ensureRuntimeDir();
  if (!runtimeDir.ok()) {
    std::cerr << "error: " << runtimeDir.status().message() << "\n";
    return kExitUsage;
  }
  // Signals first: captureSignal blocks them in this thread and every thread started later.
  kj::UnixEventPort::captureSignal(SIGINT);
  kj::UnixEventPort::captureSignal(SIGTERM);
  auto io = kj::setupAsyncIo();

  kj::Own<kj::ConnectionReceiver> listener;
  try {
    auto addr = io.provider->getNetwork()
                    .parseAddress(kj::StringPtr(o.address.c_str()), static_cast<uint>(o.port))
                    .wait(io.waitScope);
    listener = addr->listen();
  } catch (const kj::Exception& e) {
    std::string why = e.getDescription().cStr();
    if (why.find("Address already in use") != std::string::npos)
      why = "the port is in use (another jobhost ui?): pick another --port, or --port 0 for any free one";
    else if (why.find("DNS lookup failed") != std::string::npos)
      why = "cannot resolve the address";
    else if (auto colon = why.find("): "); colon != std::string::npos)
      why = why.substr(colon + 3);  // drop kj's "::bind(sockfd, ...)" prefix
    std::cerr << "error: cannot listen on " << o.address << ":" << o.port << ": " << why << "\n";
    return kExitUsage;
  }
  const int port = static_cast<int>(listener->getPort());
  DashboardAccess access({o.address, port, o.allowedHosts, o.auth ? newDashboardToken() : std::string()});
  const std::string url = access.url();
  std::string hosts;
  for (const auto& h : access.hosts()) hosts += (hosts.empty() ? "" : ", ") + h;

  DashboardRecord record{getpid(), processStartTicks(getpid()), port, url, ""};
  auto recordPath = writeDashboardRecord(*runtimeDir, record);
  if (!recordPath.ok()) {
    std::cerr << "error: " << recordPath.status().message() << "\n";
    return kExitUsage;
  }
  auto removeRecord = kj::defer([&] { unlink(recordPath->c_str()); });

  DashboardHttpServer http(io.provider->getTimer(), std::make_shared<Dashboard>(o.dashboard), access);
  if (!o.auth)
    spdlog::warn("--no-auth: NO AUTHENTICATION — every local user and every program on this machine can read your "
                 "jobs' configuration{} through {}",
                 o.dashboard.readOnly ? "" : " and take savepoints or cancel them", url);
  if (!loopback)
    spdlog::warn("the dashboard listens on {}: traffic is plain HTTP — the token and everything the dashboard shows "
                 "cross the network unencrypted; put a TLS reverse proxy in front (and --allowed-host NAME), or bind "
                 "127.0.0.1 (the default) to keep it on this machine",
                 o.address);
  spdlog::info("the dashboard answers for Host {}; its URL{} is in {} (jobhost ui --print-url)", hosts,
               o.auth ? " with the token" : "", *recordPath);
  spdlog::info("finished jobs are looked for under {}{}", o.dashboard.checkpointDir,
               o.dashboard.readOnly ? "; read-only: savepoint and cancel are disabled" : "");
  std::cout << "Dashboard: " << url << std::endl;

  auto stopped = io.unixEventPort.onSignal(SIGINT)
                     .exclusiveJoin(io.unixEventPort.onSignal(SIGTERM))
                     .then([](siginfo_t info) { spdlog::info("received signal {}: stopping the dashboard", info.si_signo); });
  HttpConnections connections(http.server(), kMaxHttpConnections, "dashboard");
  try {
    connections.acceptLoop(*listener).exclusiveJoin(kj::mv(stopped)).wait(io.waitScope);
  } catch (const kj::Exception& e) {
    std::cerr << "error: the dashboard stopped: " << e.getDescription().cStr() << "\n";
    return kExitJobFailed;
  }
  http.drain(std::chrono::seconds(5));
  return kExitInterrupted;
}

}  // namespace jobhost::host
