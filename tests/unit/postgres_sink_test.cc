// Tests of jobhost::PostgresSink (sdk/include/jobhost/postgres.h) run by the SDK's own
// TwoPhaseCommitSinkOp, with a fake operator context, against a private server
// (tests/support/postgres_server.h). They force the orders the host makes rare: a barrier
// before the previous checkpoint's commit, a crash between any two steps, a commit that
// already happened, a transaction rolled back behind the sink's back, leftovers of a run
// that was not restored, strays of other subtasks and parallelisms. The end-to-end tests
// are tests/e2e/postgres_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jobhost/postgres.h"
#include "support/fake_operator_context.h"
#include "support/postgres_server.h"

namespace {

using jobhost_test::PostgresServer;
using Count = std::pair<std::string, int64_t>;
using Sink = jobhost::PostgresSink<Count>;
using SinkOp = jobhost::detail::TwoPhaseCommitSinkOp<Sink>;

/// What the host gives a sink: its place and nothing else.
class FakeContext : public jobhost_test::FakeOperatorContext {
 public:
  FakeContext(int subtask, int parallelism) : FakeOperatorContext(subtask, parallelism, "PostgreSQL Sink", "pg") {}
};

class PostgresSinkTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() { server_ = PostgresServer::start({}, &why_).release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

 protected:
  void SetUp() override {
    if (!server_) {
      if (PostgresServer::required()) FAIL() << "JOBHOST_REQUIRE_POSTGRES=1, but: " << why_;
      GTEST_SKIP() << "no PostgreSQL server: " << why_;
    }
    db_ = "u" + std::to_string(++databases_);
    server_->createDatabase(db_);
    server_->query("CREATE TABLE counts (word text PRIMARY KEY, n bigint NOT NULL); CREATE TABLE log (word text, n bigint)",
                   db_);
  }
  void TearDown() override {
    ops_.clear();
    if (!server_) return;
    for (const auto& gid : prepared()) server_->query("ROLLBACK PREPARED '" + gid + "'", db_);
  }

  Sink sink(const std::string& table = "counts", bool upsert = true) {
    Sink s(server_->conninfo(db_), table, {"word", "n"},
           [](const Count& c) { return std::vector<std::string>{c.first, std::to_string(c.second)}; });
    if (upsert) s.upsertOn({"word"});
    s.withBatchSize(2).withLockTimeout(std::chrono::seconds(5));
    return s;
  }
  /// A subtask's sink operator, restored from `states` (the snapshots of every former
  /// subtask) if given, opened.
  SinkOp& open(int subtask, int parallelism, const std::vector<std::string>& states = {}) {
    return openSink(subtask, parallelism, states, sink());
  }
  SinkOp& openSink(int subtask, int parallelism, const std::vector<std::string>& states, Sink s) {
    contexts_.push_back(std::make_unique<FakeContext>(subtask, parallelism));
    ops_.push_back(std::make_unique<SinkOp>(std::make_unique<Sink>(std::move(s))));
    SinkOp& op = *ops_.back();
    for (const auto& st : states) op.restoreState(st);
    op.open(*contexts_.back());
    return op;
  }
  /// Drops an operator without closing it: the crash of its process (the server rolls
  /// back its open transaction when the connections close; prepared ones stay).
  void crash(SinkOp& op) {
    for (auto& p : ops_)
      if (p.get() == &op) p.reset();
  }
  static void write(SinkOp& op, const std::vector<Count>& records) {
    for (const auto& r : records) op.collect(r);
  }
  std::map<std::string, long> table(const std::string& name = "counts") const {
    std::map<std::string, long> t;
    for (const auto& row : server_->query("SELECT word, n FROM " + name, db_)) t[row[0]] += std::stol(row[1]);
    return t;
  }
  std::vector<std::string> prepared() const {
    return server_->column("SELECT gid FROM pg_prepared_xacts WHERE database = '" + db_ + "' ORDER BY gid");
  }

  static PostgresServer* server_;
  static std::string why_;
  static int databases_;
  std::string db_;
  std::vector<std::unique_ptr<FakeContext>> contexts_;
  std::vector<std::unique_ptr<SinkOp>> ops_;
};
PostgresServer* PostgresSinkTest::server_ = nullptr;
std::string PostgresSinkTest::why_;
int PostgresSinkTest::databases_ = 0;

using Table = std::map<std::string, long>;

TEST_F(PostgresSinkTest, RowsAreInvisibleUntilTheirCheckpointCompletes) {
  SinkOp& op = open(0, 1);
  write(op, {{"a", 1}, {"b", 1}, {"a", 2}, {"c", 1}, {"a", 3}});
  EXPECT_EQ(table(), Table{});
  op.beforeSnapshot(1);
  EXPECT_EQ(prepared(), std::vector<std::string>{"jobhost-counts-pg-0-1"});
  EXPECT_EQ(table(), Table{}) << "prepared is not visible";
  op.notifyCheckpointComplete(1);
  EXPECT_EQ(table(), (Table{{"a", 3}, {"b", 1}, {"c", 1}}));
  EXPECT_EQ(prepared(), std::vector<std::string>{});
  write(op, {{"b", 2}});
  op.beforeSnapshot(2);
  op.notifyCheckpointComplete(2);
  EXPECT_EQ(table(), (Table{{"a", 3}, {"b", 2}, {"c", 1}}));
  op.close();
}

TEST_F(PostgresSinkTest, AnIdleIntervalPreparesNothing) {
  SinkOp& op = open(0, 1);
  op.beforeSnapshot(1);
  EXPECT_EQ(prepared(), std::vector<std::string>{});
  op.notifyCheckpointComplete(1);
  op.close();
}

// The host notifies a completed checkpoint before the next barrier nearly always; when it
// does not, writing the next rows would wait on this thread for the row locks of the
// prepared transaction only this thread can commit.
TEST_F(PostgresSinkTest, ABarrierBeforeThePreviousCommitCarriesItsRowsInTheCheckpoint) {
  SinkOp& op = open(0, 1);
  write(op, {{"a", 1}, {"b", 1}});
  op.beforeSnapshot(1);
  write(op, {{"a", 2}, {"b", 2}, {"c", 1}, {"a", 3}});  // more than a batch: nothing may be written yet
  op.beforeSnapshot(2);                                // 1 is not committed yet
  EXPECT_EQ(prepared(), (std::vector<std::string>{"jobhost-counts-pg-0-1", "jobhost-counts-pg-0-2"}));
  write(op, {{"d", 1}});
  op.notifyCheckpointComplete(1);
  EXPECT_EQ(table(), (Table{{"a", 1}, {"b", 1}}));
  op.notifyCheckpointComplete(2);
  EXPECT_EQ(table(), (Table{{"a", 3}, {"b", 2}, {"c", 1}}));
  op.beforeSnapshot(3);
  op.notifyCheckpointComplete(3);
  EXPECT_EQ(table(), (Table{{"a", 3}, {"b", 2}, {"c", 1}, {"d", 1}}));
  EXPECT_EQ(prepared(), std::vector<std::string>{});
  op.close();
}

TEST_F(PostgresSinkTest, ARestoreCommitsTheCheckpointsTransactionsAndRollsBackNewerOnes) {
  SinkOp& op = open(0, 1);
  write(op, {{"a", 1}});
  op.beforeSnapshot(1);
  const std::string state1 = op.snapshotState();
  write(op, {{"a", 2}});
  op.beforeSnapshot(2);  // prepared, but checkpoint 2 never completes
  crash(op);
  EXPECT_EQ(prepared(), (std::vector<std::string>{"jobhost-counts-pg-0-1", "jobhost-counts-pg-0-2"}));
  SinkOp& again = open(0, 1, {state1});
  EXPECT_EQ(table(), (Table{{"a", 1}}));
  EXPECT_EQ(prepared(), std::vector<std::string>{});
  write(again, {{"a", 2}});  // the replay
  again.beforeSnapshot(2);
  again.notifyCheckpointComplete(2);
  EXPECT_EQ(table(), (Table{{"a", 2}}));
  again.close();
}

TEST_F(PostgresSinkTest, ACommitThatHappenedBeforeTheFailureIsNoError) {
  SinkOp& op = open(0, 1);
  write(op, {{"a", 1}});
  op.beforeSnapshot(1);
  const std::string state1 = op.snapshotState();
  op.notifyCheckpointComplete(1);  // committed; then the process dies
  crash(op);
  SinkOp& again = open(0, 1, {state1});
  EXPECT_EQ(table(), (Table{{"a", 1}}));
  again.close();
}

TEST_F(PostgresSinkTest, ATransactionRolledBackBehindTheSinksBackIsAnErrorOnRestore) {
  SinkOp& op = open(0, 1);
  write(op, {{"a", 1}});
  op.beforeSnapshot(1);
  const std::string state1 = op.snapshotState();
  crash(op);
  server_->query("ROLLBACK PREPARED 'jobhost-counts-pg-0-1'", db_);
  try {
    open(0, 1, {state1});
    FAIL() << "restored without noticing the lost transaction";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("prepared transaction 'jobhost-counts-pg-0-1'"), std::string::npos) << m;
    EXPECT_NE(m.find("was not committed (aborted)"), std::string::npos) << m;
    EXPECT_NE(m.find("rows are lost"), std::string::npos) << m;
  }
}

TEST_F(PostgresSinkTest, CarriedRowsAreWrittenOnceWhereverTheCrashFalls) {
  // A checkpoint whose transaction carries its rows, restored after crashes at each step
  // of their commit: before it, after they were prepared, after the marker committed.
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("crash after step " + std::to_string(step));
    server_->query("TRUNCATE counts", db_);
    SinkOp& op = open(0, 1);
    write(op, {{"a", 1}});
    op.beforeSnapshot(1);
    write(op, {{"a", 2}, {"b", 1}});
    op.beforeSnapshot(2);  // carried
    const std::string state2 = op.snapshotState();
    crash(op);
    const std::string marker = "jobhost-counts-pg-0-2", rows = marker + "-carried";
    if (step >= 1) {  // the rows prepared, as commit() would
      server_->query("COMMIT PREPARED 'jobhost-counts-pg-0-1'", db_);
      server_->query("BEGIN; INSERT INTO counts VALUES ('a', 2), ('b', 1) ON CONFLICT (word) DO UPDATE SET n = "
                     "EXCLUDED.n; PREPARE TRANSACTION '" + rows + "'",
                     db_);
    }
    if (step >= 2) server_->query("COMMIT PREPARED '" + marker + "'", db_);
    SinkOp& again = open(0, 1, {state2});
    EXPECT_EQ(table(), (Table{{"a", 2}, {"b", 1}}));
    EXPECT_EQ(prepared(), std::vector<std::string>{});
    again.close();
  }
}

TEST_F(PostgresSinkTest, AppendedRowsAreExactlyOnceAcrossACrashWithCarriedRows) {
  SinkOp& op = openSink(0, 1, {}, sink("log", /*upsert=*/false));
  write(op, {{"a", 1}, {"a", 1}});
  op.beforeSnapshot(1);
  write(op, {{"a", 1}, {"b", 1}, {"b", 1}});
  op.beforeSnapshot(2);  // carried
  const std::string state2 = op.snapshotState();
  op.notifyCheckpointComplete(1);
  op.notifyCheckpointComplete(2);  // carried rows written and committed; then a crash
  crash(op);
  SinkOp& again = openSink(0, 1, {state2}, sink("log", false));
  EXPECT_EQ(table("log"), (Table{{"a", 3}, {"b", 2}}));
  EXPECT_EQ(server_->column("SELECT count(*) FROM log", db_), std::vector<std::string>{"5"});
  again.close();
}

TEST_F(PostgresSinkTest, AfterRescalingEachFormerSubtaskIsRecoveredByExactlyOneSubtask) {
  // Three subtasks each commit checkpoint 1 and prepare checkpoint 2 (never complete),
  // then the job restores checkpoint 1 at parallelism 2.
  std::vector<std::string> states;
  std::vector<SinkOp*> old;
  for (int s = 0; s < 3; ++s) old.push_back(&open(s, 3));
  for (int s = 0; s < 3; ++s) {
    write(*old[s], {{"w" + std::to_string(s), 1}});
    old[s]->beforeSnapshot(1);
    states.push_back(old[s]->snapshotState());
  }
  for (int s = 0; s < 3; ++s) {
    write(*old[s], {{"w" + std::to_string(s), 2}});
    old[s]->beforeSnapshot(2);
    crash(*old[s]);
  }
  EXPECT_EQ(prepared().size(), 6u);
  SinkOp& a = open(0, 2, states);  // recovers 0 and 2
  EXPECT_EQ(table(), (Table{{"w0", 1}, {"w2", 1}}));
  EXPECT_EQ(prepared(), (std::vector<std::string>{"jobhost-counts-pg-1-1", "jobhost-counts-pg-1-2"}));
  SinkOp& b = open(1, 2, states);  // recovers 1
  EXPECT_EQ(table(), (Table{{"w0", 1}, {"w1", 1}, {"w2", 1}}));
  EXPECT_EQ(prepared(), std::vector<std::string>{});
  a.close();
  b.close();
}

TEST_F(PostgresSinkTest, AFreshStartRollsBackWhatAnUnrestoredRunLeftPrepared) {
  SinkOp& op = open(0, 1);
  write(op, {{"a", 1}});
  op.beforeSnapshot(1);
  crash(op);
  EXPECT_EQ(prepared(), std::vector<std::string>{"jobhost-counts-pg-0-1"});
  SinkOp& fresh = open(0, 1);  // e.g. `jobhost run` again without -s
  EXPECT_EQ(prepared(), std::vector<std::string>{});
  write(fresh, {{"a", 1}});  // would wait for the leftover's row lock otherwise
  fresh.beforeSnapshot(1);
  fresh.notifyCheckpointComplete(1);
  EXPECT_EQ(table(), (Table{{"a", 1}}));
  fresh.close();
}

TEST_F(PostgresSinkTest, WithoutCheckpointsTheEndOfTheInputCommits) {
  SinkOp& op = open(0, 1);
  write(op, {{"a", 1}, {"b", 1}, {"a", 2}});
  op.endInput();
  EXPECT_EQ(table(), (Table{{"a", 2}, {"b", 1}}));
  EXPECT_EQ(prepared(), std::vector<std::string>{});
  op.close();
}

// The rows go as one COPY (appending) or one INSERT ... FROM unnest(text arrays) (upserting):
// values with the characters those formats escape, or give a meaning (\N is NULL to COPY,
// quotes and backslashes delimit array elements, braces and commas separate them), arrive
// as they were, and the upsert casts each column to its type (n is bigint).
TEST_F(PostgresSinkTest, ValuesWithQuotesBackslashesTabsNewlinesAndBracesArriveUnchangedEitherWay) {
  const std::vector<std::string> words = {"plain", "it's", "say \"hi\"", "back\\slash", "\\N", "tab\there",
                                          "new\nline", "cr\rhere", "{a,b}", "NULL", "", "ünïcödé", " lead"};
  for (bool upsert : {true, false}) {
    SCOPED_TRACE(upsert ? "upsert" : "append");
    const std::string t = upsert ? "counts" : "log";
    SinkOp& op = openSink(0, 1, {}, sink(t, upsert).withBatchSize(65536));
    std::vector<Count> records;
    for (size_t i = 0; i < words.size(); ++i) records.push_back({words[i], static_cast<int64_t>(i + 1)});
    write(op, records);
    op.endInput();
    Table want;
    for (size_t i = 0; i < words.size(); ++i) want[words[i]] = static_cast<long>(i + 1);
    EXPECT_EQ(table(t), want);
    EXPECT_EQ(server_->column("SELECT count(*) FROM " + t + " WHERE word IS NULL", db_),
              std::vector<std::string>{"0"});
    op.close();
  }
}

// The buffer of one interval's rows, without a server: upserting keeps one row per key
// (the latest), whichever columns are the key and whatever bytes the values hold (empty,
// NUL bytes, values that look like the buffer's own length prefixes); appending keeps
// every row in arrival order. take() empties it.
TEST(PgRowBufferTest, OneRowPerKeyTheLatestWhenUpsertingEveryRowInOrderWhenAppending) {
  using Rows = std::vector<std::vector<std::string>>;
  const std::string odd = std::string("\x04\x00\x00\x00", 4) + "abcd";
  jobhost::detail::PgRowBuffer upserts(3, {2, 0});  // key: columns 2 and 0 of 3
  const Rows in = {{"a", "1", "x"},  {"a", "2", "y"},      {"a", "3", "x"}, {"", "4", ""},
                   {"b", odd, "x"},  {"", "5", ""},        {"ab", "6", ""}, {"a", "7", "xy"},
                   {odd, "8", odd}, {"b", "", "x"}, {odd, "9", odd}};
  for (const auto& r : in) upserts.add(r);
  EXPECT_EQ(upserts.size(), 7u);  // (a,x) (a,y) ("","") (b,x) (ab,"") (a,xy) (odd,odd)
  Rows got = upserts.take();
  std::sort(got.begin(), got.end());
  Rows want = {{"", "5", ""}, {"a", "2", "y"}, {"a", "3", "x"}, {"a", "7", "xy"},
               {"ab", "6", ""}, {"b", "", "x"}, {odd, "9", odd}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  EXPECT_TRUE(upserts.empty());
  EXPECT_TRUE(upserts.take().empty());
  upserts.add({"c", "1", "z"});
  EXPECT_EQ(upserts.take(), (Rows{{"c", "1", "z"}}));

  jobhost::detail::PgRowBuffer appends(3);
  for (const auto& r : in) appends.add(r);
  EXPECT_EQ(appends.size(), in.size());
  EXPECT_EQ(appends.take(), in);
  EXPECT_TRUE(appends.empty());
}

TEST_F(PostgresSinkTest, BadArgumentsAreRefusedWhenTheJobIsBuilt) {
  auto row = [](const Count& c) { return std::vector<std::string>{c.first}; };
  EXPECT_THROW(Sink("host=/x", "", {"a"}, row), jobhost::JobArgumentError);
  EXPECT_THROW(Sink("host=/x", "t", {}, row), jobhost::JobArgumentError);
  EXPECT_THROW(Sink("host=/x", "t", {"a", "a"}, row), jobhost::JobArgumentError);
  EXPECT_THROW(Sink("host=/x", "t", {"a"}, row).upsertOn({"b"}), jobhost::JobArgumentError);
  EXPECT_THROW(Sink("host=/x", "t", {"a"}, row).withJobName("has-dash"), jobhost::JobArgumentError);
  try {
    Sink("not a conninfo", "t", {"a"}, row);
    FAIL() << "an invalid connection string was accepted";
  } catch (const jobhost::JobArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("the connection string 'not a conninfo' is invalid"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(Sink("host=/x", "public.Word Counts", {"a"}, row).jobName(), "public_Word_Counts");
}

TEST_F(PostgresSinkTest, AMissingColumnAndAnUnreachableServerAreClearErrors) {
  try {
    Sink s(server_->conninfo(db_), "counts", {"word", "total"},
           [](const Count& c) { return std::vector<std::string>{c.first, std::to_string(c.second)}; });
    openSink(0, 1, {}, s);
    FAIL() << "opened with a missing column";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("table counts in the PostgreSQL server at"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lacks a column the sink writes"), std::string::npos) << e.what();
  }
  try {
    Sink s("host=/nonexistent-dir dbname=x", "counts", {"word"},
           [](const Count& c) { return std::vector<std::string>{c.first}; });
    openSink(0, 1, {}, s);
    FAIL() << "opened without a server";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot connect to PostgreSQL ("), std::string::npos) << m;
    EXPECT_NE(m.find("host=/nonexistent-dir"), std::string::npos) << m;
    EXPECT_NE(m.find("/nonexistent-dir/.s.PGSQL.5432"), std::string::npos) << m;
  }
}

}  // namespace
