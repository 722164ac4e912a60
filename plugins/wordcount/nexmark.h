// plugins/wordcount/nexmark.h — the Nexmark benchmark's events and a deterministic port of
// its event generator, as nexmark-flink defines them (github.com/nexmark/nexmark,
// nexmark-flink/src/main/java/com/github/nexmark/flink/generator/: GeneratorConfig,
// NexmarkGenerator, model/PersonGenerator, AuctionGenerator, BidGenerator,
// PriceGenerator, StringsGenerator, LongGenerator). Arroyo's generator is a port of the
// same code.
//
// What is ported exactly: the event kinds by event id (1 person : 3 auctions : 46 bids per
// 50 events), the ids (first person and auction id 1000, category from 10, hot sellers,
// auctions and bidders, in-flight auctions and active people with their leads), the
// timestamps (baseTime + eventNumber x inter-event delay, the delay 1e6 / rate µs; first
// event id 1 and first event number 1, as NexmarkTableSourceFactory creates them), the
// price distribution, the auction lengths and the sizes of the padding strings.
//
// What differs, on purpose: nexmark-flink draws from one unseeded SplittableRandom, so
// its events differ from run to run. Here every event draws from its own small PRNG
// (splitmix64) seeded by (seed, event id), so event n is the same in every run, does not
// depend on the events before it, and a restored source resumes with exactly the events
// it would have produced. The tables nexmark-flink builds from an unseeded random at class
// load (the 1 MiB padding string, the hot URLs and the 10 000 channel URLs) are built from
// `seed` as well. The base time is a parameter (nexmark-flink takes the wall clock at
// start). One rate, as nexmark-flink's GeneratorConfig uses (only the first of its
// inter-event delays), and one generator (numEventGenerators = 1: the source runs at p=1).
//
// Plain C++ with no SDK dependency: the plugin's source, the benchmark's hand-written
// baseline and the tests all generate the same events from this header.
//
// Thread-safety: a Generator is used by one thread; GeneratorConfig is a value.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nexmark {

/// 2023-11-14T22:13:20Z, a multiple of 10 s, so 10 s windows start at the first event.
inline constexpr int64_t kDefaultBaseTime = 1'700'000'000'000;

struct Person {
  int64_t id = 0;
  std::string name, emailAddress, creditCard, city, state;
  int64_t dateTime = 0;  // epoch millis
  std::string extra;
};

struct Auction {
  int64_t id = 0;
  std::string itemName, description;
  int64_t initialBid = 0, reserve = 0;
  int64_t dateTime = 0, expires = 0;  // epoch millis
  int64_t seller = 0, category = 0;
  std::string extra;
};

struct Bid {
  int64_t auction = 0, bidder = 0, price = 0;
  std::string channel, url;
  int64_t dateTime = 0;  // epoch millis
  std::string extra;
};

enum class EventType : uint8_t { kPerson = 0, kAuction = 1, kBid = 2 };

/// One generated event: `type` says which of the three members holds it (the others keep
/// whatever an earlier event left there, so a reused Event does not reallocate).
struct Event {
  EventType type = EventType::kBid;
  Person person;
  Auction auction;
  Bid bid;
  int64_t timestamp() const {
    switch (type) {
      case EventType::kPerson: return person.dateTime;
      case EventType::kAuction: return auction.dateTime;
      case EventType::kBid: return bid.dateTime;
    }
    return 0;
  }
};

/// NexmarkConfiguration's defaults and GeneratorConfig's derived values.
struct GeneratorConfig {
  static constexpr int64_t kFirstAuctionId = 1000;
  static constexpr int64_t kFirstPersonId = 1000;
  static constexpr int64_t kFirstCategoryId = 10;

  /// Events to generate; 0: unbounded.
  uint64_t maxEvents = 100'000;
  /// Seeds every event's PRNG and the string tables.
  uint64_t seed = 0;
  /// Events per second of event time (nexmark's first-event.rate): the inter-event delay
  /// is 1e6 / rate µs.
  double firstEventRate = 10'000;
  /// Epoch millis of event number 0.
  int64_t baseTime = kDefaultBaseTime;
  int64_t firstEventId = 1;
  int64_t firstEventNumber = 1;
  int numEventGenerators = 1;
  int64_t personProportion = 1, auctionProportion = 3, bidProportion = 46;
  int avgPersonByteSize = 200, avgAuctionByteSize = 500, avgBidByteSize = 100;
  int hotAuctionRatio = 2, hotSellersRatio = 4, hotBiddersRatio = 4;
  int numInFlightAuctions = 100, numActivePeople = 1000;
  /// 1: events in timestamp order (nexmark-flink's default).
  int64_t outOfOrderGroupSize = 1;

  int64_t totalProportion() const { return personProportion + auctionProportion + bidProportion; }
  double interEventDelayUs() const { return 1'000'000.0 / firstEventRate * numEventGenerators; }
  int64_t nextEventNumber(uint64_t numEvents) const { return firstEventNumber + static_cast<int64_t>(numEvents); }
  int64_t nextAdjustedEventNumber(uint64_t numEvents) const {
    const int64_t n = outOfOrderGroupSize;
    const int64_t eventNumber = nextEventNumber(numEvents);
    return (eventNumber / n) * n + (eventNumber * 953) % n;
  }
  /// Java: baseTime + (long)(eventNumber * interEventDelayUs) / 1000L.
  int64_t timestampForEvent(int64_t eventNumber) const {
    return baseTime + static_cast<int64_t>(static_cast<double>(eventNumber) * interEventDelayUs()) / 1000;
  }
  /// The event-time timestamp of the event generated after `numEvents` others.
  int64_t timestampOfEvent(uint64_t numEvents) const { return timestampForEvent(nextAdjustedEventNumber(numEvents)); }

  int64_t lastBase0PersonId(int64_t eventId) const {
    int64_t epoch = eventId / totalProportion();
    int64_t offset = eventId % totalProportion();
    if (offset >= personProportion) offset = personProportion - 1;  // the last person of this epoch
    return epoch * personProportion + offset;
  }
  int64_t lastBase0AuctionId(int64_t eventId) const {
    int64_t epoch = eventId / totalProportion();
    int64_t offset = eventId % totalProportion();
    if (offset < personProportion) {  // a person: the last auction of the previous epoch
      --epoch;
      offset = auctionProportion - 1;
    } else if (offset >= personProportion + auctionProportion) {  // a bid: the last auction of this epoch
      offset = auctionProportion - 1;
    } else {
      offset -= personProportion;
    }
    return epoch * auctionProportion + offset;
  }
};

/// splitmix64 with Java's SplittableRandom interface (the draws nexmark-flink makes).
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t nextU64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, bound), bound > 0 (multiply-shift; the bias is below 2^-32).
  int32_t nextInt(int64_t bound) {
    return static_cast<int32_t>(((nextU64() >> 32) * static_cast<uint64_t>(bound)) >> 32);
  }
  /// Any int (Java's nextInt()).
  int32_t nextInt() { return static_cast<int32_t>(nextU64() >> 32); }
  double nextDouble() { return static_cast<double>(nextU64() >> 11) * 0x1.0p-53; }
  /// LongGenerator.nextLong: uniform in [0, n).
  int64_t nextLong(int64_t n) {
    if (n < 2147483647) return nextInt(n);
    return static_cast<int64_t>(nextU64() % static_cast<uint64_t>(n));
  }

 private:
  uint64_t state_;
};

/// The Nexmark event stream of a GeneratorConfig, one event after another.
class Generator {
 public:
  explicit Generator(GeneratorConfig config) : c_(config) { buildTables(); }

  const GeneratorConfig& config() const { return c_; }
  uint64_t eventsCountSoFar() const { return count_; }
  /// Continue after `n` events (a restored position).
  void setEventsCountSoFar(uint64_t n) { count_ = n; }
  bool hasNext() const { return c_.maxEvents == 0 || count_ < c_.maxEvents; }

  /// Writes the next event into `out` (its strings keep their capacity) and advances.
  void next(Event& out) {
    const int64_t timestamp = c_.timestampOfEvent(count_);
    const int64_t eventId = c_.firstEventId + c_.nextAdjustedEventNumber(count_);
    Random random(eventSeed(eventId));
    const int64_t rem = eventId % c_.totalProportion();
    if (rem < c_.personProportion) {
      out.type = EventType::kPerson;
      nextPerson(eventId, random, timestamp, out.person);
    } else if (rem < c_.personProportion + c_.auctionProportion) {
      out.type = EventType::kAuction;
      nextAuction(count_, eventId, random, timestamp, out.auction);
    } else {
      out.type = EventType::kBid;
      nextBid(eventId, random, timestamp, out.bid);
    }
    ++count_;
  }

 private:
  static constexpr int kPersonIdLead = 10;
  static constexpr int kAuctionIdLead = 10;
  static constexpr int kHotSellerRatio = 100;
  static constexpr int kHotAuctionRatio = 100;
  static constexpr int kHotBidderRatio = 100;
  static constexpr int kHotChannelsRatio = 2;
  static constexpr int kChannelsNumber = 10'000;
  static constexpr int kNumCategories = 5;
  static constexpr int kMinStringLength = 3;
  static constexpr size_t kReusableExtraLength = 1024 * 1024;

  uint64_t eventSeed(int64_t eventId) const {
    Random r(c_.seed ^ 0x6e65786d61726b00ULL);  // "nexmark\0"
    return r.nextU64() ^ (static_cast<uint64_t>(eventId) * 0xd1b54a32d192ed03ULL);
  }

  // --- PersonGenerator ---------------------------------------------------------------

  void nextPerson(int64_t eventId, Random& random, int64_t timestamp, Person& p) const {
    static constexpr std::string_view kStates[] = {"AZ", "CA", "ID", "OR", "WA", "WY"};
    static constexpr std::string_view kCities[] = {"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland",
                                                   "Bend",    "Redmond",     "Seattle",       "Kent",  "Cheyenne"};
    static constexpr std::string_view kFirstNames[] = {"Peter", "Paul",  "Luke",  "John",   "Saul",  "Vicky",
                                                       "Kate",  "Julie", "Sarah", "Deiter", "Walter"};
    static constexpr std::string_view kLastNames[] = {"Shultz", "Abrams", "Spencer", "White", "Bartels",
                                                      "Walton", "Smith",  "Jones",   "Noris"};
    p.id = c_.lastBase0PersonId(eventId) + GeneratorConfig::kFirstPersonId;
    p.name.assign(kFirstNames[random.nextInt(std::size(kFirstNames))]);
    p.name += ' ';
    p.name += kLastNames[random.nextInt(std::size(kLastNames))];
    nextString(random, 7, ' ', p.emailAddress);
    p.emailAddress += '@';
    appendString(random, 5, ' ', p.emailAddress);
    p.emailAddress += ".com";
    p.creditCard.clear();
    for (int i = 0; i < 4; ++i) {
      char digits[8];
      std::snprintf(digits, sizeof digits, i > 0 ? " %04d" : "%04d", random.nextInt(10'000));
      p.creditCard += digits;
    }
    p.city.assign(kCities[random.nextInt(std::size(kCities))]);
    p.state.assign(kStates[random.nextInt(std::size(kStates))]);
    const int currentSize = static_cast<int>(8 + p.name.size() + p.emailAddress.size() + p.creditCard.size() +
                                             p.city.size() + p.state.size());
    nextExtra(random, currentSize, c_.avgPersonByteSize, p.extra);
    p.dateTime = timestamp;
  }

  int64_t nextBase0PersonId(int64_t eventId, Random& random) const {
    // A person among the active ones, plus a few not created yet ("leads").
    const int64_t numPeople = c_.lastBase0PersonId(eventId) + 1;
    const int64_t activePeople = std::min<int64_t>(numPeople, c_.numActivePeople);
    const int64_t n = random.nextLong(activePeople + kPersonIdLead);
    return numPeople - activePeople + n;
  }

  // --- AuctionGenerator --------------------------------------------------------------

  void nextAuction(uint64_t eventsCountSoFar, int64_t eventId, Random& random, int64_t timestamp, Auction& a) const {
    a.id = c_.lastBase0AuctionId(eventId) + GeneratorConfig::kFirstAuctionId;
    int64_t seller;
    if (random.nextInt(c_.hotSellersRatio) > 0) {
      // The first person of the batch of the last kHotSellerRatio people.
      seller = (c_.lastBase0PersonId(eventId) / kHotSellerRatio) * kHotSellerRatio;
    } else {
      seller = nextBase0PersonId(eventId, random);
    }
    a.seller = seller + GeneratorConfig::kFirstPersonId;
    a.category = GeneratorConfig::kFirstCategoryId + random.nextInt(kNumCategories);
    a.initialBid = nextPrice(random);
    a.expires = timestamp + nextAuctionLengthMs(eventsCountSoFar, random, timestamp);
    nextString(random, 20, ' ', a.itemName);
    nextString(random, 100, ' ', a.description);
    a.reserve = a.initialBid + nextPrice(random);
    const int currentSize = static_cast<int>(8 + a.itemName.size() + a.description.size() + 8 + 8 + 8 + 8 + 8);
    nextExtra(random, currentSize, c_.avgAuctionByteSize, a.extra);
    a.dateTime = timestamp;
  }

  int64_t nextBase0AuctionId(int64_t eventId, Random& random) const {
    // An auction likely still in flight, plus a few not created yet.
    const int64_t maxAuction = c_.lastBase0AuctionId(eventId);
    const int64_t minAuction = std::max<int64_t>(maxAuction - c_.numInFlightAuctions, 0);
    return minAuction + random.nextLong(maxAuction - minAuction + 1 + kAuctionIdLead);
  }

  int64_t nextAuctionLengthMs(uint64_t eventsCountSoFar, Random& random, int64_t timestamp) const {
    // When will the auction numInFlightAuctions after this one be generated? Its distance
    // is the average auction length.
    const int64_t currentEventNumber = c_.nextAdjustedEventNumber(eventsCountSoFar);
    const int64_t numEventsForAuctions =
        (static_cast<int64_t>(c_.numInFlightAuctions) * c_.totalProportion()) / c_.auctionProportion;
    const int64_t futureAuction = c_.timestampForEvent(currentEventNumber + numEventsForAuctions);
    const int64_t horizonMs = futureAuction - timestamp;
    return 1 + random.nextLong(std::max<int64_t>(horizonMs * 2, 1));
  }

  // --- BidGenerator ------------------------------------------------------------------

  void nextBid(int64_t eventId, Random& random, int64_t timestamp, Bid& b) const {
    int64_t auction;
    if (random.nextInt(c_.hotAuctionRatio) > 0) {
      // The first auction of the batch of the last kHotAuctionRatio auctions.
      auction = (c_.lastBase0AuctionId(eventId) / kHotAuctionRatio) * kHotAuctionRatio;
    } else {
      auction = nextBase0AuctionId(eventId, random);
    }
    b.auction = auction + GeneratorConfig::kFirstAuctionId;
    int64_t bidder;
    if (random.nextInt(c_.hotBiddersRatio) > 0) {
      // The second person of the batch of the last kHotBidderRatio people (hot bidders and
      // hot sellers do not collide).
      bidder = (c_.lastBase0PersonId(eventId) / kHotBidderRatio) * kHotBidderRatio + 1;
    } else {
      bidder = nextBase0PersonId(eventId, random);
    }
    // nexmark-flink's BidGenerator.nextBid adds FIRST_PERSON_ID twice (once here, once
    // after the channel); kept, so bidder ids are nexmark-flink's (Arroyo adds it once).
    b.bidder = bidder + 2 * GeneratorConfig::kFirstPersonId;
    b.price = nextPrice(random);
    if (random.nextInt(kHotChannelsRatio) > 0) {
      const int i = random.nextInt(static_cast<int64_t>(std::size(hotUrls_)));
      b.channel.assign(kHotChannels[i]);
      b.url.assign(hotUrls_[i]);
    } else {
      const auto& cu = channelUrls_[static_cast<size_t>(random.nextInt(kChannelsNumber))];
      b.channel.assign(cu.first);
      b.url.assign(cu.second);
    }
    nextExtra(random, 8 + 8 + 8 + 8, c_.avgBidByteSize, b.extra);
    b.dateTime = timestamp;
  }

  // --- PriceGenerator, StringsGenerator ------------------------------------------------

  static int64_t nextPrice(Random& random) {
    return static_cast<int64_t>(std::floor(std::pow(10.0, random.nextDouble() * 6.0) * 100.0 + 0.5));  // Math.round
  }

  /// A random string of 3 to maxLength-1 characters, trimmed of spaces at its ends.
  static void appendString(Random& random, int maxLength, char special, std::string& out) {
    const size_t start = out.size();
    int len = kMinStringLength + random.nextInt(maxLength - kMinStringLength);
    while (len-- > 0) out += random.nextInt(13) == 0 ? special : static_cast<char>('a' + random.nextInt(26));
    // String.trim(): leading and trailing characters <= ' ' (only `special` can be one).
    size_t end = out.size();
    while (end > start && static_cast<unsigned char>(out[end - 1]) <= ' ') --end;
    out.resize(end);
    size_t first = start;
    while (first < out.size() && static_cast<unsigned char>(out[first]) <= ' ') ++first;
    out.erase(start, first - start);
  }
  static void nextString(Random& random, int maxLength, char special, std::string& out) {
    out.clear();
    appendString(random, maxLength, special, out);
  }

  /// Exactly `length` characters: a random slice of the reusable string when it is short
  /// enough, else generated (nexmark-flink's nextExactString, Java's signed % and / kept).
  void nextExactString(Random& random, int length, std::string& out) const {
    if (!reusableExtra_.empty() && static_cast<size_t>(length) < reusableExtra_.size() / 2) {
      const int offset = random.nextInt(static_cast<int64_t>(reusableExtra_.size()) - length);
      out.assign(reusableExtra_, static_cast<size_t>(offset), static_cast<size_t>(length));
      return;
    }
    exactString(random, length, out);
  }
  static void exactString(Random& random, int length, std::string& out) {
    out.clear();
    out.reserve(static_cast<size_t>(length));
    int32_t rnd = 0;
    int n = 0;  // random characters left in rnd
    while (length-- > 0) {
      if (n == 0) {
        rnd = random.nextInt();
        n = 6;  // log_26(2^31)
      }
      out += static_cast<char>('a' + rnd % 26);
      rnd /= 26;
      --n;
    }
  }

  /// Padding such that currentSize + its length is desiredAverageSize on average (±20 %).
  void nextExtra(Random& random, int currentSize, int desiredAverageSize, std::string& out) const {
    if (currentSize > desiredAverageSize) {
      out.clear();
      return;
    }
    desiredAverageSize -= currentSize;
    const int delta = static_cast<int>(std::floor(desiredAverageSize * 0.2 + 0.5));  // Math.round
    const int minSize = desiredAverageSize - delta;
    const int desiredSize = minSize + (delta == 0 ? 0 : random.nextInt(2 * delta));
    nextExactString(random, desiredSize, out);
  }

  static std::string baseUrl(Random& random) {
    std::string url = "https://www.nexmark.com/";
    appendString(random, 5, '_', url);
    url += '/';
    appendString(random, 5, '_', url);
    url += '/';
    appendString(random, 5, '_', url);
    url += "/item.htm?query=1";
    return url;
  }

  /// The tables nexmark-flink fills at class load, from `seed` here.
  void buildTables() {
    Random tables(c_.seed ^ 0x7461626c65730000ULL);  // "tables"
    exactString(tables, static_cast<int>(kReusableExtraLength), reusableExtra_);
    for (auto& u : hotUrls_) u = baseUrl(tables);
    channelUrls_.reserve(kChannelsNumber);
    for (int i = 0; i < kChannelsNumber; ++i) {
      std::string url = baseUrl(tables);
      if (tables.nextInt(10) > 0) {
        // Math.abs(Integer.reverse(i)); abs(INT_MIN) stays INT_MIN in Java.
        uint32_t v = static_cast<uint32_t>(i), r = 0;
        for (int bit = 0; bit < 32; ++bit) r |= ((v >> bit) & 1u) << (31 - bit);
        int64_t reversed = static_cast<int32_t>(r);
        if (reversed < 0 && reversed != INT32_MIN) reversed = -reversed;
        url += "&channel_id=" + std::to_string(reversed);
      }
      channelUrls_.emplace_back("channel-" + std::to_string(i), std::move(url));
    }
  }

  static constexpr std::string_view kHotChannels[] = {"Google", "Facebook", "Baidu", "Apple"};

  GeneratorConfig c_;
  uint64_t count_ = 0;
  std::string reusableExtra_;
  std::string hotUrls_[4];
  std::vector<std::pair<std::string, std::string>> channelUrls_;
};

}  // namespace nexmark
