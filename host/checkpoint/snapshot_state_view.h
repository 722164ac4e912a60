// host/checkpoint/snapshot_state_view.h — a snapshot's keyed state for people: entries
// decoded by serializer id, each key group sorted, statistics, and the comparison of two
// snapshots. Used by `jobhost state ls|dump|diff` (cli/state_command.cc); the reading
// itself is state::OperatorStateReader's (every handle type, pinned files).
//
// Order: key group by key group; inside one, by (state name, key bytes, user key bytes).
// The key group of a key depends only on its bytes and the max parallelism, so two
// snapshots of the same logical state list it in the same order whatever backend,
// handle type or parallelism wrote them, and comparing them is a merge of two sorted
// streams. Memory: one key group of each side at a time (a 1/max-parallelism share of
// the state), never the whole state.
//
// Thread-safety: one object, one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/operator.h"
#include "jobhost/serializer_text.h"
#include "jobhost/state/snapshot_entries.h"
#include "jobhost/state/status.h"

namespace jobhost::host {

/// Serialized bytes to text or typed JSON with a SerializerTextRegistry. What it cannot
/// decode is hex with the serializer id and version: "0x0a0b (com.example.Point v1)" as
/// text, {"hex":"0a0b","serializer":"com.example.Point v1"} as JSON (with "error": why,
/// when the bytes do not decode as their serializer says).
class StateTexts {
 public:
  explicit StateTexts(SerializerTextRegistry registry) : registry_(std::move(registry)) {}
  std::string key(const StateDescriptorInfo& d, std::string_view bytes) {
    return text(d.keySerializer, d.keySerializerVersion, bytes);
  }
  std::string userKey(const StateDescriptorInfo& d, std::string_view bytes) {
    return text(d.userKeySerializer, d.userKeySerializerVersion, bytes);
  }
  /// A ListState's value is its elements: "[a, b]".
  std::string value(const StateDescriptorInfo& d, std::string_view bytes);
  std::string text(const std::string& id, uint32_t version, std::string_view bytes);

  /// The same as JSON values (SerializerTextRegistry::toJson); a ListState's value is an
  /// array of its elements.
  std::string keyJson(const StateDescriptorInfo& d, std::string_view bytes) {
    return json(d.keySerializer, d.keySerializerVersion, bytes);
  }
  std::string userKeyJson(const StateDescriptorInfo& d, std::string_view bytes) {
    return json(d.userKeySerializer, d.userKeySerializerVersion, bytes);
  }
  std::string valueJson(const StateDescriptorInfo& d, std::string_view bytes);
  std::string json(const std::string& id, uint32_t version, std::string_view bytes);
  /// "com.example.Point v1" of every serializer printed as hex so far.
  const std::set<std::string>& undecoded() const { return undecoded_; }

 private:
  SerializerTextRegistry registry_;
  std::set<std::string> undecoded_;
};

/// "string", "pair<string,i64>", for a table column: the id, and " v<N>" when the id
/// alone does not say the version (a user serializer).
std::string typeName(const std::string& id, uint32_t version);

struct OwnedEntry {
  int state = 0;  // index into the reader's OperatorSnapshot::states
  std::string key, userKey, value;
};

/// The entries of key group kg, sorted as described in the file comment.
state::Status sortedKeyGroup(state::OperatorStateReader& reader, int kg, std::vector<OwnedEntry>* out);

struct StateStats {
  uint64_t entries = 0;  // keys (MapState: map entries)
  uint64_t bytes = 0;    // serialized key, user key and value bytes
  std::vector<std::pair<uint64_t, uint64_t>> perKeyGroup;  // (entries, bytes), if asked for
};
/// Per state of the reader's operator (index as OperatorSnapshot::states).
state::Status stateStats(state::OperatorStateReader& reader, bool perKeyGroup, std::vector<StateStats>* out);

enum class DiffKind { kOnlyInA, kOnlyInB, kChanged };
struct DiffEntry {
  DiffKind kind;
  const StateDescriptorInfo* state;  // of side A, or of B for kOnlyInB
  const OwnedEntry* a;               // null for kOnlyInB
  const OwnedEntry* b;               // null for kOnlyInA
};
/// Compares one operator's keyed state in two snapshots (a side may be null: an
/// operator only the other has). `stateName` restricts it to one state. Both sides need
/// the same max parallelism (checked by the caller). fn's error stops the comparison.
state::Status diffOperator(state::OperatorStateReader* a, state::OperatorStateReader* b,
                           const std::optional<std::string>& stateName,
                           const std::function<state::Status(const DiffEntry&)>& fn);

}  // namespace jobhost::host
