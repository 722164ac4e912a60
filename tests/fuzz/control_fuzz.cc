// control_fuzz.cc — libFuzzer target for the control endpoint of a running job: the real
// ControlServer (Cap'n Proto RPC over its Unix socket, control/control_server.h) in front
// of a scripted job, fed each input as the byte stream of one connection.
//
// A connection's bytes are untrusted (any process of the user can connect): whatever they
// are — truncated frames, absurd segment tables, calls to unknown methods, targets that
// are not absolute, NUL bytes, `..` — the server must answer or drop the connection and
// keep serving: never crash, hang, leak or hit undefined behaviour. After every input the
// target checks that the server still answers status() on a fresh connection.
//
// Seeds (corpus/control/): real conversations, written by this target itself with
//   JOBHOST_CONTROL_SEEDS=tests/fuzz/corpus/control build-fuzz/tests/fuzz/control_fuzz
// (a bootstrap, then one call of each method with valid and invalid arguments).
#include <capnp/message.h>
#include <capnp/rpc.capnp.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "control/control.capnp.h"
#include "control/control_client.h"
#include "control/control_server.h"
#include "control/job_control.h"

namespace {

using jobhost::host::ControlServer;
using jobhost::host::JobControl;
namespace state = jobhost::state;
namespace rpc = jobhost::host::rpc;

/// Answers every call at once; a target directory containing "fail" fails the savepoint.
class ScriptedJob : public JobControl {
 public:
  jobhost::host::JobStatusInfo status() override {
    jobhost::host::JobStatusInfo s;
    s.jobId = "0123456789abcdef0123456789abcdef";
    s.jobClass = "WordCount";
    s.pluginPath = "/plugins/libwordcount_jobs.so";
    s.pluginDigest = "0123456789abcdef";
    s.state = jobhost::host::JobState::kRunning;
    return s;
  }
  std::vector<jobhost::host::CheckpointRecord> checkpointHistory() override {
    jobhost::host::CheckpointRecord r;
    r.id = 7;
    r.path = "/ck/chk-7";
    return {r};
  }
  std::map<std::string, std::string> configuration() override { return {{"state.backend.type", "hashmap"}}; }
  state::Result<std::string> savepoint(const std::optional<std::string>& dir, state::SnapshotFormat) override {
    if (dir && dir->find("fail") != std::string::npos) return state::Status::IOError("scripted failure");
    return dir.value_or("/sp") + "/savepoint-0123ab-000000000000";
  }
  state::Result<std::string> cancel(bool withSavepoint, const std::optional<std::string>& dir) override {
    return withSavepoint ? savepoint(dir, state::SnapshotFormat::kCanonical) : state::Result<std::string>(std::string());
  }
  state::Result<std::string> stop(const std::optional<std::string>& dir, bool) override {
    return savepoint(dir, state::SnapshotFormat::kCanonical);
  }
};

ScriptedJob gJob;
std::unique_ptr<ControlServer> gServer;

int connectTo(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) std::abort();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) std::abort();
  return fd;
}

/// Sends `bytes`, half-closes, and reads until the server closes (the RPC system ends a
/// connection at EOF). A server that neither answers nor closes within 10 s is a hang.
void converse(const uint8_t* bytes, size_t size) {
  int fd = connectTo(gServer->socketPath());
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::send(fd, bytes + done, size - done, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server dropped the connection: fine
    done += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, 10000);
    if (ready == 0) {
      std::fprintf(stderr, "control_fuzz: the server neither answered nor closed the connection\n");
      std::abort();
    }
    if (ready < 0) continue;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
  }
  ::close(fd);
}

// --- seeds -------------------------------------------------------------------------

void writeMessage(int fd, capnp::MallocMessageBuilder& m) { capnp::writeMessageToFd(fd, m); }

void bootstrap(int fd) {
  capnp::MallocMessageBuilder m;
  m.initRoot<capnp::rpc::Message>().initBootstrap().setQuestionId(0);
  writeMessage(fd, m);
}

template <class Params, class Fill>
void call(int fd, uint32_t question, uint16_t method, Fill fill) {
  capnp::MallocMessageBuilder m;
  auto c = m.initRoot<capnp::rpc::Message>().initCall();
  c.setQuestionId(question);
  c.initTarget().initPromisedAnswer().setQuestionId(0);
  c.setInterfaceId(capnp::typeId<rpc::JobControlService>());
  c.setMethodId(method);
  fill(c.initParams().getContent().template initAs<Params>());
  writeMessage(fd, m);
}

void finish(int fd, uint32_t question) {
  capnp::MallocMessageBuilder m;
  m.initRoot<capnp::rpc::Message>().initFinish().setQuestionId(question);
  writeMessage(fd, m);
}

void writeSeeds(const std::string& dir) {
  using Svc = rpc::JobControlService;
  auto seed = [&](const std::string& name, auto&& body) {
    int fd = ::open((dir + "/" + name).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) std::abort();
    bootstrap(fd);
    body(fd);
    ::close(fd);
  };
  seed("status", [](int fd) { call<Svc::StatusParams>(fd, 1, 0, [](auto) {}); });
  seed("savepoint", [](int fd) {
    call<Svc::SavepointParams>(fd, 1, 1, [](auto p) {
      p.setTargetDir("/savepoints");
      p.setFormat(rpc::Format::NATIVE);
    });
    finish(fd, 1);
  });
  seed("savepoint-relative", [](int fd) {
    call<Svc::SavepointParams>(fd, 1, 1, [](auto p) { p.setTargetDir("../../etc"); });
  });
  seed("savepoint-dotdot-fails", [](int fd) {
    call<Svc::SavepointParams>(fd, 1, 1, [](auto p) { p.setTargetDir("/a/../fail"); });
    call<Svc::SavepointParams>(fd, 2, 1, [](auto p) { p.setTargetDir("/fail"); });
  });
  seed("cancel-with-savepoint", [](int fd) {
    call<Svc::CancelParams>(fd, 1, 2, [](auto p) {
      p.setWithSavepoint(true);
      p.setTargetDir("/savepoints");
    });
  });
  seed("stop", [](int fd) { call<Svc::StopParams>(fd, 1, 3, [](auto p) { p.setTargetDir(""); }); });
  seed("history-and-configuration", [](int fd) {
    call<Svc::CheckpointHistoryParams>(fd, 1, 4, [](auto) {});
    call<Svc::ConfigurationParams>(fd, 2, 5, [](auto) {});
  });
  seed("unknown-method", [](int fd) { call<Svc::StatusParams>(fd, 1, 99, [](auto) {}); });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  if (const char* out = std::getenv("JOBHOST_CONTROL_SEEDS")) {
    writeSeeds(out);
    std::exit(0);
  }
  // A private runtime directory of our own (the server checks it: 0700, ours).
  static char dir[] = "/tmp/jobhost-control-fuzz-XXXXXX";
  if (::mkdtemp(dir) == nullptr) std::abort();
  ::setenv("XDG_RUNTIME_DIR", dir, 1);
  auto started = ControlServer::start(gJob, "fuzz");
  if (!started.ok()) {
    std::fprintf(stderr, "control_fuzz: %s\n", started.status().message().c_str());
    std::abort();
  }
  gServer = std::move(*started);
  std::atexit([] {
    gServer.reset();  // removes its socket
    ::rmdir((std::string(dir) + "/jobhost").c_str());
    ::rmdir(dir);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  converse(data, size);
  // Still serving: a real client's status() works on a new connection.
  auto s = jobhost::host::callStatus(gServer->socketPath());
  if (!s.ok() || s->jobClass != "WordCount") {
    std::fprintf(stderr, "control_fuzz: the server stopped answering: %s\n",
                 s.ok() ? "wrong status" : s.status().message().c_str());
    std::abort();
  }
  return 0;
}
