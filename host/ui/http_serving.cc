// kj-http plumbing shared by jobhost's HTTP servers: see http_serving.h.
#include "ui/http_serving.h"

#include <spdlog/spdlog.h>

// GCC 12 reports a false -Wmaybe-uninitialized inside kj promise templates.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace jobhost::host {

const char* httpReasonPhrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 303: return "See Other";
    case 401: return "Unauthorized";
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

kj::Promise<void> sendHttpReply(kj::HttpService::Response& response, const kj::HttpHeaderTable& table, HttpReply reply,
                                const std::vector<std::pair<std::string, std::string>>& commonHeaders) {
  // kj::HttpHeaders keeps pointers: the strings live in `owned` until the body is sent.
  struct Owned {
    HttpReply reply;
    std::vector<std::pair<std::string, std::string>> common;
  };
  auto owned = kj::heap<Owned>(Owned{std::move(reply), commonHeaders});
  kj::HttpHeaders h(table);
  if (!owned->reply.contentType.empty()) h.set(kj::HttpHeaderId::CONTENT_TYPE, owned->reply.contentType.c_str());
  for (const auto& [name, value] : owned->common) h.add(kj::StringPtr(name.c_str()), kj::StringPtr(value.c_str()));
  for (const auto& [name, value] : owned->reply.headers) h.add(kj::StringPtr(name.c_str()), kj::StringPtr(value.c_str()));
  const int status = owned->reply.status;
  auto stream = response.send(static_cast<uint>(status), httpReasonPhrase(status), h, owned->reply.body.size());
  auto write = stream->write(owned->reply.body.data(), owned->reply.body.size());
  return write.attach(kj::mv(stream), kj::mv(owned));
}

kj::Promise<void> QuietHttpErrors::handleApplicationError(kj::Exception exception,
                                                          kj::Maybe<kj::HttpService::Response&> response) {
  spdlog::debug("{} request failed: {}", what_, exception.getDescription().cStr());
  if (exception.getType() == kj::Exception::Type::DISCONNECTED) return kj::READY_NOW;
  return kj::evalNow([&] { return kj::HttpServerErrorHandler::handleApplicationError(kj::mv(exception), response); })
      .catch_([this](kj::Exception&& e) {
        spdlog::debug("{}: could not send an error response: {}", what_, e.getDescription().cStr());
      });
}

kj::Promise<void> QuietHttpErrors::handleClientProtocolError(kj::HttpHeaders::ProtocolError error,
                                                             kj::HttpService::Response& response) {
  spdlog::debug("{}: bad HTTP request: {}", what_, error.description.cStr());
  return kj::evalNow([&] { return kj::HttpServerErrorHandler::handleClientProtocolError(kj::mv(error), response); })
      .catch_([this](kj::Exception&& e) {
        spdlog::debug("{}: could not send an error response: {}", what_, e.getDescription().cStr());
      });
}

kj::Promise<void> HttpConnections::acceptLoop(kj::ConnectionReceiver& listener) {
  return listener.accept().then([this, &listener](kj::Own<kj::AsyncIoStream>&& connection) {
    if (open_ >= max_) {
      spdlog::warn("{}: refused a connection: {} connections already open", what_, open_);
    } else {
      ++open_;
      tasks_.add(server_.listenHttp(kj::mv(connection)).attach(kj::defer([this] { --open_; })));
    }
    return acceptLoop(listener);
  });
}

void HttpConnections::taskFailed(kj::Exception&& e) {
  spdlog::debug("{} connection ended: {}", what_, e.getDescription().cStr());
}

}  // namespace jobhost::host
