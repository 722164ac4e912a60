// host/ui/http_reply.h — an HTTP answer as the servers of jobhost build it (the
// dashboard's, http_server.h, and `run --health-port`'s, health_server.h), before
// http_serving.h sends it through kj-http.
//
// Thread-safety: a plain value.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace jobhost::host {

struct HttpReply {
  int status = 200;
  std::string contentType;
  std::string body;
  // Extra: Location, Set-Cookie, ... (initialised here, so that HttpReply{status, type, body}
  // leaves it empty without a -Wmissing-field-initializers warning).
  std::vector<std::pair<std::string, std::string>> headers = {};
};

}  // namespace jobhost::host
