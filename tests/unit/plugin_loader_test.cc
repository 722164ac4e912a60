// plugin_loader_test.cc — tests for host/plugin: ELF metadata reading, compatibility
// checks, loading, class selection and "did you mean".
//
// Fixture plugins (tests/fixtures/test_plugin/*.cpp) are found through environment
// variables, falling back to compile definitions of the same name:
//   JOBHOST_TEST_PLUGIN               libjhtest_jobs.so         (WordCount, RunningAverage)
//   JOBHOST_TEST_SINGLE_PLUGIN        libjhtest_single.so       (OnlyJob)
//   JOBHOST_TEST_MISSING_DEP_PLUGIN   libjhtest_missing_dep.so  (needs a missing library)
//   JOBHOST_TEST_ABI_MISMATCH_PLUGIN  libjhtest_abi_mismatch.so (SDK 2.0.0 metadata)
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "host/plugin/did_you_mean.h"
#include "host/plugin/elf_metadata.h"
#include "host/plugin/plugin_loader.h"
#include "jobhost/job.h"
#include "jobhost/version.h"

namespace jobhost::host {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------
// Helpers

std::string fixturePath(const char* envName, const char* compiledPath) {
  if (const char* env = std::getenv(envName); env != nullptr && *env != '\0') return env;
  return compiledPath != nullptr ? compiledPath : "";
}

#ifndef JOBHOST_TEST_PLUGIN
#define JOBHOST_TEST_PLUGIN nullptr
#endif
#ifndef JOBHOST_TEST_SINGLE_PLUGIN
#define JOBHOST_TEST_SINGLE_PLUGIN nullptr
#endif
#ifndef JOBHOST_TEST_MISSING_DEP_PLUGIN
#define JOBHOST_TEST_MISSING_DEP_PLUGIN nullptr
#endif
#ifndef JOBHOST_TEST_ABI_MISMATCH_PLUGIN
#define JOBHOST_TEST_ABI_MISMATCH_PLUGIN nullptr
#endif

// Returns the fixture's path, or "" after recording a test failure.
std::string requireFixture(const char* envName, const char* compiledPath) {
  std::string path = fixturePath(envName, compiledPath);
  if (path.empty()) {
    ADD_FAILURE() << "fixture plugin not configured: set " << envName
                  << " (environment variable or compile definition)";
  } else if (!fs::is_regular_file(path)) {
    ADD_FAILURE() << "fixture plugin " << path << " (" << envName << ") does not exist";
    path.clear();
  }
  return path;
}

std::string testPlugin() { return requireFixture("JOBHOST_TEST_PLUGIN", JOBHOST_TEST_PLUGIN); }

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void writeAll(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

bool haveTool(const std::string& tool) {
  return std::system(("command -v " + tool + " >/dev/null 2>&1").c_str()) == 0;
}

void put16(std::string& b, size_t off, uint16_t v) {
  for (int i = 0; i < 2; ++i) b[off + i] = static_cast<char>(v >> (8 * i));
}
void put32(std::string& b, size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[off + i] = static_cast<char>(v >> (8 * i));
}
void put64(std::string& b, size_t off, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[off + i] = static_cast<char>(v >> (8 * i));
}
uint16_t get16(const std::string& b, size_t off) {
  return static_cast<uint16_t>(static_cast<uint8_t>(b[off]) |
                               static_cast<uint8_t>(b[off + 1]) << 8);
}
uint64_t get64(const std::string& b, size_t off) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(b[off + i]);
  return v;
}

// A machine that is not this host's, for "wrong architecture" cases.
uint16_t foreignMachine() { return hostElfMachine() == 183 ? 62 : 183; }

// ---------------------------------------------------------------------------------------
// A minimal ELF64 little-endian file: header, section contents, .shstrtab, section
// header table (index 0 is the null section, .shstrtab is last).

struct CraftedSection {
  std::string name;
  uint32_t type = 1;  // SHT_PROGBITS
  std::string contents;
};

constexpr size_t kShdrSize = 64;

std::string craftElf(const std::vector<CraftedSection>& sections, uint16_t type = 3,
                     uint16_t machine = hostElfMachine()) {
  std::string b(64, '\0');
  b[0] = 0x7f;
  b[1] = 'E';
  b[2] = 'L';
  b[3] = 'F';
  b[4] = 2;  // ELFCLASS64
  b[5] = 1;  // ELFDATA2LSB
  b[6] = 1;  // EV_CURRENT
  put16(b, 16, type);
  put16(b, 18, machine);
  put32(b, 20, 1);
  put16(b, 52, 64);

  std::string names(1, '\0');
  std::vector<uint32_t> nameOffsets;
  std::vector<uint64_t> offsets;
  for (const CraftedSection& s : sections) {
    nameOffsets.push_back(static_cast<uint32_t>(names.size()));
    names += s.name;
    names += '\0';
    offsets.push_back(b.size());
    b += s.contents;
  }
  const uint32_t shstrtabName = static_cast<uint32_t>(names.size());
  names += ".shstrtab";
  names += '\0';
  const uint64_t namesOffset = b.size();
  b += names;
  while (b.size() % 8 != 0) b += '\0';

  const uint64_t shoff = b.size();
  const size_t count = sections.size() + 2;
  b.append(count * kShdrSize, '\0');
  auto header = [&](size_t i, uint32_t name, uint32_t shType, uint64_t offset, uint64_t size) {
    const size_t h = shoff + i * kShdrSize;
    put32(b, h + 0, name);
    put32(b, h + 4, shType);
    put64(b, h + 24, offset);
    put64(b, h + 32, size);
    put64(b, h + 48, 1);
  };
  for (size_t i = 0; i < sections.size(); ++i) {
    header(i + 1, nameOffsets[i], sections[i].type, offsets[i], sections[i].contents.size());
  }
  header(count - 1, shstrtabName, 3 /*SHT_STRTAB*/, namesOffset, names.size());
  put64(b, 40, shoff);
  put16(b, 58, kShdrSize);
  put16(b, 60, static_cast<uint16_t>(count));
  put16(b, 62, static_cast<uint16_t>(count - 1));
  return b;
}

// Offset of section header i in a crafted (or real) file.
size_t shdr(const std::string& b, size_t i) { return get64(b, 40) + i * get16(b, 58); }

std::string record(std::string_view name, std::string_view description = "A job",
                   std::string_view backend = "hashmap", std::string_view incremental = "0",
                   std::string_view sdk = JOBHOST_SDK_VERSION,
                   std::string_view abi = JOBHOST_ABI_TAG) {
  std::string r("JHJOB\001", 6);
  for (std::string_view f : {name, description, backend, incremental, sdk, abi}) {
    r += f;
    r += '\0';
  }
  return r;
}

std::string craftPlugin(const std::string& jhmeta) { return craftElf({{".jhmeta", 1, jhmeta}}); }

// ---------------------------------------------------------------------------------------
// A scratch directory per test.

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "jhplugin_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    for (const auto& entry : fs::directory_iterator(dir_, ec)) {
      fs::permissions(entry.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    }
    fs::remove_all(dir_, ec);
  }

  // Writes bytes to dir_/name and returns the path.
  std::string write(const std::string& name, std::string_view bytes) {
    const std::string path = (dir_ / name).string();
    writeAll(path, bytes);
    return path;
  }

  // Copies `from` to dir_/name and returns the path.
  std::string copy(const std::string& from, const std::string& name) {
    const std::string to = (dir_ / name).string();
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
    return to;
  }

  fs::path dir_;
};

// Expects readPluginMetadataFile and PluginLibrary::open to fail the same way.
void expectRejected(const std::string& path, PluginError::Kind kind,
                    const std::string& messagePart) {
  PluginMetadataResult meta = readPluginMetadataFile(path);
  ASSERT_FALSE(meta.ok()) << path;
  EXPECT_EQ(pluginErrorKindName(meta.error->kind), pluginErrorKindName(kind))
      << meta.error->message;
  EXPECT_NE(meta.error->message.find(messagePart), std::string::npos)
      << "message: " << meta.error->message << "\nexpected to contain: " << messagePart;
  EXPECT_TRUE(meta.classes.empty());

  PluginError error;
  EXPECT_EQ(PluginLibrary::open(path, &error), nullptr);
  EXPECT_EQ(error.kind, meta.error->kind);
  EXPECT_EQ(error.message, meta.error->message);

  // The supervisor of `jobhost run` pins: the kernel copies the file into a memfd and the
  // checks read the copy. Same verdict, same words.
  PluginOpenOptions pin;
  pin.pin = true;
  PluginError pinned;
  EXPECT_EQ(PluginLibrary::open(path, &pinned, pin), nullptr);
  EXPECT_EQ(pinned.kind, meta.error->kind);
  EXPECT_EQ(pinned.message, meta.error->message);
}

// ---------------------------------------------------------------------------------------
// Metadata of the real test plugin

void expectTestPluginClasses(const std::vector<JobClassMeta>& classes) {
  // Sorted by name, whatever order the compiler emitted the records in.
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_EQ(classes[0].name, "RunningAverage");
  EXPECT_EQ(classes[0].description, "Running average per key");
  EXPECT_EQ(classes[0].backend, "rocksdb");
  EXPECT_TRUE(classes[0].incremental);
  EXPECT_EQ(classes[1].name, "WordCount");
  EXPECT_EQ(classes[1].description, "Counts words from a socket or a file");
  EXPECT_EQ(classes[1].backend, "hashmap");
  EXPECT_FALSE(classes[1].incremental);
  for (const JobClassMeta& c : classes) {
    EXPECT_EQ(c.sdkVersion, JOBHOST_SDK_VERSION);
    EXPECT_EQ(c.abiTag, JOBHOST_ABI_TAG);
  }
}

TEST_F(PluginTest, ReadsMetadataOfTestPlugin) {
  const std::string plugin = testPlugin();
  ASSERT_FALSE(plugin.empty());
  PluginMetadataResult meta = readPluginMetadataFile(plugin);
  ASSERT_TRUE(meta.ok()) << meta.error->message;
  expectTestPluginClasses(meta.classes);
}

TEST_F(PluginTest, MetadataSurvivesStripping) {
  const std::string plugin = testPlugin();
  ASSERT_FALSE(plugin.empty());
  if (!haveTool("strip")) GTEST_SKIP() << "strip (binutils) not installed";
  for (const char* flags : {"--strip-unneeded", "--strip-all"}) {
    SCOPED_TRACE(flags);
    const std::string stripped = copy(plugin, std::string("stripped") + flags + ".so");
    ASSERT_EQ(std::system(("strip " + std::string(flags) + " '" + stripped + "'").c_str()), 0);
    // .symtab (and with it Boost.DLL 1.74's library_info::symbols()) is gone...
    const std::string bytes = readAll(stripped);
    EXPECT_EQ(bytes.find(std::string(".symtab\0", 8)), std::string::npos);
    EXPECT_LT(bytes.size(), fs::file_size(plugin));
    // ...but the allocated .jhmeta section is not, and neither is the alias in .dynsym.
    PluginMetadataResult meta = readPluginMetadataFile(stripped);
    ASSERT_TRUE(meta.ok()) << meta.error->message;
    expectTestPluginClasses(meta.classes);

    PluginError error;
    auto lib = PluginLibrary::open(stripped, &error);
    ASSERT_NE(lib, nullptr) << error.message;
    const JobClassInfo* info = lib->selectClass("RunningAverage", &error);
    ASSERT_NE(info, nullptr) << error.message;
    EXPECT_STREQ(info->name, "RunningAverage");
  }
}

// ---------------------------------------------------------------------------------------
// Loading and selecting

TEST_F(PluginTest, SelectsClassByName) {
  const std::string plugin = testPlugin();
  ASSERT_FALSE(plugin.empty());
  PluginError error;
  auto lib = PluginLibrary::open(plugin, &error);
  ASSERT_NE(lib, nullptr) << error.message;
  EXPECT_EQ(lib->path(), plugin);
  expectTestPluginClasses(lib->classes());

  const JobClassInfo* wc = lib->selectClass("WordCount", &error);
  ASSERT_NE(wc, nullptr) << error.message;
  EXPECT_EQ(wc->magic, kJobClassInfoMagic);
  EXPECT_STREQ(wc->abiTag, JOBHOST_ABI_TAG);
  EXPECT_STREQ(wc->sdkVersion, JOBHOST_SDK_VERSION);
  EXPECT_STREQ(wc->name, "WordCount");
  EXPECT_STREQ(wc->description, "Counts words from a socket or a file");
  EXPECT_STREQ(wc->backend, "hashmap");
  EXPECT_FALSE(wc->incremental);

  const JobClassInfo* avg = lib->selectClass("RunningAverage", &error);
  ASSERT_NE(avg, nullptr) << error.message;
  EXPECT_STREQ(avg->backend, "rocksdb");
  EXPECT_TRUE(avg->incremental);

  // The factory works and configure() runs plugin code.
  std::unique_ptr<Job> job(avg->create());
  ASSERT_NE(job, nullptr);
  JobConfig config;
  job->configure(config);
  EXPECT_EQ(config.get("execution.checkpointing.interval"), "5000ms");
}

TEST_F(PluginTest, LibraryStaysLoadedAfterPluginLibraryIsDestroyed) {
  const std::string original = testPlugin();
  ASSERT_FALSE(original.empty());
  const std::string plugin = copy(original, "libkeep.so");  // a path no other test loads
  PluginError error;
  auto lib = PluginLibrary::open(plugin, &error);
  ASSERT_NE(lib, nullptr) << error.message;
  const JobClassInfo* info = lib->selectClass("WordCount", &error);
  ASSERT_NE(info, nullptr) << error.message;
  lib.reset();
  // RTLD_NODELETE: still mapped, so plugin code (here the factory) stays callable.
  void* handle = ::dlopen(plugin.c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(handle, nullptr);
  if (handle != nullptr) ::dlclose(handle);
  std::unique_ptr<Job> job(info->create());
  EXPECT_NE(job, nullptr);
}

TEST_F(PluginTest, SelectsTheOnlyClassWithoutName) {
  const std::string plugin =
      requireFixture("JOBHOST_TEST_SINGLE_PLUGIN", JOBHOST_TEST_SINGLE_PLUGIN);
  ASSERT_FALSE(plugin.empty());
  PluginError error;
  auto lib = PluginLibrary::open(plugin, &error);
  ASSERT_NE(lib, nullptr) << error.message;
  const JobClassInfo* info = lib->selectClass(std::nullopt, &error);
  ASSERT_NE(info, nullptr) << error.message;
  EXPECT_STREQ(info->name, "OnlyJob");
}

TEST_F(PluginTest, AmbiguousWithoutName) {
  const std::string plugin = testPlugin();
  ASSERT_FALSE(plugin.empty());
  PluginError error;
  auto lib = PluginLibrary::open(plugin, &error);
  ASSERT_NE(lib, nullptr) << error.message;
  EXPECT_EQ(lib->selectClass(std::nullopt, &error), nullptr);
  EXPECT_EQ(error.kind, PluginError::kAmbiguousClass);
  EXPECT_EQ(error.message, plugin +
                               " contains 2 job classes (RunningAverage, WordCount); choose "
                               "one with -c <Class>");
}

TEST_F(PluginTest, UnknownClassSuggestsClosestName) {
  const std::string plugin = testPlugin();
  ASSERT_FALSE(plugin.empty());
  PluginError error;
  auto lib = PluginLibrary::open(plugin, &error);
  ASSERT_NE(lib, nullptr) << error.message;

  EXPECT_EQ(lib->selectClass("WordCont", &error), nullptr);
  EXPECT_EQ(error.kind, PluginError::kUnknownClass);
  EXPECT_EQ(error.message, "job class 'WordCont' not found in " + plugin +
                               "; did you mean 'WordCount'? Available: RunningAverage, "
                               "WordCount");

  // Case-insensitive: a wrong case is a distance-0 suggestion, not a match.
  EXPECT_EQ(lib->selectClass("runningaverage", &error), nullptr);
  EXPECT_EQ(error.kind, PluginError::kUnknownClass);
  EXPECT_NE(error.message.find("did you mean 'RunningAverage'?"), std::string::npos)
      << error.message;

  // Nothing close: no suggestion, just the list.
  EXPECT_EQ(lib->selectClass("Sessionize", &error), nullptr);
  EXPECT_EQ(error.kind, PluginError::kUnknownClass);
  EXPECT_EQ(error.message, "job class 'Sessionize' not found in " + plugin +
                               "; available: RunningAverage, WordCount");

  EXPECT_EQ(lib->selectClass("", &error), nullptr);
  EXPECT_EQ(error.kind, PluginError::kUnknownClass);
}

TEST_F(PluginTest, ContentDigestIsXxh3OfTheFile) {
  EXPECT_EQ(pluginDigestHex(""), "2d06800538d394c2");  // XXH3-64 of no bytes (xxhash's sanity check)
  EXPECT_NE(pluginDigestHex("a"), pluginDigestHex("b"));

  const std::string plugin = testPlugin();
  ASSERT_FALSE(plugin.empty());
  PluginError error;
  auto lib = PluginLibrary::open(plugin, &error);
  ASSERT_NE(lib, nullptr) << error.message;
  EXPECT_EQ(lib->contentDigest().size(), 16u);
  EXPECT_EQ(lib->contentDigest(), pluginDigestHex(readAll(plugin)));

  // A different build (here: a stripped copy) has a different digest.
  if (haveTool("strip")) {
    const std::string stripped = copy(plugin, "stripped.so");
    ASSERT_EQ(std::system(("strip '" + stripped + "'").c_str()), 0);
    auto other = PluginLibrary::open(stripped, &error);
    ASSERT_NE(other, nullptr) << error.message;
    EXPECT_NE(other->contentDigest(), lib->contentDigest());
  }
}

// A worker loads the supervisor's pinned copy (a sealed memfd) with the digest the
// supervisor computed: the sealed bytes cannot differ from what it hashed, so they are
// mapped and not hashed again. A descriptor that is not sealed is read and hashed whatever
// digest comes with it.
TEST_F(PluginTest, ThePinnedCopysDigestIsPassedOnOnlyWhileTheCopyIsSealed) {
  const std::string plugin = testPlugin();
  ASSERT_FALSE(plugin.empty());
  const std::string real = pluginDigestHex(readAll(plugin));
  PluginError error;
  PluginOpenOptions pin;
  pin.pin = true;
  auto pinned = PluginLibrary::open(plugin, &error, pin);
  ASSERT_NE(pinned, nullptr) << error.message;
  ASSERT_GE(pinned->pinnedFd(), 0);
  EXPECT_EQ(pinned->contentDigest(), real);
  // The copy is the file, byte for byte, and sealed.
  EXPECT_EQ(readAll("/proc/self/fd/" + std::to_string(pinned->pinnedFd())), readAll(plugin));
  const int seals = ::fcntl(pinned->pinnedFd(), F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK), F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK);

  // A digest that is not the bytes' one shows which path was taken.
  const std::string told = "0123456789abcdef";
  PluginOpenOptions sealed;
  sealed.fd = ::dup(pinned->pinnedFd());  // the library takes the descriptor over
  sealed.sealedDigest = told;
  auto worker = PluginLibrary::open(plugin, &error, sealed);
  ASSERT_NE(worker, nullptr) << error.message;
  EXPECT_EQ(worker->contentDigest(), told);
  EXPECT_NE(worker->selectClass("WordCount", &error), nullptr) << error.message;

  PluginOpenOptions plain;
  plain.fd = ::open(plugin.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(plain.fd, 0);
  plain.sealedDigest = told;
  auto unsealed = PluginLibrary::open(plugin, &error, plain);
  ASSERT_NE(unsealed, nullptr) << error.message;
  EXPECT_EQ(unsealed->contentDigest(), real);
}

// ---------------------------------------------------------------------------------------
// Files that are not (usable) plugins

TEST_F(PluginTest, RejectsNonElfFiles) {
  const std::string text = write("notes.txt", "hello, I am not a plugin\n");
  expectRejected(text, PluginError::kNotSharedLibrary,
                 text + ": not a shared library (no ELF header)");
  expectRejected(write("empty.so", ""), PluginError::kNotSharedLibrary, "no ELF header");
  expectRejected(write("three.so", "\x7f" "EL"), PluginError::kNotSharedLibrary,
                 "no ELF header");
}

TEST_F(PluginTest, RejectsTruncatedElf) {
  const std::string plugin = testPlugin();
  ASSERT_FALSE(plugin.empty());
  const std::string bytes = readAll(plugin);
  for (size_t length : {size_t{4}, size_t{16}, size_t{63}, size_t{64}, size_t{1000},
                        bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE("first " + std::to_string(length) + " bytes");
    const std::string path = write("truncated.so", std::string_view(bytes).substr(0, length));
    expectRejected(path, PluginError::kCorrupt, path + ": corrupt ELF file: ");
  }
}

TEST_F(PluginTest, RejectsDirectory) {
  const std::string dir = dir_.string();
  expectRejected(dir, PluginError::kNotSharedLibrary, dir + " is a directory");
}

TEST_F(PluginTest, RejectsMissingFile) {
  const std::string missing = (dir_ / "libnope.so").string();
  expectRejected(missing, PluginError::kNotFound, "no such file: " + missing);
  expectRejected((dir_ / "no-dir" / "libnope.so").string(), PluginError::kNotFound,
                 "no such file: ");
  expectRejected("", PluginError::kNotFound, "no such file");
}

TEST_F(PluginTest, RejectsUnreadableFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root can read any file";
  const std::string plugin = testPlugin();
  ASSERT_FALSE(plugin.empty());
  const std::string path = copy(plugin, "unreadable.so");
  fs::permissions(path, fs::perms::none);
  expectRejected(path, PluginError::kLoadFailed, "permission denied: cannot read " + path);
}

TEST_F(PluginTest, RejectsFifoWithoutBlocking) {
  const std::string path = (dir_ / "fifo.so").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  expectRejected(path, PluginError::kNotSharedLibrary, path + " is not a regular file");
}

TEST_F(PluginTest, RejectsExecutables) {
  // A PIE executable is ET_DYN like a library; DT_FLAGS_1 tells them apart.
  for (const char* exe : {"/bin/true", "/usr/bin/true"}) {
    if (!fs::exists(exe)) continue;
    expectRejected(exe, PluginError::kNotSharedLibrary, "an executable");
    break;
  }
  const std::string plugin = testPlugin();
  ASSERT_FALSE(plugin.empty());
  std::string bytes = readAll(plugin);
  put16(bytes, 16, 2);  // ET_EXEC
  expectRejected(write("exec.so", bytes), PluginError::kNotSharedLibrary,
                 "an executable, not a shared library");
  put16(bytes, 16, 1);  // ET_REL
  expectRejected(write("object.o", bytes), PluginError::kNotSharedLibrary,
                 "an object file (.o), not a shared library");
  put16(bytes, 16, 4);  // ET_CORE
  expectRejected(write("core", bytes), PluginError::kNotSharedLibrary, "a core dump");
}

// Some shared library of the system that is certainly not a plugin.
std::string systemSharedLibrary() {
  for (const char* candidate :
       {"/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1",
        "/lib/aarch64-linux-gnu/libz.so.1", "/usr/lib/aarch64-linux-gnu/libz.so.1",
        "/lib64/libz.so.1", "/usr/lib64/libz.so.1"}) {
    if (fs::exists(candidate)) return candidate;
  }
  Dl_info info;  // else the C++ runtime this test is linked against
  if (::dladdr(reinterpret_cast<void*>(&std::terminate), &info) != 0 &&
      info.dli_fname != nullptr && std::string(info.dli_fname).find(".so") != std::string::npos) {
    return info.dli_fname;
  }
  return "";
}

TEST_F(PluginTest, RejectsSharedLibraryThatIsNotAPlugin) {
  const std::string lib = systemSharedLibrary();
  if (lib.empty()) GTEST_SKIP() << "no system shared library found";
  expectRejected(lib, PluginError::kNotPlugin,
                 lib + ": not a jobhost plugin: no .jhmeta section — was it built with "
                       "JOBHOST_JOB?");
}

TEST_F(PluginTest, RejectsOtherArchitectures) {
  const std::string plugin = testPlugin();
  ASSERT_FALSE(plugin.empty());
  const std::string host = elfMachineName(hostElfMachine());

  std::string bytes = readAll(plugin);
  put16(bytes, 18, foreignMachine());
  const std::string foreign = write("foreign.so", bytes);
  const std::string expected =
      "built for " + elfMachineName(foreignMachine()) + " (e_machine " +
      std::to_string(foreignMachine()) + "), this host is " + host;
  expectRejected(foreign, PluginError::kWrongArchitecture, foreign + ": " + expected);
  if (host == "x86_64") {
    expectRejected(foreign, PluginError::kWrongArchitecture,
                   "built for aarch64 (e_machine 183), this host is x86_64");
  }

  bytes = readAll(plugin);
  bytes[4] = 1;  // ELFCLASS32
  expectRejected(write("elf32.so", bytes), PluginError::kWrongArchitecture,
                 "built for " + host + " (e_machine " + std::to_string(hostElfMachine()) +
                     ", 32-bit ELF), this host is " + host);

  bytes = readAll(plugin);
  bytes[5] = 2;  // ELFDATA2MSB: e_machine now reads byte-swapped
  expectRejected(write("bigendian.so", bytes), PluginError::kWrongArchitecture,
                 "big-endian");

  // A 32-bit i386 header, crafted: only e_ident and e_machine matter.
  std::string i386 = craftElf({});
  i386[4] = 1;
  put16(i386, 18, 3);
  expectRejected(write("i386.so", i386), PluginError::kWrongArchitecture,
                 "built for i386 (e_machine 3, 32-bit ELF)");
}

TEST_F(PluginTest, ReportsMissingDependencyWithoutBoostNoise) {
  const std::string plugin =
      requireFixture("JOBHOST_TEST_MISSING_DEP_PLUGIN", JOBHOST_TEST_MISSING_DEP_PLUGIN);
  ASSERT_FALSE(plugin.empty());
  // The metadata is fine; only dlopen() fails.
  PluginMetadataResult meta = readPluginMetadataFile(plugin);
  ASSERT_TRUE(meta.ok()) << meta.error->message;
  ASSERT_EQ(meta.classes.size(), 1u);
  EXPECT_EQ(meta.classes[0].name, "NeedsThrowaway");

  PluginError error;
  auto lib = PluginLibrary::open(plugin, &error);
  ASSERT_EQ(lib, nullptr) << "the fixture found its dependency; build "
                             "libjhtest_missing_dep.so without an RPATH (SKIP_BUILD_RPATH)";
  EXPECT_EQ(error.kind, PluginError::kLoadFailed);
  EXPECT_EQ(error.message.rfind("cannot load " + plugin +
                                    ": libjhtest_throwaway.so: cannot open shared object file",
                                0),
            0u)
      << error.message;
  EXPECT_NE(error.message.find("LD_LIBRARY_PATH"), std::string::npos) << error.message;
  EXPECT_EQ(error.message.find("boost"), std::string::npos) << error.message;
  EXPECT_EQ(error.message.find("Bad file descriptor"), std::string::npos) << error.message;
  EXPECT_EQ(error.message.find('\n'), std::string::npos) << error.message;
}

TEST_F(PluginTest, RefusesAbiMismatchBeforeLoading) {
  const std::string plugin =
      requireFixture("JOBHOST_TEST_ABI_MISMATCH_PLUGIN", JOBHOST_TEST_ABI_MISMATCH_PLUGIN);
  ASSERT_FALSE(plugin.empty());
  ::unsetenv("JHTEST_ABI_MISMATCH_LOADED");

  PluginMetadataResult meta = readPluginMetadataFile(plugin);
  ASSERT_TRUE(meta.ok()) << meta.error->message;  // readable, just incompatible
  ASSERT_EQ(meta.classes.size(), 1u);
  EXPECT_EQ(meta.classes[0].sdkVersion, "2.0.0");

  PluginError error;
  EXPECT_EQ(PluginLibrary::open(plugin, &error), nullptr);
  EXPECT_EQ(error.kind, PluginError::kIncompatible);
  EXPECT_EQ(error.message, "plugin " + plugin +
                               " was built with SDK 2.0.0 (ABI "
                               "sdk2;gcc99;libstdc++-cxx11abi1;x86_64), this jobhost has SDK " +
                               JOBHOST_SDK_VERSION + " (ABI " + JOBHOST_ABI_TAG +
                               "): rebuild the plugin against the installed jobhost SDK");
  // No plugin code ran and the library was never mapped.
  EXPECT_EQ(std::getenv("JHTEST_ABI_MISMATCH_LOADED"), nullptr);
  EXPECT_EQ(::dlopen(plugin.c_str(), RTLD_NOW | RTLD_NOLOAD), nullptr);
}

TEST(PluginCompatibilityTest, VersionAndAbiRules) {
  auto meta = [](std::string sdk, std::string abi) {
    JobClassMeta m;
    m.name = "J";
    m.backend = "hashmap";
    m.sdkVersion = std::move(sdk);
    m.abiTag = std::move(abi);
    return std::vector<JobClassMeta>{m};
  };
  const std::string tag = "sdk1;gcc12;libstdc++-cxx11abi1;x86_64";
  EXPECT_FALSE(checkPluginCompatibility("p.so", meta("1.0.0", tag), "1.0.0", tag));
  EXPECT_FALSE(checkPluginCompatibility("p.so", meta("1.0.7", tag), "1.0.2", tag));
  EXPECT_TRUE(checkPluginCompatibility("p.so", meta("1.1.0", tag), "1.0.0", tag));
  EXPECT_TRUE(checkPluginCompatibility("p.so", meta("1.0.0", tag), "1.1.0", tag));
  EXPECT_TRUE(checkPluginCompatibility("p.so", meta("2.0.0", tag), "1.0.0", tag));
  EXPECT_TRUE(checkPluginCompatibility("p.so", meta("1.0", tag), "1.0.0", tag));
  EXPECT_TRUE(checkPluginCompatibility("p.so", meta("1.0.0x", tag), "1.0.0", tag));
  auto error = checkPluginCompatibility(
      "libfoo.so", meta("1.0.0", "sdk1;gcc13;libstdc++-cxx11abi1;x86_64"), "1.0.0", tag);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->kind, PluginError::kIncompatible);
  EXPECT_EQ(error->message,
            "plugin libfoo.so was built with SDK 1.0.0 (ABI "
            "sdk1;gcc13;libstdc++-cxx11abi1;x86_64), this jobhost has SDK 1.0.0 (ABI "
            "sdk1;gcc12;libstdc++-cxx11abi1;x86_64): rebuild the plugin against the "
            "installed jobhost SDK");
}

// ---------------------------------------------------------------------------------------
// Crafted files: record parsing and ELF structure, table-driven

TEST(ElfMetadataTest, RecordParsing) {
  const std::string pad(13, '\0');
  struct Case {
    const char* what;
    std::string jhmeta;
    bool ok;
    size_t classes;
    const char* messagePart;
  };
  const Case cases[] = {
      {"one record", record("A"), true, 1, ""},
      {"two records with padding", pad + record("A") + pad + record("B") + pad, true, 2, ""},
      {"empty description", record("A", ""), true, 1, ""},
      {"bool literal true", record("A", "d", "rocksdb", "true"), true, 1, ""},
      {"utf-8 description", record("A", "Zählt Wörter"), true, 1, ""},
      {"empty section", "", false, 0, "holds no job records"},
      {"only padding", pad, false, 0, "holds no job records"},
      {"bad marker", "JHJOB\002" + record("A").substr(6), false, 0,
       "does not start with the JHJOB record marker"},
      {"garbage after record", record("A") + "xyz", false, 0, "record 2"},
      {"truncated abiTag", record("A").substr(0, record("A").size() - 1), false, 0,
       "field 'abiTag' has no terminating NUL"},
      {"truncated name", std::string("JHJOB\001Wor", 9), false, 0,
       "field 'name' has no terminating NUL"},
      {"bad incremental", record("A", "d", "hashmap", "2"), false, 0,
       "incremental flag '2'"},
      {"name not an identifier", record("Word Count"), false, 0, "not a C identifier"},
      {"name starts with digit", record("1Job"), false, 0, "not a C identifier"},
      {"empty name", record(""), false, 0, "empty field 'name'"},
      {"empty backend", record("A", "d", ""), false, 0, "empty field 'backend'"},
      {"empty abi", record("A", "d", "hashmap", "0", "1.0.0", ""), false, 0,
       "empty field 'abiTag'"},
      {"control character", record("A", "bell\a"), false, 0, "control characters"},
      {"escape sequence", record("A", "\x1b[31mred"), false, 0, "control characters"},
      {"duplicate class", record("A") + record("A"), false, 0, "declares class 'A' a second"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    PluginMetadataResult r = readPluginMetadata(craftPlugin(c.jhmeta));
    EXPECT_EQ(r.ok(), c.ok) << (r.error ? r.error->message : "");
    if (c.ok) {
      EXPECT_EQ(r.classes.size(), c.classes);
    } else {
      ASSERT_TRUE(r.error);
      EXPECT_EQ(r.error->kind, PluginError::kCorrupt);
      EXPECT_NE(r.error->message.find(c.messagePart), std::string::npos) << r.error->message;
      EXPECT_NE(r.error->message.find("rebuild the plugin"), std::string::npos);
    }
  }

  PluginMetadataResult two = readPluginMetadata(
      craftPlugin(pad + record("B", "", "rocksdb") + record("A", "first", "hashmap", "1")));
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two.classes[0],
            (JobClassMeta{"A", "first", "hashmap", true, JOBHOST_SDK_VERSION, JOBHOST_ABI_TAG}));
  EXPECT_EQ(two.classes[1],
            (JobClassMeta{"B", "", "rocksdb", false, JOBHOST_SDK_VERSION, JOBHOST_ABI_TAG}));
}

TEST(ElfMetadataTest, ElfStructure) {
  const std::string good = craftPlugin(record("A"));
  ASSERT_TRUE(readPluginMetadata(good).ok());
  // Sections: 0 null, 1 .jhmeta, 2 .shstrtab.
  using Patch = void (*)(std::string&);
  struct Case {
    const char* what;
    Patch patch;
    PluginError::Kind kind;
    const char* messagePart;
  };
  const Case cases[] = {
      {"no section headers", [](std::string& b) { put64(b, 40, 0); }, PluginError::kNotPlugin,
       "no section headers"},
      {"section table past end", [](std::string& b) { put64(b, 40, b.size() - 10); },
       PluginError::kCorrupt, "extends past the end of the file"},
      {"section table offset overflow", [](std::string& b) { put64(b, 40, ~uint64_t{0} - 8); },
       PluginError::kCorrupt, "extends past the end"},
      {"huge section count", [](std::string& b) { put16(b, 60, 0xfeff); },
       PluginError::kCorrupt, "extends past the end"},
      {"small section header size", [](std::string& b) { put16(b, 58, 40); },
       PluginError::kCorrupt, "section header size 40"},
      {"zero section header size", [](std::string& b) { put16(b, 58, 0); },
       PluginError::kCorrupt, "section header size 0"},
      {"no name table", [](std::string& b) { put16(b, 62, 0); }, PluginError::kCorrupt,
       "no section name table"},
      {"name table index out of range", [](std::string& b) { put16(b, 62, 7); },
       PluginError::kCorrupt, "out of range"},
      {"reserved name table index", [](std::string& b) { put16(b, 62, 0xff05); },
       PluginError::kCorrupt, "reserved index"},
      {"name table past end", [](std::string& b) { put64(b, shdr(b, 2) + 24, b.size()); },
       PluginError::kCorrupt, "section name table"},
      {"name table size overflow",
       [](std::string& b) { put64(b, shdr(b, 2) + 32, ~uint64_t{0}); }, PluginError::kCorrupt,
       "section name table"},
      {"name offset out of table", [](std::string& b) { put32(b, shdr(b, 1), 0x7fffffff); },
       PluginError::kCorrupt, "name offset"},
      {"jhmeta past end", [](std::string& b) { put64(b, shdr(b, 1) + 24, b.size() - 2); },
       PluginError::kCorrupt, ".jhmeta section (offset"},
      {"jhmeta size overflow", [](std::string& b) { put64(b, shdr(b, 1) + 32, ~uint64_t{0}); },
       PluginError::kCorrupt, ".jhmeta section (offset"},
      {"jhmeta nobits", [](std::string& b) { put32(b, shdr(b, 1) + 4, 8); },
       PluginError::kCorrupt, "SHT_NOBITS"},
      {"jhmeta renamed", [](std::string& b) { b[b.find(".jhmeta")] = '_'; },
       PluginError::kNotPlugin, "no .jhmeta section"},
      {"not ET_DYN", [](std::string& b) { put16(b, 16, 0x1234); },
       PluginError::kNotSharedLibrary, "an ELF file of type 4660"},
      {"bad ELF class", [](std::string& b) { b[4] = 3; }, PluginError::kCorrupt,
       "invalid ELF class 3"},
      {"bad byte order", [](std::string& b) { b[5] = 0; }, PluginError::kCorrupt,
       "invalid ELF byte order 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::string b = good;
    c.patch(b);
    PluginMetadataResult r = readPluginMetadata(b);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(pluginErrorKindName(r.error->kind), pluginErrorKindName(c.kind))
        << r.error->message;
    EXPECT_NE(r.error->message.find(c.messagePart), std::string::npos) << r.error->message;
  }
}

TEST(ElfMetadataTest, ExtendedSectionNumbering) {
  // e_shnum = 0 and e_shstrndx = SHN_XINDEX: the real values live in section 0.
  std::string b = craftPlugin(record("A"));
  const uint16_t count = get16(b, 60);
  const uint16_t names = get16(b, 62);
  put16(b, 60, 0);
  put16(b, 62, 0xffff);
  put64(b, shdr(b, 0) + 32, count);  // sh_size
  put32(b, shdr(b, 0) + 40, names);  // sh_link
  PluginMetadataResult r = readPluginMetadata(b);
  ASSERT_TRUE(r.ok()) << r.error->message;
  EXPECT_EQ(r.classes.size(), 1u);

  put64(b, shdr(b, 0) + 32, ~uint64_t{0});  // absurd count
  r = readPluginMetadata(b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->kind, PluginError::kCorrupt);
}

TEST(ElfMetadataTest, DuplicateMetaPieAndGcSections) {
  PluginMetadataResult r =
      readPluginMetadata(craftElf({{".jhmeta", 1, record("A")}, {".jhmeta", 1, record("B")}}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error->message.find("two .jhmeta sections"), std::string::npos);

  // A dynamic section with DT_FLAGS_1 = DF_1_PIE marks a PIE executable.
  std::string dynamic(48, '\0');
  put64(dynamic, 0, 0x6ffffffb);
  put64(dynamic, 8, 0x08000000);
  r = readPluginMetadata(craftElf({{".dynamic", 6, dynamic}, {".jhmeta", 1, record("A")}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->kind, PluginError::kNotSharedLibrary);
  EXPECT_NE(r.error->message.find("an executable (position-independent)"), std::string::npos);

  // Aliases without metadata: what -Wl,--gc-sections leaves of a JOBHOST_JOB plugin
  // unless the SDK marks the records [[gnu::retain]].
  r = readPluginMetadata(craftElf({{"jhjobs", 1, std::string(16, '\0')}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->kind, PluginError::kCorrupt);
  EXPECT_NE(r.error->message.find("--gc-sections"), std::string::npos) << r.error->message;

  put64(dynamic, 8, 0x1);  // DF_1_NOW only: a library
  r = readPluginMetadata(craftElf({{".dynamic", 6, dynamic}, {".jhmeta", 1, record("A")}}));
  EXPECT_TRUE(r.ok()) << r.error->message;
}

// Random mutations of the real plugin (and of a crafted one) must never crash, hang or
// produce an inconsistent result. Run under ASan/UBSan (JOBHOST_SANITIZE) this also
// catches out-of-range reads.
TEST(ElfMetadataTest, SurvivesRandomMutations) {
  const std::string plugin = testPlugin();
  ASSERT_FALSE(plugin.empty());
  const std::string real = readAll(plugin);
  const std::string crafted = craftPlugin(record("A") + record("B"));
  ASSERT_TRUE(readPluginMetadata(real).ok());

  // Mutate where the parser looks: the ELF header, the section header table, the
  // section name table and .jhmeta.
  auto hotSpots = [](const std::string& b) {
    std::vector<std::pair<size_t, size_t>> spots = {{0, 64}};
    const size_t shoff = get64(b, 40);
    const size_t count = get16(b, 60);
    spots.push_back({shoff, count * 64});
    const size_t names = shdr(b, get16(b, 62));
    spots.push_back({get64(b, names + 24), get64(b, names + 32)});
    const size_t meta = b.find("JHJOB");
    spots.push_back({meta, 300});
    return spots;
  };

  std::mt19937_64 rng(20240601);
  int ok = 0;
  const uint64_t interesting[] = {0, 1, 0x7f, 0xff, 0xffff, 0x7fffffff, 0xffffffff,
                                  ~uint64_t{0}, ~uint64_t{0} - 63};
  for (int iteration = 0; iteration < 4000; ++iteration) {
    const std::string& base = iteration % 4 == 0 ? crafted : real;
    std::string b = base;
    const auto spots = hotSpots(base);
    const int mutations = 1 + static_cast<int>(rng() % 6);
    for (int m = 0; m < mutations; ++m) {
      const auto& spot = spots[rng() % spots.size()];
      size_t off = spot.first + (spot.second ? rng() % spot.second : 0);
      if (off >= b.size()) off = rng() % b.size();
      switch (rng() % 5) {
        case 0:  // flip a bit
          b[off] = static_cast<char>(b[off] ^ (1 << (rng() % 8)));
          break;
        case 1:  // random byte
          b[off] = static_cast<char>(rng());
          break;
        case 2:  // interesting 64-bit value
          if (off + 8 <= b.size()) put64(b, off, interesting[rng() % std::size(interesting)]);
          break;
        case 3:  // interesting 16-bit value
          if (off + 2 <= b.size()) {
            put16(b, off, static_cast<uint16_t>(interesting[rng() % std::size(interesting)]));
          }
          break;
        case 4:  // truncate
          b.resize(rng() % (b.size() + 1));
          break;
      }
      if (b.empty()) break;
    }
    PluginMetadataResult r = readPluginMetadata(b);
    if (r.ok()) {
      ++ok;
      EXPECT_FALSE(r.classes.empty());
    } else {
      EXPECT_TRUE(r.classes.empty());
      EXPECT_FALSE(r.error->message.empty());
      EXPECT_EQ(r.error->message.find('\n'), std::string::npos);
    }
  }
  // Some mutations are harmless (e.g. in the description); most are not.
  EXPECT_GT(ok, 0);
  EXPECT_LT(ok, 4000);
}

// ---------------------------------------------------------------------------------------
// did_you_mean

TEST(DidYouMeanTest, LevenshteinDistance) {
  struct Case {
    const char* a;
    const char* b;
    bool ignoreCase;
    size_t distance;
  };
  const Case cases[] = {
      {"", "", false, 0},
      {"", "abc", false, 3},
      {"abc", "", false, 3},
      {"abc", "abc", false, 0},
      {"ab", "ba", false, 2},
      {"kitten", "sitting", false, 3},
      {"flaw", "lawn", false, 2},
      {"Saturday", "Sunday", false, 3},
      {"WordCont", "WordCount", false, 1},
      {"wordcount", "WordCount", false, 2},
      {"wordcount", "WordCount", true, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.a) + " / " + c.b);
    EXPECT_EQ(levenshteinDistance(c.a, c.b, c.ignoreCase), c.distance);
    EXPECT_EQ(levenshteinDistance(c.b, c.a, c.ignoreCase), c.distance);
  }
}

TEST(DidYouMeanTest, ClosestCandidate) {
  const std::vector<std::string> jobs = {"WordCount", "WordCountIncremental", "RunningAverage"};
  EXPECT_EQ(closestCandidate("WordCont", jobs), "WordCount");
  EXPECT_EQ(closestCandidate("wordcount", jobs), "WordCount");
  EXPECT_EQ(closestCandidate("RunningAvg", jobs), "RunningAverage");  // 4 edits <= 14/3
  EXPECT_EQ(closestCandidate("RuningAverage", jobs), "RunningAverage");
  EXPECT_EQ(closestCandidate("WordCountIncrmental", jobs), "WordCountIncremental");
  EXPECT_EQ(closestCandidate("Avg", jobs), std::nullopt);
  EXPECT_EQ(closestCandidate("", jobs), std::nullopt);
  EXPECT_EQ(closestCandidate("WordCont", {}), std::nullopt);
  EXPECT_EQ(closestCandidate(std::string(1000, 'a'), {std::string(1000, 'a')}), std::nullopt);

  const std::vector<std::string> commands = {"run", "info", "list", "restore"};
  EXPECT_EQ(closestCandidate("rn", commands), "run");
  EXPECT_EQ(closestCandidate("inf", commands), "info");
  EXPECT_EQ(closestCandidate("lsit", commands), "list");  // a swap is 2 edits
  EXPECT_EQ(closestCandidate("rnu", {"run"}), std::nullopt);  // 2 edits; 3 bytes allow 1
  EXPECT_EQ(closestCandidate("ls", commands), "list");
  EXPECT_EQ(closestCandidate("zz", commands), std::nullopt);
  EXPECT_EQ(closestCandidate("restor", commands), "restore");
  EXPECT_EQ(closestCandidate("xyz", commands), std::nullopt);
  EXPECT_EQ(joinNames({"a", "b", "c"}), "a, b, c");
  EXPECT_EQ(joinNames({}), "");
}

}  // namespace
}  // namespace jobhost::host
