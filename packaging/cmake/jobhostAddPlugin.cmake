# jobhost_add_plugin(<name> SOURCES <file>...)
#
# Builds a job plugin: one shared library lib<name>.so holding any number of job classes
# exported with JOBHOST_JOB. Used by this repository's example plugin and installed with
# the package config (lib/cmake/jobhost), so an out-of-tree plugin is built exactly like
# the in-tree one. Link further libraries with target_link_libraries(<name> PRIVATE ...).
include_guard(GLOBAL)

function(jobhost_add_plugin name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "jobhost_add_plugin(${name}): unexpected arguments: ${arg_UNPARSED_ARGUMENTS} "
                        "(usage: jobhost_add_plugin(<name> SOURCES <file>...))")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "jobhost_add_plugin(${name}): no SOURCES given")
  endif()

  # The host and the plugin exchange C++ objects, so a plugin built by another compiler
  # family or major version is refused at load time (the ABI tag in jobhost/version.h).
  # Say so now rather than at `jobhost run`. JOBHOST_CXX_COMPILER_* come from the
  # installed jobhostConfig.cmake; in the source tree they are unset and nothing can differ.
  if(DEFINED JOBHOST_CXX_COMPILER_ID AND CMAKE_CXX_COMPILER_ID)
    string(REGEX MATCH "^[0-9]+" _major "${CMAKE_CXX_COMPILER_VERSION}")
    if(NOT CMAKE_CXX_COMPILER_ID STREQUAL JOBHOST_CXX_COMPILER_ID
       OR NOT _major STREQUAL JOBHOST_CXX_COMPILER_VERSION_MAJOR)
      message(WARNING
        "jobhost_add_plugin(${name}): this project compiles with ${CMAKE_CXX_COMPILER_ID} "
        "${CMAKE_CXX_COMPILER_VERSION}, but the installed jobhost was built with "
        "${JOBHOST_CXX_COMPILER_ID} ${JOBHOST_CXX_COMPILER_VERSION_MAJOR}; jobhost will refuse "
        "to load the plugin (ABI mismatch). Configure with -DCMAKE_CXX_COMPILER=<that compiler>.")
    endif()
  endif()

  add_library(${name} SHARED ${arg_SOURCES})
  # The SDK is header-only: linking it adds the include directory, C++20 and Boost's headers.
  target_link_libraries(${name} PRIVATE jobhost::sdk)
  set_target_properties(${name} PROPERTIES
    CXX_STANDARD 20
    CXX_STANDARD_REQUIRED ON
    CXX_EXTENSIONS OFF
    # Export nothing but the job table (the Boost.DLL aliases jhjob_<Class>): user code
    # cannot clash with the host's or another plugin's symbols.
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  # A missing symbol fails the link here instead of the dlopen in `jobhost run`.
  target_link_options(${name} PRIVATE LINKER:--no-undefined)
  # `jobhost run` copies the whole file into memory and hashes it at every start (the
  # pinned copy: host/plugin/plugin_loader.h), and in a build with debug information most
  # of the file is DWARF (14 of the example plugin's 17 MB at -g1). Compressed (zlib) debug
  # sections, which Debian's gdb, binutils, elfutils and llvm-symbolizer read, make the
  # example 6.6 MB and its start about 7 ms shorter. No effect without -g.
  target_link_options(${name} PRIVATE LINKER:--compress-debug-sections=zlib)
endfunction()
