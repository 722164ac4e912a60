// host/plugin/elf_metadata.cc — see elf_metadata.h.
//
// Parsing rules: every number read from the input is untrusted. Offsets and sizes are
// checked with inBounds() (which cannot overflow) before any byte is touched, counts
// are bounded by the file size, and all reads go through the little-endian helpers
// below, which take an already-checked offset.
#include "host/plugin/elf_metadata.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

namespace jobhost::host {
namespace {

// ELF constants (System V gABI); spelled out here rather than taken from <elf.h> to
// keep this file's vocabulary small and explicit.
constexpr char kElfMagic[4] = {0x7f, 'E', 'L', 'F'};
constexpr size_t kEiClass = 4;
constexpr size_t kEiData = 5;
constexpr uint8_t kElfClass32 = 1;
constexpr uint8_t kElfClass64 = 2;
constexpr uint8_t kElfData2Lsb = 1;
constexpr uint8_t kElfData2Msb = 2;

constexpr uint16_t kEtRel = 1;
constexpr uint16_t kEtExec = 2;
constexpr uint16_t kEtDyn = 3;
constexpr uint16_t kEtCore = 4;

constexpr uint16_t kEmX86_64 = 62;
constexpr uint16_t kEmAarch64 = 183;

constexpr size_t kElf64HeaderSize = 64;
constexpr size_t kElf64ShdrSize = 64;
constexpr size_t kElf64DynSize = 16;

constexpr uint16_t kShnUndef = 0;
constexpr uint16_t kShnLoReserve = 0xff00;
constexpr uint16_t kShnXindex = 0xffff;

constexpr uint32_t kShtNobits = 8;
constexpr uint32_t kShtDynamic = 6;

constexpr int64_t kDtNull = 0;
constexpr int64_t kDtFlags1 = 0x6ffffffb;
constexpr uint64_t kDf1Pie = 0x08000000;

constexpr std::string_view kMetaSectionName = ".jhmeta";
constexpr std::string_view kAliasSectionName = "jhjobs";  // JOBHOST_JOB's Boost.DLL aliases
constexpr std::string_view kRecordMagic{"JHJOB\001", 6};
constexpr const char* kRebuildHint = "; rebuild the plugin";

// True iff [offset, offset + length) lies within a buffer of `size` bytes.
bool inBounds(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

// Little-endian reads; the caller has checked that the bytes exist.
uint16_t le16(std::string_view b, size_t off) {
  return static_cast<uint16_t>(static_cast<uint8_t>(b[off]) |
                               static_cast<uint8_t>(b[off + 1]) << 8);
}
uint32_t le32(std::string_view b, size_t off) {
  return static_cast<uint32_t>(le16(b, off)) | static_cast<uint32_t>(le16(b, off + 2)) << 16;
}
uint64_t le64(std::string_view b, size_t off) {
  return static_cast<uint64_t>(le32(b, off)) | static_cast<uint64_t>(le32(b, off + 4)) << 32;
}

std::string hex(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  do {
    out.insert(out.begin(), kDigits[v & 0xf]);
    v >>= 4;
  } while (v != 0);
  return "0x" + out;
}

PluginMetadataResult failure(PluginError::Kind kind, std::string message) {
  PluginMetadataResult result;
  result.error = PluginError{kind, std::move(message)};
  return result;
}

PluginMetadataResult corrupt(const std::string& what) {
  return failure(PluginError::kCorrupt, "corrupt ELF file: " + what + kRebuildHint);
}

// One ELF64 section header, decoded.
struct Section {
  uint32_t name = 0;
  uint32_t type = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t link = 0;
};

Section readSection(std::string_view b, uint64_t headerOffset) {
  Section s;
  s.name = le32(b, headerOffset + 0);
  s.type = le32(b, headerOffset + 4);
  s.offset = le64(b, headerOffset + 24);
  s.size = le64(b, headerOffset + 32);
  s.link = le32(b, headerOffset + 40);
  return s;
}

// The section header table, bounds-checked once so sections can be read freely.
struct SectionTable {
  uint64_t offset = 0;
  uint64_t entrySize = 0;
  uint64_t count = 0;
  uint64_t nameTableIndex = 0;

  Section at(std::string_view b, uint64_t i) const {
    return readSection(b, offset + i * entrySize);
  }
};

// Locates and validates the section header table. On failure returns an error result.
std::optional<PluginMetadataResult> readSectionTable(std::string_view b, SectionTable* t) {
  const uint64_t size = b.size();
  t->offset = le64(b, 40);
  t->entrySize = le16(b, 58);
  t->count = le16(b, 60);
  t->nameTableIndex = le16(b, 62);
  if (t->offset == 0) {
    return failure(PluginError::kNotPlugin,
                   "not a jobhost plugin: the file has no section headers (removed by a "
                   "tool such as sstrip?), so there is no .jhmeta section to read; rebuild "
                   "the plugin and strip it with `strip` or `strip -g` only");
  }
  if (t->entrySize < kElf64ShdrSize) {
    return corrupt("section header size " + std::to_string(t->entrySize) + " is smaller than " +
                   std::to_string(kElf64ShdrSize));
  }
  // Extended numbering: counts that do not fit 16 bits live in section 0.
  if (t->count == 0 || t->nameTableIndex == kShnXindex) {
    if (!inBounds(t->offset, t->entrySize, size)) {
      return corrupt("section header table at offset " + hex(t->offset) +
                     " lies beyond the end of the file (" + std::to_string(size) +
                     " bytes; truncated?)");
    }
    Section zero = readSection(b, t->offset);
    if (t->count == 0) t->count = zero.size;
    if (t->nameTableIndex == kShnXindex) t->nameTableIndex = zero.link;
  } else if (t->nameTableIndex >= kShnLoReserve) {
    return corrupt("section name table index " + std::to_string(t->nameTableIndex) +
                   " is a reserved index");
  }
  if (t->count == 0) {
    return failure(PluginError::kNotPlugin,
                   "not a jobhost plugin: the file has no sections, so no .jhmeta section "
                   "— was it built with JOBHOST_JOB?");
  }
  if (t->count > size / t->entrySize || !inBounds(t->offset, t->count * t->entrySize, size)) {
    return corrupt("section header table (" + std::to_string(t->count) + " entries at offset " +
                   hex(t->offset) + ") extends past the end of the file (" +
                   std::to_string(size) + " bytes; truncated?)");
  }
  if (t->nameTableIndex == kShnUndef) {
    return corrupt("the file has no section name table (e_shstrndx is 0)");
  }
  if (t->nameTableIndex >= t->count) {
    return corrupt("section name table index " + std::to_string(t->nameTableIndex) +
                   " is out of range (" + std::to_string(t->count) + " sections)");
  }
  return std::nullopt;
}

// Checks that a section's contents lie within the file.
bool sectionInFile(const Section& s, uint64_t fileSize) {
  return s.type == kShtNobits || inBounds(s.offset, s.size, fileSize);
}

// True if the dynamic section marks the file as a position-independent executable
// (DT_FLAGS_1 has DF_1_PIE). Such files are ET_DYN, like libraries, but dlopen()
// refuses them. *bad is set if the dynamic section is malformed.
bool isPieExecutable(std::string_view b, const Section& dynamic, bool* bad) {
  *bad = false;
  if (dynamic.type == kShtNobits) return false;
  if (!inBounds(dynamic.offset, dynamic.size, b.size())) {
    *bad = true;
    return false;
  }
  const uint64_t entries = dynamic.size / kElf64DynSize;
  for (uint64_t i = 0; i < entries; ++i) {
    const uint64_t off = dynamic.offset + i * kElf64DynSize;
    const int64_t tag = static_cast<int64_t>(le64(b, off));
    const uint64_t value = le64(b, off + 8);
    if (tag == kDtNull) break;
    if (tag == kDtFlags1) return (value & kDf1Pie) != 0;
  }
  return false;
}

std::string elfTypeProblem(uint16_t type) {
  switch (type) {
    case kEtRel:
      return "an object file (.o), not a shared library; link the job classes into a shared "
             "library (CMake: add_library(<name> MODULE ...))";
    case kEtExec:
      return "an executable, not a shared library; build the job classes as a shared library "
             "(CMake: add_library(<name> MODULE ...))";
    case kEtCore:
      return "a core dump, not a shared library; pass the plugin's .so file";
    default:
      return "an ELF file of type " + std::to_string(type) +
             ", not a shared library; pass the plugin's .so file";
  }
}

bool isIdentifier(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

// No ASCII control characters: the fields end up on the user's terminal.
bool isPrintable(std::string_view s) {
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

// Parses the concatenated records of a .jhmeta section.
PluginMetadataResult parseRecords(std::string_view section) {
  static constexpr const char* kFieldNames[6] = {"name",        "description", "backend",
                                                 "incremental", "sdkVersion",  "abiTag"};
  PluginMetadataResult result;
  std::set<std::string, std::less<>> names;
  size_t pos = 0;
  int index = 0;
  auto bad = [&](size_t at, const std::string& what) {
    return failure(PluginError::kCorrupt,
                   "corrupt plugin metadata: .jhmeta record " + std::to_string(index) +
                       " (section offset " + hex(at) + ") " + what + kRebuildHint);
  };
  while (pos < section.size()) {
    if (section[pos] == '\0') {  // alignment padding between records
      ++pos;
      continue;
    }
    ++index;
    const size_t start = pos;
    if (section.substr(pos, kRecordMagic.size()) != kRecordMagic) {
      return bad(start, "does not start with the JHJOB record marker");
    }
    pos += kRecordMagic.size();
    std::string_view fields[6];
    for (int f = 0; f < 6; ++f) {
      const size_t nul = section.find('\0', pos);
      if (nul == std::string_view::npos) {
        return bad(start, std::string("is truncated: field '") + kFieldNames[f] +
                              "' has no terminating NUL");
      }
      fields[f] = section.substr(pos, nul - pos);
      pos = nul + 1;
    }
    for (int f = 0; f < 6; ++f) {
      if (!isPrintable(fields[f])) {
        return bad(start, std::string("has control characters in field '") + kFieldNames[f] +
                              "'");
      }
      if (f != 1 && fields[f].empty()) {
        return bad(start, std::string("has an empty field '") + kFieldNames[f] + "'");
      }
    }
    JobClassMeta meta;
    if (!isIdentifier(fields[0])) {
      return bad(start, "has class name '" + std::string(fields[0]) +
                            "', which is not a C identifier");
    }
    meta.name = fields[0];
    meta.description = fields[1];
    meta.backend = fields[2];
    // "0"/"1" as JOBHOST_JOB writes them; "false"/"true" if a job author passed a bool
    // literal to JOBHOST_JOB_INCREMENTAL (the macro stringifies the token).
    if (fields[3] == "1" || fields[3] == "true") {
      meta.incremental = true;
    } else if (fields[3] == "0" || fields[3] == "false") {
      meta.incremental = false;
    } else {
      return bad(start, "has incremental flag '" + std::string(fields[3]) +
                            "' (expected 0 or 1)");
    }
    meta.sdkVersion = fields[4];
    meta.abiTag = fields[5];
    if (!names.insert(meta.name).second) {
      return bad(start, "declares class '" + meta.name + "' a second time");
    }
    result.classes.push_back(std::move(meta));
  }
  if (result.classes.empty()) {
    return failure(PluginError::kCorrupt,
                   "corrupt plugin metadata: the .jhmeta section holds no job records" +
                       std::string(kRebuildHint));
  }
  // The record order is the compiler's and linker's choice (GCC -O2 reverses the
  // classes of one file), so present a stable order.
  std::sort(result.classes.begin(), result.classes.end(),
            [](const JobClassMeta& a, const JobClassMeta& b) { return a.name < b.name; });
  return result;
}

}  // namespace

std::string elfMachineName(uint16_t machine) {
  switch (machine) {
    case 2: return "sparc";
    case 3: return "i386";
    case 8: return "mips";
    case 20: return "ppc";
    case 21: return "ppc64";
    case 22: return "s390";
    case 40: return "arm";
    case 43: return "sparcv9";
    case 50: return "ia64";
    case kEmX86_64: return "x86_64";
    case kEmAarch64: return "aarch64";
    case 243: return "riscv";
    case 258: return "loongarch";
    default: return "machine " + std::to_string(machine);
  }
}

uint16_t hostElfMachine() {
#if defined(__x86_64__)
  return kEmX86_64;
#elif defined(__aarch64__)
  return kEmAarch64;
#elif defined(__riscv) && __riscv_xlen == 64
  return 243;
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return 21;
#elif defined(__loongarch64)
  return 258;
#else
#error "jobhost: unknown host architecture; add its ELF e_machine to hostElfMachine()"
#endif
}

PluginMetadataResult readPluginMetadata(std::string_view b) {
  const uint64_t size = b.size();

  // 1. ELF at all?
  if (size < sizeof(kElfMagic) || std::memcmp(b.data(), kElfMagic, sizeof(kElfMagic)) != 0) {
    return failure(PluginError::kNotSharedLibrary,
                   "not a shared library (no ELF header); pass the plugin's .so file");
  }
  // e_ident (16 bytes), e_type and e_machine sit at the same offsets in ELF32 and ELF64.
  if (size < 20) {
    return corrupt("truncated ELF header (" + std::to_string(size) + " bytes)");
  }
  const uint8_t elfClass = static_cast<uint8_t>(b[kEiClass]);
  const uint8_t elfData = static_cast<uint8_t>(b[kEiData]);
  if (elfClass != kElfClass32 && elfClass != kElfClass64) {
    return corrupt("invalid ELF class " + std::to_string(elfClass));
  }
  if (elfData != kElfData2Lsb && elfData != kElfData2Msb) {
    return corrupt("invalid ELF byte order " + std::to_string(elfData));
  }

  // 2. For this host?
  const bool bigEndian = elfData == kElfData2Msb;
  const uint16_t machine =
      bigEndian ? static_cast<uint16_t>(static_cast<uint8_t>(b[18]) << 8 |
                                        static_cast<uint8_t>(b[19]))
                : le16(b, 18);
  const uint16_t hostMachine = hostElfMachine();
  if (machine != hostMachine || elfClass != kElfClass64 || bigEndian) {
    std::string built = elfMachineName(machine) + " (e_machine " + std::to_string(machine);
    if (elfClass == kElfClass32) built += ", 32-bit ELF";
    if (bigEndian) built += ", big-endian";
    built += ")";
    const std::string host = elfMachineName(hostMachine);
    return failure(PluginError::kWrongArchitecture,
                   "built for " + built + ", this host is " + host +
                       " (64-bit, little-endian); rebuild the plugin for " + host);
  }
  if (size < kElf64HeaderSize) {
    return corrupt("truncated ELF header (" + std::to_string(size) + " of " +
                   std::to_string(kElf64HeaderSize) + " bytes)");
  }

  // 3. A shared library?
  const uint16_t type = le16(b, 16);
  if (type != kEtDyn) {
    return failure(PluginError::kNotSharedLibrary, elfTypeProblem(type));
  }

  // 4. Find .jhmeta (and .dynamic, to tell a PIE executable from a library).
  SectionTable table;
  if (auto error = readSectionTable(b, &table)) return std::move(*error);
  const Section names = table.at(b, table.nameTableIndex);
  if (names.type == kShtNobits || !inBounds(names.offset, names.size, size)) {
    return corrupt("section name table (offset " + hex(names.offset) + ", " +
                   std::to_string(names.size) + " bytes) lies outside the file (" +
                   std::to_string(size) + " bytes; truncated?)");
  }
  const std::string_view nameTable = b.substr(names.offset, names.size);

  std::optional<Section> meta;
  bool pie = false;
  bool hasAliases = false;
  for (uint64_t i = 0; i < table.count; ++i) {
    const Section s = table.at(b, i);
    if (s.type == kShtDynamic && !pie) {
      bool badDynamic = false;
      pie = isPieExecutable(b, s, &badDynamic);
      if (badDynamic) {
        return corrupt("dynamic section (offset " + hex(s.offset) + ", " +
                       std::to_string(s.size) + " bytes) lies outside the file (" +
                       std::to_string(size) + " bytes; truncated?)");
      }
    }
    if (i == 0) continue;  // SHN_UNDEF has no name
    if (s.name >= nameTable.size()) {
      return corrupt("section " + std::to_string(i) + " has a name offset (" + hex(s.name) +
                     ") outside the section name table");
    }
    const size_t nul = nameTable.find('\0', s.name);
    if (nul == std::string_view::npos) {
      return corrupt("section " + std::to_string(i) + " has an unterminated name");
    }
    const std::string_view sectionName = nameTable.substr(s.name, nul - s.name);
    if (sectionName == kAliasSectionName) hasAliases = true;
    if (sectionName != kMetaSectionName) continue;
    if (meta) return corrupt("the file has two .jhmeta sections");
    if (!sectionInFile(s, size)) {
      return corrupt(".jhmeta section (offset " + hex(s.offset) + ", " +
                     std::to_string(s.size) + " bytes) lies outside the file (" +
                     std::to_string(size) + " bytes; truncated?)");
    }
    if (s.type == kShtNobits) {
      return corrupt("the .jhmeta section has no contents in the file (SHT_NOBITS)");
    }
    meta = s;
  }
  if (pie) {
    return failure(PluginError::kNotSharedLibrary,
                   "an executable (position-independent), not a shared library; build the job "
                   "classes as a shared library (CMake: add_library(<name> MODULE ...))");
  }
  if (!meta && hasAliases) {
    // Built with JOBHOST_JOB, but nothing references the metadata, so
    // `-ffunction-sections -fdata-sections -Wl,--gc-sections` can drop it.
    return failure(PluginError::kCorrupt,
                   "a jobhost plugin without metadata: it has job class aliases (section "
                   "jhjobs) but no .jhmeta section, which the linker drops under "
                   "-Wl,--gc-sections; link the plugin without --gc-sections");
  }
  if (!meta) {
    return failure(PluginError::kNotPlugin,
                   "not a jobhost plugin: no .jhmeta section — was it built with JOBHOST_JOB?");
  }

  // 5. The records.
  return parseRecords(b.substr(meta->offset, meta->size));
}

PluginFileBytes& PluginFileBytes::operator=(PluginFileBytes&& other) noexcept {
  if (this != &other) {
    release();
    std::swap(map_, other.map_);
    std::swap(mapBytes_, other.mapBytes_);
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
  }
  return *this;
}

void PluginFileBytes::release() {
  if (map_ != nullptr) ::munmap(map_, mapBytes_);
  map_ = nullptr;
  mapBytes_ = 0;
  data_ = nullptr;
  size_ = 0;
}

int openPluginFile(const std::string& path, uint64_t* size, PluginError* error) {
  auto fail = [&](PluginError::Kind kind, std::string message) {
    *error = PluginError{kind, std::move(message)};
    return -1;
  };
  auto failErrno = [&](int err) {
    if (err == ENOENT || err == ENOTDIR) {
      return fail(PluginError::kNotFound, "no such file: " + path);
    }
    if (err == EACCES || err == EPERM) {
      return fail(PluginError::kLoadFailed,
                  "permission denied: cannot read " + path + "; check the file's permissions");
    }
    return fail(PluginError::kLoadFailed, "cannot read " + path + ": " + std::strerror(err));
  };
  if (path.empty()) return fail(PluginError::kNotFound, "no such file: (empty path)");

  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat() rejects it next.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return failErrno(errno);
  auto failClosing = [&](int result) {
    ::close(fd);
    return result;
  };

  struct stat st;
  if (::fstat(fd, &st) != 0) return failClosing(failErrno(errno));
  if (S_ISDIR(st.st_mode)) {
    return failClosing(fail(PluginError::kNotSharedLibrary,
                            path + " is a directory, not a shared library; pass the plugin's .so file"));
  }
  if (!S_ISREG(st.st_mode)) {
    return failClosing(fail(PluginError::kNotSharedLibrary,
                            path + " is not a regular file (a device, FIFO or socket); pass the plugin's "
                                   ".so file"));
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxPluginFileBytes) {
    return failClosing(fail(PluginError::kLoadFailed,
                            path + " is " + std::to_string(st.st_size) + " bytes, larger than the " +
                                std::to_string(kMaxPluginFileBytes) +
                                "-byte limit for plugins; strip debug info (`strip -g`) to shrink it"));
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

std::string pluginGrewMessage(const std::string& path, uint64_t sizeWhenOpened) {
  return path + " grew while it was read (" + std::to_string(sizeWhenOpened) +
         " bytes when opened); is it being rewritten? Run the command again once it is complete";
}

bool readPluginFile(const std::string& path, PluginFileBytes* bytes, PluginError* error) {
  bytes->release();
  auto fail = [&](PluginError::Kind kind, std::string message) {
    bytes->release();
    *error = PluginError{kind, std::move(message)};
    return false;
  };
  uint64_t fileSize = 0;
  const int fd = openPluginFile(path, &fileSize, error);
  if (fd < 0) return false;
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  auto failErrno = [&](int err) {
    return fail(PluginError::kLoadFailed, "cannot read " + path + ": " + std::strerror(err));
  };

  // Room for the size fstat() saw plus one byte, to see that the file grew meanwhile;
  // mapped with 2 MiB of slack so the data can start on a 2 MiB boundary.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t capacity = static_cast<size_t>(fileSize) + 1;
  const size_t rounded = (capacity + kHuge - 1) & ~(kHuge - 1);
  bytes->mapBytes_ = rounded + kHuge;
  void* map = ::mmap(nullptr, bytes->mapBytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) {
    bytes->mapBytes_ = 0;
    return fail(PluginError::kLoadFailed, "cannot read " + path + ": " + std::strerror(errno));
  }
  bytes->map_ = map;
  bytes->data_ = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(map) + kHuge - 1) & ~uintptr_t{kHuge - 1});
  ::madvise(bytes->data_, rounded, MADV_HUGEPAGE);  // a hint: without THP it reads as before
  size_t got = 0;
  while (true) {
    const ssize_t n = ::read(fd, bytes->data_ + got, capacity - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return failErrno(errno);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
    // The file grew while we read.
    if (got == capacity) {
      return fail(PluginError::kLoadFailed, pluginGrewMessage(path, fileSize));
    }
  }
  bytes->size_ = got;
  return true;
}

bool mapSealedPluginFd(int fd, const std::string& path, PluginFileBytes* bytes, bool* sealed, PluginError* error) {
  bytes->release();
  *sealed = false;
  constexpr int kSeals = F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK;
  const int seals = ::fcntl(fd, F_GET_SEALS);
  struct stat st;
  if (seals < 0 || (seals & kSeals) != kSeals || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
      static_cast<uint64_t>(st.st_size) > kMaxPluginFileBytes) {
    return readPluginFile("/proc/self/fd/" + std::to_string(fd), bytes, error);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    *error = PluginError{PluginError::kLoadFailed, "cannot read " + path + ": " + std::strerror(errno)};
    return false;
  }
  bytes->map_ = map;
  bytes->mapBytes_ = size;
  bytes->data_ = static_cast<char*>(map);
  bytes->size_ = size;
  *sealed = true;
  return true;
}

PluginMetadataResult readPluginMetadataFile(const std::string& path, PluginFileBytes* fileBytes) {
  PluginFileBytes local;
  PluginFileBytes* bytes = fileBytes != nullptr ? fileBytes : &local;
  PluginError error;
  if (!readPluginFile(path, bytes, &error)) {
    PluginMetadataResult result;
    result.error = std::move(error);
    return result;
  }
  PluginMetadataResult result = readPluginMetadata(bytes->view());
  if (result.error) result.error->message = path + ": " + result.error->message;
  return result;
}

}  // namespace jobhost::host
