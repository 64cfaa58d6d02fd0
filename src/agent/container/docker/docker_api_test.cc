// DockerApi against a dockerd of the suite's own (in a fresh /tmp dir, with
// its own managed containerd and containerd namespace, no bridge and no
// iptables, so it coexists with a system docker and with other runs of this
// test), started once and stopped by pid. The image is built here without a
// registry: /bin/sh, sleep, cat, echo and their libraries, imported as a tar.
// Skipped when not root or without /usr/sbin/dockerd. Also the pure parts
// (timestamps, the log demuxer) and errors against fake sockets.
#include "agent/container/docker/docker_api.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "agent/container/docker/testing/dockerd.h"

namespace ringmaster::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::BuildImageTar;
using testing::Dockerd;

// ---- timestamps

TEST(DockerTimestampTest, ParsesRfc3339Nano) {
  EXPECT_EQ(DockerApi::ParseDockerTimestamp("1970-01-01T00:00:00Z").value(), 0);
  EXPECT_EQ(DockerApi::ParseDockerTimestamp("2026-12-03T15:00:43.381533502Z").value(), 1796310043381533502);
  EXPECT_EQ(DockerApi::ParseDockerTimestamp("2026-12-03T15:00:43.3815335Z").value(), 1796310043381533500);
  EXPECT_EQ(DockerApi::ParseDockerTimestamp("2026-12-03T16:00:43.5+01:00").value(), 1796310043500000000);
  EXPECT_EQ(DockerApi::ParseDockerTimestamp("2024-02-29T00:00:00Z").value(), 1709164800LL * 1000000000);
  for (const char* bad : {"", "2026-12-03", "2026-12-03T15:00:43", "2026-13-03T15:00:43Z", "2026-02-30T15:00:43Z",
                          "2026-12-03T15:00:43.Z", "2026-12-03T15:00:43Zx", "2026-12-03 15:00:43Z",
                          "2026-12-03T15:00:43+0100", "9999-12-03T15:00:43Z"}) {
    EXPECT_EQ(DockerApi::ParseDockerTimestamp(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(DockerTimestampTest, FormatSinceRoundTrips) {
  EXPECT_EQ(DockerApi::FormatSince(1796310043381533502), "1796310043.381533502");
  EXPECT_EQ(DockerApi::FormatSince(1796310043000000007), "1796310043.000000007");
  EXPECT_EQ(DockerApi::FormatSince(0), "0.000000000");
}

// ---- the log demuxer, on hand-made frames

std::string Frame(int stream, std::string_view payload) {
  std::string f(8, '\0');
  f[0] = static_cast<char>(stream);
  uint32_t n = payload.size();
  for (int i = 0; i < 4; ++i) f[4 + i] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
  return f + std::string(payload);
}

struct Line {
  int stream;
  std::string ts, text;
  bool operator==(const Line&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Line& l) { return os << l.stream << " [" << l.ts << "] " << l.text; }

constexpr const char* kT1 = "2026-12-03T15:00:43.381533502Z";
constexpr const char* kT2 = "2026-12-03T15:00:44.000000001Z";

struct Collector {
  std::vector<Line> lines;
  size_t stop_after = SIZE_MAX;
  DockerApi::LogSink Sink() {
    return [this](int stream, std::string_view ts, std::string_view text) {
      lines.push_back({stream, std::string(ts), std::string(text)});
      return lines.size() < stop_after;
    };
  }
};

TEST(DockerLogDemuxerTest, SplitsFramesAndLinesFedInAnyPieces) {
  std::string stream = Frame(1, std::string(kT1) + " one\n") + Frame(2, std::string(kT2) + " err\n") +
                       // several lines in one frame, the second with its own timestamp, the third without
                       Frame(1, std::string(kT1) + " two\n" + kT2 + " three\nfour\n") +
                       Frame(1, std::string(kT2) + " \n");  // an empty line
  for (size_t piece : {stream.size(), size_t{1}, size_t{7}}) {
    Collector c;
    DockerLogDemuxer d(c.Sink());
    for (size_t i = 0; i < stream.size(); i += piece) ASSERT_TRUE(d.Feed(stream.substr(i, piece)).ok());
    ASSERT_TRUE(d.Finish().ok());
    EXPECT_EQ(c.lines, (std::vector<Line>{{1, kT1, "one"}, {2, kT2, "err"}, {1, kT1, "two"}, {1, kT2, "three"},
                                          {1, kT1, "four"}, {1, kT2, ""}}))
        << "pieces of " << piece;
  }
}

TEST(DockerLogDemuxerTest, JoinsLongLinesAcrossFramesKeepingTheFirstTimestamp) {
  // Docker splits lines over 16 KiB into frames that each repeat the
  // timestamp; stderr's frames may come in between.
  std::string a(16384, 'a'), b(100, 'b');
  Collector c;
  DockerLogDemuxer d(c.Sink());
  ASSERT_TRUE(d.Feed(Frame(1, std::string(kT1) + " " + a)).ok());
  ASSERT_TRUE(d.Feed(Frame(2, std::string(kT2) + " err\n")).ok());
  ASSERT_TRUE(d.Feed(Frame(1, std::string(kT2) + " " + b)).ok());
  ASSERT_TRUE(d.Feed(Frame(1, std::string(kT2) + " \n")).ok());
  ASSERT_TRUE(d.Feed(Frame(2, std::string(kT2) + " partial at the end")).ok());
  ASSERT_TRUE(d.Finish().ok());
  EXPECT_EQ(c.lines, (std::vector<Line>{{2, kT2, "err"}, {1, kT1, a + b}, {2, kT2, "partial at the end"}}));
}

TEST(DockerLogDemuxerTest, PassesOverlongLinesOnInPieces) {
  std::string big(DockerLogDemuxer::kMaxLine + 10, 'x');
  Collector c;
  DockerLogDemuxer d(c.Sink());
  for (size_t i = 0; i < big.size(); i += 16384) {
    ASSERT_TRUE(d.Feed(Frame(1, std::string(kT1) + " " + big.substr(i, 16384))).ok());
  }
  ASSERT_TRUE(d.Feed(Frame(1, std::string(kT1) + " \n")).ok());
  ASSERT_TRUE(d.Finish().ok());
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[0].text.size(), DockerLogDemuxer::kMaxLine);
  EXPECT_EQ(c.lines[1].text, std::string(10, 'x'));
  EXPECT_EQ(c.lines[1].ts, kT1);
}

TEST(DockerLogDemuxerTest, StopsWhenTheSinkSaysSo) {
  Collector c;
  c.stop_after = 1;
  DockerLogDemuxer d(c.Sink());
  EXPECT_EQ(d.Feed(Frame(1, std::string(kT1) + " one\n" + kT1 + " two\n")).code(), StatusCode::kAborted);
  EXPECT_EQ(d.Feed(Frame(1, std::string(kT1) + " three\n")).code(), StatusCode::kAborted);
  EXPECT_EQ(c.lines.size(), 1u);
}

TEST(DockerLogDemuxerTest, RefusesWhatIsNotFramed) {
  Collector c;
  EXPECT_EQ(DockerLogDemuxer(c.Sink()).Feed("hello from a tty container\n").code(), StatusCode::kFailedPrecondition);
  std::string huge = Frame(1, "");
  huge[4] = 0x7f;  // a 2 GB frame
  EXPECT_EQ(DockerLogDemuxer(c.Sink()).Feed(huge).code(), StatusCode::kInternal);
  Status daemon_error = DockerLogDemuxer(c.Sink()).Feed(Frame(3, "driver failed"));
  EXPECT_EQ(daemon_error.code(), StatusCode::kInternal);
  EXPECT_NE(daemon_error.message().find("driver failed"), std::string::npos);
  DockerLogDemuxer truncated(c.Sink());
  ASSERT_TRUE(truncated.Feed(Frame(1, std::string(kT1) + " cut").substr(0, 12)).ok());
  EXPECT_EQ(truncated.Finish().code(), StatusCode::kInternal);
  EXPECT_TRUE(c.lines.empty());
}

// ---- errors against sockets that are not a healthy dockerd

// A unix socket at `path`, bound; listening when `listen_backlog` > 0.
int BoundSocket(const std::string& path, int listen_backlog) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << path;
  if (listen_backlog > 0) {
    EXPECT_EQ(listen(fd, listen_backlog), 0);
  }
  return fd;
}

class DockerApiFakeSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rmdkfakeXXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (int fd : fds_) close(fd);
    fs::remove_all(dir_);
  }
  std::string Path() const { return (dir_ / "docker.sock").string(); }

  // Answers one connection with `answer`, after reading the request head.
  void ServeOnce(std::string answer) {
    int fd = BoundSocket(Path(), 4);
    fds_.push_back(fd);
    server_ = std::jthread([fd, answer = std::move(answer)] {
      int c = accept(fd, nullptr, nullptr);
      if (c < 0) return;
      std::string got;
      char buf[4096];
      while (got.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = read(c, buf, sizeof buf);
        if (n <= 0) break;
        got.append(buf, n);
      }
      for (size_t off = 0; off < answer.size();) {
        ssize_t n = send(c, answer.data() + off, answer.size() - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += n;
      }
      close(c);
    });
  }

  fs::path dir_;
  std::vector<int> fds_;
  std::jthread server_;
};

TEST_F(DockerApiFakeSocketTest, MissingSocketIsUnavailable) {
  Status s = DockerApi(Path()).Ping();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("docker: cannot reach " + Path()), std::string::npos) << s.ToString();
}

TEST_F(DockerApiFakeSocketTest, SocketNobodyListensOnIsUnavailable) {
  fds_.push_back(BoundSocket(Path(), 0));
  Status s = DockerApi(Path()).Version().status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
}

TEST_F(DockerApiFakeSocketTest, SilentDaemonIsDeadlineExceeded) {
  fds_.push_back(BoundSocket(Path(), 4));  // the kernel accepts; nobody answers
  auto start = std::chrono::steady_clock::now();
  Status s = DockerApi(Path(), 200ms).Version().status();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST_F(DockerApiFakeSocketTest, OversizeAnswerIsRefused) {
  ServeOnce("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{}");
  Status s = DockerApi(Path(), 5s).Version().status();
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
}

TEST_F(DockerApiFakeSocketTest, KeepsTheDaemonsMessage) {
  std::string body = R"({"message":"the disk is on fire"})";
  ServeOnce("HTTP/1.1 503 Service Unavailable\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  Status s = DockerApi(Path(), 5s).Version().status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_EQ(s.message(), "docker: version: the disk is on fire");
}

TEST(DockerApiArgsTest, RefusesIdsThatWouldChangeTheRoute) {
  DockerApi api("/nonexistent/docker.sock");
  EXPECT_EQ(api.InspectContainer("abc/../../images").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(api.StartContainer("").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(api.InspectImage("a b").status().code(), StatusCode::kInvalidArgument);
}

// ---- the real daemon

constexpr const char* kImage = "rmtest:base";

class DockerApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = new Dockerd;
    skip_ = daemon_->Start();
    if (!skip_.empty()) return;
    tar_ = daemon_->dir() / "image.tar";
    setup_ = BuildImageTar(daemon_->dir(), tar_);
    if (setup_.ok()) setup_ = DockerApi(daemon_->socket()).ImportImage(tar_.string(), "rmtest", "base", {});
  }
  static void TearDownTestSuite() {
    if (daemon_ && skip_.empty()) {
      // Running containers would make dockerd's shutdown wait for them.
      DockerApi api(daemon_->socket());
      if (auto left = api.ListContainers({{"rm.test.suite", Suite()}}, true); left.ok()) {
        for (const json& c : *left) (void)api.RemoveContainer(c["Id"].get<std::string>(), true);
      }
    }
    if (daemon_) daemon_->Stop();
    delete daemon_;
    daemon_ = nullptr;
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(setup_.ok()) << setup_.ToString();
  }

  static std::string Suite() { return "rmtest-" + std::to_string(getpid()); }

  DockerApi Api() const { return DockerApi(daemon_->socket(), 30s); }

  // A container of the suite, running `script` under /bin/sh.
  static json Config(const std::string& script, const std::string& test_case) {
    return {{"Image", kImage},
            {"Cmd", {"/bin/sh", "-c", script}},
            {"Tty", false},
            {"Labels", {{"rm.test.suite", Suite()}, {"rm.test.case", test_case}}},
            {"HostConfig", {{"NetworkMode", "none"}, {"Memory", 64 << 20}, {"AutoRemove", false}}}};
  }

  std::string Run(const std::string& name, const std::string& script) {
    auto id = Api().CreateContainer(name, Config(script, name));
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    if (!id.ok()) return "";
    Status s = Api().StartContainer(*id);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return *id;
  }

  static std::vector<Line> Follow(const DockerApi& api, const std::string& id, const std::string& since) {
    Collector c;
    DockerApi::LogOptions options;
    options.since = since;
    Status s = api.FollowLogs(id, options, c.Sink());
    EXPECT_TRUE(s.ok()) << s.ToString();
    return c.lines;
  }

  static std::vector<std::string> Texts(const std::vector<Line>& lines, int stream) {
    std::vector<std::string> out;
    for (const Line& l : lines) {
      if (l.stream == stream) out.push_back(l.text);
    }
    return out;
  }

  static inline Dockerd* daemon_ = nullptr;
  static inline std::string skip_;
  static inline Status setup_;
  static inline fs::path tar_;
};

TEST_F(DockerApiTest, PingAndVersion) {
  EXPECT_TRUE(Api().Ping().ok());
  auto v = Api().Version();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_TRUE((*v)["ApiVersion"].is_string()) << v->dump();
  EXPECT_GE((*v)["ApiVersion"].get<std::string>(), "1.41");
  EXPECT_TRUE((*v)["Version"].is_string());
}

TEST_F(DockerApiTest, ImportAndInspectImage) {
  DockerApi api = Api();
  Status s = api.ImportImage(tar_.string(), "rmtest", "import", {"ENV RM_TEST=1", "LABEL rm.test=import"});
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto image = api.InspectImage("rmtest:import");
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ((*image)["RepoTags"], json({"rmtest:import"}));
  EXPECT_EQ((*image)["Config"]["Env"], json({"RM_TEST=1"}));
  EXPECT_EQ((*image)["Config"]["Labels"]["rm.test"], "import");

  EXPECT_EQ(api.InspectImage("rmtest:absent").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(api.ImportImage((daemon_->dir() / "absent.tar").string(), "rmtest", "x", {}).code(),
            StatusCode::kNotFound);
  // Refused before the body is read: the answer still says why.
  s = api.ImportImage(tar_.string(), "Upper", "x", {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  s = api.ImportImage(tar_.string(), "rmtest", "x", {"NOSUCH instruction"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  const fs::path junk = daemon_->dir() / "junk.tar";
  std::ofstream(junk) << std::string(100000, 'j');
  s = api.ImportImage(junk.string(), "rmtest", "junk", {});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tar"), std::string::npos) << s.ToString();
}

TEST_F(DockerApiTest, RunFollowWaitResumeListRemove) {
  DockerApi api = Api();
  const std::string id = Run("rmtest-logs", "echo one; echo two; echo err >&2; echo three; exit 3");
  ASSERT_FALSE(id.empty());

  std::vector<Line> lines = Follow(api, id, "");  // returns once the container exited and its logs drained
  auto code = api.WaitContainer(id, 10s);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 3);
  // stdout and stderr are separate pipes: ordered within each, not between.
  EXPECT_EQ(Texts(lines, 1), (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_EQ(Texts(lines, 2), (std::vector<std::string>{"err"}));
  std::vector<int64_t> stdout_ts;
  for (const Line& l : lines) {
    auto ns = DockerApi::ParseDockerTimestamp(l.ts);
    ASSERT_TRUE(ns.ok()) << l;
    if (l.stream == 1) stdout_ts.push_back(*ns);
  }
  ASSERT_EQ(stdout_ts.size(), 3u);
  EXPECT_LT(stdout_ts[0], stdout_ts[1]);
  EXPECT_LT(stdout_ts[1], stdout_ts[2]);

  // `since` is inclusive to the nanosecond: the line stamped exactly `since`
  // comes again; one nanosecond later, only what followed it.
  std::vector<Line> again = Follow(api, id, DockerApi::FormatSince(stdout_ts[1]));
  EXPECT_EQ(Texts(again, 1), (std::vector<std::string>{"two", "three"}));
  again = Follow(api, id, DockerApi::FormatSince(stdout_ts[1] + 1));
  EXPECT_EQ(Texts(again, 1), (std::vector<std::string>{"three"}));
  for (const Line& l : again) EXPECT_GT(DockerApi::ParseDockerTimestamp(l.ts).value(), stdout_ts[1]) << l;

  auto inspect = api.InspectContainer(id);
  ASSERT_TRUE(inspect.ok()) << inspect.status().ToString();
  EXPECT_EQ((*inspect)["State"]["ExitCode"], 3);
  EXPECT_EQ((*inspect)["HostConfig"]["Memory"], 64 << 20);
  EXPECT_EQ((*inspect)["HostConfig"]["NetworkMode"], "none");

  const std::map<std::string, std::string> labels = {{"rm.test.suite", Suite()}, {"rm.test.case", "rmtest-logs"}};
  auto listed = api.ListContainers(labels, true);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0]["Id"], id);
  EXPECT_EQ(api.ListContainers(labels, false)->size(), 0u);  // exited
  EXPECT_EQ(api.ListContainers({{"rm.test.case", ""}, {"rm.test.suite", Suite()}}, true)->size(), 1u);

  auto dup = api.CreateContainer("rmtest-logs", Config("true", "dup"));
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists) << dup.status().ToString();

  ASSERT_TRUE(api.RemoveContainer(id, true).ok());
  EXPECT_TRUE(api.ListContainers(labels, true)->empty());
  EXPECT_TRUE(api.RemoveContainer(id, true).ok());  // nothing left to remove
  EXPECT_EQ(api.InspectContainer(id).status().code(), StatusCode::kNotFound);
}

TEST_F(DockerApiTest, KillStopAndForcedRemove) {
  DockerApi api = Api();
  const std::string killed = Run("rmtest-kill", "exec sleep 1000");
  const std::string stopped = Run("rmtest-stop", "exec sleep 1000");
  const std::string removed = Run("rmtest-remove", "exec sleep 1000");
  ASSERT_FALSE(killed.empty() || stopped.empty() || removed.empty());

  EXPECT_EQ(api.WaitContainer(killed, 200ms).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(api.StartContainer(killed).ok());  // already running
  ASSERT_TRUE(api.KillContainer(killed, "SIGKILL").ok());
  EXPECT_EQ(api.WaitContainer(killed, 10s).value(), 137);
  EXPECT_EQ(api.KillContainer(killed, "SIGKILL").code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(api.StopContainer(killed, 1).ok());  // already stopped

  // sleep as pid 1 ignores SIGTERM, so stop ends with SIGKILL after 1 s.
  ASSERT_TRUE(api.StopContainer(stopped, 1).ok());
  EXPECT_EQ(api.InspectContainer(stopped).value()["State"]["Running"], false);
  EXPECT_EQ(api.WaitContainer(stopped, 10s).value(), 137);

  EXPECT_EQ(api.RemoveContainer(removed, false).code(), StatusCode::kFailedPrecondition);  // running
  ASSERT_TRUE(api.RemoveContainer(removed, true).ok());
  ASSERT_TRUE(api.RemoveContainer(killed, false).ok());
  ASSERT_TRUE(api.RemoveContainer(stopped, false).ok());
  auto left = api.ListContainers({{"rm.test.suite", Suite()}}, true);
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
}

TEST_F(DockerApiTest, FollowStopsOnRequest) {
  DockerApi api = Api();
  const std::string chatty = Run("rmtest-chatty", "while :; do echo tick; sleep 0.05; done");
  const std::string quiet = Run("rmtest-quiet", "exec sleep 1000");
  ASSERT_FALSE(chatty.empty() || quiet.empty());

  Collector c;
  c.stop_after = 3;
  ASSERT_TRUE(api.FollowLogs(chatty, {}, c.Sink()).ok());
  EXPECT_EQ(Texts(c.lines, 1), (std::vector<std::string>{"tick", "tick", "tick"}));

  auto start = std::chrono::steady_clock::now();
  DockerApi::LogOptions options;
  options.poll = 50ms;
  options.stop_requested = [&] { return std::chrono::steady_clock::now() - start > 300ms; };
  Collector none;
  ASSERT_TRUE(api.FollowLogs(quiet, options, none.Sink()).ok());
  EXPECT_TRUE(none.lines.empty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);

  ASSERT_TRUE(api.RemoveContainer(chatty, true).ok());
  ASSERT_TRUE(api.RemoveContainer(quiet, true).ok());
}

TEST_F(DockerApiTest, MissingThingsAreNotFound) {
  DockerApi api = Api();
  auto inspect = api.InspectContainer("rmtest-no-such");
  EXPECT_EQ(inspect.status().code(), StatusCode::kNotFound);
  EXPECT_NE(inspect.status().message().find("No such container"), std::string::npos) << inspect.status().ToString();
  EXPECT_EQ(api.StartContainer("rmtest-no-such").code(), StatusCode::kNotFound);
  EXPECT_EQ(api.WaitContainer("rmtest-no-such", 5s).status().code(), StatusCode::kNotFound);
  Collector c;
  EXPECT_EQ(api.FollowLogs("rmtest-no-such", {}, c.Sink()).code(), StatusCode::kNotFound);
  json config = Config("true", "missing-image");
  config["Image"] = "rmtest:absent";
  EXPECT_EQ(api.CreateContainer("", config).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ringmaster::agent
