// plugins/wordcount/output.h — where the example plugin's classes write their results.
//
// Without `--output`, to stdout (print(): at-least-once, "N> " prefix at p > 1). With
// `--output PATH`:
//  - PATH a directory (one that exists, or any path ending in '/'): the exactly-once file
//    sink (jobhost::FileSink): part files under PATH, committed at each completed
//    checkpoint (issue 15). A class with a second output (WindowedWordCount's late lines)
//    writes it to a subdirectory of PATH;
//  - anything else (a file, /dev/null): a text file, as print() would print
//    (writeAsText(): at-least-once).
#pragma once

#include <jobhost/jobhost.h>

#include <filesystem>
#include <string>

namespace examples {

/// Sends `stream` where the job arguments say (see the file comment). `uid` names the
/// file sink's state; `subdir` is its directory under a --output directory.
template <class T>
void writeOutput(jobhost::StreamEnvironment& env, jobhost::DataStream<T> stream, const std::string& uid = "output",
                 const std::string& subdir = "") {
  auto out = env.args().get("--output");
  if (!out) {
    stream.print();
    return;
  }
  std::error_code ec;
  const bool directory = out->back() == '/' || std::filesystem::is_directory(*out, ec);
  if (!directory) {
    stream.writeAsText(*out);
    return;
  }
  std::string dir = *out;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (!subdir.empty()) dir += "/" + subdir;
  stream.sinkTo(jobhost::FileSink<T>(dir), "File Sink").uid(uid);
}

}  // namespace examples
