// tests/e2e/json_reader.h — a minimal JSON reader for the tests' checks of JSON output
// (the dashboard's REST API, `jobhost state dump|diff --format json`). Numbers keep their
// literal (Json::s) so that a test can tell 3 from 3.0 or "3".
#pragma once

#include <cctype>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace e2e {

struct Json {
  enum Type { kNull, kBool, kNumber, kString, kArray, kObject } type = kNull;
  bool b = false;
  double n = 0;
  std::string s;  // a string's value, or a number's literal as written
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
    v.s = t_.substr(i_, used);  // the literal: "3", not "3.0"
    i_ += used;
    return v;
  }
  const std::string& t_;
  size_t i_ = 0;
};

}  // namespace e2e
