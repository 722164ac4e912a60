// example: sdk_examples/serializer.cpp
#include <jobhost/jobhost.h>

#include <optional>
#include <sstream>
#include <string>

/// A user type that crosses keyBy and is kept in keyed state.
struct Reading {
  std::string sensor;
  double celsius = 0;
  int64_t time = 0;
};

/// Its serializer: a stable id, a version, and the encoding. Checkpoints record the id
/// and version of every state's serializers; a restore that finds others is refused
/// before any state is read. Bump version() whenever write() changes.
template <>
struct jobhost::Serializer<Reading> {
  static std::string id() { return "com.example.Reading"; }
  static uint32_t version() { return 1; }
  static void write(ByteWriter& w, const Reading& r) {
    Serializer<std::string>::write(w, r.sensor);  // reuse the built-in serializers
    Serializer<double>::write(w, r.celsius);
    w.writeI64(r.time);
  }
  static Reading read(ByteReader& r) {
    Reading x;
    x.sensor = Serializer<std::string>::read(r);
    x.celsius = Serializer<double>::read(r);
    x.time = r.readI64();
    return x;
  }
};

/// Per sensor: the hottest reading so far.
class Hottest : public jobhost::KeyedProcessFunction<std::string, Reading, std::string> {
 public:
  void processElement(const Reading& r, Context&, jobhost::Collector<std::string>& out) override {
    std::optional<Reading> best = hottest_.value();
    if (best && best->celsius >= r.celsius) return;
    hottest_.update(r);
    out.collect(r.sensor + " hottest " + std::to_string(r.celsius) + " at " + std::to_string(r.time));
  }

 private:
  jobhost::ValueState<Reading> hottest_{*this, "hottest"};
};

/// Lines "sensor celsius time": jobhost run -c HottestReading my_jobs.so --input readings.txt
class HottestReading : public jobhost::Job {
 public:
  void build(jobhost::StreamEnvironment& env) override {
    env.readTextFile(env.args().get("--input", "readings.txt"))
        .uid("lines")
        .flatMap<Reading>([](const std::string& line, jobhost::Collector<Reading>& out) {
          std::istringstream in(line);
          Reading r;
          if (in >> r.sensor >> r.celsius >> r.time) out.collect(r);
        })
        .keyBy([](const Reading& r) { return r.sensor; })
        .process<Hottest>()
        .uid("hottest")
        .print();
  }
};
JOBHOST_JOB(HottestReading, "Hottest reading per sensor (a user type in state)", "hashmap")
