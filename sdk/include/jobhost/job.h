// jobhost/job.h — the Job base class and the macro that exports a job class.
//
// A plugin is one shared library holding any number of job classes. Each class derives
// from jobhost::Job and is exported once with JOBHOST_JOB:
//
//   class WordCount : public jobhost::Job {
//    public:
//     void configure(jobhost::JobConfig& c) override { c.checkpointInterval(1s); }
//     void build(jobhost::StreamEnvironment& env) override { ... }
//   };
//   JOBHOST_JOB(WordCount, "Counts words from a socket or a file", "hashmap")
//
// `jobhost info lib.so` lists the classes from static metadata without running plugin
// code; `jobhost run -c WordCount lib.so` creates one instance, calls configure(), then
// build(), and runs the dataflow build() defined.
//
// Lifetime: the host keeps the library loaded for as long as the process runs, so
// objects a job creates may reference plugin code freely.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <cstdint>
#include <memory>

#include <boost/dll/alias.hpp>

#include "jobhost/config.h"

namespace jobhost {

class StreamEnvironment;

/// Base class of every job. One instance is created per run (and per restart attempt).
class JOBHOST_API Job {
 public:
  virtual ~Job() = default;
  /// Chooses checkpointing, restart strategy, parallelism (the backend is declared in
  /// JOBHOST_JOB, and configure() may not contradict it). Called before
  /// build(); values set here override the configuration file and are overridden by
  /// `-D` on the command line. Default: sets nothing.
  virtual void configure(JobConfig& config) {}
  /// Defines the dataflow. May throw JobArgumentError for bad job arguments.
  virtual void build(StreamEnvironment& env) = 0;
};

/// First word of every JobClassInfo; the host checks it before reading anything else.
inline constexpr uint32_t kJobClassInfoMagic = 0x4a484a31;  // "JHJ1"

/// What a plugin exports per class (through a Boost.DLL alias `jhjob_<Class>` in
/// section `jhjobs`). Layout is part of the ABI: fields are only ever appended.
struct JobClassInfo {
  uint32_t magic;          // kJobClassInfoMagic
  const char* abiTag;      // JOBHOST_ABI_TAG of the plugin build
  const char* sdkVersion;  // JOBHOST_SDK_VERSION of the plugin build
  const char* name;        // class name as given to -c
  const char* description; // one line
  const char* backend;     // declared state backend: "hashmap" or "rocksdb"
  bool incremental;        // declared incremental flag (rocksdb only)
  Job* (*create)();        // new instance; the caller owns it
};

}  // namespace jobhost

// Static metadata, readable from the file without loading it: one record per class in
// ELF section ".jhmeta", fields NUL-terminated:
//   "JHJOB\001" name description backend incremental("0"/"1") sdkVersion abiTag
// String literal pieces are kept separate so "\0" never merges with a following digit.
#define JOBHOST_JOB_INCREMENTAL(Class, Description, Backend, Incremental)                     \
  namespace jobhost_export_##Class {                                                          \
  [[gnu::section(".jhmeta"), gnu::used, gnu::retain]] static const char kMeta[] =                         \
      "JHJOB\001" #Class "\0" Description "\0" Backend "\0" #Incremental "\0"                \
      JOBHOST_SDK_VERSION "\0" JOBHOST_ABI_TAG;                                               \
  static ::jobhost::Job* create() { return new Class(); }                                     \
  extern const ::jobhost::JobClassInfo kInfo;                                                 \
  const ::jobhost::JobClassInfo kInfo = {::jobhost::kJobClassInfoMagic, JOBHOST_ABI_TAG,     \
                                         JOBHOST_SDK_VERSION, #Class, Description, Backend,   \
                                         (Incremental) != 0, &create};                        \
  }                                                                                           \
  BOOST_DLL_ALIAS_SECTIONED(jobhost_export_##Class::kInfo, jhjob_##Class, jhjobs)

/// Exports `Class` (a jobhost::Job with a default constructor) from the plugin.
/// Backend is "hashmap" or "rocksdb": the class's state backend, declared here once
/// (JOBHOST_JOB_INCREMENTAL with Incremental 1 for incremental checkpoints). `jobhost info`
/// reads it without loading the plugin, the host runs the class on it, and a restore is
/// checked against it; the configuration file cannot change it, `-D state.backend.type=…`
/// can, and a configure() that sets another backend is refused.
#define JOBHOST_JOB(Class, Description, Backend) \
  JOBHOST_JOB_INCREMENTAL(Class, Description, Backend, 0)
