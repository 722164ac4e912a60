// jobhost/detail/json_string.h — a string as a JSON string literal: the one escaper of the
// host's JSON output (typed state values in serializer_text.h, `jobhost state`/`inspect`
// rows). Not part of the job API.
#pragma once

#include <string>
#include <string_view>

namespace jobhost {

/// Appends `s` as a JSON string literal (RFC 8259, quotes included): '"', '\\' and
/// control characters escaped; valid UTF-8 kept as it is, each byte of an invalid
/// sequence replaced by U+FFFD (JSON text is UTF-8; a tool would reject it otherwise).
inline void appendJsonString(std::string& out, std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20) {
            out += "\\u00";
            out += kHex[c >> 4];
            out += kHex[c & 15];
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    // The length of a well-formed UTF-8 sequence starting here, 0 if there is none
    // (no overlong forms, no surrogates, nothing above U+10FFFF).
    size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (n != 0 && i + n <= s.size()) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      bool ok = (c1 & 0xc0) == 0x80;
      if (c == 0xe0) ok = ok && c1 >= 0xa0;
      if (c == 0xed) ok = ok && c1 < 0xa0;
      if (c == 0xf0) ok = ok && c1 >= 0x90;
      if (c == 0xf4) ok = ok && c1 < 0x90;
      for (size_t k = 2; k < n; ++k) ok = ok && (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
      if (ok) {
        out.append(s.substr(i, n));
        i += n;
        continue;
      }
    }
    out += "\xef\xbf\xbd";  // U+FFFD
    ++i;
  }
  out += '"';
}

}  // namespace jobhost
