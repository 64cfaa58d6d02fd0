// RenderTop: bars and their colours, lines that fit the width, names cut short,
// fields a server may leave out, the jobs' flags, errors in the frame.
#include "cli/top.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ringmaster::cli {
namespace {

using nlohmann::json;

// What a terminal shows: escape sequences dropped.
std::string Visible(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\x1b') {
      ++i;
      if (i < s.size() && s[i] == '[') {
        while (i + 1 < s.size() && !(s[i + 1] >= 0x40 && s[i + 1] <= 0x7E)) ++i;
        ++i;
      }
      continue;
    }
    out += s[i];
  }
  return out;
}

// Columns: one per UTF-8 code point.
int Columns(const std::string& s) {
  std::string v = Visible(s);
  return static_cast<int>(std::count_if(v.begin(), v.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

json Node(const std::string& name, double cpu_util, int64_t used, int64_t total) {
  return {{"name", name},
          {"state", "ready"},
          {"cpu", "4"},
          {"memory_bytes", total},
          {"gpus", json::array()},
          {"allocated", {{"cpu", "1"}, {"memory_bytes", 0}, {"gpus", 0}, {"tasks", 2}}},
          {"usage", {{"cpu_util", cpu_util}, {"memory_used_bytes", used}}}};
}

json Job(int64_t id, const std::string& name, const std::string& state) {
  return {{"id", id}, {"name", name}, {"user", "alice"}, {"state", state}, {"replicas", 2}};
}

TopData Data(json nodes, json jobs) {
  TopData d;
  d.server = "http://127.0.0.1:8080";
  d.time = "15:03:50";
  d.nodes = json{{"nodes", std::move(nodes)}};
  d.jobs = json{{"jobs", std::move(jobs)}};
  return d;
}

std::vector<std::string> Render(const TopData& d, int width = 120, bool ansi = false, int height = 0) {
  TopLayout l;
  l.width = width;
  l.height = height;
  l.ansi = ansi;
  return RenderTop(d, l);
}

// The line that contains `needle`, or "" (the test then fails on what it expects of it).
std::string LineWith(const std::vector<std::string>& lines, const std::string& needle) {
  for (const std::string& l : lines) {
    if (Visible(l).find(needle) != std::string::npos) return Visible(l);
  }
  return "";
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  return all;
}

// The bars of a row: what is between each "[" and "]".
std::vector<std::string> Bars(const std::string& row) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = row.find('[', at)) != std::string::npos) {
    const size_t end = row.find(']', at);
    if (end == std::string::npos) break;
    out.push_back(row.substr(at + 1, end - at - 1));
    at = end + 1;
  }
  return out;
}

TEST(Render, HeaderCountsNodesAndJobs) {
  json nodes = {Node("a", 0.1, 1, 2), Node("b", 0.1, 1, 2)};
  nodes[1]["state"] = "unreachable";
  TopData d = Data(nodes, {Job(1, "x", "RUNNING"), Job(2, "y", "SCHEDULED"), Job(3, "z", "PENDING"),
                           Job(4, "w", "SUCCEEDED")});
  d.all_users = true;
  const std::string header = Render(d, 200)[0];
  EXPECT_NE(header.find("http://127.0.0.1:8080"), std::string::npos) << header;
  EXPECT_NE(header.find("15:03:50"), std::string::npos) << header;
  EXPECT_NE(header.find("nodes 1/2 ready"), std::string::npos) << header;
  EXPECT_NE(header.find("2 running, 1 pending"), std::string::npos) << header;
  EXPECT_NE(header.find("all users"), std::string::npos) << header;
  EXPECT_EQ(header.find("q quits"), std::string::npos) << "the hint is for the interactive view: " << header;
  EXPECT_NE(Render(d, 200, true)[0].find("q quits"), std::string::npos);
  const auto narrow = Render(d, 80);  // too narrow for one line: two
  EXPECT_NE(narrow[0].find("http://127.0.0.1:8080"), std::string::npos) << narrow[0];
  EXPECT_EQ(narrow[1], "nodes 1/2 ready  jobs 2 running, 1 pending (all users)");
}

TEST(Render, BarsShowUsageAndMemory) {
  const int64_t gi = int64_t{1} << 30;
  json node = Node("n1", 0.53, static_cast<int64_t>(3.1 * gi), 8 * gi);
  node["gpus"] = {{{"index", 0}, {"model", "H100"}}, {{"index", 1}, {"model", "H100"}}};
  node["usage"]["gpu_util"] = 0.25;
  const std::string row = LineWith(Render(Data({node}, json::array())), "n1");
  ASSERT_FALSE(row.empty());
  EXPECT_NE(row.find("53%"), std::string::npos) << row;
  EXPECT_NE(row.find("3.1G/8G"), std::string::npos) << row;
  EXPECT_NE(row.find("25%"), std::string::npos) << row;
  const std::vector<std::string> bars = Bars(row);
  ASSERT_EQ(bars.size(), 3u) << row;
  const double fill[] = {0.53, 3.1 / 8, 0.25};
  for (size_t i = 0; i < 3; ++i) {
    const auto n = std::count(bars[i].begin(), bars[i].end(), '|');
    EXPECT_EQ(n, std::lround(fill[i] * static_cast<double>(bars[i].size()))) << "bar " << i << ": " << row;
    EXPECT_EQ(bars[i].find_first_not_of('|'), static_cast<size_t>(n)) << "filled from the left: " << row;
  }
  EXPECT_EQ(row.substr(row.size() - 1), "2") << "the tasks column ends the row: " << row;
}

TEST(Render, BarsAreColouredByLevelOnlyWithAnsi) {
  auto cpu_row = [](double util, bool ansi) {
    json node = Node("n1", util, 1, 2);
    for (const std::string& l : Render(Data({node}, json::array()), 120, ansi)) {
      if (Visible(l).rfind("n1", 0) == 0) return l;
    }
    return std::string();
  };
  EXPECT_NE(cpu_row(0.30, true).find("\x1b[32m|"), std::string::npos) << "green below 60%";
  EXPECT_NE(cpu_row(0.70, true).find("\x1b[33m|"), std::string::npos) << "yellow below 85%";
  EXPECT_NE(cpu_row(0.85, true).find("\x1b[31m|"), std::string::npos) << "red from 85%";
  EXPECT_NE(cpu_row(1.0, true).find("\x1b[31m|"), std::string::npos);
  json nodes = {Node("n1", 0.9, 1, 2)};
  json jobs = {Job(1, "x", "RUNNING")};
  jobs[0]["flags"] = {{{"kind", "idle"}}};
  for (const std::string& l : Render(Data(nodes, jobs), 120, false)) {
    EXPECT_EQ(l.find('\x1b'), std::string::npos) << "plain text has no escapes: " << l;
  }
}

TEST(Render, NodeWithoutGpusOrUsage) {
  json bare = {{"name", "bare"}, {"state", "ready"}, {"gpus", nullptr}};  // no usage, memory or allocation
  json odd = Node("odd", 0.5, 1, 2);
  odd["usage"]["cpu_util"] = "lots";  // a wrong type is as good as missing
  odd["usage"].erase("memory_used_bytes");
  const auto lines = Render(Data({bare, odd}, json::array()));
  const std::string b = LineWith(lines, "bare");
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.find('['), std::string::npos) << "no usage, no bars: " << b;
  EXPECT_NE(b.find(" ? "), std::string::npos) << b;
  EXPECT_NE(b.find(" - "), std::string::npos) << "no GPUs: " << b;
  const std::string o = LineWith(lines, "odd");
  EXPECT_NE(o.find("?/2B"), std::string::npos) << "total without used: " << o;
  EXPECT_EQ(o.find('['), std::string::npos) << o;

  json gpu_node = Node("withgpu", 0.5, 1, 2);
  gpu_node["gpus"] = {{{"index", 0}}};  // GPUs, but a server that reports no gpu_util
  const std::string g = LineWith(Render(Data({gpu_node}, json::array())), "withgpu");
  EXPECT_EQ(Bars(g).size(), 2u) << "cpu and memory bars, no GPU bar: " << g;
  EXPECT_NE(g.find(" ? "), std::string::npos) << g;
}

TEST(Render, ClusterWithoutGpusGivesItsColumnToTheBars) {
  const int64_t gi = int64_t{1} << 30;
  const auto lines = Render(Data({Node("top-e2e-node", 0.5, gi, 2 * gi)}, json::array()), 80);
  const std::string row = LineWith(lines, "top-e2e-node");
  ASSERT_FALSE(row.empty()) << "a 12-character name is not cut at 80 columns: " << Joined(lines);
  const std::vector<std::string> bars = Bars(row);
  ASSERT_EQ(bars.size(), 2u) << row;
  EXPECT_GE(bars[0].size(), 10u) << row;
  EXPECT_NE(row.find("1G/2G  -        2"), std::string::npos) << "GPU is a narrow -: " << row;
}

TEST(Render, JobsShowUsageAndFlags) {
  json running = Job(7, "train", "RUNNING");
  running["usage"] = {{"cpu_cores", 3.25}, {"memory_bytes", int64_t{512} << 20}, {"gpu_util", 0.87}};
  running["flags"] = {{{"kind", "straggler"}, {"rank", 1}, {"message", "rank 1 is 3x slower"}},
                      {{"kind", "idle"}, {"message", "no GPU use for 10m"}}};
  json pending = Job(9, "waits", "PENDING");
  json done = Job(5, "finished", "SUCCEEDED");
  json failed = Job(6, "broken", "FAILED");
  const auto lines = Render(Data(json::array(), {pending, done, running, failed}), 140);
  const std::string r = LineWith(lines, "train");
  ASSERT_FALSE(r.empty());
  for (const char* want : {"alice", "RUNNING", "3.2", "512M", "87%", "straggler r1, idle"}) {
    EXPECT_NE(r.find(want), std::string::npos) << want << " in: " << r;
  }
  const std::string p = LineWith(lines, "waits");
  ASSERT_FALSE(p.empty());
  EXPECT_NE(p.find("PENDING"), std::string::npos) << p;
  EXPECT_EQ(std::count(p.begin(), p.end(), '-'), 3) << "no usage: cpu, memory and GPU are -: " << p;
  const std::string all = Visible(Joined(lines));
  EXPECT_EQ(all.find("finished"), std::string::npos) << "ended jobs are not shown";
  EXPECT_EQ(all.find("broken"), std::string::npos);
  EXPECT_LT(all.find("train"), all.find("waits")) << "running before pending";
  EXPECT_NE(Joined(Render(Data(json::array(), {running}), 140, true)).find("\x1b[33mstraggler r1"), std::string::npos);
}

TEST(Render, LinesFitTheWidthAndLongNamesAreCut) {
  const std::string long_node = "node-" + std::string(60, 'n') + "-end";
  const std::string long_job = "job-" + std::string(80, 'j') + "-end";
  json running = Job(123456, long_job, "RUNNING");
  running["user"] = "a-user-with-a-long-name";
  running["flags"] = {{{"kind", "straggler"}, {"rank", 12}}, {{"kind", "idle"}}};
  running["usage"] = {{"cpu_cores", 12.0}, {"memory_bytes", int64_t{100} << 30}};
  for (int width : {30, 60, 80, 100, 160, 250}) {
    for (bool ansi : {false, true}) {
      const auto lines = Render(Data({Node(long_node, 0.4, 1 << 30, int64_t{4} << 30)}, {running}), width, ansi);
      for (const std::string& l : lines) EXPECT_LE(Columns(l), width) << "width " << width << ": " << Visible(l);
      const std::string all = Visible(Joined(lines));
      EXPECT_EQ(all.find("-end"), std::string::npos) << "width " << width << ": names are cut\n" << all;
      if (width >= 80) {
        EXPECT_NE(LineWith(lines, "node-").find("..."), std::string::npos) << all;
        EXPECT_NE(LineWith(lines, "job-j").find("..."), std::string::npos) << all;
        EXPECT_NE(LineWith(lines, "job-j").find("123456"), std::string::npos) << all;
      }
      if (width >= 100) {
        EXPECT_NE(LineWith(lines, "job-jjj").find("straggler r12, idle"), std::string::npos) << all;
        EXPECT_NE(LineWith(lines, "node-").find("1G/4G"), std::string::npos) << all;
      }
    }
  }
}

TEST(Render, NamesAreSanitizedAndCutOnCharacters) {
  json evil = Job(1, "x\x1b[2J\x07y", "RUNNING");
  evil["user"] = "bob\xc2\x9b";  // U+009B: CSI on some terminals
  std::string accents;
  for (int i = 0; i < 50; ++i) accents += "\xc3\xa9";  // é: two bytes, one column
  json wide = Job(2, accents, "RUNNING");
  const auto lines = Render(Data(json::array(), {evil, wide}), 80);
  for (const std::string& l : lines) {
    EXPECT_EQ(l.find('\x1b'), std::string::npos) << l;
    EXPECT_EQ(l.find('\x07'), std::string::npos) << l;
    EXPECT_EQ(l.find("\xc2\x9b"), std::string::npos) << l;
    EXPECT_TRUE(ValidUtf8(l)) << l;
    EXPECT_LE(Columns(l), 80) << l;
  }
  // Escaped, not dropped: what was sent stays readable (EscapeControl).
  EXPECT_NE(LineWith(lines, "x\\x1b[2J\\x07y").find("bob\\u009b"), std::string::npos) << Joined(lines);
  EXPECT_NE(LineWith(lines, "\xc3\xa9\xc3\xa9...").size(), 0u) << Joined(lines);
}

TEST(Render, FailedRequestsAreOneLineEach) {
  TopData d = Data({Node("n1", 0.5, 1, 2)}, json::array());
  d.jobs = Unavailable("cannot reach the server at http://127.0.0.1:1: Connection\nrefused");
  auto lines = Render(d);
  EXPECT_NE(LineWith(lines, "n1").size(), 0u) << "the nodes are still shown";
  const std::string err = LineWith(lines, "jobs: cannot reach");
  EXPECT_NE(err.find("Connection refused"), std::string::npos) << Joined(lines);
  EXPECT_NE(Joined(lines).find("jobs ?"), std::string::npos) << Joined(lines);

  d.nodes = json{{"something", "else"}};  // not an answer of GET /api/v1/nodes
  lines = Render(d);
  EXPECT_NE(LineWith(lines, "nodes: the server's answer has no \"nodes\" list").size(), 0u) << Joined(lines);
  EXPECT_NE(Joined(lines).find("nodes ?"), std::string::npos) << Joined(lines);
  for (const std::string& l : Render(d, 40)) EXPECT_LE(Columns(l), 40) << l;
}

TEST(Render, EmptyClusterAndHeightLimit) {
  auto lines = Render(Data(json::array(), json::array()));
  EXPECT_NE(LineWith(lines, "(no nodes)").size(), 0u);
  EXPECT_NE(LineWith(lines, "(no running or pending jobs)").size(), 0u);

  json jobs = json::array();
  for (int i = 1; i <= 30; ++i) jobs.push_back(Job(i, "j" + std::to_string(i), "PENDING"));
  lines = Render(Data({Node("n1", 0.5, 1, 2)}, jobs), 160, true, 12);
  ASSERT_EQ(lines.size(), 12u);
  EXPECT_EQ(Visible(lines.back()), "... 25 more lines (a taller terminal shows them)");
}

TEST(Render, ShortBytes) {
  EXPECT_EQ(ShortBytes(900), "900B");
  EXPECT_EQ(ShortBytes(512.0 * (1 << 20)), "512M");
  EXPECT_EQ(ShortBytes(8.0 * (1 << 30)), "8G");
  EXPECT_EQ(ShortBytes(3.1 * (1 << 30)), "3.1G");
  EXPECT_EQ(ShortBytes(15.6 * (1 << 30)), "16G");
  EXPECT_EQ(ShortBytes(-5), "0B");
}

}  // namespace
}  // namespace ringmaster::cli
