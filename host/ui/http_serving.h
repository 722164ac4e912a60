// host/ui/http_serving.h — what every HTTP server of jobhost does the same way on top of
// kj-http (Cap'n Proto's HTTP library): accept connections up to a limit, send an
// HttpReply with its status line and headers, and keep a client that hangs up out of the
// error log. Used by the dashboard (http_server.h) and by `jobhost run --health-port`
// (health_server.h).
//
// Thread-safety: each object lives on the thread of one kj event loop.
#pragma once

#include <kj/async-io.h>
#include <kj/compat/http.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "ui/http_reply.h"

namespace jobhost::host {

/// "OK", "Not Found", ... for the status codes jobhost sends.
const char* httpReasonPhrase(int status);

/// Sends `reply` (its body with a Content-Length) with `commonHeaders` and the reply's own.
kj::Promise<void> sendHttpReply(kj::HttpService::Response& response, const kj::HttpHeaderTable& table, HttpReply reply,
                                const std::vector<std::pair<std::string, std::string>>& commonHeaders);

/// A client that hangs up mid-response is not an error worth a log line: the connection
/// just closes. Anything else gets kj's default answer (500), if one can still be sent;
/// both are logged at debug level with `what` ("dashboard", "health endpoint").
class QuietHttpErrors final : public kj::HttpServerErrorHandler {
 public:
  explicit QuietHttpErrors(std::string what) : what_(std::move(what)) {}
  kj::Promise<void> handleApplicationError(kj::Exception exception,
                                           kj::Maybe<kj::HttpService::Response&> response) override;
  kj::Promise<void> handleClientProtocolError(kj::HttpHeaders::ProtocolError error,
                                              kj::HttpService::Response& response) override;

 private:
  std::string what_;
};

/// Accepts connections and hands each to the HttpServer, at most `maxConnections` at
/// once (more are closed with a warning). Its own TaskSet: a connection that fails (a
/// client that hangs up mid-response) is logged at debug level, where kj's own accept
/// loop would log an error.
class HttpConnections final : private kj::TaskSet::ErrorHandler {
 public:
  HttpConnections(kj::HttpServer& server, size_t maxConnections, std::string what)
      : server_(server), max_(maxConnections), what_(std::move(what)), tasks_(*this) {}
  kj::Promise<void> acceptLoop(kj::ConnectionReceiver& listener);

 private:
  void taskFailed(kj::Exception&& e) override;
  kj::HttpServer& server_;
  size_t max_;
  std::string what_;
  size_t open_ = 0;  // before tasks_: the tasks' deferred decrements run when tasks_ goes
  kj::TaskSet tasks_;
};

}  // namespace jobhost::host
