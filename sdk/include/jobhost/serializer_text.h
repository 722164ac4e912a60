// jobhost/serializer_text.h — serialized bytes back to text, by serializer id, without the
// C++ type: what `jobhost state dump|diff` print.
//
// A snapshot's `_metadata` records each state's serializer ids and versions (serializer.h),
// e.g. "pair<string,i64>" version 1001. SerializerTextRegistry parses such an id and
// decodes the bytes recursively with the built-in encodings: integers, floating point,
// bool, char, string, vector, pair, tuple, map, optional. The text is what the print sink
// shows for the same value (format.h): strings as they are, `(a,b)`, `[a, b]`,
// `{k=v, k=v}`, the value or `null`. toJson decodes the same bytes into typed JSON for
// tools (`jobhost state dump --format json | jq '.value[1]'`): numbers, arrays, objects.
//
// A user's serializer (any id that is not a built-in) is decoded only through a
// SerializerTextForm registered for its id and version. The SDK fills those in at plan
// time for every non-built-in type in keyed state (PlanNode::textForms; collected by
// textFormsOf<T>()), so a host that loads the plugin and builds the job's plan — without
// running it — can decode them. The type needs a text form (a Formatter<T> or an
// operator<<); without one it stays undecodable (hex).
//
// Thread-safety: a registry is filled once and then only read (toText is const).
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/detail/json_string.h"
#include "jobhost/format.h"
#include "jobhost/operator.h"
#include "jobhost/serializer.h"

namespace jobhost {

// ------------------------------------------------------------------------------------
// Plugin side: the text forms of the non-built-in types in T.

namespace detail {
template <class T>
concept HasTextForm = !requires { typename Formatter<T>::PrimaryTemplate; } ||
                      requires(std::ostream& os, const T& v) { os << v; };

template <class T, class Enable = void>
struct TextForms {  // a user type: a leaf with its own serializer
  static void collect(std::vector<SerializerTextForm>& out) {
    if constexpr (HasTextForm<T>) {
      out.push_back({Serializer<T>::id(), Serializer<T>::version(),
                     [](ByteReader& r, std::string& s) { appendText(s, Serializer<T>::read(r)); }});
    }
  }
};
template <class T>
struct TextForms<T, std::enable_if_t<std::is_arithmetic_v<T>>> {
  static void collect(std::vector<SerializerTextForm>&) {}
};
template <>
struct TextForms<std::string> {
  static void collect(std::vector<SerializerTextForm>&) {}
};
template <class T>
struct TextForms<std::vector<T>> {
  static void collect(std::vector<SerializerTextForm>& out) { TextForms<T>::collect(out); }
};
template <class T>
struct TextForms<std::optional<T>> {
  static void collect(std::vector<SerializerTextForm>& out) { TextForms<T>::collect(out); }
};
template <class A, class B>
struct TextForms<std::pair<A, B>> {
  static void collect(std::vector<SerializerTextForm>& out) {
    TextForms<A>::collect(out);
    TextForms<B>::collect(out);
  }
};
template <class K, class V>
struct TextForms<std::map<K, V>> {
  static void collect(std::vector<SerializerTextForm>& out) {
    TextForms<K>::collect(out);
    TextForms<V>::collect(out);
  }
};
template <class... Ts>
struct TextForms<std::tuple<Ts...>> {
  static void collect(std::vector<SerializerTextForm>& out) { (TextForms<Ts>::collect(out), ...); }
};
}  // namespace detail

/// Appends the text forms of every user type inside T (none for built-ins).
template <class T>
void textFormsOf(std::vector<SerializerTextForm>& out) {
  detail::TextForms<T>::collect(out);
}

// ------------------------------------------------------------------------------------
// Host side: decoding by id.

class SerializerTextRegistry {
 public:
  /// Registers a user serializer's text form; a later one for the same id and version
  /// replaces it.
  void add(SerializerTextForm form) {
    std::string key = form.id;
    forms_[{std::move(key), form.version}] = std::move(form);
  }
  void addAll(const std::vector<SerializerTextForm>& forms) {
    for (const auto& f : forms) add(f);
  }

  /// The text of `bytes` written by serializer `id` at `version`; nullopt when the id,
  /// or a user type inside it, has no registered text form, or the version differs from
  /// the one the id implies (a changed encoding this code cannot know). Throws
  /// SerializationError when the bytes do not decode (trailing bytes included).
  std::optional<std::string> toText(std::string_view id, uint32_t version, std::string_view bytes) const {
    Type t;
    if (!parse(id, &t) || !resolvable(t) || versionOf(t) != version) return std::nullopt;
    ByteReader r(bytes);
    std::string out;
    append(t, r, out);
    if (!r.atEnd()) throw SerializationError("trailing bytes after a " + std::string(id));
    return out;
  }

  /// The same value as typed JSON (RFC 8259), for tools: integers and floating point are
  /// numbers (exact: integers are printed in full, floating point in the shortest form
  /// that reads back the same; NaN and the infinities, which JSON lacks, are the strings
  /// "NaN", "Infinity" and "-Infinity"); bool is true/false; char and string are strings
  /// (see appendJsonString); vector is an array; pair and tuple are arrays; map is an
  /// object whose names are the keys (a string key as it is, any other key as its JSON
  /// text: "3", "[\"a\",1]"); optional is null or the value; a user type is the string of its
  /// registered text form. nullopt and exceptions as for toText.
  std::optional<std::string> toJson(std::string_view id, uint32_t version, std::string_view bytes) const {
    Type t;
    if (!parse(id, &t) || !resolvable(t) || versionOf(t) != version) return std::nullopt;
    ByteReader r(bytes);
    std::string out;
    appendJson(t, r, out);
    if (!r.atEnd()) throw SerializationError("trailing bytes after a " + std::string(id));
    return out;
  }

  /// Why toText gives nullopt, for people: "no decoder for com.example.Point v1 (give
  /// --plugin)" style text is the caller's; this names the part that is unknown, or
  /// "version" when only the version differs. Empty when toText would decode.
  std::string unknownPart(std::string_view id, uint32_t version) const {
    Type t;
    if (!parse(id, &t)) return std::string(id);
    if (std::string u = firstUnknown(t); !u.empty()) return u;
    if (versionOf(t) != version) return "version";
    return "";
  }

 private:
  struct Type {
    std::string name;  // "vector", "i64", "com.example.Point", ...
    std::string full;  // the whole id of this node
    std::vector<Type> args;
  };

  static bool parse(std::string_view id, Type* t) {
    size_t pos = 0;
    return parseAt(id, pos, t) && pos == id.size();
  }
  static bool parseAt(std::string_view id, size_t& pos, Type* t) {
    size_t start = pos;
    while (pos < id.size() && id[pos] != '<' && id[pos] != ',' && id[pos] != '>') ++pos;
    t->name = std::string(id.substr(start, pos - start));
    if (t->name.empty()) return false;
    if (pos < id.size() && id[pos] == '<') {
      ++pos;
      for (;;) {
        t->args.emplace_back();
        if (!parseAt(id, pos, &t->args.back())) return false;
        if (pos >= id.size()) return false;
        if (id[pos] == ',') {
          ++pos;
          continue;
        }
        if (id[pos] != '>') return false;
        ++pos;
        break;
      }
    }
    t->full = std::string(id.substr(start, pos - start));
    return true;
  }

  const SerializerTextForm* userForm(const Type& t) const {
    auto it = forms_.lower_bound({t.full, 0});
    if (it == forms_.end() || it->first.first != t.full) return nullptr;
    return &it->second;
  }
  static bool isLeaf(const std::string& n) {
    static const char* kLeaves[] = {"i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64",
                                    "bool", "char", "f32", "f64", "string"};
    for (const char* l : kLeaves)
      if (n == l) return true;
    return false;
  }
  static size_t arity(const std::string& n) {
    if (n == "vector" || n == "optional") return 1;
    if (n == "pair" || n == "map") return 2;
    if (n == "tuple") return SIZE_MAX;  // any
    return 0;
  }
  bool builtin(const Type& t) const {
    if (t.args.empty()) return isLeaf(t.name);
    size_t a = arity(t.name);
    return a != 0 && (a == SIZE_MAX || a == t.args.size());
  }
  std::string firstUnknown(const Type& t) const {
    if (!builtin(t)) return userForm(t) ? "" : t.full;
    for (const auto& a : t.args)
      if (std::string u = firstUnknown(a); !u.empty()) return u;
    return "";
  }
  bool resolvable(const Type& t) const { return firstUnknown(t).empty(); }

  uint32_t versionOf(const Type& t) const {
    if (!builtin(t)) {
      // Several versions of one id may be registered: the versions match when any does.
      const SerializerTextForm* f = userForm(t);
      return f ? f->version : 0;
    }
    if (t.args.empty()) return 1;
    if (t.name == "vector" || t.name == "optional") return versionOf(t.args[0]);
    if (t.name == "pair" || t.name == "map") return versionOf(t.args[0]) * 1000 + versionOf(t.args[1]);
    uint32_t v = 0;  // tuple
    for (const auto& a : t.args) v = v * 31 + versionOf(a);
    return v;
  }

  template <class I>
  static void appendInt(ByteReader& r, std::string& out) {
    out += std::to_string(r.readFixed<I>());
  }
  template <class F>
  static void appendFloat(F v, std::string& out) {
    std::ostringstream os;
    os << v;  // as Formatter<float/double> (operator<<) prints it
    out += os.str();
  }

  void append(const Type& t, ByteReader& r, std::string& out) const {
    if (!builtin(t)) {
      userForm(t)->append(r, out);
      return;
    }
    const std::string& n = t.name;
    if (n == "i8") return appendInt<int8_t>(r, out);
    if (n == "i16") return appendInt<int16_t>(r, out);
    if (n == "i32") return appendInt<int32_t>(r, out);
    if (n == "i64") return appendInt<int64_t>(r, out);
    if (n == "u8") return appendInt<uint8_t>(r, out);
    if (n == "u16") return appendInt<uint16_t>(r, out);
    if (n == "u32") return appendInt<uint32_t>(r, out);
    if (n == "u64") return appendInt<uint64_t>(r, out);
    if (n == "bool") {
      out += r.readU8() != 0 ? "true" : "false";
      return;
    }
    if (n == "char") {
      out += static_cast<char>(r.readU8());
      return;
    }
    if (n == "f32") return appendFloat(Serializer<float>::read(r), out);
    if (n == "f64") return appendFloat(Serializer<double>::read(r), out);
    if (n == "string") {
      out += r.readBytes();
      return;
    }
    if (n == "optional") {
      if (r.readU8() == 0) out += "null";
      else append(t.args[0], r, out);
      return;
    }
    if (n == "pair" || n == "tuple") {
      out += '(';
      for (size_t i = 0; i < t.args.size(); ++i) {
        if (i) out += ',';
        append(t.args[i], r, out);
      }
      out += ')';
      return;
    }
    uint64_t count = r.readVarint();
    if (count > r.remaining() && count > (uint64_t{1} << 20))
      throw SerializationError("implausible element count " + std::to_string(count));
    if (n == "vector") {
      out += '[';
      for (uint64_t i = 0; i < count; ++i) {
        if (i) out += ", ";
        append(t.args[0], r, out);
      }
      out += ']';
      return;
    }
    out += '{';  // map
    for (uint64_t i = 0; i < count; ++i) {
      if (i) out += ", ";
      append(t.args[0], r, out);
      out += '=';
      append(t.args[1], r, out);
    }
    out += '}';
  }

  template <class I>
  static void appendJsonInt(ByteReader& r, std::string& out) {
    out += std::to_string(r.readFixed<I>());
  }
  template <class F>
  static void appendJsonFloat(F v, std::string& out) {
    if (std::isnan(v)) {
      out += "\"NaN\"";
    } else if (std::isinf(v)) {
      out += v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
    } else {
      char buf[64];
      auto res = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
      out.append(buf, res.ptr);
    }
  }

  void appendJson(const Type& t, ByteReader& r, std::string& out) const {
    if (!builtin(t)) {
      std::string text;
      userForm(t)->append(r, text);
      appendJsonString(out, text);
      return;
    }
    const std::string& n = t.name;
    if (n == "i8") return appendJsonInt<int8_t>(r, out);
    if (n == "i16") return appendJsonInt<int16_t>(r, out);
    if (n == "i32") return appendJsonInt<int32_t>(r, out);
    if (n == "i64") return appendJsonInt<int64_t>(r, out);
    if (n == "u8") return appendJsonInt<uint8_t>(r, out);
    if (n == "u16") return appendJsonInt<uint16_t>(r, out);
    if (n == "u32") return appendJsonInt<uint32_t>(r, out);
    if (n == "u64") return appendJsonInt<uint64_t>(r, out);
    if (n == "bool") {
      out += r.readU8() != 0 ? "true" : "false";
      return;
    }
    if (n == "char") {
      const char c = static_cast<char>(r.readU8());
      appendJsonString(out, std::string_view(&c, 1));
      return;
    }
    if (n == "f32") return appendJsonFloat(Serializer<float>::read(r), out);
    if (n == "f64") return appendJsonFloat(Serializer<double>::read(r), out);
    if (n == "string") {
      appendJsonString(out, r.readBytes());
      return;
    }
    if (n == "optional") {
      if (r.readU8() == 0) out += "null";
      else appendJson(t.args[0], r, out);
      return;
    }
    if (n == "pair" || n == "tuple") {
      out += '[';
      for (size_t i = 0; i < t.args.size(); ++i) {
        if (i) out += ',';
        appendJson(t.args[i], r, out);
      }
      out += ']';
      return;
    }
    uint64_t count = r.readVarint();
    if (count > r.remaining() && count > (uint64_t{1} << 20))
      throw SerializationError("implausible element count " + std::to_string(count));
    if (n == "vector") {
      out += '[';
      for (uint64_t i = 0; i < count; ++i) {
        if (i) out += ',';
        appendJson(t.args[0], r, out);
      }
      out += ']';
      return;
    }
    out += '{';  // map: a name is the key's string, or the JSON text of any other key
    for (uint64_t i = 0; i < count; ++i) {
      if (i) out += ',';
      if (t.args[0].name == "string") {
        appendJsonString(out, r.readBytes());
      } else {
        std::string key;
        appendJson(t.args[0], r, key);
        if (key.size() >= 2 && key.front() == '"' && key.back() == '"') out += key;  // char, user type
        else appendJsonString(out, key);
      }
      out += ':';
      appendJson(t.args[1], r, out);
    }
    out += '}';
  }

  std::map<std::pair<std::string, uint32_t>, SerializerTextForm> forms_;
};

}  // namespace jobhost
