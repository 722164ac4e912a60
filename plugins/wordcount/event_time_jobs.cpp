// Event-time examples of the example plugin (issue 14): windowed word count with late
// data on a side output, and an interval join of orders and payments.
//
// Input and output formats are fixed, so that results can be checked by anyone:
//  - WindowedWordCount: --input FILE of lines "<epoch millis> <word> [<word> ...]";
//    prints "(<window end millis>,<word>,<count>)" per fired window and word, and
//    "late> <original line>" for a line too late for its window.
//  - OrderPaymentJoin: --orders FILE "<epoch millis> <orderId> <amount>" and --payments
//    FILE "<epoch millis> <orderId> <method>"; prints "(<orderId>,<amount>,<method>)" for
//    a payment 0 to 5 s after the order with the same id.
// Both take --out-of-orderness (default 2s), --rate R (lines per second per file) and
// --output DIR (the exactly-once file sink) or --output-file FILE (a text file) instead of
// stdout (see output.h). A line whose first field is not all digits fails the job with
// the line's text.
#include <jobhost/jobhost.h>

#include "output.h"

#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

using namespace std::chrono_literals;

namespace {

/// The epoch millis at the start of `line`: digits only (at most 19, within int64),
/// followed by whitespace or the end of the line. Anything else — "1.7e+12 word",
/// "-5 word", "12ms word", a line without a timestamp — is refused with the line's text
/// (issue 34: "1.7e+12" used to read as 1 ms, its leading digits).
int64_t leadingMillis(const std::string& line) {
  size_t i = 0;
  while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
  size_t start = i;
  while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
  int64_t millis = 0;
  const bool digitsOnly = i > start && (i == line.size() || std::isspace(static_cast<unsigned char>(line[i])));
  if (!digitsOnly || std::from_chars(line.data() + start, line.data() + i, millis).ec != std::errc())
    throw std::runtime_error("input line '" + line.substr(0, 80) + (line.size() > 80 ? "...'" : "'") +
                             " does not start with a timestamp in epoch milliseconds (digits only, e.g. "
                             "1767225600000, then a space)");
  return millis;
}

/// The whitespace-separated fields of `line` after the first.
std::vector<std::string> fieldsAfterFirst(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool first = true;
  auto flush = [&] {
    if (cur.empty()) return;
    if (!first) out.push_back(cur);
    first = false;
    cur.clear();
  };
  for (char c : line) {
    if (std::isspace(static_cast<unsigned char>(c))) flush();
    else cur.push_back(c);
  }
  flush();
  return out;
}

template <class T>
void sink(jobhost::StreamEnvironment& env, jobhost::DataStream<T> stream) {
  examples::writeOutput(env, stream);
}

jobhost::DataStream<std::string> timestampedLines(jobhost::StreamEnvironment& env, const std::string& flag,
                                                  const std::string& uid) {
  const auto& args = env.args();
  auto path = args.get(flag);
  if (!path) throw jobhost::JobArgumentError(flag + " FILE is required");
  auto ooo = args.getDuration("--out-of-orderness", 2s);
  auto lines = env.readTextFile(*path, static_cast<double>(args.getInt("--rate", 0)));
  lines.uid(uid);
  auto stamped = lines.assignTimestampsAndWatermarks(
      jobhost::WatermarkStrategy<std::string>::forBoundedOutOfOrderness(ooo).withTimestampAssigner(leadingMillis));
  stamped.uid(uid + "-timestamps");
  return stamped;
}

// --- WindowedWordCount ------------------------------------------------------------------

const jobhost::OutputTag<std::string> kLateLines{"late-lines"};

/// Passes on lines in time for their window; a line whose window the watermark has
/// already passed goes to kLateLines (so a late line is reported once, as it was read).
class SplitLateLines : public jobhost::ProcessFunction<std::string, std::string> {
 public:
  explicit SplitLateLines(jobhost::WindowAssigner windows) : windows_(windows) {}
  void processElement(const std::string& line, Context& ctx, jobhost::Collector<std::string>& out) override {
    const int64_t ts = *ctx.timestamp();
    bool late = true;
    for (const auto& w : windows_.assignWindows(ts))
      if (w.maxTimestamp() > ctx.currentWatermark()) late = false;
    if (late) ctx.output(kLateLines, line);
    else out.collect(line);
  }

 private:
  jobhost::WindowAssigner windows_;
};

struct CountWords : jobhost::AggregateFunction<std::pair<std::string, int64_t>, int64_t, int64_t> {
  int64_t createAccumulator() const override { return 0; }
  int64_t add(const std::pair<std::string, int64_t>& v, int64_t acc) const override { return acc + v.second; }
  int64_t getResult(const int64_t& acc) const override { return acc; }
  int64_t merge(int64_t a, const int64_t& b) const override { return a + b; }
};

using WindowCount = std::tuple<int64_t, std::string, int64_t>;  // (window end, word, count)

struct WithWindowEnd : jobhost::ProcessWindowFunction<int64_t, WindowCount, std::string> {
  void process(const std::string& word, Context& ctx, const std::vector<int64_t>& counts,
               jobhost::Collector<WindowCount>& out) override {
    out.collect({ctx.window().end, word, counts.front()});
  }
};

class WindowedWordCount : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override {
    c.checkpointInterval(1s);
    c.fixedDelayRestart(3, 2s);
  }
  void build(jobhost::StreamEnvironment& env) override {
    auto windows = jobhost::TumblingEventTimeWindows::of(env.args().getDuration("--window", 10s));
    auto split = timestampedLines(env, "--input", "lines")
                     .process<SplitLateLines>([windows] { return std::make_unique<SplitLateLines>(windows); });
    split.uid("split-late").name("Split Late Lines");
    auto late = split.getSideOutput(kLateLines).map([](const std::string& line) { return "late> " + line; });
    auto counts = split
                      .flatMap<std::pair<std::string, int64_t>>(
                          [](const std::string& line, jobhost::Collector<std::pair<std::string, int64_t>>& out) {
                            for (auto& w : fieldsAfterFirst(line)) out.collect({w, 1});
                          })
                      .name("Tokenizer")
                      .keyBy([](const std::pair<std::string, int64_t>& p) { return p.first; })
                      .window(windows)
                      .aggregate(CountWords{}, WithWindowEnd{});
    counts.uid("window-counts");
    sink(env, counts);
    examples::writeOutput(env, late, "late-output", "late");  // a --output directory: late lines in late/
  }
};

// --- OrderPaymentJoin -------------------------------------------------------------------

using Order = std::pair<std::string, std::string>;    // (orderId, amount)
using Payment = std::pair<std::string, std::string>;  // (orderId, method)
using Paid = std::tuple<std::string, std::string, std::string>;

/// "<millis> <id> <value>" -> (id, value).
std::pair<std::string, std::string> idAndValue(const std::string& line) {
  auto f = fieldsAfterFirst(line);
  if (f.size() != 2)
    throw std::runtime_error("input line '" + line.substr(0, 80) + "' is not '<epoch millis> <orderId> <value>'");
  return {f[0], f[1]};
}

struct JoinPayment : jobhost::ProcessJoinFunction<Order, Payment, Paid> {
  void processElement(const Order& o, const Payment& p, Context&, jobhost::Collector<Paid>& out) override {
    out.collect({o.first, o.second, p.second});
  }
};

class OrderPaymentJoin : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override {
    c.checkpointInterval(1s);
    c.fixedDelayRestart(3, 2s);
  }
  void build(jobhost::StreamEnvironment& env) override {
    auto byId = [](const std::pair<std::string, std::string>& p) { return p.first; };
    auto orders = timestampedLines(env, "--orders", "orders").map(idAndValue).name("Parse Orders").keyBy(byId);
    auto payments =
        timestampedLines(env, "--payments", "payments").map(idAndValue).name("Parse Payments").keyBy(byId);
    auto paid = orders.intervalJoin(payments).between(0ms, 5s).process<JoinPayment>();
    paid.uid("order-payment-join");
    sink(env, paid);
  }
};

}  // namespace

JOBHOST_JOB(WindowedWordCount, "Word counts per 10 s event-time window, late lines on a side output", "hashmap")
JOBHOST_JOB(OrderPaymentJoin, "Interval join of payments to orders 0-5 s before them (event time)", "hashmap")
