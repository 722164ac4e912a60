// Nexmark queries 5, 7 and 8 of the example plugin (issue 14), over a built-in,
// deterministic Nexmark event generator (nexmark.h: nexmark-flink's generator, ported).
// The queries are those of nexmark-flink (queries/q5.sql, q7.sql, q8.sql), which Flink's
// and Arroyo's Nexmark runs use, written with the DataStream API.
//
// Job arguments (all classes):
//   --events N      events to generate (default 100000; 0: unbounded)
//   --seed S        seeds the generator (default 0); same seed, same events
//   --rate R        events per second of event time (default 10000, nexmark's
//                   first-event.rate): event n has timestamp base + n x 1e6/R µs
//   --base-time MS  epoch millis of the first event (default 1700000000000)
//   --throttle      emit at R events per second of wall time, as nexmark's generator with
//                   maxEmitSpeed=false; without it the source runs flat out (nexmark's
//                   default), event times are unaffected either way
//   --output DIR    write the results exactly once to part files in DIR (the file sink),
//   --output-file F or to a text file F, instead of stdout (see output.h)
// Event time is the events' dateTime, with watermarks 4 s behind it (the suite's
// `WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND`); the generated events are
// in time order, so no event is late. The source's position (events emitted) is in every
// checkpoint: a restored job continues with exactly the next event.
//
// Output formats, one line per result (with the usual "N> " prefix at p > 1):
//  - NexmarkQ5, hot items: per 10 s window sliding by 2 s, the auctions with the most
//    bids: "(<window end millis>,<auction>,<bids>)"; ties give one line each.
//  - NexmarkQ7, highest bid: per 10 s tumbling window, the bids with the highest price:
//    "(<window end millis>,<auction>,<price>,<bidder>,<bid millis>)". q7.sql joins bids at
//    [window end - 10 s, window end] (both ends included) to the window's maximum; here a
//    bid belongs to its own window [start, end) only, as in the suite's definition ("the
//    highest bids per period"). The bid's `extra` (generator padding) is not printed.
//  - NexmarkQ8, new people who opened an auction in the 10 s tumbling window in which
//    they registered: "(<person id>,<name>,<window start millis>)", once per person.
#include <jobhost/jobhost.h>

#include "output.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "nexmark.h"

using namespace std::chrono_literals;
using jobhost::Collector;

namespace {

constexpr int64_t kWindowMs = 10'000;  // every query's window size
constexpr int64_t kSlideMs = 2'000;    // Q5's slide

// --- The source ------------------------------------------------------------------------

/// The generator as a source. Position: events emitted so far, with the seed, rate and
/// base time they were generated with (a restore with other ones would continue a
/// different stream: refused).
class NexmarkSource : public jobhost::SourceFunction<nexmark::Event> {
 public:
  NexmarkSource(nexmark::GeneratorConfig config, bool throttle) : gen_(config), throttle_(throttle) {}

  void open(jobhost::OperatorContext&) override {
    // Nexmark's wall-clock schedule: event n is due (timestamp(n) - base time) after the
    // start; a restored source starts its schedule at the event it resumes with.
    wallBase_ = std::chrono::steady_clock::now() - std::chrono::milliseconds(eventOffsetMs(gen_.eventsCountSoFar()));
  }

  jobhost::PollStatus poll(jobhost::SourceOutput<nexmark::Event>& out) override {
    if (!gen_.hasNext()) return jobhost::PollStatus::kEnd;
    int64_t dueMs = INT64_MAX;  // throttled: emit only events already due
    if (throttle_)
      dueMs = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - wallBase_)
                  .count();
    int emitted = 0;
    // Unthrottled, every event is due: no schedule to compute per event (it cost about
    // 3 % of NexmarkQ8's source thread).
    while (emitted < kBatch && gen_.hasNext() && (!throttle_ || eventOffsetMs(gen_.eventsCountSoFar()) <= dueMs)) {
      gen_.next(event_);
      out.emit(event_);
      ++emitted;
    }
    if (!gen_.hasNext()) return jobhost::PollStatus::kEnd;
    if (emitted == 0) {
      int64_t wait = eventOffsetMs(gen_.eventsCountSoFar()) - dueMs;
      std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp<int64_t>(wait, 1, 50)));
      return jobhost::PollStatus::kIdle;
    }
    return jobhost::PollStatus::kMore;
  }

  std::string snapshotPosition() override {
    std::string s;
    jobhost::ByteWriter w(s);
    w.writeU8(kPositionFormat);
    w.writeFixed<uint64_t>(gen_.eventsCountSoFar());
    w.writeFixed<uint64_t>(gen_.config().seed);
    w.writeFixed<int64_t>(static_cast<int64_t>(gen_.config().firstEventRate));
    w.writeI64(gen_.config().baseTime);
    return s;
  }
  void restorePosition(std::string_view p) override {
    if (p.empty()) return;  // a source without a position wrote it: start at the first event
    jobhost::ByteReader r(p);
    if (r.readU8() != kPositionFormat) throw jobhost::SerializationError("unknown Nexmark source position format");
    const uint64_t count = r.readFixed<uint64_t>();
    const uint64_t seed = r.readFixed<uint64_t>();
    const int64_t rate = r.readFixed<int64_t>();
    const int64_t base = r.readI64();
    if (!r.atEnd()) throw jobhost::SerializationError("the Nexmark source position has trailing bytes");
    const auto& c = gen_.config();
    if (seed != c.seed || rate != static_cast<int64_t>(c.firstEventRate) || base != c.baseTime)
      throw jobhost::SerializationError(
          "the saved Nexmark position was generated with --seed " + std::to_string(seed) + " --rate " +
          std::to_string(rate) + " --base-time " + std::to_string(base) + ", this run has --seed " +
          std::to_string(c.seed) + " --rate " + std::to_string(static_cast<int64_t>(c.firstEventRate)) +
          " --base-time " + std::to_string(c.baseTime) + "; restore with the same generator arguments");
    if (c.maxEvents != 0 && count > c.maxEvents)
      throw jobhost::SerializationError("the saved Nexmark position is event " + std::to_string(count) +
                                        ", beyond --events " + std::to_string(c.maxEvents));
    gen_.setEventsCountSoFar(count);
  }

 private:
  static constexpr uint8_t kPositionFormat = 1;
  static constexpr int kBatch = 1024;
  int64_t eventOffsetMs(uint64_t n) const { return gen_.config().timestampOfEvent(n) - gen_.config().baseTime; }

  nexmark::Generator gen_;
  bool throttle_;
  nexmark::Event event_;
  std::chrono::steady_clock::time_point wallBase_{};
};

nexmark::GeneratorConfig generatorConfig(const jobhost::JobArgs& args) {
  nexmark::GeneratorConfig c;
  const int64_t events = args.getInt("--events", 100'000);
  const int64_t rate = args.getInt("--rate", 10'000);
  if (events < 0) throw jobhost::JobArgumentError("--events must be 0 (unbounded) or positive, got " + std::to_string(events));
  if (rate <= 0) throw jobhost::JobArgumentError("--rate must be positive (events per second), got " + std::to_string(rate));
  c.maxEvents = static_cast<uint64_t>(events);
  c.seed = static_cast<uint64_t>(args.getInt("--seed", 0));
  c.firstEventRate = static_cast<double>(rate);
  c.baseTime = args.getInt("--base-time", nexmark::kDefaultBaseTime);
  return c;
}

/// The generated events with event timestamps and watermarks.
jobhost::DataStream<nexmark::Event> nexmarkEvents(jobhost::StreamEnvironment& env) {
  const nexmark::GeneratorConfig config = generatorConfig(env.args());
  const bool throttle = env.args().has("--throttle");
  auto events = env.addSource<nexmark::Event>(
      [config, throttle] { return std::make_unique<NexmarkSource>(config, throttle); }, "Nexmark Source");
  events.uid("nexmark-source");
  auto stamped = events.assignTimestampsAndWatermarks(
      jobhost::WatermarkStrategy<nexmark::Event>::forBoundedOutOfOrderness(4s).withTimestampAssigner(
          [](const nexmark::Event& e) { return e.timestamp(); }));
  stamped.uid("nexmark-timestamps");
  return stamped;
}

template <class T>
void sink(jobhost::StreamEnvironment& env, jobhost::DataStream<T> stream) {
  examples::writeOutput(env, stream);
}

void configureNexmark(jobhost::JobConfig& c) {
  c.checkpointInterval(1s);
  c.fixedDelayRestart(3, 2s);
  c.windowMiniBatch(16384);  // the aggregates' merge() is exact: counts, maxima
}

/// Keeps, per key (a window end), the rows with the largest `score`, and emits them,
/// sorted, when the watermark passes the window: the "max per window" half of Q5 and Q7.
/// The rows come from a window operator, so they carry the window's last millisecond as
/// their timestamp, and every upstream result for the window precedes the watermark that
/// fires the timer.
template <class Row, int64_t (*Score)(const Row&)>
class MaxPerWindow : public jobhost::KeyedProcessFunction<int64_t, Row, Row> {
 public:
  using Base = jobhost::KeyedProcessFunction<int64_t, Row, Row>;
  void processElement(const Row& row, typename Base::Context& ctx, Collector<Row>& out) override {
    std::vector<Row> best = best_.value().value_or(std::vector<Row>{});
    if (best.empty()) ctx.timerService().registerEventTimeTimer(ctx.currentKey() - 1);
    if (best.empty() || Score(row) > Score(best.front())) best.assign(1, row);
    else if (Score(row) == Score(best.front())) best.push_back(row);
    else return;
    best_.update(best);
  }
  void onTimer(int64_t, typename Base::OnTimerContext&, Collector<Row>& out) override {
    std::vector<Row> best = best_.value().value_or(std::vector<Row>{});
    std::sort(best.begin(), best.end());
    for (const Row& r : best) out.collect(r);
    best_.clear();
  }

 private:
  jobhost::ValueState<std::vector<Row>> best_{*this, "max-rows"};
};

template <class Row>
int64_t windowEndOf(const Row& r) {
  return std::get<0>(r);
}

// --- Q5: hot items ---------------------------------------------------------------------

using AuctionCount = std::tuple<int64_t, int64_t, int64_t>;  // (window end, auction, bids)

struct CountBids : jobhost::AggregateFunction<int64_t, int64_t, int64_t> {
  int64_t createAccumulator() const override { return 0; }
  int64_t add(const int64_t&, int64_t acc) const override { return acc + 1; }
  int64_t getResult(const int64_t& acc) const override { return acc; }
  int64_t merge(int64_t a, const int64_t& b) const override { return a + b; }
};

struct WithWindowEnd : jobhost::ProcessWindowFunction<int64_t, AuctionCount, int64_t> {
  void process(const int64_t& auction, Context& ctx, const std::vector<int64_t>& counts,
               Collector<AuctionCount>& out) override {
    out.collect({ctx.window().end, auction, counts.front()});
  }
};

int64_t bidsOf(const AuctionCount& c) { return std::get<2>(c); }

/// q5.sql: bids per auction per HOP(2 s, 10 s) window, and the auctions whose count is
/// the window's maximum.
class NexmarkQ5 : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override { configureNexmark(c); }
  void build(jobhost::StreamEnvironment& env) override {
    auto auctions = nexmarkEvents(env)
                        .flatMap<int64_t>([](const nexmark::Event& e, Collector<int64_t>& out) {
                          if (e.type == nexmark::EventType::kBid) out.collect(e.bid.auction);
                        })
                        .name("Bid Auctions");
    auto counts = auctions.keyBy([](const int64_t& auction) { return auction; })
                      .window(jobhost::SlidingEventTimeWindows::of(std::chrono::milliseconds(kWindowMs),
                                                                   std::chrono::milliseconds(kSlideMs)))
                      .aggregate(CountBids{}, WithWindowEnd{});
    counts.uid("q5-bids-per-auction");
    auto hot = counts.keyBy(windowEndOf<AuctionCount>).process<MaxPerWindow<AuctionCount, bidsOf>>();
    hot.uid("q5-hot-items").name("Hot Items");
    sink(env, hot);
  }
};

// --- Q7: highest bid -------------------------------------------------------------------

using PricedBid = std::tuple<int64_t, int64_t, int64_t, int64_t>;            // (auction, price, bidder, millis)
using HighestBid = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;  // (window end, auction, price, bidder, millis)

/// The bids with the highest price (all of them on a tie).
struct MaxPriceBids : jobhost::AggregateFunction<PricedBid, std::vector<PricedBid>, std::vector<PricedBid>> {
  std::vector<PricedBid> createAccumulator() const override { return {}; }
  std::vector<PricedBid> add(const PricedBid& b, std::vector<PricedBid> acc) const override {
    if (acc.empty() || std::get<1>(b) > std::get<1>(acc.front())) acc.assign(1, b);
    else if (std::get<1>(b) == std::get<1>(acc.front())) acc.push_back(b);
    return acc;
  }
  std::vector<PricedBid> getResult(const std::vector<PricedBid>& acc) const override { return acc; }
  std::vector<PricedBid> merge(std::vector<PricedBid> a, const std::vector<PricedBid>& b) const override {
    for (const auto& x : b) a = add(x, std::move(a));
    return a;
  }
};

struct BidsWithWindowEnd : jobhost::ProcessWindowFunction<std::vector<PricedBid>, HighestBid, int64_t> {
  void process(const int64_t&, Context& ctx, const std::vector<std::vector<PricedBid>>& results,
               Collector<HighestBid>& out) override {
    for (const auto& [auction, price, bidder, millis] : results.front())
      out.collect({ctx.window().end, auction, price, bidder, millis});
  }
};

int64_t priceOf(const HighestBid& b) { return std::get<2>(b); }

/// q7.sql: the bids with the highest price of each 10 s tumbling window, in two steps:
/// the highest per auction and window (parallel), then the highest per window.
class NexmarkQ7 : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override { configureNexmark(c); }
  void build(jobhost::StreamEnvironment& env) override {
    auto bids = nexmarkEvents(env)
                    .flatMap<PricedBid>([](const nexmark::Event& e, Collector<PricedBid>& out) {
                      if (e.type == nexmark::EventType::kBid)
                        out.collect({e.bid.auction, e.bid.price, e.bid.bidder, e.bid.dateTime});
                    })
                    .name("Bids");
    auto perAuction = bids.keyBy([](const PricedBid& b) { return std::get<0>(b); })
                          .window(jobhost::TumblingEventTimeWindows::of(std::chrono::milliseconds(kWindowMs)))
                          .aggregate(MaxPriceBids{}, BidsWithWindowEnd{});
    perAuction.uid("q7-highest-per-auction");
    auto highest = perAuction.keyBy(windowEndOf<HighestBid>).process<MaxPerWindow<HighestBid, priceOf>>();
    highest.uid("q7-highest-bid").name("Highest Bid");
    sink(env, highest);
  }
};

// --- Q8: new people who opened an auction ----------------------------------------------

using NewPerson = std::pair<int64_t, std::string>;           // (id, name)
using PersonInWindow = std::tuple<int64_t, std::string, int64_t>;  // (id, name, window start)

const jobhost::OutputTag<int64_t> kAuctionSellers{"auction-sellers"};

/// Persons (id, name) to the main output, the seller of every auction to kAuctionSellers.
struct SplitPersonsAndSellers : jobhost::ProcessFunction<nexmark::Event, NewPerson> {
  void processElement(const nexmark::Event& e, Context& ctx, Collector<NewPerson>& out) override {
    if (e.type == nexmark::EventType::kPerson) out.collect({e.person.id, e.person.name});
    else if (e.type == nexmark::EventType::kAuction) ctx.output(kAuctionSellers, e.auction.seller);
  }
};

/// Keyed by person id: the person's name per tumbling window it registered in, and the
/// windows in which it sold; at a window's end, the person if both. A record whose
/// window the watermark has passed is dropped, as a window operator drops late data.
class JoinPersonsAndSellers : public jobhost::KeyedCoProcessFunction<int64_t, NewPerson, int64_t, PersonInWindow> {
 public:
  void processElement1(const NewPerson& p, Context& ctx, Collector<PersonInWindow>&) override {
    if (auto start = windowOf(ctx)) {
      names_.put(*start, p.second);
      ctx.timerService().registerEventTimeTimer(*start + kWindowMs - 1);
    }
  }
  void processElement2(const int64_t&, Context& ctx, Collector<PersonInWindow>&) override {
    auto start = windowOf(ctx);
    if (!start || sold_.contains(*start)) return;
    sold_.put(*start, true);
    ctx.timerService().registerEventTimeTimer(*start + kWindowMs - 1);
  }
  void onTimer(int64_t time, OnTimerContext& ctx, Collector<PersonInWindow>& out) override {
    const int64_t start = time + 1 - kWindowMs;
    auto name = names_.get(start);
    if (name && sold_.contains(start)) out.collect({ctx.currentKey(), *name, start});
    names_.remove(start);
    sold_.remove(start);
  }

 private:
  /// The start of the record's window; nullopt when it is late.
  static std::optional<int64_t> windowOf(Context& ctx) {
    const int64_t ts = *ctx.timestamp();
    const int64_t start = jobhost::WindowAssigner::windowStart(ts, 0, kWindowMs);
    if (start + kWindowMs - 1 <= ctx.timerService().currentWatermark()) return std::nullopt;
    return start;
  }
  jobhost::MapState<int64_t, std::string> names_{*this, "person-name-by-window"};
  jobhost::MapState<int64_t, bool> sold_{*this, "sold-in-window"};
};

/// q8.sql: persons joined with auction sellers by person id = seller within the same
/// 10 s tumbling window (a windowed join of two keyed inputs).
class NexmarkQ8 : public jobhost::Job {
 public:
  void configure(jobhost::JobConfig& c) override { configureNexmark(c); }
  void build(jobhost::StreamEnvironment& env) override {
    auto persons = nexmarkEvents(env).process<SplitPersonsAndSellers>();
    persons.uid("q8-split").name("Persons and Sellers");
    auto sellers = persons.getSideOutput(kAuctionSellers);
    auto joined = persons.keyBy([](const NewPerson& p) { return p.first; })
                      .connect(sellers.keyBy([](const int64_t& seller) { return seller; }))
                      .process<JoinPersonsAndSellers>();
    joined.uid("q8-new-sellers").name("New Persons Selling");
    sink(env, joined);
  }
};

}  // namespace

JOBHOST_JOB(NexmarkQ5, "Nexmark Q5: auctions with the most bids per 10 s window sliding by 2 s (generated events)",
            "hashmap")
JOBHOST_JOB(NexmarkQ7, "Nexmark Q7: the highest bids per 10 s tumbling window (generated events)", "hashmap")
JOBHOST_JOB(NexmarkQ8, "Nexmark Q8: new persons who opened an auction in the same 10 s window (generated events)",
            "hashmap")
