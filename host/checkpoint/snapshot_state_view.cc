// A snapshot's keyed state for people: see snapshot_state_view.h.
#include "checkpoint/snapshot_state_view.h"

#include <algorithm>
#include <tuple>

namespace jobhost::host {

namespace {
std::string hex(std::string_view bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out = "0x";
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

bool isBuiltinId(const std::string& id) { return SerializerTextRegistry().unknownPart(id, 0) == "version"; }
}  // namespace

std::string typeName(const std::string& id, uint32_t version) {
  if (id.empty()) return "-";
  return isBuiltinId(id) ? id : id + " v" + std::to_string(version);
}

std::string StateTexts::text(const std::string& id, uint32_t version, std::string_view bytes) {
  try {
    if (auto t = registry_.toText(id, version, bytes)) return *t;
  } catch (const SerializationError& e) {
    return hex(bytes) + " (" + id + " v" + std::to_string(version) + ": does not decode: " + e.what() + ")";
  }
  std::string name = id + " v" + std::to_string(version);
  undecoded_.insert(name);
  return hex(bytes) + " (" + name + ")";
}

std::string StateTexts::value(const StateDescriptorInfo& d, std::string_view bytes) {
  if (d.kind != StateKind::kList) return text(d.valueSerializer, d.valueSerializerVersion, bytes);
  std::string out = "[";
  ByteReader r(bytes);
  try {
    for (bool first = true; !r.atEnd(); first = false) {
      std::string_view element = r.readBytes();
      if (!first) out += ", ";
      out += text(d.valueSerializer, d.valueSerializerVersion, element);
    }
  } catch (const SerializationError& e) {
    return hex(bytes) + " (list of " + d.valueSerializer + ": does not decode: " + e.what() + ")";
  }
  return out + "]";
}

namespace {
std::string hexJson(std::string_view bytes, const std::string& serializer, const std::string& error = "") {
  std::string out = "{\"hex\":\"" + hex(bytes).substr(2) + "\",\"serializer\":";
  appendJsonString(out, serializer);
  if (!error.empty()) {
    out += ",\"error\":";
    appendJsonString(out, error);
  }
  return out + "}";
}
}  // namespace

std::string StateTexts::json(const std::string& id, uint32_t version, std::string_view bytes) {
  std::string name = id + " v" + std::to_string(version);
  try {
    if (auto j = registry_.toJson(id, version, bytes)) return *j;
  } catch (const SerializationError& e) {
    return hexJson(bytes, name, std::string("does not decode: ") + e.what());
  }
  undecoded_.insert(name);
  return hexJson(bytes, name);
}

std::string StateTexts::valueJson(const StateDescriptorInfo& d, std::string_view bytes) {
  if (d.kind != StateKind::kList) return json(d.valueSerializer, d.valueSerializerVersion, bytes);
  std::string out = "[";
  ByteReader r(bytes);
  try {
    for (bool first = true; !r.atEnd(); first = false) {
      std::string_view element = r.readBytes();
      if (!first) out += ',';
      out += json(d.valueSerializer, d.valueSerializerVersion, element);
    }
  } catch (const SerializationError& e) {
    return hexJson(bytes, "list of " + d.valueSerializer, std::string("does not decode: ") + e.what());
  }
  return out + "]";
}

state::Status sortedKeyGroup(state::OperatorStateReader& reader, int kg, std::vector<OwnedEntry>* out) {
  out->clear();
  state::Status s = reader.readKeyGroup(kg, [&](const state::LogicalEntry& e) {
    out->push_back({e.state, std::string(e.key), std::string(e.userKey), std::string(e.value)});
    return state::Status::OK();
  });
  if (!s.ok()) return s;
  const auto& states = reader.operatorSnapshot().states;
  std::sort(out->begin(), out->end(), [&](const OwnedEntry& x, const OwnedEntry& y) {
    return std::tie(states[static_cast<size_t>(x.state)].name, x.key, x.userKey) <
           std::tie(states[static_cast<size_t>(y.state)].name, y.key, y.userKey);
  });
  return s;
}

state::Status stateStats(state::OperatorStateReader& reader, bool perKeyGroup, std::vector<StateStats>* out) {
  const size_t n = reader.operatorSnapshot().states.size();
  out->assign(n, {});
  if (perKeyGroup)
    for (auto& st : *out) st.perKeyGroup.assign(static_cast<size_t>(reader.maxParallelism()), {0, 0});
  return reader.readAll([&](const state::LogicalEntry& e) {
    StateStats& st = (*out)[static_cast<size_t>(e.state)];
    uint64_t bytes = e.key.size() + e.userKey.size() + e.value.size();
    ++st.entries;
    st.bytes += bytes;
    if (perKeyGroup) {
      auto& kg = st.perKeyGroup[static_cast<size_t>(e.keyGroup)];
      ++kg.first;
      kg.second += bytes;
    }
    return state::Status::OK();
  });
}

state::Status diffOperator(state::OperatorStateReader* a, state::OperatorStateReader* b,
                           const std::optional<std::string>& stateName,
                           const std::function<state::Status(const DiffEntry&)>& fn) {
  const int maxP = a ? a->maxParallelism() : b->maxParallelism();
  std::vector<OwnedEntry> ea, eb;
  auto nameOf = [](state::OperatorStateReader* r, const OwnedEntry& e) -> const std::string& {
    return r->operatorSnapshot().states[static_cast<size_t>(e.state)].name;
  };
  auto descOf = [](state::OperatorStateReader* r, const OwnedEntry& e) {
    return &r->operatorSnapshot().states[static_cast<size_t>(e.state)];
  };
  auto keep = [&](state::OperatorStateReader* r, std::vector<OwnedEntry>* v) {
    if (!stateName) return;
    v->erase(std::remove_if(v->begin(), v->end(), [&](const OwnedEntry& e) { return nameOf(r, e) != *stateName; }),
             v->end());
  };
  for (int kg = 0; kg < maxP; ++kg) {
    ea.clear();
    eb.clear();
    if (a)
      if (state::Status s = sortedKeyGroup(*a, kg, &ea); !s.ok()) return s;
    if (b)
      if (state::Status s = sortedKeyGroup(*b, kg, &eb); !s.ok()) return s;
    keep(a, &ea);
    keep(b, &eb);
    size_t i = 0, j = 0;
    while (i < ea.size() || j < eb.size()) {
      int cmp;
      if (i == ea.size()) cmp = 1;
      else if (j == eb.size()) cmp = -1;
      else {
        auto ka = std::tie(nameOf(a, ea[i]), ea[i].key, ea[i].userKey);
        auto kb = std::tie(nameOf(b, eb[j]), eb[j].key, eb[j].userKey);
        cmp = ka < kb ? -1 : (kb < ka ? 1 : 0);
      }
      state::Status s;
      if (cmp < 0) {
        s = fn({DiffKind::kOnlyInA, descOf(a, ea[i]), &ea[i], nullptr});
        ++i;
      } else if (cmp > 0) {
        s = fn({DiffKind::kOnlyInB, descOf(b, eb[j]), nullptr, &eb[j]});
        ++j;
      } else {
        if (ea[i].value != eb[j].value) s = fn({DiffKind::kChanged, descOf(a, ea[i]), &ea[i], &eb[j]});
        ++i;
        ++j;
      }
      if (!s.ok()) return s;
    }
  }
  return state::Status::OK();
}

}  // namespace jobhost::host
