// tests/support/contains.h — `contains(text, part)`, which nearly every test asks of a
// message or an output: one definition for all of them (a test binary is built as one unit
// per batch of sources, where per-file copies would collide).
#pragma once

#include <string_view>

inline bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}
