// `jobhost state ls|dump|diff`: a snapshot's keyed state, decoded, without the job's code
// (the plugin only to decode user serializers). Reading is snapshot_state_view.h's and
// state::OperatorStateReader's; this file is options, output and exit codes.
//
// A running job's checkpoints may be read: the reader takes no lock, it opens every file
// of the operators it reads before reading any (see snapshot_entries.h), so a checkpoint
// the job removes meanwhile stays readable; one already removed is reported by name.
// Nothing is written to the snapshot; rocksdb copies go to a private temporary directory
// that is removed at the end, also after Ctrl-C or a closed pipe (`| head`).
#include <signal.h>

#include <atomic>
#include <csignal>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_coordinator.h"
#include "checkpoint/snapshot_state_view.h"
#include "cli/commands.h"
#include "cli/row_output.h"
#include "cli/source_positions.h"
#include "cli/table.h"
#include "config/units.h"
#include "exit_codes.h"
#include "run_options.h"
#include "job_setup.h"
#include "runtime/key_group_assignment.h"

namespace jobhost::host {

namespace {

volatile std::sig_atomic_t gInterrupted = 0;
void onInterrupt(int) { gInterrupted = 1; }

/// Ctrl-C and SIGTERM end the command cleanly (temporary copies removed, exit 130); a
/// closed output pipe ends it quietly instead of killing it with SIGPIPE.
void installStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = onInterrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

/// What stops a scan early without being an error.
const state::Status kStop = state::Status::IOError("stop");

/// The text forms of a plugin's user serializers: the plugin is loaded and the class's
/// plan built (configure() and build() run; no operator is created, nothing runs).
struct Decoding {
  std::unique_ptr<JobSetup> setup;  // keeps the plugin loaded while its text forms are used
  std::unique_ptr<StateTexts> texts;
};

int loadDecoding(const StateCommandOptions& o, Decoding* d) {
  SerializerTextRegistry registry;
  if (o.plugin) {
    RunOptions ro;
    ro.pluginPath = *o.plugin;
    ro.jobClass = o.jobClass;
    ro.jobArgs = o.jobArgs;
    ro.planOnly = true;  // the plan is only looked at: sources need not open their inputs
    d->setup = std::make_unique<JobSetup>();
    if (int rc = setupJob(ro, d->setup.get()); rc != 0) {
      std::cerr << "(--plugin builds the class's plan to find its serializers; nothing runs. A job whose build() "
                   "needs arguments gets them after --, as for run: ... --plugin "
                << *o.plugin << " -c <Class> -- --input FILE)\n";
      return rc;
    }
    size_t n = 0;
    for (const auto& node : d->setup->plan.nodes) {
      registry.addAll(node.textForms);
      n += node.textForms.size();
    }
    spdlog::debug("{} user serializer(s) with a text form in class {} of {}", n, d->setup->className, *o.plugin);
  } else if (o.jobClass || !o.jobArgs.empty()) {
    std::cerr << "error: " << (o.jobClass ? "-c/--class" : "job arguments")
              << " need --plugin <lib.so>: the class's serializers come from its plugin\n";
    return kExitUsage;
  }
  d->texts = std::make_unique<StateTexts>(std::move(registry));
  return kExitOk;
}

void noteUndecoded(const StateTexts& texts, const StateCommandOptions& o) {
  if (texts.undecoded().empty()) return;
  std::string ids;
  for (const auto& id : texts.undecoded()) ids += (ids.empty() ? "" : ", ") + id;
  std::cerr << "note: values of " << ids << " are printed as hex: "
            << (o.plugin ? "the plugin's class registers no text form for them (give the class operator<< or a "
                           "jobhost::Formatter)"
                         : "give --plugin <lib.so> -c <Class> to decode them with the job's serializers")
            << "\n";
}

state::Result<ResolvedSnapshot> openForReading(const std::string& path) {
  auto r = resolveSnapshot(path);
  if (r.ok()) logResolution(*r);
  return r;
}

int cannotRead(const std::string& path, const state::Status& s) {
  std::cerr << "error: cannot read " << path << ": " << s.message() << "\n";
  return exitCodeForSnapshotError(s);
}

std::string keyedOperatorList(const state::CheckpointMetadata& m) {
  std::string s;
  for (const auto& op : m.operators)
    if (!op.states.empty()) s += (s.empty() ? "" : ", ") + op.uid;
  return s.empty() ? "none" : s;
}

std::string stateList(const state::OperatorSnapshot& op) {
  std::string s;
  for (const auto& d : op.states) s += (s.empty() ? "" : ", ") + d.name;
  return s;
}

bool parseFormat(const std::string& f, RowFormat* out) {
  if (f == "table") *out = RowFormat::kTable;
  else if (f == "json") *out = RowFormat::kJson;
  else if (f == "csv") *out = RowFormat::kCsv;
  else return false;
  return true;
}

/// What dump and diff start with: the stop handlers, the output format and the decoding
/// (with the plugin, if given). Returns an exit code, 0 to go on.
int prepare(const StateCommandOptions& o, RowFormat* format, Decoding* dec) {
  installStopHandlers();
  if (!parseFormat(o.format, format)) {
    std::cerr << "error: --format " << o.format << " is unknown; use table, json or csv\n";
    return kExitUsage;
  }
  return loadDecoding(o, dec);
}

int stateIndexOf(const state::OperatorSnapshot& op, const std::string& name) {
  for (size_t i = 0; i < op.states.size(); ++i)
    if (op.states[i].name == name) return static_cast<int>(i);
  return -1;
}

}  // namespace

int stateLsCommand(const StateCommandOptions& o) {
  installStopHandlers();
  auto src = openForReading(o.snapshot);
  if (!src.ok()) return cannotRead(o.snapshot, src.status());
  const auto& m = src->metadata;
  if (o.operatorUid && !m.findOperator(*o.operatorUid)) {
    std::cerr << "error: " << src->directory << " has no operator '" << *o.operatorUid
              << "'; operators with keyed state: " << keyedOperatorList(m) << "\n";
    return kExitUsage;
  }
  std::cout << "Snapshot " << src->directory << ": " << (m.kind == state::SnapshotKind::kSavepoint ? "savepoint" : "checkpoint")
            << " " << m.checkpointId << " of " << m.jobClass << ", backend " << m.backend
            << (m.incremental ? " (incremental)" : "") << ", parallelism " << m.parallelism << ", max parallelism "
            << m.maxParallelism << "\n\n";
  Table states({"OPERATOR", "STATE", "KIND", "KEY", "USER KEY", "VALUE", "ENTRIES", "BYTES"});
  Table groups({"OPERATOR", "STATE", "KEY GROUP", "SUBTASK", "ENTRIES", "BYTES"});
  bool any = false;
  for (const auto& op : m.operators) {
    if (o.operatorUid && op.uid != *o.operatorUid) continue;
    if (op.states.empty()) continue;
    auto reader = state::OperatorStateReader::open(*src->storage, op, m.maxParallelism);
    if (!reader.ok()) return cannotRead(src->directory, reader.status());
    std::vector<StateStats> stats;
    if (state::Status s = stateStats(**reader, o.keyGroups, &stats); !s.ok()) return cannotRead(src->directory, s);
    if (gInterrupted) return kExitInterrupted;
    for (size_t i = 0; i < op.states.size(); ++i) {
      const auto& d = op.states[i];
      any = true;
      states.add({op.uid, d.name, stateKindName(d.kind), typeName(d.keySerializer, d.keySerializerVersion),
                  typeName(d.userKeySerializer, d.userKeySerializerVersion),
                  typeName(d.valueSerializer, d.valueSerializerVersion), std::to_string(stats[i].entries),
                  formatBytes(stats[i].bytes)});
      for (size_t kg = 0; kg < stats[i].perKeyGroup.size(); ++kg) {
        const auto& g = stats[i].perKeyGroup[kg];
        if (g.first == 0) continue;
        groups.add({op.uid, d.name, std::to_string(kg), std::to_string((*reader)->subtaskOf(static_cast<int>(kg))),
                    std::to_string(g.first), formatBytes(g.second)});
      }
    }
  }
  // Kafka sources: their offsets per partition (the rest of a source's position is opaque).
  Table offsets({"SOURCE", "SUBTASK", "TOPIC", "PARTITION", "NEXT OFFSET", "STOPS AT"});
  bool anyOffsets = false;
  for (const auto& op : m.operators) {
    if ((o.operatorUid && op.uid != *o.operatorUid) || !holdsKafkaOffsets(op)) continue;
    std::vector<SourcePartitionRow> rows;
    std::string subscription;
    if (state::Status s = kafkaPartitions(op, &rows, &subscription); !s.ok()) return cannotRead(src->directory, s);
    for (const auto& r : rows) {
      anyOffsets = true;
      offsets.add({op.uid, std::to_string(r.subtask), r.topic, std::to_string(r.partition), offsetText(r.offset),
                   offsetText(r.stoppingOffset)});
    }
  }
  // An unaligned checkpoint's in-flight records, per exchange and subtask.
  Table inFlight({"EXCHANGE", "SUBTASK", "BUFFERS", "BYTES"});
  bool anyInFlight = false;
  for (const auto& op : m.operators) {
    if (o.operatorUid && op.uid != *o.operatorUid) continue;
    for (const auto& sub : op.subtasks) {
      if (sub.inputChannels.empty()) continue;
      anyInFlight = true;
      inFlight.add({op.uid, std::to_string(sub.index), std::to_string(sub.inputChannels.size()),
                    formatBytes(sub.inFlightBytes())});
    }
  }
  if (!any && !anyOffsets && !anyInFlight) {
    std::cout << "No keyed state.\n";
    return kExitOk;
  }
  if (any) std::cout << states.render();
  if (any && o.keyGroups) std::cout << "\n" << groups.render();
  if (anyOffsets) std::cout << (any ? "\n" : "") << "Kafka offsets (the next offset to read per partition):\n" << offsets.render();
  if (anyInFlight)
    std::cout << (any || anyOffsets ? "\n" : "")
              << "In-flight records of an unaligned checkpoint (processed first on restore):\n"
              << inFlight.render();
  return kExitOk;
}

namespace {
/// `state dump` of a Kafka source: its offsets per partition as rows.
int dumpKafkaOffsets(const state::OperatorSnapshot& op, const std::string& where, RowFormat format,
                     const StateCommandOptions& o) {
  std::vector<SourcePartitionRow> rows;
  std::string subscription;
  if (state::Status s = kafkaPartitions(op, &rows, &subscription); !s.ok()) return cannotRead(where, s);
  RowPrinter out(std::cout, format, {"SUBTASK", "TOPIC", "PARTITION", "NEXT OFFSET", "STOPS AT"},
                 {"#subtask", "topic", "#partition", "offset", "stoppingOffset"});
  for (const auto& r : rows) {
    if (!out.add({std::to_string(r.subtask), r.topic, std::to_string(r.partition), offsetText(r.offset),
                  offsetText(r.stoppingOffset)}) ||
        (o.limit && out.rows() >= *o.limit))
      break;
  }
  out.finish();
  return kExitOk;
}
}  // namespace

int stateDumpCommand(const StateCommandOptions& o) {
  RowFormat format;
  Decoding dec;
  if (int rc = prepare(o, &format, &dec); rc != 0) return rc;
  auto src = openForReading(o.snapshot);
  if (!src.ok()) return cannotRead(o.snapshot, src.status());
  const auto& m = src->metadata;
  const state::OperatorSnapshot* op = m.findOperator(o.operatorUid.value_or(""));
  if (op && op->states.empty() && holdsKafkaOffsets(*op)) return dumpKafkaOffsets(*op, src->directory, format, o);
  if (op && op->states.empty() &&
      std::any_of(op->subtasks.begin(), op->subtasks.end(), [](const auto& s) { return !s.inputChannels.empty(); })) {
    std::cerr << "error: '" << op->uid << "' in " << src->directory
              << " is an exchange holding the in-flight records of an unaligned checkpoint, not keyed state; "
                 "`jobhost inspect "
              << src->directory << "` shows how many; operators with keyed state: " << keyedOperatorList(m) << "\n";
    return kExitUsage;
  }
  if (!op || op->states.empty()) {
    std::cerr << "error: " << src->directory << (op ? " holds no keyed state for operator '" : " has no operator '")
              << o.operatorUid.value_or("") << "'; operators with keyed state: " << keyedOperatorList(m)
              << " (jobhost state ls " << src->directory << ")\n";
    return kExitUsage;
  }
  int only = -1;
  if (o.stateName) {
    only = stateIndexOf(*op, *o.stateName);
    if (only < 0) {
      std::cerr << "error: operator '" << op->uid << "' has no state '" << *o.stateName << "'; its states: "
                << stateList(*op) << "\n";
      return kExitUsage;
    }
  }
  auto reader = state::OperatorStateReader::open(*src->storage, *op, m.maxParallelism);
  if (!reader.ok()) return cannotRead(src->directory, reader.status());

  bool withState = only < 0 && op->states.size() > 1;
  bool withUserKey = false;
  for (size_t i = 0; i < op->states.size(); ++i)
    if ((only < 0 || static_cast<size_t>(only) == i) && op->states[i].kind == StateKind::kMap) withUserKey = true;
  // JSON: key, user key and value are typed JSON values ('#'), not their text.
  const bool json = format == RowFormat::kJson;
  std::vector<std::string> header, keys;
  if (withState) header.push_back("STATE"), keys.push_back("state");
  header.push_back("KEY"), keys.push_back("#key");
  if (withUserKey) header.push_back("USER KEY"), keys.push_back("#userKey");
  header.push_back("VALUE"), keys.push_back("#value");
  RowPrinter out(std::cout, format, header, keys);

  // A string key is found in its own key group, without reading the others.
  int firstKg = 0, lastKg = m.maxParallelism - 1;
  if (o.key && op->states.front().keySerializer == "string") {
    std::string bytes;
    serializeInto(bytes, *o.key);
    firstKg = lastKg = keyGroupFor(bytes, m.maxParallelism);
  }
  StateTexts& texts = *dec.texts;
  std::vector<OwnedEntry> entries;
  bool stopped = false;
  for (int kg = firstKg; kg <= lastKg && !stopped; ++kg) {
    if (state::Status s = sortedKeyGroup(**reader, kg, &entries); !s.ok()) {
      out.finish();
      return cannotRead(src->directory, s);
    }
    for (const auto& e : entries) {
      if (only >= 0 && e.state != only) continue;
      const auto& d = op->states[static_cast<size_t>(e.state)];
      std::string key = json && !o.key ? std::string() : texts.key(d, e.key);  // --key matches the text
      if (o.key && key != *o.key) continue;
      std::vector<std::string> row;
      if (withState) row.push_back(d.name);
      const bool isMap = d.kind == StateKind::kMap;
      if (json) {
        row.push_back(texts.keyJson(d, e.key));
        if (withUserKey) row.push_back(isMap ? texts.userKeyJson(d, e.userKey) : "null");
        row.push_back(texts.valueJson(d, e.value));
      } else {
        row.push_back(std::move(key));
        if (withUserKey) row.push_back(isMap ? texts.userKey(d, e.userKey) : "");
        row.push_back(texts.value(d, e.value));
      }
      if (!out.add(std::move(row)) || (o.limit && out.rows() >= *o.limit) || gInterrupted) {
        stopped = true;
        break;
      }
    }
  }
  out.finish();
  if (gInterrupted) return kExitInterrupted;
  noteUndecoded(texts, o);
  if (out.rows() == 0)
    std::cerr << "no entries" << (o.key ? " for key '" + *o.key + "'" : std::string()) << " in operator '" << op->uid
              << "'" << (o.stateName ? " state '" + *o.stateName + "'" : std::string()) << "\n";
  return kExitOk;
}

int stateDiffCommand(const StateCommandOptions& o) {
  RowFormat format;
  Decoding dec;
  if (int rc = prepare(o, &format, &dec); rc != 0) return rc;
  auto a = openForReading(o.snapshot);
  if (!a.ok()) return cannotRead(o.snapshot, a.status());
  auto b = openForReading(o.other);
  if (!b.ok()) return cannotRead(o.other, b.status());
  const auto& ma = a->metadata;
  const auto& mb = b->metadata;
  if (ma.maxParallelism != mb.maxParallelism) {
    std::cerr << "error: cannot compare " << a->directory << " (max parallelism " << ma.maxParallelism << ") with "
              << b->directory << " (max parallelism " << mb.maxParallelism
              << "): keys fall into other key groups; snapshots of one job keep pipeline.max-parallelism for life\n";
    return kExitUsage;
  }
  // The keyed operators to compare, by uid, in A's order then B's.
  std::vector<std::string> uids;
  std::set<std::string> seen;
  for (const auto* m : {&ma, &mb})
    for (const auto& op : m->operators)
      if (!op.states.empty() && (!o.operatorUid || op.uid == *o.operatorUid) && seen.insert(op.uid).second)
        uids.push_back(op.uid);
  if (o.operatorUid && uids.empty()) {
    std::cerr << "error: neither snapshot holds keyed state for operator '" << *o.operatorUid
              << "'; operators with keyed state: A: " << keyedOperatorList(ma) << "; B: " << keyedOperatorList(mb)
              << "\n";
    return kExitUsage;
  }
  if (o.stateName) {
    bool found = false;
    for (const auto& uid : uids)
      for (const auto* m : {&ma, &mb})
        if (const auto* op = m->findOperator(uid); op && stateIndexOf(*op, *o.stateName) >= 0) found = true;
    if (!found) {
      std::cerr << "error: no operator" << (o.operatorUid ? " '" + *o.operatorUid + "'" : std::string())
                << " of either snapshot has a state '" << *o.stateName << "'\n";
      return kExitUsage;
    }
  }
  // JSON: key, user key and the two values are typed JSON values ('#'); a side without
  // the entry, and the user key of a state that is not a MapState, are null.
  const bool json = format == RowFormat::kJson;
  RowPrinter out(std::cout, format, {"CHANGE", "OPERATOR", "STATE", "KEY", "USER KEY", "A", "B"},
                 {"change", "operator", "state", "#key", "#userKey", "#a", "#b"});
  StateTexts& texts = *dec.texts;
  uint64_t changed = 0, onlyA = 0, onlyB = 0;
  bool closed = false;
  for (const auto& uid : uids) {
    std::unique_ptr<state::OperatorStateReader> ra, rb;
    for (auto [src, reader] : {std::pair{&*a, &ra}, std::pair{&*b, &rb}}) {
      const auto* op = src->metadata.findOperator(uid);
      if (!op || op->states.empty()) continue;
      auto r = state::OperatorStateReader::open(*src->storage, *op, src->metadata.maxParallelism);
      if (!r.ok()) return cannotRead(src->directory, r.status());
      *reader = std::move(*r);
    }
    state::Status s = diffOperator(ra.get(), rb.get(), o.stateName, [&](const DiffEntry& e) {
      const auto& d = *e.state;
      const OwnedEntry& any = e.a ? *e.a : *e.b;
      std::string kind = e.kind == DiffKind::kChanged ? (++changed, "changed")
                         : e.kind == DiffKind::kOnlyInA ? (++onlyA, "only in A")
                                                        : (++onlyB, "only in B");
      if (closed) return state::Status::OK();  // keep counting for the exit code
      const bool isMap = d.kind == StateKind::kMap;
      std::vector<std::string> row =
          json ? std::vector<std::string>{kind, uid, d.name, texts.keyJson(d, any.key),
                                          isMap ? texts.userKeyJson(d, any.userKey) : "null",
                                          e.a ? texts.valueJson(d, e.a->value) : "null",
                                          e.b ? texts.valueJson(d, e.b->value) : "null"}
               : std::vector<std::string>{kind, uid, d.name, texts.key(d, any.key),
                                          isMap ? texts.userKey(d, any.userKey) : "",
                                          e.a ? texts.value(d, e.a->value) : "", e.b ? texts.value(d, e.b->value) : ""};
      if (!out.add(std::move(row))) closed = true;
      return gInterrupted ? kStop : state::Status::OK();
    });
    if (gInterrupted) return kExitInterrupted;
    if (!s.ok()) {
      out.finish();
      return cannotRead(a->directory + " or " + b->directory, s);
    }
  }
  out.finish();
  noteUndecoded(texts, o);
  uint64_t total = changed + onlyA + onlyB;
  if (format == RowFormat::kTable) {
    if (total == 0)
      std::cout << "equal: the keyed state" << (o.operatorUid ? " of operator '" + *o.operatorUid + "'" : std::string())
                << (o.stateName ? " state '" + *o.stateName + "'" : std::string()) << " is the same in A and B\n";
    else
      std::cout << "\n" << total << (total == 1 ? " difference" : " differences") << ": " << changed << " changed, "
                << onlyA << " only in A, " << onlyB << " only in B\n";
    std::cout << "  A: " << a->directory << "\n  B: " << b->directory << "\n";
  }
  return total == 0 ? kExitOk : kExitJobFailed;
}

}  // namespace jobhost::host
