// plugins/wordcount/output.h — where the example plugin's classes write their results.
//
// One flag per guarantee, so that the guarantee never depends on how a path is spelled:
//  - no flag: stdout (print(): at-least-once, "N> " prefix at p > 1);
//  - `--output DIR`: always the exactly-once file sink (jobhost::FileSink): part files
//    under DIR (created if missing), committed at each completed checkpoint (issue 15).
//    A class with a second output (WindowedWordCount's late lines) writes it to a
//    subdirectory of DIR. `--buckets event-hour|processing-hour` puts part files in hourly
//    bucket directories (YYYY-MM-DD--HH, UTC), `--max-part-size BYTES` (default 128 MiB)
//    and `--rollover DURATION` (default 60s) roll part files between checkpoints too;
//  - `--output-file FILE`: a text file, as print() would print (writeAsText():
//    at-least-once), e.g. /dev/null;
//  - `--kafka-output TOPIC`: a Kafka topic (kafka_io.h; --kafka-delivery chooses none,
//    at-least-once or exactly-once).
// Until issue 34 `--output PATH` chose between the two by the path (a trailing '/' or an
// existing directory: the file sink; anything else: a text file). What that form meant
// is refused with the flag to use: `--output` naming an existing file that is not a
// directory, `--output-file` naming a directory, both flags at once, and the file sink's
// options without `--output`.
#pragma once

#include <jobhost/jobhost.h>

#include "kafka_io.h"

#include <chrono>
#include <filesystem>
#include <string>

namespace examples {

/// Sends `stream` where the job arguments say (see the file comment). `uid` names the
/// file sink's state; `subdir` is its directory under the --output directory. Throws
/// JobArgumentError (exit 2) for the combinations the file comment lists.
template <class T>
void writeOutput(jobhost::StreamEnvironment& env, jobhost::DataStream<T> stream, const std::string& uid = "output",
                 const std::string& subdir = "") {
  if (auto topic = env.args().get("--kafka-output")) {
    writeKafka(env, stream, subdir.empty() ? *topic : *topic + "-" + subdir, uid);
    return;
  }
  const auto& args = env.args();
  auto dirArg = args.get("--output");
  auto fileArg = args.get("--output-file");
  std::error_code ec;
  if (dirArg && fileArg)
    throw jobhost::JobArgumentError("job arguments --output DIR (exactly-once file sink) and --output-file FILE "
                                    "(at-least-once text file) exclude each other: give one");
  if (!dirArg) {
    for (const char* option : {"--buckets", "--max-part-size", "--rollover"})
      if (args.get(option))
        throw jobhost::JobArgumentError(std::string("job argument ") + option +
                                        " configures the exactly-once file sink: it needs --output DIR");
  }
  if (fileArg) {
    if (fileArg->empty()) throw jobhost::JobArgumentError("job argument --output-file needs a file name");
    if (std::filesystem::is_directory(*fileArg, ec))
      throw jobhost::JobArgumentError("job argument --output-file " + *fileArg +
                                      " is a directory; --output-file writes one text file (at-least-once). For "
                                      "exactly-once part files in that directory use --output " +
                                      *fileArg);
    stream.writeAsText(*fileArg);
    return;
  }
  if (!dirArg) {
    stream.print();
    return;
  }
  std::string dir = *dirArg;
  if (dir.empty()) throw jobhost::JobArgumentError("job argument --output needs a directory");
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
    throw jobhost::JobArgumentError("job argument --output " + *dirArg +
                                    " is an existing file, not a directory: --output DIR is always the exactly-once "
                                    "file sink's directory (created if missing). To write a text file "
                                    "(at-least-once) use --output-file " +
                                    *dirArg);
  if (!subdir.empty()) dir += "/" + subdir;
  jobhost::FileSink<T> sink(dir);
  if (auto b = args.get("--buckets")) {
    if (*b == "event-hour") sink.withBucketAssigner(jobhost::BucketAssigner::kEventHour);
    else if (*b == "processing-hour") sink.withBucketAssigner(jobhost::BucketAssigner::kProcessingHour);
    else if (*b != "none")
      throw jobhost::JobArgumentError("job argument --buckets must be none, event-hour or processing-hour, got '" + *b +
                                      "'");
  }
  if (args.get("--max-part-size")) {
    int64_t bytes = args.getInt("--max-part-size", 0);
    if (bytes <= 0) throw jobhost::JobArgumentError("job argument --max-part-size must be a positive number of bytes");
    sink.withMaxPartSize(static_cast<uint64_t>(bytes));
  }
  if (args.get("--rollover")) sink.withRolloverInterval(args.getDuration("--rollover", std::chrono::seconds(60)));
  stream.sinkTo(sink, "File Sink").uid(uid);
}

}  // namespace examples
