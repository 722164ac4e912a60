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
// With `--kafka-output TOPIC`: to a Kafka topic (kafka_io.h; --kafka-delivery chooses
// none, at-least-once or exactly-once).
// With a directory, `--buckets event-hour|processing-hour` puts part files in hourly
// bucket directories (YYYY-MM-DD--HH, UTC), `--max-part-size BYTES` (default 128 MiB) and
// `--rollover DURATION` (default 60s) roll part files between checkpoints too.
#pragma once

#include <jobhost/jobhost.h>

#include "kafka_io.h"

#include <chrono>
#include <filesystem>
#include <string>

namespace examples {

/// Sends `stream` where the job arguments say (see the file comment). `uid` names the
/// file sink's state; `subdir` is its directory under a --output directory.
template <class T>
void writeOutput(jobhost::StreamEnvironment& env, jobhost::DataStream<T> stream, const std::string& uid = "output",
                 const std::string& subdir = "") {
  if (auto topic = env.args().get("--kafka-output")) {
    writeKafka(env, stream, subdir.empty() ? *topic : *topic + "-" + subdir, uid);
    return;
  }
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
  jobhost::FileSink<T> sink(dir);
  const auto& args = env.args();
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
