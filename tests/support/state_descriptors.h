// tests/support/state_descriptors.h — the state descriptor the state unit tests declare:
// string keys, user keys and values, serializer version 1.
#pragma once

#include <string>

#include "jobhost/operator.h"

namespace jobhost::testing {

inline StateDescriptorInfo stringDescriptor(const std::string& name, StateKind kind) {
  StateDescriptorInfo d;
  d.name = name;
  d.kind = kind;
  d.keySerializer = "string";
  d.keySerializerVersion = 1;
  if (kind == StateKind::kMap) {
    d.userKeySerializer = "string";
    d.userKeySerializerVersion = 1;
  }
  d.valueSerializer = "string";
  d.valueSerializerVersion = 1;
  return d;
}

}  // namespace jobhost::testing
