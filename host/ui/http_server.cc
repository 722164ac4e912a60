// `jobhost ui`'s HTTP server: kj-http (Cap'n Proto's HTTP library) on the main thread's
// event loop, in front of Dashboard (dashboard.h). Requests that need a job run on worker
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

#include "job_runner.h"
#include "ui/dashboard.h"

namespace jobhost::host {

namespace {

constexpr size_t kMaxBodyBytes = 4096;
constexpr size_t kMaxRequestsInFlight = 16;
constexpr size_t kMaxConnections = 64;

const char* reasonPhrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

HttpReply jsonError(int status, const std::string& message) {
  // Only fixed messages pass here (no request data): hand-built JSON is safe.
  return HttpReply{status, "application/json; charset=utf-8",
                   "{\"status\":" + std::to_string(status) + ",\"error\":\"" + message + "\"}"};
}

bool isLoopbackAddress(const std::string& a) {
  return a == "localhost" || a == "::1" || a == "[::1]" || a.rfind("127.", 0) == 0;
}

/// The host part of a Host header ("127.0.0.1:8081" -> "127.0.0.1", "[::1]:80" -> "[::1]").
std::string hostPart(const std::string& h) {
  if (!h.empty() && h[0] == '[') {
    auto close = h.find(']');
    return close == std::string::npos ? h : h.substr(0, close + 1);
  }
  return h.substr(0, h.find(':'));
}

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
                   kj::HttpHeaderId origin, bool loopbackOnly)
      : dashboard_(std::move(dashboard)), offloader_(offloader), table_(table), origin_(origin), loopbackOnly_(loopbackOnly) {}

  kj::Promise<void> request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders& headers,
                            kj::AsyncInputStream& requestBody, Response& response) override {
    // url and headers die at the first read of the body: copy what we need.
    std::string target(url.cStr(), url.size());
    std::string m = kj::str(method).cStr();
    std::string host = headers.get(kj::HttpHeaderId::HOST).map([](kj::StringPtr s) { return std::string(s.cStr()); }).orDefault("");
    std::string type =
        headers.get(kj::HttpHeaderId::CONTENT_TYPE).map([](kj::StringPtr s) { return std::string(s.cStr()); }).orDefault("");
    std::string origin = headers.get(origin_).map([](kj::StringPtr s) { return std::string(s.cStr()); }).orDefault("");

    if (loopbackOnly_ && !isLoopbackAddress(hostPart(host)))
      return send(response, jsonError(403, "the Host header must name a loopback address (127.0.0.1, localhost)"));
    if (m == "POST") {
      // A foreign page can make a browser POST a form, but not with a JSON content type
      // (that needs CORS, which we never grant), and its Origin gives it away.
      if (type.rfind("application/json", 0) != 0)
        return send(response, jsonError(415, "POST requests must have Content-Type: application/json"));
      if (!origin.empty() && origin != "http://" + host)
        return send(response, jsonError(403, "cross-origin requests are not allowed"));
    }
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
    kj::HttpHeaders h(table_);
    if (!reply.contentType.empty()) h.set(kj::HttpHeaderId::CONTENT_TYPE, reply.contentType.c_str());
    h.add("Cache-Control", "no-store");
    h.add("X-Content-Type-Options", "nosniff");
    h.add("X-Frame-Options", "DENY");
    h.add("Referrer-Policy", "no-referrer");
    h.add("Content-Security-Policy",
          "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
          "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    if (reply.status == 405) h.add("Allow", "GET, HEAD, POST");
    auto body = kj::heap<std::string>(kj::mv(reply.body));
    auto stream = response.send(static_cast<uint>(reply.status), reasonPhrase(reply.status), h, body->size());
    auto write = stream->write(body->data(), body->size());
    return write.attach(kj::mv(stream), kj::mv(body));
  }

  std::shared_ptr<Dashboard> dashboard_;
  Offloader& offloader_;
  const kj::HttpHeaderTable& table_;
  kj::HttpHeaderId origin_;
  bool loopbackOnly_;
};

/// A client that hangs up mid-response is not an error worth a log line: the connection
/// just closes. Anything else gets kj's default answer (500), if one can still be sent.
class QuietErrors final : public kj::HttpServerErrorHandler {
 public:
  kj::Promise<void> handleApplicationError(kj::Exception exception, kj::Maybe<kj::HttpService::Response&> response) override {
    spdlog::debug("dashboard request failed: {}", exception.getDescription().cStr());
    if (exception.getType() == kj::Exception::Type::DISCONNECTED) return kj::READY_NOW;
    return kj::evalNow([&] { return kj::HttpServerErrorHandler::handleApplicationError(kj::mv(exception), response); })
        .catch_([](kj::Exception&& e) { spdlog::debug("could not send an error response: {}", e.getDescription().cStr()); });
  }
  kj::Promise<void> handleClientProtocolError(kj::HttpHeaders::ProtocolError error,
                                              kj::HttpService::Response& response) override {
    spdlog::debug("bad HTTP request: {}", error.description.cStr());
    return kj::evalNow([&] { return kj::HttpServerErrorHandler::handleClientProtocolError(kj::mv(error), response); })
        .catch_([](kj::Exception&& e) { spdlog::debug("could not send an error response: {}", e.getDescription().cStr()); });
  }
};

/// Accepts connections and hands each to the HttpServer, at most kMaxConnections at once.
/// Its own TaskSet: a connection that fails (a client that hangs up mid-response) is
/// logged at debug level, where kj's own accept loop would log an error.
class Connections final : private kj::TaskSet::ErrorHandler {
 public:
  Connections(kj::HttpServer& server) : server_(server), tasks_(*this) {}

  kj::Promise<void> acceptLoop(kj::ConnectionReceiver& listener) {
    return listener.accept().then([this, &listener](kj::Own<kj::AsyncIoStream>&& connection) {
      if (open_ >= kMaxConnections) {
        spdlog::warn("dashboard: refused a connection: {} connections already open", open_);
      } else {
        ++open_;
        tasks_.add(server_.listenHttp(kj::mv(connection)).attach(kj::defer([this] { --open_; })));
      }
      return acceptLoop(listener);
    });
  }

 private:
  void taskFailed(kj::Exception&& e) override {
    spdlog::debug("dashboard connection ended: {}", e.getDescription().cStr());
  }
  kj::HttpServer& server_;
  size_t open_ = 0;  // before tasks_: the tasks' deferred decrements run when tasks_ goes
  kj::TaskSet tasks_;
};

}  // namespace

int serveDashboard(const DashboardOptions& o) {
  // Signals first: captureSignal blocks them in this thread and every thread started later.
  kj::UnixEventPort::captureSignal(SIGINT);
  kj::UnixEventPort::captureSignal(SIGTERM);
  auto io = kj::setupAsyncIo();
  kj::HttpHeaderTable::Builder builder;
  kj::HttpHeaderId originId = builder.add("Origin");
  auto table = builder.build();

  bool loopback = isLoopbackAddress(o.address);
  auto dashboard = std::make_shared<Dashboard>(o.dashboard);
  Offloader offloader;
  DashboardService service(dashboard, offloader, *table, originId, loopback);
  QuietErrors errors;
  kj::HttpServerSettings settings;
  settings.errorHandler = errors;
  kj::HttpServer server(io.provider->getTimer(), *table, service, settings);

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
  uint port = listener->getPort();
  std::string shown = o.address.find(':') != std::string::npos && o.address[0] != '[' ? "[" + o.address + "]" : o.address;
  if (!loopback)
    spdlog::warn("the dashboard listens on {}: anyone who can reach it sees your jobs{} — there is no authentication "
                 "(bind 127.0.0.1, the default, to keep it on this machine)",
                 o.address, o.dashboard.readOnly ? "" : " and can take savepoints or cancel them (--read-only disables that)");
  spdlog::info("finished jobs are looked for under {}{}", o.dashboard.checkpointDir,
               o.dashboard.readOnly ? "; read-only: savepoint and cancel are disabled" : "");
  std::cout << "Dashboard: http://" << shown << ":" << port << "/" << std::endl;

  auto stopped = io.unixEventPort.onSignal(SIGINT)
                     .exclusiveJoin(io.unixEventPort.onSignal(SIGTERM))
                     .then([](siginfo_t info) { spdlog::info("received signal {}: stopping the dashboard", info.si_signo); });
  Connections connections(server);
  try {
    connections.acceptLoop(*listener).exclusiveJoin(kj::mv(stopped)).wait(io.waitScope);
  } catch (const kj::Exception& e) {
    std::cerr << "error: the dashboard stopped: " << e.getDescription().cStr() << "\n";
    return kExitJobFailed;
  }
  offloader.drain(std::chrono::seconds(5));
  return kExitInterrupted;
}

}  // namespace jobhost::host
