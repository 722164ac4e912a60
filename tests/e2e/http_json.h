// tests/e2e/http_json.h — a raw HTTP/1.1 client (any headers, any number of Host lines)
// and a minimal JSON reader, for the end-to-end tests of jobhost's HTTP servers (the
// dashboard, ui_test.cc; the health endpoint, production_test.cc).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "json_reader.h"  // Json, JsonReader

namespace e2e {

// ---------------------------------------------------------------------------------------
// A raw HTTP/1.1 client.

struct HttpResponse {
  int status = 0;  // 0: no answer
  std::string headers;
  std::string body;
  std::string error;
  Json json() const { return JsonReader(body).parse().value_or(Json{}); }
};

/// Sends `request` as it is (any headers, any number of Host lines) and reads the answer.
inline HttpResponse sendRaw(int port, const std::string& request, std::chrono::seconds timeout = std::chrono::seconds(120)) {
  HttpResponse r;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return r.error = std::strerror(errno), r;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count());
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    r.error = std::string("connect: ") + std::strerror(errno);
    close(fd);
    return r;
  }
  for (size_t off = 0; off < request.size();) {
    ssize_t n = send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      r.error = std::string("send: ") + std::strerror(errno);
      close(fd);
      return r;
    }
    off += static_cast<size_t>(n);
  }
  std::string in;
  char buf[16384];
  std::optional<size_t> total;  // header + Content-Length
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
    if (!total) {
      auto end = in.find("\r\n\r\n");
      if (end != std::string::npos) {
        std::string head = in.substr(0, end);
        std::string lower = head;
        std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
        auto cl = lower.find("\r\ncontent-length:");
        if (cl != std::string::npos) total = end + 4 + std::stoul(head.substr(cl + 17));
      }
    }
    if (total && in.size() >= *total) break;
  }
  close(fd);
  auto end = in.find("\r\n\r\n");
  if (in.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) {
    r.error = "no HTTP response: '" + in.substr(0, 200) + "'";
    return r;
  }
  r.status = std::stoi(in.substr(9, 3));
  r.headers = in.substr(0, end);
  r.body = in.substr(end + 4);
  return r;
}

/// GET `target` from 127.0.0.1:`port` with a plain Host header.
inline HttpResponse httpGet(int port, const std::string& target, std::chrono::seconds timeout = std::chrono::seconds(30)) {
  return sendRaw(port, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\nConnection: close\r\n\r\n",
                 timeout);
}

}  // namespace e2e
