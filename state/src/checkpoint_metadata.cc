// `_metadata` codec: see jobhost/state/checkpoint_metadata.h.
#include "jobhost/state/checkpoint_metadata.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <cstring>

#include "checkpoint_metadata.capnp.h"

namespace jobhost::state {
namespace {

constexpr char kMagic[8] = {'J', 'H', 'M', 'E', 'T', 'A', '\r', '\n'};
constexpr size_t kHeaderSize = 12;

std::vector<std::string> splitPath(const std::string& p) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= p.size()) {
    size_t slash = p.find('/', start);
    if (slash == std::string::npos) slash = p.size();
    std::string part = p.substr(start, slash - start);
    if (!part.empty() && part != ".") parts.push_back(part);
    start = slash + 1;
  }
  return parts;
}

std::string joinRelative(const std::string& dir, const std::string& rel) {
  return dir.empty() ? rel : dir + "/" + rel;
}

void fillFileRef(schema::FileRef::Builder b, const FileRef& f, const std::string& dir) {
  b.setPath(relativePath(dir, f.path));
  b.setSize(f.size);
}

FileRef readFileRef(schema::FileRef::Reader r, const std::string& dir, Status* err) {
  FileRef f;
  std::string raw = r.getPath();
  f.path = normalizePath(joinRelative(dir, raw));
  f.size = r.getSize();
  auto lastSlash = raw.rfind('/');
  std::string last = lastSlash == std::string::npos ? raw : raw.substr(lastSlash + 1);
  if (raw.empty() || f.path.empty() || raw[0] == '/')
    *err = Status::Corruption("file reference '" + raw + "' leaves the checkpoint storage");
  else if (last == "." || last == ".." || last.empty() || f.path == normalizePath(dir))
    *err = Status::Corruption("file reference '" + raw + "' names a directory, not a file");
  return f;
}

void fillShared(capnp::List<schema::SharedFile>::Builder list, const std::vector<SharedFileRef>& files,
                const std::string& dir) {
  for (unsigned i = 0; i < files.size(); ++i) {
    auto b = list[i];
    b.setLocalName(files[i].localName);
    fillFileRef(b.initFile(), files[i].file, dir);
    b.setCreatedByCheckpoint(files[i].createdByCheckpoint);
  }
}

std::vector<SharedFileRef> readShared(capnp::List<schema::SharedFile>::Reader list, const std::string& dir,
                                      Status* err) {
  std::vector<SharedFileRef> out;
  for (auto r : list) {
    SharedFileRef f;
    f.localName = r.getLocalName();
    if (f.localName.find('/') != std::string::npos || f.localName == ".." || f.localName.empty())
      *err = Status::Corruption("invalid local file name '" + f.localName + "'");
    f.file = readFileRef(r.getFile(), dir, err);
    f.createdByCheckpoint = r.getCreatedByCheckpoint();
    out.push_back(std::move(f));
  }
  return out;
}

void fillKeyGroups(schema::KeyGroupsStateHandle::Builder hb, const KeyGroupsStateHandle& kg, const std::string& dir) {
  fillFileRef(hb.initFile(), kg.file, dir);
  hb.setStartKeyGroup(static_cast<uint32_t>(kg.range.start));
  hb.setEndKeyGroup(static_cast<uint32_t>(kg.range.end));
  auto offs = hb.initOffsets(static_cast<unsigned>(kg.offsets.size()));
  for (unsigned k = 0; k < kg.offsets.size(); ++k) offs.set(k, kg.offsets[k]);
}

/// A key-group file's handle; an impossible range is reported through err (the caller
/// names the operator).
KeyGroupsStateHandle readKeyGroupsHandle(schema::KeyGroupsStateHandle::Reader hb, const std::string& dir,
                                         int maxParallelism, Status* err) {
  KeyGroupsStateHandle h;
  h.file = readFileRef(hb.getFile(), dir, err);
  if (hb.getStartKeyGroup() > 32768 || hb.getEndKeyGroup() > 32768) {
    *err = Status::Corruption("a key-group handle has an impossible range");
    return h;
  }
  h.range = {static_cast<int>(hb.getStartKeyGroup()), static_cast<int>(hb.getEndKeyGroup())};
  for (auto o : hb.getOffsets()) h.offsets.push_back(o);
  if (h.range.end >= maxParallelism || h.range.start > h.range.end + 1 ||
      static_cast<int>(h.offsets.size()) != h.range.size())
    *err = Status::Corruption("a key-group handle has an inconsistent range");
  return h;
}

}  // namespace

std::string normalizePath(const std::string& path) {
  std::vector<std::string> out;
  for (auto& part : splitPath(path)) {
    if (part == "..") {
      if (out.empty()) return "";
      out.pop_back();
    } else {
      out.push_back(part);
    }
  }
  std::string s;
  for (auto& p : out) s += (s.empty() ? "" : "/") + p;
  return s;
}

std::string relativePath(const std::string& fromDir, const std::string& to) {
  auto a = splitPath(normalizePath(fromDir));
  auto b = splitPath(normalizePath(to));
  size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
  std::string s;
  for (size_t i = common; i < a.size(); ++i) s += "../";
  for (size_t i = common; i < b.size(); ++i) s += b[i] + (i + 1 < b.size() ? "/" : "");
  return s;
}

std::vector<FileRef> CheckpointMetadata::referencedFiles() const {
  std::vector<FileRef> out;
  for (const auto& op : operators)
    for (const auto& st : op.subtasks)
      for (auto& f : state::referencedFiles(st.keyed)) out.push_back(f);
  return out;
}

bool CheckpointMetadata::hasChannelState() const {
  for (const auto& op : operators)
    for (const auto& st : op.subtasks)
      if (!st.inputChannels.empty()) return true;
  return false;
}

const OperatorSnapshot* CheckpointMetadata::findOperator(const std::string& uid) const {
  for (const auto& op : operators)
    if (op.uid == uid) return &op;
  return nullptr;
}

Result<std::string> serializeMetadata(const CheckpointMetadata& m, const std::string& dir) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<schema::CheckpointMetadata>();
  // A snapshot with in-flight records needs a reader that restores them (version 2);
  // without them it stays readable by every release (see kMetadataFormatVersion).
  const uint32_t version =
      m.hasChannelState() ? std::max(m.formatVersion, kMetadataFormatVersion)
                          : std::min(m.formatVersion, kMetadataFormatVersionWithoutChannelState);
  root.setFormatVersion(version);
  root.setJobId(m.jobId);
  root.setCheckpointId(m.checkpointId);
  root.setKind(m.kind == SnapshotKind::kSavepoint ? schema::CheckpointMetadata::Kind::SAVEPOINT
                                                  : schema::CheckpointMetadata::Kind::CHECKPOINT);
  root.setFormat(m.format == SnapshotFormat::kCanonical ? schema::CheckpointMetadata::Format::CANONICAL
                                                        : schema::CheckpointMetadata::Format::NATIVE);
  root.setTimestampMs(m.timestampMs);
  auto w = root.initWriter();
  w.setJobClass(m.jobClass);
  w.setPluginFile(m.pluginFile);
  w.setPluginDigest(m.pluginDigest);
  w.setSdkVersion(m.sdkVersion);
  w.setParallelism(static_cast<uint32_t>(m.parallelism));
  root.setBackend(m.backend);
  root.setIncremental(m.incremental);
  root.setMaxParallelism(static_cast<uint32_t>(m.maxParallelism));
  auto stats = root.initStats();
  stats.setSyncMicros(m.stats.syncMicros);
  stats.setAsyncMicros(m.stats.asyncMicros);
  stats.setAlignmentMicros(m.stats.alignmentMicros);
  stats.setNewBytes(m.stats.newBytes);
  stats.setTotalBytes(m.stats.totalBytes);
  auto ops = root.initOperators(static_cast<unsigned>(m.operators.size()));
  for (unsigned i = 0; i < m.operators.size(); ++i) {
    const auto& op = m.operators[i];
    auto ob = ops[i];
    ob.setUid(op.uid);
    ob.setName(op.name);
    ob.setParallelism(static_cast<uint32_t>(op.parallelism));
    ob.setKeyed(op.keyed);
    auto states = ob.initStates(static_cast<unsigned>(op.states.size()));
    for (unsigned j = 0; j < op.states.size(); ++j) {
      const auto& d = op.states[j];
      auto sb = states[j];
      sb.setName(d.name);
      sb.setKind(static_cast<schema::StateDescriptor::Kind>(static_cast<uint16_t>(d.kind)));
      sb.setKeySerializer(d.keySerializer);
      sb.setKeySerializerVersion(d.keySerializerVersion);
      sb.setUserKeySerializer(d.userKeySerializer);
      sb.setUserKeySerializerVersion(d.userKeySerializerVersion);
      sb.setValueSerializer(d.valueSerializer);
      sb.setValueSerializerVersion(d.valueSerializerVersion);
    }
    auto subs = ob.initSubtasks(static_cast<unsigned>(op.subtasks.size()));
    for (unsigned j = 0; j < op.subtasks.size(); ++j) {
      const auto& st = op.subtasks[j];
      auto sb = subs[j];
      sb.setIndex(static_cast<uint32_t>(st.index));
      sb.setOperatorState(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(st.operatorState.data()),
                                              st.operatorState.size()));
      auto keyed = sb.initKeyed();
      if (auto* kg = std::get_if<KeyGroupsStateHandle>(&st.keyed)) {
        fillKeyGroups(keyed.initKeyGroups(), *kg, dir);
      } else if (auto* ikg = std::get_if<IncrementalKeyGroupsStateHandle>(&st.keyed)) {
        auto hb = keyed.initIncrementalKeyGroups();
        hb.setBackendId(ikg->backendId);
        hb.setCheckpointId(ikg->checkpointId);
        hb.setStartKeyGroup(static_cast<uint32_t>(ikg->range.start));
        hb.setEndKeyGroup(static_cast<uint32_t>(ikg->range.end));
        auto parts = hb.initParts(static_cast<unsigned>(ikg->parts.size()));
        for (unsigned k = 0; k < ikg->parts.size(); ++k) {
          const auto& part = ikg->parts[k];
          fillKeyGroups(parts[k].initFile(), part.file, dir);
          parts[k].setCreatedByCheckpoint(part.createdByCheckpoint);
          auto runs = parts[k].initKeyGroups(static_cast<unsigned>(part.keyGroups.size()));
          for (unsigned r = 0; r < part.keyGroups.size(); ++r) {
            runs[r].setStart(static_cast<uint32_t>(part.keyGroups[r].start));
            runs[r].setEnd(static_cast<uint32_t>(part.keyGroups[r].end));
          }
        }
      } else if (auto* inc = std::get_if<IncrementalStateHandle>(&st.keyed)) {
        auto hb = keyed.initIncremental();
        hb.setBackendId(inc->backendId);
        hb.setCheckpointId(inc->checkpointId);
        hb.setStartKeyGroup(static_cast<uint32_t>(inc->range.start));
        hb.setEndKeyGroup(static_cast<uint32_t>(inc->range.end));
        fillShared(hb.initSharedFiles(static_cast<unsigned>(inc->sharedFiles.size())), inc->sharedFiles, dir);
        fillShared(hb.initPrivateFiles(static_cast<unsigned>(inc->privateFiles.size())), inc->privateFiles, dir);
        auto cfs = hb.initColumnFamilies(static_cast<unsigned>(inc->columnFamilies.size()));
        for (unsigned k = 0; k < inc->columnFamilies.size(); ++k) cfs.set(k, inc->columnFamilies[k]);
      } else {
        keyed.setNone();
      }
      if (!st.inputChannels.empty()) {
        sb.setInputWatermark(st.inputWatermark);
        auto bufs = sb.initInputChannels(static_cast<unsigned>(st.inputChannels.size()));
        for (unsigned k = 0; k < st.inputChannels.size(); ++k) {
          const auto& b = st.inputChannels[k];
          bufs[k].setInput(static_cast<uint32_t>(b.input));
          bufs[k].setFromSubtask(static_cast<uint32_t>(b.fromSubtask));
          bufs[k].setData(
              capnp::Data::Reader(reinterpret_cast<const kj::byte*>(b.data.data()), b.data.size()));
        }
      }
    }
  }
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  std::string out(kMagic, sizeof kMagic);
  uint32_t v = version;
  char vb[4] = {static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff), static_cast<char>((v >> 16) & 0xff),
                static_cast<char>((v >> 24) & 0xff)};
  out.append(vb, 4);
  out.append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  return out;
}

Result<CheckpointMetadata> parseMetadata(std::string_view bytes, const std::string& dir, const std::string& where) {
  if (bytes.size() < kHeaderSize || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return Status::Corruption(where + " is not a jobhost checkpoint or savepoint metadata file (bad magic" +
                              std::string(bytes.size() < kHeaderSize ? ", file too short" : "") + ")");
  }
  uint32_t version = 0;
  for (int i = 0; i < 4; ++i) version |= uint32_t(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
  if (version > kMetadataFormatVersion || version == 0) {
    return Status::Incompatible(where + " has metadata format version " + std::to_string(version) +
                                "; this jobhost reads versions 1 to " + std::to_string(kMetadataFormatVersion) +
                                ". Restore it with the jobhost release that wrote it, or a newer one");
  }
  std::string_view body = bytes.substr(kHeaderSize);
  if (body.size() % sizeof(capnp::word) != 0)
    return Status::Corruption(where + " is truncated or corrupt (message size is not a multiple of 8 bytes)");
  // Copy into aligned words: the input may not be 8-byte aligned.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(body.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), body.data(), body.size());
  CheckpointMetadata m;
  Status err;
  try {
    capnp::ReaderOptions opts;
    // Bound the work by the file's size: a small corrupt file must not claim millions of
    // (zero-sized) elements. Cap'n Proto counts every list element as at least one word.
    opts.traversalLimitInWords = std::max<uint64_t>(4096, words.size() * 4);
    capnp::FlatArrayMessageReader reader(words.asPtr(), opts);
    auto root = reader.getRoot<schema::CheckpointMetadata>();
    m.formatVersion = root.getFormatVersion();
    m.jobId = root.getJobId();
    m.checkpointId = root.getCheckpointId();
    m.kind = root.getKind() == schema::CheckpointMetadata::Kind::SAVEPOINT ? SnapshotKind::kSavepoint
                                                                           : SnapshotKind::kCheckpoint;
    m.format = root.getFormat() == schema::CheckpointMetadata::Format::CANONICAL ? SnapshotFormat::kCanonical
                                                                                : SnapshotFormat::kNative;
    m.timestampMs = root.getTimestampMs();
    auto w = root.getWriter();
    m.jobClass = w.getJobClass();
    m.pluginFile = w.getPluginFile();
    m.pluginDigest = w.getPluginDigest();
    m.sdkVersion = w.getSdkVersion();
    m.parallelism = static_cast<int>(w.getParallelism());
    m.backend = root.getBackend();
    m.incremental = root.getIncremental();
    m.maxParallelism = static_cast<int>(root.getMaxParallelism());
    if (m.maxParallelism <= 0 || m.maxParallelism > 32768)
      return Status::Corruption(where + ": implausible max parallelism " + std::to_string(m.maxParallelism));
    auto stats = root.getStats();
    m.stats = {stats.getSyncMicros(), stats.getAsyncMicros(), stats.getNewBytes(), stats.getTotalBytes(),
               stats.getAlignmentMicros()};
    for (auto ob : root.getOperators()) {
      OperatorSnapshot op;
      op.uid = ob.getUid();
      op.name = ob.getName();
      op.parallelism = static_cast<int>(ob.getParallelism());
      op.keyed = ob.getKeyed();
      for (auto sb : ob.getStates()) {
        StateDescriptorInfo d;
        d.name = sb.getName();
        auto k = static_cast<uint16_t>(sb.getKind());
        if (k > 2) return Status::Corruption(where + ": unknown state kind " + std::to_string(k));
        d.kind = static_cast<StateKind>(k);
        d.keySerializer = sb.getKeySerializer();
        d.keySerializerVersion = sb.getKeySerializerVersion();
        d.userKeySerializer = sb.getUserKeySerializer();
        d.userKeySerializerVersion = sb.getUserKeySerializerVersion();
        d.valueSerializer = sb.getValueSerializer();
        d.valueSerializerVersion = sb.getValueSerializerVersion();
        op.states.push_back(std::move(d));
      }
      for (auto sb : ob.getSubtasks()) {
        SubtaskSnapshot st;
        st.index = static_cast<int>(sb.getIndex());
        auto data = sb.getOperatorState();
        st.operatorState.assign(reinterpret_cast<const char*>(data.begin()), data.size());
        auto keyed = sb.getKeyed();
        switch (keyed.which()) {
          case schema::SubtaskSnapshot::Keyed::NONE:
            break;
          case schema::SubtaskSnapshot::Keyed::KEY_GROUPS: {
            Status bad;
            st.keyed = readKeyGroupsHandle(keyed.getKeyGroups(), dir, m.maxParallelism, &bad);
            if (!bad.ok()) return Status::Corruption(where + ": operator '" + op.uid + "': " + bad.message());
            break;
          }
          case schema::SubtaskSnapshot::Keyed::INCREMENTAL_KEY_GROUPS: {
            auto hb = keyed.getIncrementalKeyGroups();
            IncrementalKeyGroupsStateHandle h;
            h.backendId = hb.getBackendId();
            h.checkpointId = hb.getCheckpointId();
            auto bad = [&](const std::string& what) {
              return Status::Corruption(where + ": incremental key-group handle of '" + op.uid + "' subtask " +
                                        std::to_string(st.index) + " " + what +
                                        "; the metadata is damaged: restore from another checkpoint or savepoint");
            };
            if (hb.getStartKeyGroup() > 32768 || hb.getEndKeyGroup() > 32768) return bad("has an impossible range");
            h.range = {static_cast<int>(hb.getStartKeyGroup()), static_cast<int>(hb.getEndKeyGroup())};
            if (h.range.end >= m.maxParallelism || h.range.start > h.range.end + 1)
              return bad("has an inconsistent range");
            std::vector<char> covered(static_cast<size_t>(std::max(0, h.range.size())), 0);
            for (auto pb : hb.getParts()) {
              KeyGroupsFilePart part;
              Status fileErr;
              part.file = readKeyGroupsHandle(pb.getFile(), dir, m.maxParallelism, &fileErr);
              if (!fileErr.ok()) return bad("has a part where " + fileErr.message());
              part.createdByCheckpoint = pb.getCreatedByCheckpoint();
              int prevEnd = -1;
              for (auto rb : pb.getKeyGroups()) {
                KeyGroupRange run{static_cast<int>(rb.getStart()), static_cast<int>(rb.getEnd())};
                if (run.empty() || run.start <= prevEnd || run.intersect(part.file.range) != run ||
                    run.intersect(h.range) != run)
                  return bad("reads key groups " + std::to_string(run.start) + "-" + std::to_string(run.end) +
                             " outside its file or its range, or out of order");
                for (int kg = run.start; kg <= run.end; ++kg)
                  if (covered[static_cast<size_t>(kg - h.range.start)]++)
                    return bad("reads key group " + std::to_string(kg) + " from two files");
                prevEnd = run.end;
                part.keyGroups.push_back(run);
              }
              h.parts.push_back(std::move(part));
            }
            st.keyed = std::move(h);
            break;
          }
          case schema::SubtaskSnapshot::Keyed::INCREMENTAL: {
            auto hb = keyed.getIncremental();
            IncrementalStateHandle h;
            h.backendId = hb.getBackendId();
            h.checkpointId = hb.getCheckpointId();
            if (hb.getStartKeyGroup() > 32768 || hb.getEndKeyGroup() > 32768)
              return Status::Corruption(where + ": incremental handle of '" + op.uid + "' has an impossible range");
            h.range = {static_cast<int>(hb.getStartKeyGroup()), static_cast<int>(hb.getEndKeyGroup())};
            h.sharedFiles = readShared(hb.getSharedFiles(), dir, &err);
            h.privateFiles = readShared(hb.getPrivateFiles(), dir, &err);
            for (auto cf : hb.getColumnFamilies()) h.columnFamilies.emplace_back(cf);
            if (h.range.end >= m.maxParallelism || h.range.start > h.range.end + 1)
              err = Status::Corruption(where + ": incremental handle of '" + op.uid + "' has an inconsistent range");
            st.keyed = std::move(h);
            break;
          }
          default:
            return Status::Incompatible(where + " uses a state handle type this jobhost does not know; "
                                        "restore it with a newer jobhost");
        }
        for (auto bb : sb.getInputChannels()) {
          InputChannelBuffer b;
          b.input = static_cast<int>(bb.getInput());
          b.fromSubtask = static_cast<int>(bb.getFromSubtask());
          if (b.input > 1024 || b.fromSubtask > 32768)
            return Status::Corruption(where + ": the in-flight records of '" + op.uid + "' subtask " +
                                      std::to_string(st.index) + " name an impossible channel");
          auto d = bb.getData();
          b.data.assign(reinterpret_cast<const char*>(d.begin()), d.size());
          st.inputChannels.push_back(std::move(b));
        }
        st.inputWatermark = sb.getInputWatermark();
        op.subtasks.push_back(std::move(st));
      }
      m.operators.push_back(std::move(op));
    }
  } catch (const kj::Exception& e) {
    return Status::Corruption(where + " is truncated or corrupt: " + std::string(e.getDescription().cStr()));
  } catch (const std::exception& e) {  // e.g. bad_alloc from an implausible count
    return Status::Corruption(where + " is corrupt: " + e.what());
  }
  if (!err.ok()) return Status::Corruption(where + ": " + err.message());
  return m;
}

}  // namespace jobhost::state
