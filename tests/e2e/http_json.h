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

namespace e2e {

// ---------------------------------------------------------------------------------------
// A minimal JSON reader for the API's answers.

struct Json {
  enum Type { kNull, kBool, kNumber, kString, kArray, kObject } type = kNull;
  bool b = false;
  double n = 0;
  std::string s;
  std::vector<Json> a;
  std::map<std::string, Json> o;
  const Json& operator[](const std::string& k) const {
    static const Json null;
    auto it = o.find(k);
    return it == o.end() ? null : it->second;
  }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& t) : t_(t) {}
  std::optional<Json> parse() {
    try {
      Json v = value();
      ws();
      if (i_ != t_.size()) return std::nullopt;
      return v;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

 private:
  void ws() {
    while (i_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[i_]))) ++i_;
  }
  char peek() {
    ws();
    if (i_ >= t_.size()) throw std::runtime_error("eof");
    return t_[i_];
  }
  void expect(char c) {
    if (peek() != c) throw std::runtime_error("unexpected");
    ++i_;
  }
  std::string str() {
    expect('"');
    std::string out;
    while (i_ < t_.size() && t_[i_] != '"') {
      char c = t_[i_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      char e = t_.at(i_++);
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          unsigned cp = static_cast<unsigned>(std::stoul(t_.substr(i_, 4), nullptr, 16));
          i_ += 4;
          if (cp < 0x80) out += static_cast<char>(cp);
          else if (cp < 0x800) out += {static_cast<char>(0xc0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3f))};
          else
            out += {static_cast<char>(0xe0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3f)),
                    static_cast<char>(0x80 | (cp & 0x3f))};
          break;
        }
        default: out += e;
      }
    }
    expect('"');
    return out;
  }
  Json value() {
    Json v;
    char c = peek();
    if (c == '{') {
      v.type = Json::kObject;
      ++i_;
      if (peek() == '}') return ++i_, v;
      for (;;) {
        std::string k = str();
        expect(':');
        v.o[k] = value();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.type = Json::kArray;
      ++i_;
      if (peek() == ']') return ++i_, v;
      for (;;) {
        v.a.push_back(value());
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.type = Json::kString;
      v.s = str();
      return v;
    }
    if (t_.compare(i_, 4, "true") == 0) return i_ += 4, v.type = Json::kBool, v.b = true, v;
    if (t_.compare(i_, 5, "false") == 0) return i_ += 5, v.type = Json::kBool, v;
    if (t_.compare(i_, 4, "null") == 0) return i_ += 4, v;
    size_t used = 0;
    v.n = std::stod(t_.substr(i_), &used);
    v.type = Json::kNumber;
    i_ += used;
    return v;
  }
  const std::string& t_;
  size_t i_ = 0;
};

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
