#include "slurm/cli_parse.h"

#include <sys/wait.h>

#include <cctype>
#include <charconv>
#include <set>

#include <fmt/format.h>

namespace ringmaster::slurm {
namespace {

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    size_t n = text.find('\n');
    std::string_view line = text.substr(0, n);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) lines.push_back(line);
    if (n == text.npos) break;
    text.remove_prefix(n + 1);
  }
  return lines;
}

// The first `n` '|'-ended fields of a line and the rest (the last field).
bool SplitFields(std::string_view line, size_t n, std::vector<std::string_view>& fields) {
  fields.clear();
  for (size_t i = 0; i < n; ++i) {
    size_t p = line.find('|');
    if (p == line.npos) return false;
    fields.push_back(line.substr(0, p));
    line.remove_prefix(p + 1);
  }
  fields.push_back(line);
  return true;
}

template <typename T>
bool ToNumber(std::string_view s, T& v) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

// sinfo's state suffixes (sinfo(1), "NODE STATE CODES") as flags.
std::string NodeState(std::string_view s) {
  static constexpr std::pair<char, std::string_view> kFlags[] = {
      {'*', "not_responding"}, {'~', "powered_down"}, {'#', "powering_up"},  {'%', "powering_down"},
      {'!', "power_down_pending"}, {'$', "maintenance"}, {'@', "reboot_pending"}, {'^', "rebooting"},
      {'-', "planned"}};
  std::string flags;
  while (!s.empty()) {
    bool found = false;
    for (const auto& [c, word] : kFlags) {
      if (s.back() == c) {
        flags = "+" + std::string(word) + flags;
        found = true;
      }
    }
    if (!found) break;
    s.remove_suffix(1);
  }
  std::string state(s);
  for (char& c : state) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return state + flags;
}

bool Contains(std::string_view text, std::string_view what) { return text.find(what) != text.npos; }

}  // namespace

std::vector<JobInfo> ParseSqueue(std::string_view out, std::string_view name_prefix) {
  std::vector<JobInfo> jobs;
  std::vector<std::string_view> f;
  for (std::string_view line : Lines(out)) {
    if (!SplitFields(line, 5, f)) continue;
    JobInfo j;
    int wait_status = 0;
    if (!ToNumber(f[0], j.id) || !ToNumber(f[4], wait_status)) continue;
    j.name = std::string(f[5]);
    if (!j.name.starts_with(name_prefix)) continue;
    j.state = std::string(f[1]);
    j.reason = f[2] == "None" ? "" : std::string(f[2]);
    j.nodes = std::string(f[3]);
    // Slurm keeps the batch script's waitpid status: the code in the high
    // byte, the signal in the low seven bits.
    j.exit_code = (wait_status >> 8) & 0xff;
    j.exit_signal = wait_status & 0x7f;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

int GpuCount(std::string_view gres) {
  int total = 0;
  // Entries are split at commas outside parentheses ("gpu:2(IDX:0,2)").
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= gres.size(); ++i) {
    const char c = i < gres.size() ? gres[i] : ',';
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c != ',' || depth > 0) continue;
    std::string_view e = gres.substr(start, i - start);
    start = i + 1;
    // "gpu:2(IDX:0-1)": drop the index list; "gpu:(null):0" is a type, kept.
    if (size_t p = e.rfind('('); e.ends_with(')') && p != e.npos && p > 0 && std::isdigit(static_cast<unsigned char>(e[p - 1]))) {
      e = e.substr(0, p);
    }
    if (!e.starts_with("gpu:") && e != "gpu") continue;
    size_t colon = e.rfind(':');
    int n = 0;
    if (colon != e.npos && ToNumber(e.substr(colon + 1), n)) total += n;
  }
  return total;
}

std::vector<NodeInfo> ParseSinfo(std::string_view out) {
  std::vector<NodeInfo> nodes;
  std::set<std::string, std::less<>> seen;
  std::vector<std::string_view> f;
  for (std::string_view line : Lines(out)) {
    if (!SplitFields(line, 8, f) || seen.contains(f[0])) continue;
    NodeInfo n;
    n.name = std::string(f[0]);
    n.state = NodeState(f[1]);
    // CPUsState: allocated/idle/other/total.
    std::vector<std::string_view> cpus;
    for (std::string_view c = f[2];;) {
      size_t p = c.find('/');
      cpus.push_back(c.substr(0, p));
      if (p == c.npos) break;
      c.remove_prefix(p + 1);
    }
    if (cpus.size() == 4) {
      (void)ToNumber(cpus[0], n.cpus_alloc);
      (void)ToNumber(cpus[3], n.cpus);
    }
    std::string_view mem = f[3];
    if (!mem.empty() && mem.back() == '+') mem.remove_suffix(1);
    (void)ToNumber(mem, n.memory_mib);
    (void)ToNumber(f[4], n.memory_alloc_mib);
    n.gres = f[5] == "(null)" ? "" : std::string(f[5]);
    n.gpus = GpuCount(f[5]);
    n.gpus_used = GpuCount(f[6]);
    n.address = std::string(f[7]);
    n.reason = f[8] == "none" ? "" : std::string(f[8]);
    seen.insert(n.name);
    nodes.push_back(std::move(n));
  }
  return nodes;
}

StatusOr<int64_t> ParseSbatchOutput(std::string_view out) {
  std::string_view id = out.substr(0, out.find_first_of(";\n"));
  int64_t v = 0;
  if (!ToNumber(id, v) || v <= 0) return Internal(fmt::format("sbatch printed no job id: {:?}", out.substr(0, 200)));
  return v;
}

std::string SlurmMessage(std::string_view err) {
  std::string_view last;
  for (std::string_view line : Lines(err)) {
    if (Contains(line, "error") || Contains(line, "Unable") || Contains(line, "fatal")) last = line;
  }
  if (last.empty()) {
    auto lines = Lines(err);
    if (!lines.empty()) last = lines.back();
  }
  for (std::string_view prefix : {"error: ", "fatal: ", "Batch job submission failed: "}) {
    if (size_t p = last.find(prefix); p != last.npos) last.remove_prefix(p + prefix.size());
  }
  return std::string(last.substr(0, 500));
}

Status CommandError(std::string_view command, int wait_status, std::string_view err, StatusCode refused) {
  const std::string message = SlurmMessage(err);
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 127) {
    return NotFound(fmt::format("{} is not installed: {}", command, message));
  }
  // Slurm could not be reached, or would not talk to us now: retry later.
  static constexpr std::string_view kUnreachable[] = {
      "Unable to contact slurm controller", "Socket timed out", "Connection refused", "connect failure",
      "Zero Bytes were transmitted", "Communication connection failure", "temporarily unable to accept",
      "Resource temporarily unavailable", "backup controller in standby", "Protocol authentication error",
      "authentication", "Munge", "munge", "Could not establish a configuration source", "Unable to establish"};
  for (std::string_view marker : kUnreachable) {
    if (Contains(err, marker)) return Unavailable(fmt::format("{}: {}", command, message));
  }
  if (message.empty()) {
    return Status(refused, fmt::format("{} failed (wait status {}) and said nothing", command, wait_status));
  }
  return Status(refused, fmt::format("{}: {}", command, message));
}

}  // namespace ringmaster::slurm
