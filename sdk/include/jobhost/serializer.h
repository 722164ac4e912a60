// jobhost/serializer.h — typed, versioned binary serializers for keys, records and state.
//
// Every type that is used as a key, crosses a keyBy, or is kept in keyed state needs a
// `jobhost::Serializer<T>` specialization. Built-ins cover integers, floating point,
// bool, std::string, std::vector, std::pair, std::tuple, std::map and std::optional.
// A user type adds its own:
//
//   template <> struct jobhost::Serializer<Point> {
//     static std::string id() { return "com.example.Point"; }
//     static uint32_t version() { return 1; }
//     static void write(ByteWriter& w, const Point& p) { w.writeI64(p.x); w.writeI64(p.y); }
//     static Point read(ByteReader& r) { Point p; p.x = r.readI64(); p.y = r.readI64(); return p; }
//   };
//
// The id and version of each state's serializers are recorded in checkpoint metadata;
// restoring with a different id or version is reported by the restore preflight. Bump
// the version whenever the encoding changes.
//
// Encoding: integers little-endian fixed width, lengths as unsigned LEB128 varints.
// Thread-safety: serializers are stateless; ByteWriter/ByteReader are single-threaded.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <bit>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "jobhost/errors.h"

namespace jobhost {

static_assert(std::endian::native == std::endian::little,
              "the serialized formats are little-endian; a big-endian port needs byte swaps here");

/// Appends encoded values to a caller-owned std::string (reused to avoid allocation).
class ByteWriter {
 public:
  explicit ByteWriter(std::string& out) : out_(out) {}
  void writeRaw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  void writeU8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void writeVarint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  template <class I>
  void writeFixed(I v) {
    static_assert(std::is_integral_v<I>);
    writeRaw(&v, sizeof v);
  }
  void writeI64(int64_t v) { writeFixed(v); }
  void writeBytes(std::string_view s) {
    writeVarint(s.size());
    writeRaw(s.data(), s.size());
  }
  std::string& buffer() { return out_; }

 private:
  std::string& out_;
};

/// Reads values from a byte range; every read is bounds-checked and throws
/// SerializationError instead of reading past the end.
class ByteReader {
  /// Out of line and cold, so that readRaw() stays small enough to inline into every read
  /// (it was a call per field: a twentieth of NexmarkQ7's window thread).
  [[noreturn, gnu::cold, gnu::noinline]] void truncated(size_t n) const {
    throw SerializationError("truncated data: need " + std::to_string(n) + " bytes, " + std::to_string(remaining()) +
                             " left");
  }

 public:
  explicit ByteReader(std::string_view in) : in_(in) {}
  bool atEnd() const { return pos_ >= in_.size(); }
  size_t remaining() const { return in_.size() - pos_; }
  size_t position() const { return pos_; }
  std::string_view readRaw(size_t n) {
    if (n > remaining()) [[unlikely]]
      truncated(n);
    std::string_view s(in_.data() + pos_, n);
    pos_ += n;
    return s;
  }
  uint8_t readU8() { return static_cast<uint8_t>(readRaw(1)[0]); }
  uint64_t readVarint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = readU8();
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw SerializationError("malformed varint");
  }
  template <class I>
  I readFixed() {
    static_assert(std::is_integral_v<I>);
    I v;
    std::memcpy(&v, readRaw(sizeof v).data(), sizeof v);
    return v;
  }
  int64_t readI64() { return readFixed<int64_t>(); }
  std::string_view readBytes() { return readRaw(checkedLength(readVarint())); }
  /// A length read from the input, checked against what is left so a corrupt length
  /// cannot cause a huge allocation.
  size_t checkedLength(uint64_t n) {
    if (n > remaining()) throw SerializationError("length " + std::to_string(n) + " exceeds the " +
                                                  std::to_string(remaining()) + " bytes left");
    return static_cast<size_t>(n);
  }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

/// Primary template: deliberately undefined. A compile error naming Serializer<T> means
/// T needs a specialization (see the file comment).
template <class T, class Enable = void>
struct Serializer;

namespace detail {
template <class T>
inline constexpr const char* kIntName = nullptr;
template <> inline constexpr const char* kIntName<int8_t> = "i8";
template <> inline constexpr const char* kIntName<int16_t> = "i16";
template <> inline constexpr const char* kIntName<int32_t> = "i32";
template <> inline constexpr const char* kIntName<int64_t> = "i64";
template <> inline constexpr const char* kIntName<long long> = "i64";
template <> inline constexpr const char* kIntName<uint8_t> = "u8";
template <> inline constexpr const char* kIntName<uint16_t> = "u16";
template <> inline constexpr const char* kIntName<uint32_t> = "u32";
template <> inline constexpr const char* kIntName<uint64_t> = "u64";
template <> inline constexpr const char* kIntName<unsigned long long> = "u64";
}  // namespace detail

template <class T>
struct Serializer<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                                      !std::is_same_v<T, char>>> {
  /// Marks the SDK's own Serializer (a user's specialization has no such member):
  /// serializeInto()/deserialize() copy the value's bytes only behind this one.
  static constexpr bool kSdkFixedWidth = true;
  static std::string id() { return detail::kIntName<T>; }
  static uint32_t version() { return 1; }
  static void write(ByteWriter& w, T v) { w.writeFixed(v); }
  static T read(ByteReader& r) { return r.readFixed<T>(); }
};

template <>
struct Serializer<bool> {
  static std::string id() { return "bool"; }
  static uint32_t version() { return 1; }
  static void write(ByteWriter& w, bool v) { w.writeU8(v ? 1 : 0); }
  static bool read(ByteReader& r) { return r.readU8() != 0; }
};

template <>
struct Serializer<char> {
  static std::string id() { return "char"; }
  static uint32_t version() { return 1; }
  static void write(ByteWriter& w, char v) { w.writeU8(static_cast<uint8_t>(v)); }
  static char read(ByteReader& r) { return static_cast<char>(r.readU8()); }
};

template <class T>
struct Serializer<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static std::string id() { return sizeof(T) == 4 ? "f32" : "f64"; }
  static uint32_t version() { return 1; }
  static void write(ByteWriter& w, T v) {
    if constexpr (sizeof(T) == 4) w.writeFixed(std::bit_cast<uint32_t>(v));
    else w.writeFixed(std::bit_cast<uint64_t>(static_cast<double>(v)));
  }
  static T read(ByteReader& r) {
    if constexpr (sizeof(T) == 4) return std::bit_cast<float>(r.readFixed<uint32_t>());
    else return static_cast<T>(std::bit_cast<double>(r.readFixed<uint64_t>()));
  }
};

template <>
struct Serializer<std::string> {
  static std::string id() { return "string"; }
  static uint32_t version() { return 1; }
  static void write(ByteWriter& w, const std::string& v) { w.writeBytes(v); }
  static std::string read(ByteReader& r) { return std::string(r.readBytes()); }
};

template <class T>
struct Serializer<std::vector<T>> {
  static std::string id() { return "vector<" + Serializer<T>::id() + ">"; }
  static uint32_t version() { return Serializer<T>::version(); }
  static void write(ByteWriter& w, const std::vector<T>& v) {
    w.writeVarint(v.size());
    for (const auto& e : v) Serializer<T>::write(w, e);
  }
  static std::vector<T> read(ByteReader& r) {
    uint64_t n = r.readVarint();
    // Elements take at least a byte unless T encodes to nothing; never trust a count that
    // could only be met by millions of empty elements.
    if (n > r.remaining() && n > (uint64_t{1} << 20))
      throw SerializationError("implausible element count " + std::to_string(n));
    std::vector<T> v;
    v.reserve(std::min<uint64_t>(n, r.remaining()));
    for (uint64_t i = 0; i < n; ++i) v.push_back(Serializer<T>::read(r));
    return v;
  }
};

template <class A, class B>
struct Serializer<std::pair<A, B>> {
  static constexpr bool kSdkFields = true;  // the SDK's own: see kRawFixedFields
  static std::string id() { return "pair<" + Serializer<A>::id() + "," + Serializer<B>::id() + ">"; }
  static uint32_t version() { return Serializer<A>::version() * 1000 + Serializer<B>::version(); }
  static void write(ByteWriter& w, const std::pair<A, B>& v) {
    Serializer<A>::write(w, v.first);
    Serializer<B>::write(w, v.second);
  }
  static std::pair<A, B> read(ByteReader& r) {
    A a = Serializer<A>::read(r);
    B b = Serializer<B>::read(r);
    return {std::move(a), std::move(b)};
  }
};

template <class... Ts>
struct Serializer<std::tuple<Ts...>> {
  static constexpr bool kSdkFields = true;  // the SDK's own: see kRawFixedFields
  static std::string id() {
    std::string s = "tuple<";
    bool first = true;
    ((s += (first ? "" : ","), s += Serializer<Ts>::id(), first = false), ...);
    return s + ">";
  }
  static uint32_t version() {
    uint32_t v = 0;
    ((v = v * 31 + Serializer<Ts>::version()), ...);
    return v;
  }
  static void write(ByteWriter& w, const std::tuple<Ts...>& v) {
    std::apply([&](const auto&... e) { (Serializer<std::decay_t<decltype(e)>>::write(w, e), ...); }, v);
  }
  static std::tuple<Ts...> read(ByteReader& r) {
    // Braced initialisation evaluates left to right.
    return std::tuple<Ts...>{Serializer<Ts>::read(r)...};
  }
};

template <class K, class V>
struct Serializer<std::map<K, V>> {
  static std::string id() { return "map<" + Serializer<K>::id() + "," + Serializer<V>::id() + ">"; }
  static uint32_t version() { return Serializer<K>::version() * 1000 + Serializer<V>::version(); }
  static void write(ByteWriter& w, const std::map<K, V>& m) {
    w.writeVarint(m.size());
    for (const auto& [k, v] : m) {
      Serializer<K>::write(w, k);
      Serializer<V>::write(w, v);
    }
  }
  static std::map<K, V> read(ByteReader& r) {
    uint64_t n = r.readVarint();
    std::map<K, V> m;
    for (uint64_t i = 0; i < n; ++i) {
      K k = Serializer<K>::read(r);
      m.emplace(std::move(k), Serializer<V>::read(r));
    }
    return m;
  }
};

template <class T>
struct Serializer<std::optional<T>> {
  static std::string id() { return "optional<" + Serializer<T>::id() + ">"; }
  static uint32_t version() { return Serializer<T>::version(); }
  static void write(ByteWriter& w, const std::optional<T>& v) {
    w.writeU8(v ? 1 : 0);
    if (v) Serializer<T>::write(w, *v);
  }
  static std::optional<T> read(ByteReader& r) {
    if (!r.readU8()) return std::nullopt;
    return Serializer<T>::read(r);
  }
};

namespace detail {
/// Types whose Serializer writes the value's own bytes, fixed-width little-endian (the
/// integer Serializer above): serializeInto()/deserialize() copy them without a
/// ByteWriter/ByteReader (keyed state reads and writes one per access). Only where the
/// value's memory is that little-endian encoding; a big-endian host takes the writer.
/// A Serializer<T> the job specializes itself (say, big-endian integers, for RocksDB's key
/// order) is always called: the member below is only in the SDK's own.
template <class T>
constexpr bool rawFixedWidth() {
  if constexpr (std::endian::native == std::endian::little && std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                !std::is_same_v<T, char>)
    return requires { Serializer<T>::kSdkFixedWidth; };
  else
    return false;
}
template <class T>
inline constexpr bool kRawFixedWidth = rawFixedWidth<T>();
/// Pairs and tuples of such integers: their Serializer writes the fields' bytes one after
/// another, so serializeInto()/deserialize() copy each field in place rather than through
/// a ByteWriter call per field (an exchange serializes one per record: NexmarkQ7's bids).
/// Only behind the SDK's own pair and tuple Serializers (kSdkFields), and only when every
/// field's Serializer is the SDK's too.
template <class T>
struct RawFixedFields : std::false_type {};
template <class... Ts>
struct RawFixedFields<std::tuple<Ts...>> : std::bool_constant<(sizeof...(Ts) > 0) && (kRawFixedWidth<Ts> && ...)> {
  static constexpr size_t kBytes = (size_t{0} + ... + sizeof(Ts));  // what Serializer<T>::write() writes
};
template <class A, class B>
struct RawFixedFields<std::pair<A, B>> : std::bool_constant<kRawFixedWidth<A> && kRawFixedWidth<B>> {
  static constexpr size_t kBytes = sizeof(A) + sizeof(B);
};
template <class T>
constexpr bool rawFixedFields() {
  if constexpr (RawFixedFields<T>::value)
    return requires { Serializer<T>::kSdkFields; };
  else
    return false;
}
template <class T>
inline constexpr bool kRawFixedFields = rawFixedFields<T>();

/// Calls f on each field of a pair or tuple, in order.
template <class T, class F>
void forEachField(T& v, F&& f) {
  if constexpr (requires { v.first; v.second; }) {
    f(v.first);
    f(v.second);
  } else {
    std::apply([&](auto&... e) { (f(e), ...); }, v);
  }
}
}  // namespace detail

/// Serializes `v` into `out` (cleared first); convenience for one-off encodes.
template <class T>
void serializeInto(std::string& out, const T& v) {
  if constexpr (detail::kRawFixedWidth<T>) {
    out.resize(sizeof(T));  // no-op when it holds a value of T already
    std::memcpy(out.data(), &v, sizeof(T));
  } else if constexpr (detail::kRawFixedFields<T>) {
    out.resize(detail::RawFixedFields<T>::kBytes);
    char* p = out.data();
    detail::forEachField(v, [&](const auto& e) {
      std::memcpy(p, &e, sizeof e);
      p += sizeof e;
    });
  } else {
    out.clear();
    ByteWriter w(out);
    Serializer<T>::write(w, v);
  }
}

/// Decodes a whole byte string; trailing bytes are an error.
template <class T>
T deserialize(std::string_view bytes) {
  if constexpr (detail::kRawFixedWidth<T>) {
    if (bytes.size() == sizeof(T)) {
      T v;
      std::memcpy(&v, bytes.data(), sizeof(T));
      return v;
    }  // otherwise the reader below says what is wrong
  } else if constexpr (detail::kRawFixedFields<T>) {
    if (bytes.size() == detail::RawFixedFields<T>::kBytes) {
      T v{};
      const char* p = bytes.data();
      detail::forEachField(v, [&](auto& e) {
        std::memcpy(&e, p, sizeof e);
        p += sizeof e;
      });
      return v;
    }  // otherwise the reader below says what is wrong
  }
  ByteReader r(bytes);
  T v = Serializer<T>::read(r);
  if (!r.atEnd()) throw SerializationError("trailing bytes after a " + Serializer<T>::id());
  return v;
}

}  // namespace jobhost
