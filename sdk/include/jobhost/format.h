// jobhost/format.h — how records print: the print and text-file sinks call toText().
//
// Strings print as they are, tuples and pairs as `(a,b)`, vectors as `[a, b]`, maps as
// `{k=v, k=v}`, optionals as the value or `null` — as Flink prints Scala tuples. A user
// type prints through `operator<<` if it has one, or a `jobhost::Formatter<T>`
// specialization.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace jobhost {

template <class T, class Enable = void>
struct Formatter {
  using PrimaryTemplate = void;  // marks "no specialization": prints through operator<<
  static void append(std::string& out, const T& v) {
    std::ostringstream os;
    os << v;
    out += os.str();
  }
};

template <class T>
void appendText(std::string& out, const T& v) {
  Formatter<T>::append(out, v);
}

template <class T>
std::string toText(const T& v) {
  std::string s;
  appendText(s, v);
  return s;
}

template <>
struct Formatter<std::string> {
  static void append(std::string& out, const std::string& v) { out += v; }
};
template <>
struct Formatter<bool> {
  static void append(std::string& out, bool v) { out += v ? "true" : "false"; }
};
template <class T>
struct Formatter<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                                     !std::is_same_v<T, char>>> {
  static void append(std::string& out, T v) { out += std::to_string(v); }
};
template <class A, class B>
struct Formatter<std::pair<A, B>> {
  static void append(std::string& out, const std::pair<A, B>& v) {
    out += '(';
    appendText(out, v.first);
    out += ',';
    appendText(out, v.second);
    out += ')';
  }
};
template <class... Ts>
struct Formatter<std::tuple<Ts...>> {
  static void append(std::string& out, const std::tuple<Ts...>& v) {
    out += '(';
    bool first = true;
    std::apply([&](const auto&... e) { ((out += (first ? "" : ","), appendText(out, e), first = false), ...); }, v);
    out += ')';
  }
};
template <class T>
struct Formatter<std::vector<T>> {
  static void append(std::string& out, const std::vector<T>& v) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      appendText(out, v[i]);
    }
    out += ']';
  }
};
template <class K, class V>
struct Formatter<std::map<K, V>> {
  static void append(std::string& out, const std::map<K, V>& m) {
    out += '{';
    bool first = true;
    for (const auto& [k, v] : m) {
      if (!first) out += ", ";
      first = false;
      appendText(out, k);
      out += '=';
      appendText(out, v);
    }
    out += '}';
  }
};
template <class T>
struct Formatter<std::optional<T>> {
  static void append(std::string& out, const std::optional<T>& v) {
    if (v) appendText(out, *v);
    else out += "null";
  }
};

}  // namespace jobhost
