// Stages of chained operators from a plan. See the header.
#include "runtime/stage_graph.h"

#include <algorithm>
#include <cstdio>

namespace jobhost::host {

namespace {

std::vector<int> inputsOf(const PlanNode& n) {
  if (!n.inputs.empty()) return n.inputs;
  if (n.input >= 0) return {n.input};
  return {};
}
std::string inputTagOf(const PlanNode& n, size_t i) { return i < n.inputTags.size() ? n.inputTags[i] : std::string(); }
bool isTwoInput(const PlanNode& n) { return n.kind != NodeKind::kExchange && inputsOf(n).size() == 2; }

/// `text` with bytes that are not printable ASCII shown as \xNN (for messages).
std::string printable(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

/// Throws JobArgumentError naming the operator if its uid is not valid.
void checkUid(const PlanNode& n) {
  std::string why = validateOperatorUid(n.uid);
  if (why.empty()) return;
  std::string what = n.uidExplicit ? "uid '" + printable(n.uid) + "' of operator '" + printable(n.name) + "'"
                                   : "the default uid '" + printable(n.uid) + "' of operator '" + printable(n.name) +
                                         "' (made from its name)";
  throw JobArgumentError(what + " is not valid: " + why +
                         ". A uid names files and directories of the job's state: use 1 to 128 letters, digits, '.', "
                         "'_' or '-', not starting with '.' (e.g. .uid(\"counts\"))" +
                         (n.uidExplicit ? "" : "; give the operator one with .uid(...)"));
}

/// Who reads each node's outputs; throws JobArgumentError for a plan that cannot run.
std::vector<std::vector<Use>> findUses(const Plan& plan) {
  std::vector<std::vector<Use>> uses(plan.nodes.size());
  for (const auto& n : plan.nodes) {
    auto ins = inputsOf(n);
    for (size_t i = 0; i < ins.size(); ++i) {
      if (ins[i] < 0 || ins[i] >= n.id)
        throw JobArgumentError("operator '" + n.name + "' reads an operator that is not defined before it");
      uses[static_cast<size_t>(ins[i])].push_back({n.id, inputTagOf(n, i), i});
    }
    if (n.kind == NodeKind::kSource && !ins.empty())
      throw JobArgumentError("source '" + n.name + "' cannot have an input");
    if (n.kind != NodeKind::kSource && ins.empty()) throw JobArgumentError("operator '" + n.name + "' has no input");
    if (isTwoInput(n))
      for (int in : ins)
        if (plan.nodes[static_cast<size_t>(in)].kind != NodeKind::kExchange)
          throw JobArgumentError("the inputs of the two-input operator '" + n.name + "' must come through exchanges");
  }
  for (const auto& n : plan.nodes) {
    if (n.kind == NodeKind::kSink) continue;
    const auto& u = uses[static_cast<size_t>(n.id)];
    if (u.empty() && n.kind == NodeKind::kExchange) {
      std::string from = n.input >= 0 ? plan.nodes[static_cast<size_t>(n.input)].name : "?";
      throw JobArgumentError("the " + n.name + " after '" + from +
                             "' leads nowhere: follow it with an operator (sum, reduce, window(...)..., process); "
                             "after connect() or intervalJoin(...).between(...), call process()");
    }
    if (u.empty())
      throw JobArgumentError("the stream produced by '" + n.name +
                             "' is never consumed: end it with print(), writeAsText() or addSink()");
    if (std::none_of(u.begin(), u.end(), [](const Use& x) { return x.tag.empty(); }))
      throw JobArgumentError("the main output of '" + n.name +
                             "' is never consumed, only its side outputs: end it with print(), writeAsText() or "
                             "addSink() (a sink that does nothing: addSink([](const auto&) {}))");
  }
  return uses;
}

}  // namespace

StageGraph::StageGraph(const Plan& plan, int parallelism) : plan_(&plan) {
  for (const auto& n : plan.nodes) checkUid(n);
  uses_ = findUses(plan);
  const auto& uses = uses_;
  auto& stages = stages_;
  std::vector<int> stageOf(plan.nodes.size(), -1);
  auto newStage = [&](int p) {
    stages.emplace_back();
    stages.back().parallelism = p;
    return static_cast<int>(stages.size() - 1);
  };
  for (const auto& n : plan.nodes) {
    int s = -1;
    if (n.kind == NodeKind::kSource) {
      s = newStage(n.parallelSource ? parallelism : 1);
      stages[static_cast<size_t>(s)].heads.push_back(n.id);
    } else if (n.kind == NodeKind::kExchange) {
      // The receiving side starts a stage; both inputs of a two-input operator start the same.
      const PlanNode& c = plan.nodes[static_cast<size_t>(uses[static_cast<size_t>(n.id)].front().consumer)];
      if (isTwoInput(c))
        for (int other : inputsOf(c))
          if (other != n.id && stageOf[static_cast<size_t>(other)] >= 0) s = stageOf[static_cast<size_t>(other)];
      if (s < 0) s = newStage(parallelism);
      stages[static_cast<size_t>(s)].heads.push_back(n.id);
    } else {
      s = stageOf[static_cast<size_t>(inputsOf(n).front())];
    }
    stageOf[static_cast<size_t>(n.id)] = s;
    stages[static_cast<size_t>(s)].nodes.push_back(n.id);
  }
  if (stages.empty()) throw JobArgumentError("the job defines no source: build() must create at least one stream");
  for (const auto& n : plan.nodes) {
    if (n.kind != NodeKind::kExchange) continue;
    auto ins = inputsOf(n);
    Stage& consumer = stages[static_cast<size_t>(stageOf[static_cast<size_t>(n.id)])];
    for (size_t j = 0; j < ins.size(); ++j) {
      int ps = stageOf[static_cast<size_t>(ins[j])];
      stages[static_cast<size_t>(ps)].outputs.push_back({n.id, j, ins[j]});
      consumer.channels.push_back({n.id, j, ps, consumer.channelCount(), stages[static_cast<size_t>(ps)].parallelism});
    }
  }
}


size_t StageGraph::stageReceiving(int exchange) const {
  auto it = std::find_if(stages_.begin(), stages_.end(), [&](const Stage& c) {
    return std::count(c.heads.begin(), c.heads.end(), exchange) > 0;
  });
  return static_cast<size_t>(it - stages_.begin());
}

std::vector<OperatorInfo> StageGraph::operators() const {
  const Plan& plan = *plan_;
  std::vector<OperatorInfo> out;
  for (const auto& s : stages_)
    for (int id : s.nodes) {
      const PlanNode& n = plan.nodes[static_cast<size_t>(id)];
      const bool source = n.kind == NodeKind::kSource;
      if (!source && !n.keyed && !n.operatorState) continue;
      OperatorInfo info;
      info.uid = n.uid;
      info.name = n.name;
      info.keyed = n.keyed;
      info.source = source;
      info.operatorState = n.operatorState;
      info.parallelism = s.parallelism;
      info.states = n.states;
      info.subscription = n.subscription;
      info.broadcastStates = n.broadcastStates;
      out.push_back(std::move(info));
    }
  return out;
}

std::vector<OperatorInfo> StageGraph::restoreTargets() const {
  std::vector<OperatorInfo> out = operators();
  for (const auto& s : stages_)
    for (const auto& g : s.channels) {
      const PlanNode& n = plan_->nodes[static_cast<size_t>(g.exchange)];
      auto it = std::find_if(out.begin(), out.end(), [&](const OperatorInfo& o) { return o.uid == n.uid; });
      if (it == out.end()) {
        OperatorInfo info;
        info.uid = n.uid;
        info.name = n.name;
        info.parallelism = s.parallelism;
        info.channelReceiver = true;
        info.broadcastReceiver = n.broadcastExchange;
        out.push_back(std::move(info));
        it = out.end() - 1;
      }
      it->inputs = std::max(it->inputs, static_cast<int>(g.position) + 1);
    }
  return out;
}

std::vector<OperatorInfo> describeOperators(const Plan& plan, int parallelism) {
  return StageGraph(plan, parallelism).restoreTargets();
}

std::string validateOperatorUid(std::string_view uid) {
  constexpr size_t kMaxUidLength = 128;
  if (uid.empty()) return "it is empty";
  if (uid.size() > kMaxUidLength)
    return "it has " + std::to_string(uid.size()) + " characters, more than " + std::to_string(kMaxUidLength);
  if (uid.front() == '.') return "it starts with '.'";
  for (size_t i = 0; i < uid.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(uid[i]);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')
      continue;
    std::string shown = c == '\'' ? "a quote" : "'" + printable(uid.substr(i, 1)) + "'";
    return "it contains " + shown + " at position " + std::to_string(i + 1);
  }
  return {};
}

}  // namespace jobhost::host
