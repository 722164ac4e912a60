// Unit tests for the header-only SDK: serializers (serializer.h), record text (format.h),
// job arguments and plan building (stream.h), and declared keyed state (state.h).
//
// Plan tests build plans only; nothing here runs a job.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "jobhost/errors.h"
#include "jobhost/format.h"
#include "jobhost/serializer.h"
#include "jobhost/serializer_text.h"
#include "jobhost/state.h"
#include "jobhost/stream.h"

namespace jobhost {
namespace {

namespace fs = std::filesystem;

using WordCountRecord = std::pair<std::string, int64_t>;

template <class T>
std::string encode(const T& v) {
  std::string out;
  serializeInto(out, v);
  return out;
}

// Asserts that `v` survives encode/decode, and that every strict prefix of its encoding is
// rejected with SerializationError (the encodings are self-delimiting, so a prefix can
// never decode as a complete value).
template <class T>
void expectRoundTrip(const T& v) {
  SCOPED_TRACE("type " + Serializer<T>::id());
  const std::string bytes = encode(v);
  EXPECT_EQ(deserialize<T>(bytes), v);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(deserialize<T>(std::string_view(bytes).substr(0, n)), SerializationError)
        << "prefix of " << n << " of " << bytes.size() << " bytes";
  }
}

// ---------------------------------------------------------------------------------------
// Serializer: round trips

TEST(SerializerTest, IntegersRoundTripAtTheirLimits) {
  expectRoundTrip<int8_t>(std::numeric_limits<int8_t>::min());
  expectRoundTrip<int8_t>(std::numeric_limits<int8_t>::max());
  expectRoundTrip<int16_t>(-12345);
  expectRoundTrip<int32_t>(std::numeric_limits<int32_t>::min());
  expectRoundTrip<int64_t>(std::numeric_limits<int64_t>::min());
  expectRoundTrip<int64_t>(std::numeric_limits<int64_t>::max());
  expectRoundTrip<long long>(-7);
  expectRoundTrip<uint8_t>(255);
  expectRoundTrip<uint16_t>(65535);
  expectRoundTrip<uint32_t>(0xdeadbeefu);
  expectRoundTrip<uint64_t>(std::numeric_limits<uint64_t>::max());
}

TEST(SerializerTest, IntegersAreEncodedLittleEndianWithFixedWidth) {
  EXPECT_EQ(encode<int32_t>(0x01020304), std::string("\x04\x03\x02\x01", 4));
  EXPECT_EQ(encode<int64_t>(1).size(), 8u);
  EXPECT_EQ(encode<uint16_t>(0xabcd), std::string("\xcd\xab", 2));
}

// Pairs and tuples of integers are copied field by field in place (serializeInto's and
// deserialize's fast path); the bytes must stay the ones Serializer<T>::write() writes, and
// a wrong length must still be the reader's error.
template <class T>
void expectSameAsTheSerializer(const T& v) {
  SCOPED_TRACE("type " + Serializer<T>::id());
  std::string viaWriter;
  ByteWriter w(viaWriter);
  Serializer<T>::write(w, v);
  EXPECT_EQ(encode(v), viaWriter);
  expectRoundTrip(v);
  EXPECT_THROW(deserialize<T>(viaWriter + "x"), SerializationError);
  std::string reused = "previous contents, longer than the value";
  serializeInto(reused, v);
  EXPECT_EQ(reused, viaWriter);
}

TEST(SerializerTest, PairsAndTuplesOfIntegersAreTheBytesTheSerializerWrites) {
  expectSameAsTheSerializer(std::pair<int64_t, int32_t>{-2, 0x01020304});
  expectSameAsTheSerializer(std::tuple<int64_t, int64_t, int64_t, int64_t>{1, -1, std::numeric_limits<int64_t>::min(),
                                                                          std::numeric_limits<int64_t>::max()});
  expectSameAsTheSerializer(std::tuple<uint8_t, int16_t, uint64_t>{255, -300, 0xdeadbeefcafef00dULL});
  expectSameAsTheSerializer(std::tuple<int32_t>{7});
  // Not all integers: the general path, same encoding rules.
  expectSameAsTheSerializer(std::pair<int64_t, bool>{5, true});
  EXPECT_EQ(encode(std::pair<int32_t, int16_t>{0x01020304, 0x0506}), std::string("\x04\x03\x02\x01\x06\x05", 6));
}

}  // namespace
}  // namespace jobhost

// A job's own Serializer for a pair of integers (big-endian, as for RocksDB's key order).
template <>
struct jobhost::Serializer<std::pair<int32_t, int32_t>> {
  static std::string id() { return "be-pair"; }
  static uint32_t version() { return 1; }
  static void write(ByteWriter& w, const std::pair<int32_t, int32_t>& v) {
    for (int32_t x : {v.first, v.second})
      for (int shift = 24; shift >= 0; shift -= 8) w.writeU8(static_cast<uint8_t>(static_cast<uint32_t>(x) >> shift));
  }
  static std::pair<int32_t, int32_t> read(ByteReader& r) {
    int32_t out[2];
    for (int32_t& x : out) {
      uint32_t v = 0;
      for (int i = 0; i < 4; ++i) v = (v << 8) | r.readU8();
      x = static_cast<int32_t>(v);
    }
    return {out[0], out[1]};
  }
};
namespace jobhost {
namespace {

// serializeInto()/deserialize() copy the bytes of the SDK's own pair and tuple
// Serializers only: a job's own specialization is called.
TEST(SerializerTest, AJobsOwnSerializerForAPairOfIntegersIsCalled) {
  const std::pair<int32_t, int32_t> v{1, 0x01020304};
  EXPECT_EQ(encode(v), std::string("\x00\x00\x00\x01\x01\x02\x03\x04", 8));
  const auto back = deserialize<std::pair<int32_t, int32_t>>(encode(v));
  EXPECT_EQ(back, v);
}

TEST(SerializerTest, BoolCharAndFloatingPointRoundTrip) {
  expectRoundTrip(true);
  expectRoundTrip(false);
  expectRoundTrip('x');
  expectRoundTrip('\0');
  expectRoundTrip(3.25f);
  expectRoundTrip(-0.0);
  expectRoundTrip(std::numeric_limits<double>::infinity());
  expectRoundTrip(std::numeric_limits<double>::denorm_min());
  // -0.0 == 0.0, so check the sign bit survives too.
  EXPECT_TRUE(std::signbit(deserialize<double>(encode(-0.0))));
}

TEST(SerializerTest, StringsRoundTripIncludingEmptyBinaryAndLong) {
  expectRoundTrip(std::string());
  expectRoundTrip(std::string("hello"));
  expectRoundTrip(std::string("a\0b\xff", 4));
  expectRoundTrip(std::string(300, 'z'));  // a two-byte varint length
  EXPECT_EQ(encode(std::string("hi")), std::string("\x02hi", 3));
  EXPECT_EQ(encode(std::string(300, 'z')).substr(0, 2), std::string("\xac\x02", 2));
}

TEST(SerializerTest, ContainersRoundTrip) {
  expectRoundTrip(std::vector<int32_t>{});
  expectRoundTrip(std::vector<int32_t>{1, -2, 3});
  expectRoundTrip(std::vector<std::string>{"", "a", "bc"});
  expectRoundTrip(WordCountRecord{"hello", 3});
  expectRoundTrip(std::tuple<int32_t, std::string, bool>{7, "seven", true});
  expectRoundTrip(std::tuple<>{});
  expectRoundTrip(std::map<std::string, int64_t>{});
  expectRoundTrip(std::map<std::string, int64_t>{{"a", 1}, {"b", -2}, {"c", 3}});
  expectRoundTrip(std::optional<std::string>{});
  expectRoundTrip(std::optional<std::string>{"present"});
  expectRoundTrip(std::optional<std::string>{""});
}

TEST(SerializerTest, NestedContainersRoundTrip) {
  expectRoundTrip(std::vector<WordCountRecord>{{"to", 2}, {"be", 2}, {"or", 1}, {"", 0}});
  expectRoundTrip(std::map<std::string, std::vector<std::optional<int64_t>>>{
      {"k1", {1, std::nullopt, 3}}, {"k2", {}}});
  expectRoundTrip(std::tuple<WordCountRecord, std::vector<double>, std::optional<bool>>{
      {"x", -1}, {0.5, 1.5}, false});
  expectRoundTrip(std::optional<std::vector<std::pair<int32_t, std::string>>>{{{1, "one"}, {2, "two"}}});
}

// ---------------------------------------------------------------------------------------
// Serializer: ids and versions (recorded in checkpoint metadata, so they are a contract)

struct IdCase {
  std::string actual;
  std::string expected;
};

TEST(SerializerTest, IdsNameEveryBuiltInType) {
  const std::vector<IdCase> cases = {
      {Serializer<int8_t>::id(), "i8"},
      {Serializer<int16_t>::id(), "i16"},
      {Serializer<int32_t>::id(), "i32"},
      {Serializer<int64_t>::id(), "i64"},
      {Serializer<long long>::id(), "i64"},
      {Serializer<uint8_t>::id(), "u8"},
      {Serializer<uint16_t>::id(), "u16"},
      {Serializer<uint32_t>::id(), "u32"},
      {Serializer<uint64_t>::id(), "u64"},
      {Serializer<bool>::id(), "bool"},
      {Serializer<char>::id(), "char"},
      {Serializer<float>::id(), "f32"},
      {Serializer<double>::id(), "f64"},
      {Serializer<std::string>::id(), "string"},
      {Serializer<std::vector<int32_t>>::id(), "vector<i32>"},
      {Serializer<WordCountRecord>::id(), "pair<string,i64>"},
      {Serializer<std::tuple<int32_t, std::string, bool>>::id(), "tuple<i32,string,bool>"},
      {Serializer<std::tuple<>>::id(), "tuple<>"},
      {Serializer<std::map<std::string, int64_t>>::id(), "map<string,i64>"},
      {Serializer<std::optional<std::string>>::id(), "optional<string>"},
      {Serializer<std::vector<WordCountRecord>>::id(), "vector<pair<string,i64>>"},
  };
  for (const auto& c : cases) EXPECT_EQ(c.actual, c.expected);
}

struct VersionCase {
  std::string what;
  uint32_t actual;
  uint32_t expected;
};

TEST(SerializerTest, VersionsCombineTheElementVersions) {
  const std::vector<VersionCase> cases = {
      {"i64", Serializer<int64_t>::version(), 1},
      {"string", Serializer<std::string>::version(), 1},
      {"vector<i32>", Serializer<std::vector<int32_t>>::version(), 1},
      {"pair<string,i64>", Serializer<WordCountRecord>::version(), 1001},
      {"map<string,i64>", Serializer<std::map<std::string, int64_t>>::version(), 1001},
      {"tuple<i32,string,bool>", Serializer<std::tuple<int32_t, std::string, bool>>::version(),
       (1 * 31 + 1) * 31 + 1},
      {"optional<string>", Serializer<std::optional<std::string>>::version(), 1},
      {"vector<pair<string,i64>>", Serializer<std::vector<WordCountRecord>>::version(), 1001},
  };
  for (const auto& c : cases) EXPECT_EQ(c.actual, c.expected) << c.what;
}

// ---------------------------------------------------------------------------------------
// Serializer: bad input

TEST(SerializerTest, TruncatedInputThrowsSerializationErrorNamingTheShortfall) {
  std::string bytes = encode(WordCountRecord{"hello", 3});
  bytes.resize(bytes.size() - 1);
  try {
    deserialize<WordCountRecord>(bytes);
    FAIL() << "expected SerializationError";
  } catch (const SerializationError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

TEST(SerializerTest, IntegersOfTheWrongWidthAreRejectedAndTheRightWidthRoundTrips) {
  // Integers take a copy of their bytes on the way in and out (no reader): every width
  // still round-trips, and a value of another width is an error, not a partial read.
  std::string out;
  serializeInto(out, std::string("longer than an int"));  // the buffer held something else before
  serializeInto(out, int64_t{-2});
  EXPECT_EQ(out, std::string("\xfe\xff\xff\xff\xff\xff\xff\xff", 8));
  EXPECT_EQ(deserialize<int64_t>(out), -2);
  serializeInto(out, uint16_t{0x1234});
  EXPECT_EQ(out, std::string("\x34\x12", 2));
  EXPECT_EQ(deserialize<uint16_t>(out), 0x1234);
  serializeInto(out, int32_t{7});
  EXPECT_EQ(deserialize<int32_t>(out), 7);
  EXPECT_THROW(deserialize<int64_t>(std::string(7, '\0')), SerializationError);  // short
  EXPECT_THROW(deserialize<int64_t>(std::string(9, '\0')), SerializationError);  // trailing byte
  EXPECT_THROW(deserialize<int32_t>(std::string()), SerializationError);
}

TEST(SerializerTest, TrailingBytesAreRejectedNamingTheType) {
  std::string bytes = encode(WordCountRecord{"hello", 3}) + "x";
  try {
    deserialize<WordCountRecord>(bytes);
    FAIL() << "expected SerializationError";
  } catch (const SerializationError& e) {
    EXPECT_NE(std::string(e.what()).find("pair<string,i64>"), std::string::npos) << e.what();
  }
}

// A varint claiming 2^62 elements / bytes, followed by a few real bytes.
std::string hugeLengthPrefix() {
  std::string out;
  ByteWriter w(out);
  w.writeVarint(uint64_t{1} << 62);
  w.writeRaw("abcdefgh", 8);
  return out;
}

TEST(SerializerTest, ACorruptHugeLengthThrowsInsteadOfAllocating) {
  const std::string bytes = hugeLengthPrefix();
  EXPECT_THROW(deserialize<std::string>(bytes), SerializationError);
  EXPECT_THROW(deserialize<std::vector<int64_t>>(bytes), SerializationError);
  EXPECT_THROW(deserialize<std::vector<std::string>>(bytes), SerializationError);
  EXPECT_THROW((deserialize<std::map<std::string, int64_t>>(bytes)), SerializationError);
  EXPECT_THROW(deserialize<std::vector<WordCountRecord>>(bytes), SerializationError);
}

TEST(SerializerTest, CheckedLengthMessageNamesTheLengthAndWhatIsLeft) {
  std::string bytes;
  ByteWriter w(bytes);
  w.writeVarint(1000);
  w.writeRaw("abc", 3);
  try {
    deserialize<std::string>(bytes);
    FAIL() << "expected SerializationError";
  } catch (const SerializationError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("1000"), std::string::npos) << msg;
    EXPECT_NE(msg.find("3 bytes left"), std::string::npos) << msg;
  }
}

TEST(SerializerTest, AnOverlongVarintIsMalformed) {
  const std::string bytes(11, '\xff');
  try {
    ByteReader r(bytes);
    r.readVarint();
    FAIL() << "expected SerializationError";
  } catch (const SerializationError& e) {
    EXPECT_NE(std::string(e.what()).find("malformed varint"), std::string::npos) << e.what();
  }
}

TEST(SerializerTest, VarintsRoundTripAcrossByteBoundaries) {
  for (uint64_t v : {uint64_t{0}, uint64_t{127}, uint64_t{128}, uint64_t{16383}, uint64_t{16384},
                     uint64_t{1} << 35, std::numeric_limits<uint64_t>::max()}) {
    std::string bytes;
    ByteWriter w(bytes);
    w.writeVarint(v);
    ByteReader r(bytes);
    EXPECT_EQ(r.readVarint(), v);
    EXPECT_TRUE(r.atEnd()) << v;
  }
}

// ---------------------------------------------------------------------------------------
// format.h

struct TextCase {
  std::string actual;
  std::string expected;
};

TEST(FormatTest, RecordsPrintAsFlinkPrintsScalaValues) {
  const std::vector<TextCase> cases = {
      {toText(WordCountRecord{"hello", 3}), "(hello,3)"},
      {toText(std::tuple<int32_t, std::string, bool>{1, "a", true}), "(1,a,true)"},
      {toText(std::tuple<>{}), "()"},
      {toText(std::vector<int32_t>{1, 2}), "[1, 2]"},
      {toText(std::vector<int32_t>{}), "[]"},
      {toText(std::map<std::string, int64_t>{{"a", 1}, {"b", 2}}), "{a=1, b=2}"},
      {toText(std::map<std::string, int64_t>{}), "{}"},
      {toText(std::optional<int64_t>{}), "null"},
      {toText(std::optional<int64_t>{5}), "5"},
      {toText(std::vector<WordCountRecord>{{"a", 1}, {"b", 2}}), "[(a,1), (b,2)]"},
      {toText(std::string("plain")), "plain"},
      {toText(false), "false"},
      {toText(int8_t{-5}), "-5"},  // a number, not a character
      {toText(uint8_t{200}), "200"},
      {toText('c'), "c"},
      {toText(2.5), "2.5"},
  };
  for (const auto& c : cases) EXPECT_EQ(c.actual, c.expected);
}

// ---------------------------------------------------------------------------------------
// JobArgs

struct GetCase {
  std::vector<std::string> args;
  std::optional<std::string> expected;
};

TEST(JobArgsTest, GetReadsSpaceAndEqualsFormsAndNothingElse) {
  const std::vector<GetCase> cases = {
      {{"--input", "in.txt"}, "in.txt"},
      {{"--input=in.txt"}, "in.txt"},
      {{"--input="}, ""},
      {{"--rate", "5", "--input", "a=b"}, "a=b"},
      {{"--input=x=y"}, "x=y"},
      {{}, std::nullopt},
      {{"--inputs=x"}, std::nullopt},
      {{"--in", "x"}, std::nullopt},
      {{"input", "x"}, std::nullopt},
  };
  for (const auto& c : cases) {
    JobArgs a(c.args);
    EXPECT_EQ(a.get("--input"), c.expected) << ::testing::PrintToString(c.args);
  }
}

TEST(JobArgsTest, GetWithFallbackUsesTheFallbackOnlyWhenAbsent) {
  EXPECT_EQ(JobArgs().get("--host", "localhost"), "localhost");
  EXPECT_EQ(JobArgs({"--host", "example.org"}).get("--host", "localhost"), "example.org");
}

TEST(JobArgsTest, AFlagWithoutAValueThrowsNamingTheOption) {
  JobArgs a({"--rate", "3", "--input"});
  try {
    a.get("--input");
    FAIL() << "expected JobArgumentError";
  } catch (const JobArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("--input"), std::string::npos) << e.what();
  }
}

struct IntCase {
  std::vector<std::string> args;
  int64_t expected;
};

TEST(JobArgsTest, GetIntParsesIntegersAndFallsBack) {
  const std::vector<IntCase> cases = {
      {{"--port", "9999"}, 9999},
      {{"--port=-1"}, -1},
      {{"--port", "9223372036854775807"}, std::numeric_limits<int64_t>::max()},
      {{}, 42},
  };
  for (const auto& c : cases)
    EXPECT_EQ(JobArgs(c.args).getInt("--port", 42), c.expected) << ::testing::PrintToString(c.args);
}

TEST(JobArgsTest, GetIntRejectsNonIntegersNamingTheOptionAndTheValue) {
  for (const std::string bad : {"abc", "12x", "1.5", "", "99999999999999999999"}) {
    JobArgs a({"--port=" + bad});
    try {
      a.getInt("--port", 0);
      ADD_FAILURE() << "expected JobArgumentError for '" << bad << "'";
    } catch (const JobArgumentError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("--port"), std::string::npos) << msg;
      EXPECT_NE(msg.find("'" + bad + "'"), std::string::npos) << msg;
    }
  }
}

TEST(JobArgsTest, HasMatchesWholeArgumentsOnly) {
  JobArgs a({"--verbose", "--level=3"});
  EXPECT_TRUE(a.has("--verbose"));
  EXPECT_FALSE(a.has("--verb"));
  EXPECT_FALSE(a.has("--level"));
  EXPECT_EQ(a.all().size(), 2u);
}

struct UnreadCase {
  std::vector<std::string> args;
  std::vector<std::string> expected;  // a piece of each sentence, in order
};

/// What WordCount's build() asks (words.h, output.h): --input, and only without it
/// --host/--port; --output; the flag --throttle.
std::vector<JobArgs::Unread> unreadAfterWordCountReads(const std::vector<std::string>& args) {
  JobArgs a(args);
  JobArgs copy = a;  // a copy shares what was asked
  if (auto input = copy.get("--input")) {
    copy.getInt("--rate", 0);
  } else {
    copy.get("--host", "localhost");
    copy.getInt("--port", 9999);
  }
  copy.get("--output");
  copy.has("--throttle");
  copy.getAll("--property");
  return a.unread("WordCount");
}

TEST(JobArgsTest, UnreadNamesEveryArgumentTheJobDidNotAskForAndOnlyThose) {
  const std::vector<UnreadCase> cases = {
      {{"--input", "in.txt", "--rate=5", "--output", "out", "--throttle"}, {}},
      {{}, {}},
      {{"--property", "a=1", "--property=b=2", "--input=x"}, {}},
      {{"--inpt", "words.txt"},
       {"--inpt words.txt is not read by WordCount: it has no effect (did you mean --input?); WordCount asked for "
        "--input, --host, --port, --output, --throttle, --property"}},
      {{"--input", "x", "--port", "5"}, {"--port 5 is not read by WordCount"}},
      {{"words.txt"}, {"'words.txt' is not read by WordCount: it takes no positional arguments"}},
      {{"--input", "a", "--input=b"}, {"--input is given more than once: WordCount reads only the first, so 'b'"}},
      {{"--input", "a", "--input", "b", "--output", "o"}, {"so 'b' has no effect"}},
      {{"--throttle=yes", "--input", "a"}, {"--throttle=yes has no effect: WordCount asks for --throttle as a flag"}},
      {{"--verbose", "--input", "a", "--zzzzzzzz=1"},
       {"--verbose is not read by WordCount: it has no effect; WordCount asked", "--zzzzzzzz=1 is not read"}},
  };
  for (const auto& c : cases) {
    auto got = unreadAfterWordCountReads(c.args);
    std::string all;
    for (const auto& u : got) all += "\n  " + u.message;
    ASSERT_EQ(got.size(), c.expected.size()) << ::testing::PrintToString(c.args) << " ->" << all;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NE(got[i].message.find(c.expected[i]), std::string::npos) << got[i].message << "\n  expected: " << c.expected[i];
    if (c.args == std::vector<std::string>{"--verbose", "--input", "a", "--zzzzzzzz=1"}) {
      EXPECT_EQ(got[0].message.find("did you mean"), std::string::npos) << got[0].message;
      EXPECT_EQ(got[0].option, "--verbose");
      EXPECT_EQ(got[1].option, "--zzzzzzzz");
    }
  }
}

TEST(JobArgsTest, AJobThatReadsTheRawListReadsEverything) {
  JobArgs a({"anything", "--at=all"});
  EXPECT_EQ(a.unread().size(), 2u);
  EXPECT_EQ(a.all().size(), 2u);
  EXPECT_TRUE(a.unread().empty());
}

// ---------------------------------------------------------------------------------------
// StreamEnvironment: plan building

class TempFile {
 public:
  TempFile() {
    path_ = (fs::temp_directory_path() /
             ("jobhost-sdk-test-" + std::to_string(::getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".txt"))
                .string();
    std::ofstream(path_) << "to be or not to be\n";
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void tokenize(const std::string& line, Collector<WordCountRecord>& out) {
  out.collect({line, 1});
}

// The plan of the example WordCount job.
void buildWordCount(StreamEnvironment& env, const std::string& input) {
  auto counts = env.readTextFile(input)
                    .flatMap<WordCountRecord>(tokenize)
                    .keyBy([](const WordCountRecord& r) { return r.first; })
                    .sum<1>();
  counts.uid("counts");
  counts.print();
}

TEST(StreamPlanTest, WordCountBuildsSourceFlatMapKeyByAggregationAndSinkInOrder) {
  TempFile input;
  StreamEnvironment env;
  buildWordCount(env, input.path());
  const auto& nodes = env.plan().nodes;
  ASSERT_EQ(nodes.size(), 5u);

  struct Expected {
    NodeKind kind;
    std::string name;
    std::string uid;
    bool uidExplicit;
    int input;
    bool keyed;
  };
  const std::vector<Expected> expected = {
      {NodeKind::kSource, "Text File Source", "auto-0-text-file-source", false, -1, false},
      {NodeKind::kOperator, "Flat Map", "auto-1-flat-map", false, 0, false},
      {NodeKind::kExchange, "Key By", "auto-2-key-by", false, 1, false},
      {NodeKind::kOperator, "Keyed Aggregation", "counts", true, 2, true},
      {NodeKind::kSink, "Print to Std. Out", "auto-4-print-to-std.-out", false, 3, false},
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    SCOPED_TRACE("node " + std::to_string(i));
    EXPECT_EQ(nodes[i].id, static_cast<int>(i));
    EXPECT_EQ(nodes[i].kind, expected[i].kind);
    EXPECT_EQ(nodes[i].name, expected[i].name);
    EXPECT_EQ(nodes[i].uid, expected[i].uid);
    EXPECT_EQ(nodes[i].uidExplicit, expected[i].uidExplicit);
    EXPECT_EQ(nodes[i].input, expected[i].input);
    EXPECT_EQ(nodes[i].keyed, expected[i].keyed);
    EXPECT_TRUE(static_cast<bool>(nodes[i].create));
  }
  EXPECT_EQ(nodes[2].keySerializer, "string");
  EXPECT_TRUE(static_cast<bool>(nodes[2].createSender));
}

TEST(StreamPlanTest, KeyedAggregationDeclaresItsReduceState) {
  TempFile input;
  StreamEnvironment env;
  buildWordCount(env, input.path());
  const auto& states = env.plan().nodes.at(3).states;
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].name, "reduce");
  EXPECT_EQ(states[0].kind, StateKind::kValue);
  EXPECT_EQ(states[0].keySerializer, "string");
  EXPECT_EQ(states[0].keySerializerVersion, 1u);
  EXPECT_EQ(states[0].userKeySerializer, "");
  EXPECT_EQ(states[0].valueSerializer, "pair<string,i64>");
  EXPECT_EQ(states[0].valueSerializerVersion, 1001u);
}

TEST(StreamPlanTest, TakePlanMovesTheNodesOut) {
  StreamEnvironment env;
  env.fromGenerator<int64_t>(3, [](uint64_t i) { return static_cast<int64_t>(i); }).print();
  Plan p = env.takePlan();
  ASSERT_EQ(p.nodes.size(), 2u);
  EXPECT_EQ(p.nodes[0].name, "Generator Source");
  EXPECT_EQ(p.nodes[0].uid, "auto-0-generator-source");
}

TEST(StreamPlanTest, NameChangesTheDisplayNameButNotTheDefaultUid) {
  StreamEnvironment env;
  auto s = env.fromGenerator<int64_t>(1, [](uint64_t i) { return static_cast<int64_t>(i); })
               .map([](int64_t v) { return v + 1; })
               .name("Increment");
  s.print();
  EXPECT_EQ(env.plan().nodes.at(1).name, "Increment");
  EXPECT_EQ(env.plan().nodes.at(1).uid, "auto-1-map");
}

TEST(StreamPlanTest, ADuplicateUidThrowsNamingTheUidAndBothOperators) {
  StreamEnvironment env;
  auto src = env.fromGenerator<int64_t>(1, [](uint64_t i) { return static_cast<int64_t>(i); });
  src.uid("same");
  auto mapped = src.map([](int64_t v) { return v; });
  try {
    mapped.uid("same");
    FAIL() << "expected JobArgumentError";
  } catch (const JobArgumentError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'same'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Generator Source"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Map"), std::string::npos) << msg;
  }
  // Setting the same uid again on the same operator is not a duplicate.
  EXPECT_NO_THROW(src.uid("same"));
}

TEST(StreamPlanTest, AnExplicitUidNeverCollidesWithALaterDefaultUid) {
  // A user pins the uid an old checkpoint shows ("auto-2-map") on the first map; the
  // second map is created at position 2 and would get the same default uid.
  StreamEnvironment env;
  auto first = env.fromGenerator<int64_t>(1, [](uint64_t i) { return static_cast<int64_t>(i); })
                   .map([](int64_t v) { return v; });
  first.uid("auto-2-map");
  try {
    first.map([](int64_t v) { return v; }).print();
  } catch (const JobArgumentError&) {
    return;  // refusing the plan is fine too
  }
  std::set<std::string> uids;
  for (const auto& n : env.plan().nodes)
    EXPECT_TRUE(uids.insert(n.uid).second) << "uid '" << n.uid << "' is used by two operators";
}

TEST(StreamPlanTest, AStreamConsumedSeveralTimesFeedsEveryReader) {
  // Fan-out (issue 33): reading one stream twice is no longer an error; the plan records
  // every reader and a fan-out factory for the output, typed by the SDK.
  StreamEnvironment env;
  auto src = env.fromGenerator<int64_t>(1, [](uint64_t i) { return static_cast<int64_t>(i); });
  src.map([](int64_t v) { return v; });
  src.filter([](int64_t) { return true; });
  src.print();
  const PlanNode& source = env.plan().nodes.at(0);
  int readers = 0;
  for (const PlanNode& n : env.plan().nodes)
    for (int in : n.inputs) readers += in == source.id ? 1 : 0;
  EXPECT_EQ(readers, 3);
  ASSERT_EQ(source.fanOut.count(""), 1u);
  // The factory's operator passes each record to every reader, in plan order.
  struct Sink : Collector<int64_t> {
    std::vector<int64_t> got;
    void collect(const int64_t& v) override { got.push_back(v); }
  } a, b;
  auto fan = source.fanOut.at("")({static_cast<Collector<int64_t>*>(&a), static_cast<Collector<int64_t>*>(&b)});
  static_cast<Collector<int64_t>*>(fan->input())->collect(7);
  EXPECT_EQ(a.got, std::vector<int64_t>{7});
  EXPECT_EQ(b.got, std::vector<int64_t>{7});
}

TEST(StreamPlanTest, ReadTextFileOfAMissingFileThrowsNamingTheFile) {
  StreamEnvironment env;
  const std::string missing = "/nonexistent-jobhost-dir/words-" + std::to_string(::getpid()) + ".txt";
  try {
    env.readTextFile(missing);
    FAIL() << "expected JobArgumentError";
  } catch (const JobArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  EXPECT_TRUE(env.plan().nodes.empty());
}

TEST(StreamPlanTest, SocketTextStreamRejectsPortsOutsideTheValidRange) {
  for (int port : {0, -1, 65536}) {
    StreamEnvironment env;
    try {
      env.socketTextStream("localhost", port);
      ADD_FAILURE() << "expected JobArgumentError for port " << port;
    } catch (const JobArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(port)), std::string::npos) << e.what();
    }
  }
  StreamEnvironment env;
  EXPECT_NO_THROW(env.socketTextStream("localhost", 65535));
  EXPECT_EQ(env.plan().nodes.at(0).name, "Socket Stream");
}

TEST(StreamPlanTest, ArgsAreHandedToTheJob) {
  StreamEnvironment env(JobArgs({"--input", "x.txt"}));
  EXPECT_EQ(env.args().get("--input"), "x.txt");
}

// ---------------------------------------------------------------------------------------
// state.h: states declared by a KeyedProcessFunction

class Tracker : public KeyedProcessFunction<std::string, WordCountRecord, std::string> {
 public:
  void processElement(const WordCountRecord& v, Context& ctx, Collector<std::string>& out) override {}

  ValueState<int64_t> count_{*this, "count"};
  ListState<std::string> seen_{*this, "seen"};
  MapState<std::string, double> scores_{*this, "scores"};
};

TEST(DeclaredStateTest, AFunctionListsItsStatesInDeclarationOrder) {
  Tracker t;
  ASSERT_EQ(t.declaredStates().size(), 3u);
  EXPECT_EQ(t.declaredStates()[0]->name(), "count");
  EXPECT_EQ(t.declaredStates()[1]->name(), "seen");
  EXPECT_EQ(t.declaredStates()[2]->name(), "scores");
}

TEST(DeclaredStateTest, ProcessRecordsNamesKindsAndSerializersInThePlan) {
  StreamEnvironment env;
  env.fromGenerator<WordCountRecord>(1, [](uint64_t i) { return WordCountRecord{"w", static_cast<int64_t>(i)}; })
      .keyBy([](const WordCountRecord& r) { return r.first; })
      .process<Tracker>()
      .uid("tracker")
      .print();
  const auto& node = env.plan().nodes.at(2);
  EXPECT_EQ(node.name, "Keyed Process");
  EXPECT_TRUE(node.keyed);
  EXPECT_EQ(node.uid, "tracker");
  // The declared states, then the two timer states every keyed process function has.
  ASSERT_EQ(node.states.size(), 5u);
  EXPECT_TRUE(node.timers);
  EXPECT_EQ(node.states[3].name, "_timer_state/event_user-timers");
  EXPECT_EQ(node.states[4].name, "_timer_state/processing_user-timers");
  for (size_t i : {3, 4}) {
    EXPECT_EQ(node.states[i].kind, StateKind::kMap);
    EXPECT_EQ(node.states[i].keySerializer, "string");
    EXPECT_EQ(node.states[i].userKeySerializer, "Timer");
  }

  struct Expected {
    std::string name;
    StateKind kind;
    std::string userKey;
    uint32_t userKeyVersion;
    std::string value;
    uint32_t valueVersion;
  };
  const std::vector<Expected> expected = {
      {"count", StateKind::kValue, "", 0, "i64", 1},
      {"seen", StateKind::kList, "", 0, "string", 1},
      {"scores", StateKind::kMap, "string", 1, "f64", 1},
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(expected[i].name);
    const auto& d = node.states[i];
    EXPECT_EQ(d.name, expected[i].name);
    EXPECT_EQ(d.kind, expected[i].kind);
    EXPECT_EQ(d.keySerializer, "string");  // the keyBy key type fills this in
    EXPECT_EQ(d.keySerializerVersion, 1u);
    EXPECT_EQ(d.userKeySerializer, expected[i].userKey);
    EXPECT_EQ(d.userKeySerializerVersion, expected[i].userKeyVersion);
    EXPECT_EQ(d.valueSerializer, expected[i].value);
    EXPECT_EQ(d.valueSerializerVersion, expected[i].valueVersion);
  }
}

TEST(DeclaredStateTest, DescriptorFillsInTheOperatorsKeySerializer) {
  Tracker t;
  StateDescriptorInfo d = t.declaredStates()[2]->descriptor("pair<string,i64>", 1001);
  EXPECT_EQ(d.keySerializer, "pair<string,i64>");
  EXPECT_EQ(d.keySerializerVersion, 1001u);
  EXPECT_EQ(d.userKeySerializer, "string");
}

TEST(DeclaredStateTest, UsingStateBeforeOpenThrowsStateErrorNamingTheState) {
  Tracker t;
  try {
    t.count_.value();
    FAIL() << "expected StateError";
  } catch (const StateError& e) {
    EXPECT_NE(std::string(e.what()).find("'count'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.seen_.add("x"), StateError);
  EXPECT_THROW(t.scores_.put("k", 1.0), StateError);
}

TEST(CallUserTest, ExceptionsFromUserCodeNameTheOperator) {
  try {
    callUser("Tokenizer", []() -> int { throw std::runtime_error("boom"); });
    FAIL() << "expected UserCodeError";
  } catch (const UserCodeError& e) {
    EXPECT_EQ(e.operatorName(), "Tokenizer");
    EXPECT_STREQ(e.what(), "boom");
  }
  EXPECT_EQ(callUser("op", [] { return 7; }), 7);
}

}  // namespace
}  // namespace jobhost

// Regression (review finding): a snapshot of a socket source has an empty position;
// restoring it into a file or generator source must start from the beginning, not throw.
TEST(SourceRegression, AnEmptyPositionRestoresAFileOrGeneratorSourceToTheStart) {
  jobhost::TextFileSource file("/dev/null", 0);
  EXPECT_NO_THROW(file.restorePosition(""));
  EXPECT_EQ(file.snapshotPosition(), std::string(8, '\0'));
  jobhost::GeneratorSource<int64_t> gen(10, [](uint64_t i) { return static_cast<int64_t>(i); }, 0);
  EXPECT_NO_THROW(gen.restorePosition(""));
  EXPECT_EQ(gen.snapshotPosition(), std::string(8, '\0'));
}

// ---------------------------------------------------------------------------------------
// serializer_text.h: decoding by serializer id prints what the print sink prints.

namespace jobhost {
namespace {

struct Celsius {
  double degrees = 0;
};
inline std::ostream& operator<<(std::ostream& os, const Celsius& c) { return os << c.degrees << "C"; }
struct Opaque {
  int64_t v = 0;
};
}  // namespace

template <>
struct Serializer<Celsius> {
  static std::string id() { return "test.Celsius"; }
  static uint32_t version() { return 3; }
  static void write(ByteWriter& w, const Celsius& c) { Serializer<double>::write(w, c.degrees); }
  static Celsius read(ByteReader& r) { return {Serializer<double>::read(r)}; }
};
template <>
struct Serializer<Opaque> {
  static std::string id() { return "test.Opaque"; }
  static uint32_t version() { return 1; }
  static void write(ByteWriter& w, const Opaque& o) { w.writeI64(o.v); }
  static Opaque read(ByteReader& r) { return {r.readI64()}; }
};

namespace {

template <class T>
std::optional<std::string> textById(const SerializerTextRegistry& reg, const T& v) {
  std::string bytes;
  serializeInto(bytes, v);
  return reg.toText(Serializer<T>::id(), Serializer<T>::version(), bytes);
}

TEST(SerializerTextTest, EveryBuiltInDecodesByIdAsThePrintSinkPrintsIt) {
  SerializerTextRegistry reg;
  auto same = [&](const auto& v) {
    auto t = textById(reg, v);
    ASSERT_TRUE(t.has_value()) << Serializer<std::decay_t<decltype(v)>>::id();
    EXPECT_EQ(*t, toText(v)) << Serializer<std::decay_t<decltype(v)>>::id();
  };
  same(int8_t{-8});
  same(uint16_t{65535});
  same(int32_t{-123456});
  same(int64_t{std::numeric_limits<int64_t>::min()});
  same(uint64_t{std::numeric_limits<uint64_t>::max()});
  same(true);
  same('x');
  same(1.5f);
  same(-2.25);
  same(std::string("with, comma"));
  same(std::vector<int32_t>{1, 2, 3});
  same(std::pair<std::string, int64_t>{"the", 12});
  same(std::tuple<int32_t, bool, std::string>{7, false, "t"});
  same(std::map<std::string, std::vector<double>>{{"a", {1.0, 2.5}}, {"b", {}}});
  same(std::optional<int64_t>{});
  same(std::optional<std::pair<int32_t, std::string>>{{1, "x"}});
  same(std::vector<std::map<int64_t, std::optional<std::string>>>{{{1, "one"}, {2, std::nullopt}}});
}

template <class T>
std::string jsonById(const SerializerTextRegistry& reg, const T& v) {
  std::string bytes;
  serializeInto(bytes, v);
  return reg.toJson(Serializer<T>::id(), Serializer<T>::version(), bytes).value_or("<not decoded>");
}

// Issue 34: `jobhost state dump --format json` printed every value as its text ("(a,3)"),
// so `jq '.value[1]'` could not read a count.
TEST(SerializerTextTest, EveryBuiltInDecodesToTypedJson) {
  SerializerTextRegistry reg;
  auto json = [&](const auto& v) { return jsonById(reg, v); };
  EXPECT_EQ(json(int8_t{-8}), "-8");
  EXPECT_EQ(json(uint16_t{65535}), "65535");
  EXPECT_EQ(json(std::numeric_limits<int64_t>::min()), "-9223372036854775808");
  EXPECT_EQ(json(std::numeric_limits<uint64_t>::max()), "18446744073709551615");  // exact, not a double
  EXPECT_EQ(json(true), "true");
  EXPECT_EQ(json('x'), R"("x")");
  EXPECT_EQ(json(1.5f), "1.5");
  EXPECT_EQ(json(0.1), "0.1");  // the shortest form that reads back the same double
  EXPECT_EQ(json(1.0), "1");
  EXPECT_EQ(json(-2.5e300), "-2.5e+300");
  EXPECT_EQ(json(std::numeric_limits<double>::quiet_NaN()), R"("NaN")");
  EXPECT_EQ(json(-std::numeric_limits<float>::infinity()), R"("-Infinity")");
  EXPECT_EQ(json(std::string("say \"hi\"\n\t\\ \x01")), R"("say \"hi\"\n\t\\ \u0001")");
  EXPECT_EQ(json(std::string("caf\xc3\xa9 \xff \xe2\x82")), "\"caf\xc3\xa9 \xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\"")
      << "valid UTF-8 kept, each byte of an invalid sequence U+FFFD";
  EXPECT_EQ(json(std::vector<int32_t>{1, 2, 3}), "[1,2,3]");
  EXPECT_EQ(json(std::vector<std::string>{}), "[]");
  EXPECT_EQ(json(std::pair<std::string, int64_t>{"a", 3}), R"(["a",3])");
  EXPECT_EQ(json(std::tuple<int32_t, bool, std::string>{7, false, "t"}), R"([7,false,"t"])");
  EXPECT_EQ(json(std::map<std::string, std::vector<double>>{{"a", {1.0, 2.5}}, {"b", {}}}), R"({"a":[1,2.5],"b":[]})");
  EXPECT_EQ(json(std::map<int64_t, std::optional<std::string>>{{-1, "minus"}, {2, std::nullopt}}),
            R"({"-1":"minus","2":null})");
  EXPECT_EQ(json(std::map<std::pair<std::string, int32_t>, bool>{{{"a", 1}, true}}), R"({"[\"a\",1]":true})");
  EXPECT_EQ(json(std::map<char, int32_t>{{'k', 1}}), R"({"k":1})");
  EXPECT_EQ(json(std::optional<int64_t>{}), "null");
  EXPECT_EQ(json(std::optional<std::pair<int32_t, std::string>>{{1, "x"}}), R"([1,"x"])");
  EXPECT_EQ(json(std::vector<std::map<int64_t, std::optional<std::string>>>{{{1, "one"}}, {}}), R"([{"1":"one"},{}])");
}

TEST(SerializerTextTest, AUserTypeIsItsTextFormInJsonAndNotGuessedWithoutIt) {
  using V = std::pair<std::string, std::vector<Celsius>>;
  V v{"room", {{20.5}, {-3}}};
  SerializerTextRegistry without;
  EXPECT_EQ(jsonById(without, v), "<not decoded>");
  std::vector<SerializerTextForm> forms;
  textFormsOf<V>(forms);
  SerializerTextRegistry with;
  with.addAll(forms);
  EXPECT_EQ(jsonById(with, v), R"(["room",["20.5C","-3C"]])");
  std::string bytes;
  serializeInto(bytes, std::pair<std::string, int64_t>{"a", 1});
  EXPECT_FALSE(with.toJson("pair<string,i64>", 1002, bytes).has_value());
  EXPECT_THROW(with.toJson("pair<string,i64>", 1001, bytes + "x"), SerializationError);
}

TEST(SerializerTextTest, AUserTypeDecodesOnlyThroughItsRegisteredTextForm) {
  using V = std::pair<std::string, std::vector<Celsius>>;
  V v{"room", {{20.5}, {-3}}};
  SerializerTextRegistry without;
  EXPECT_FALSE(textById(without, v).has_value());
  EXPECT_EQ(without.unknownPart(Serializer<V>::id(), Serializer<V>::version()), "test.Celsius");
  std::vector<SerializerTextForm> forms;
  textFormsOf<V>(forms);
  textFormsOf<Opaque>(forms);  // no operator<<, no Formatter: no text form
  ASSERT_EQ(forms.size(), 1u);
  SerializerTextRegistry with;
  with.addAll(forms);
  EXPECT_EQ(textById(with, v), std::optional<std::string>("(room,[20.5C, -3C])"));
  EXPECT_FALSE(textById(with, Opaque{1}).has_value());
}

TEST(SerializerTextTest, AnotherVersionOrUndecodableBytesAreNotGuessed) {
  SerializerTextRegistry reg;
  std::string bytes;
  serializeInto(bytes, std::pair<std::string, int64_t>{"a", 1});
  EXPECT_FALSE(reg.toText("pair<string,i64>", 1002, bytes).has_value());
  EXPECT_EQ(reg.unknownPart("pair<string,i64>", 1002), "version");
  EXPECT_EQ(reg.toText("pair<string,i64>", 1001, bytes), std::optional<std::string>("(a,1)"));
  EXPECT_THROW(reg.toText("pair<string,i64>", 1001, bytes + "x"), SerializationError);
  EXPECT_THROW(reg.toText("pair<string,i64>", 1001, bytes.substr(0, 3)), SerializationError);
  for (const char* bad : {"", "vector<", "pair<i64>", "vector<i64,i64>", "map<string,i64>>", "<i64>"})
    EXPECT_FALSE(reg.toText(bad, 1, bytes).has_value()) << bad;
}

TEST(SerializerTextTest, APlanRecordsTheTextFormsOfItsKeyedStates) {
  struct Fn : KeyedProcessFunction<std::string, std::string, std::string> {
    void processElement(const std::string&, Context&, Collector<std::string>&) override {}
    MapState<std::string, Celsius> temps{*this, "temps"};
    ListState<std::optional<Celsius>> history{*this, "history"};
  };
  TempFile input;
  StreamEnvironment env;
  env.readTextFile(input.path()).keyBy([](const std::string& s) { return s; }).process<Fn>();
  size_t forms = 0;
  std::set<std::string> ids;
  for (const auto& n : env.plan().nodes)
    for (const auto& f : n.textForms) {
      ids.insert(f.id);
      if (f.id != "test.Celsius") continue;
      EXPECT_EQ(f.version, 3u);
      ++forms;
    }
  EXPECT_EQ(forms, 2u);
  // and those of its timers' keys and (empty) values
  EXPECT_EQ(ids, (std::set<std::string>{"test.Celsius", "Timer", "Void"}));
}

}  // namespace
}  // namespace jobhost
// Issue 13: callUser() turns anything user code throws into a UserCodeError naming the
// operator and the thrown value, so nothing reaches std::terminate.
TEST(CallUserTest, AnythingThrownBecomesAUserCodeErrorNamingTheOperatorAndTheValue) {
  struct Oops {};
  auto thrownBy = [](auto&& f) -> std::pair<std::string, std::string> {
    try {
      jobhost::callUser("explode", f);
    } catch (const jobhost::UserCodeError& e) {
      return {e.operatorName(), e.what()};
    }
    return {"", "(nothing thrown)"};
  };
  EXPECT_EQ(thrownBy([] { throw 42; }), std::make_pair(std::string("explode"), std::string("int 42, not a std::exception")));
  EXPECT_EQ(thrownBy([] { throw std::runtime_error("bad"); }).second, "bad");
  EXPECT_EQ(thrownBy([] { throw "text"; }).second, "a C string, not a std::exception: 'text'");
  EXPECT_EQ(thrownBy([] { throw std::string("s"); }).second, "a std::string, not a std::exception: 's'");
  EXPECT_NE(thrownBy([] { throw Oops{}; }).second.find("a value of type"), std::string::npos);
  EXPECT_NE(thrownBy([] { throw Oops{}; }).second.find("Oops"), std::string::npos);
}

namespace jobhost {
namespace {

// Issue 33 item 4: the broadcast states of one operator and their snapshot format.
TEST(BroadcastStateTest, ASnapshotRestoresEveryEntryAndIdenticalCopiesFromEverySubtaskMergeIntoOne) {
  const BroadcastStateDescriptor<std::string, int64_t> limits{"limits"};
  const BroadcastStateDescriptor<int64_t, std::vector<std::string>> groups{"groups"};
  detail::BroadcastStates a;
  a.declare("limits", detail::serializerName<std::string>(), detail::serializerName<int64_t>());
  a.declare("groups", detail::serializerName<int64_t>(), detail::serializerName<std::vector<std::string>>());
  BroadcastState<std::string, int64_t> l(a.get(limits));
  l.put("x", 1);
  l.put("y", 2);
  l.put("x", 3);  // replaces
  BroadcastState<int64_t, std::vector<std::string>> g(a.get(groups));
  g.put(7, {"a", "b"});
  g.put(8, {});
  g.remove(8);
  const std::string bytes = a.snapshot();

  detail::BroadcastStates b;  // a restored subtask: declares the same, then gets 3 equal copies
  b.declare("limits", detail::serializerName<std::string>(), detail::serializerName<int64_t>());
  b.declare("groups", detail::serializerName<int64_t>(), detail::serializerName<std::vector<std::string>>());
  for (int i = 0; i < 3; ++i) b.restore(bytes);
  ReadOnlyBroadcastState<std::string, int64_t> rl(b.get(limits));
  EXPECT_EQ(rl.size(), 2u);
  EXPECT_EQ(rl.get("x"), std::optional<int64_t>(3));
  EXPECT_EQ(rl.get("y"), std::optional<int64_t>(2));
  EXPECT_FALSE(rl.contains("z"));
  std::vector<std::string> order;
  rl.forEach([&](const std::string& k, int64_t) { order.push_back(k); });
  EXPECT_EQ(order, (std::vector<std::string>{"x", "y"}));
  ReadOnlyBroadcastState<int64_t, std::vector<std::string>> rg(b.get(groups));
  EXPECT_EQ(rg.size(), 1u);
  EXPECT_EQ(rg.get(7), (std::optional<std::vector<std::string>>(std::vector<std::string>{"a", "b"})));
  EXPECT_EQ(b.snapshot(), bytes) << "restored state snapshots to the same bytes";

  // Removing while visiting (Flink allows it) visits every entry as it was, once.
  BroadcastState<std::string, int64_t> wl(b.get(limits));
  std::vector<std::string> visited;
  wl.forEach([&](const std::string& k, int64_t) {
    visited.push_back(k);
    wl.clear();
  });
  EXPECT_EQ(visited, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(wl.empty());
}

TEST(BroadcastStateTest, OtherTypesUndeclaredStatesAndOtherFormatsAreRefusedWithTheirNames) {
  const BroadcastStateDescriptor<std::string, int64_t> limits{"limits"};
  detail::BroadcastStates a;
  a.declare("limits", detail::serializerName<std::string>(), detail::serializerName<int64_t>());
  BroadcastState<std::string, int64_t>(a.get(limits)).put("x", 1);
  const std::string bytes = a.snapshot();

  detail::BroadcastStates other;  // the same name, another value type
  other.declare("limits", detail::serializerName<std::string>(), detail::serializerName<std::string>());
  try {
    other.restore(bytes);
    FAIL() << "restored a state of another type";
  } catch (const SerializationError& e) {
    EXPECT_NE(std::string(e.what()).find("broadcast state 'limits' was written as"), std::string::npos) << e.what();
  }
  EXPECT_THROW(other.get(limits), StateError);  // declared as string -> string
  detail::BroadcastStates none;
  try {
    none.get(limits);
    FAIL() << "an undeclared broadcast state was handed out";
  } catch (const StateError& e) {
    EXPECT_NE(std::string(e.what()).find("pass its descriptor to broadcast"), std::string::npos) << e.what();
  }
  std::string future = bytes;
  future[detail::BroadcastStates::kMagic.size()] = 9;
  EXPECT_THROW(none.restore("\x01\x00"), SerializationError) << "a watermark generator's state is not broadcast state";
  EXPECT_THROW(none.restore(future), SerializationError);
  // A state the job no longer declares is kept (and snapshotted again), not dropped.
  none.restore(bytes);
  EXPECT_EQ(none.snapshot(), bytes);
  EXPECT_THROW(none.get(limits), StateError) << "kept, but not handed out undeclared";
}

}  // namespace
}  // namespace jobhost
