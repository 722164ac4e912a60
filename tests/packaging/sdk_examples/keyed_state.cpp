// example: sdk_examples/keyed_state.cpp
#include <jobhost/jobhost.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

using Visit = std::pair<std::string, std::string>;  // (user, page)

/// Per user: the number of visits, the last three pages, and the hits per page.
class VisitTracker : public jobhost::KeyedProcessFunction</*key=*/std::string, /*in=*/Visit, /*out=*/std::string> {
 public:
  void processElement(const Visit& visit, Context& ctx, jobhost::Collector<std::string>& out) override {
    // Every access reads or writes the state of the current key: ctx.currentKey().
    int64_t visits = visits_.value().value_or(0) + 1;  // nullopt: the key's first record
    visits_.update(visits);

    std::vector<std::string> recent = recentPages_.get();
    recent.push_back(visit.second);
    if (recent.size() > 3) recent.erase(recent.begin());
    recentPages_.update(recent);

    int64_t hits = hitsPerPage_.get(visit.second).value_or(0) + 1;
    hitsPerPage_.put(visit.second, hits);

    std::string line = ctx.currentKey() + " visits=" + std::to_string(visits) + " " + visit.second +
                       "=" + std::to_string(hits) + " recent=";
    for (const auto& page : recent) line += page + ";";
    out.collect(line);
  }

 private:
  // Declared state: the owner (*this) and a name, unique within the operator and stable
  // across versions of the job. The value types choose the serializers.
  jobhost::ValueState<int64_t> visits_{*this, "visits"};
  jobhost::ListState<std::string> recentPages_{*this, "recent-pages"};
  jobhost::MapState<std::string, int64_t> hitsPerPage_{*this, "hits-per-page"};
};

/// Lines "user page": jobhost run -c PageVisits my_jobs.so --input visits.txt
class PageVisits : public jobhost::Job {
 public:
  void build(jobhost::StreamEnvironment& env) override {
    env.readTextFile(env.args().get("--input", "visits.txt"))
        .uid("lines")
        .flatMap<Visit>([](const std::string& line, jobhost::Collector<Visit>& out) {
          std::istringstream in(line);
          Visit v;
          if (in >> v.first >> v.second) out.collect(v);
        })
        .keyBy([](const Visit& v) { return v.first; })
        .process<VisitTracker>()
        .uid("visits")
        .print();
  }
};
JOBHOST_JOB(PageVisits, "Visits per user (ValueState, ListState, MapState)", "hashmap")
