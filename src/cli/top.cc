// `ringmaster top` (top.h): RenderTop turns the answers of GET /api/v1/nodes
// and GET /api/v1/jobs into lines that fit the terminal; Top fetches them on a
// thread of its own (so `q` quits at once, even while a request waits on a
// silent server) and redraws on the alternate screen in raw mode.
#include "cli/top.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <future>
#include <iostream>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "common/json_limits.h"

namespace ringmaster::cli {
namespace {

using nlohmann::json;

constexpr std::chrono::milliseconds kRequestDeadline{3000};
// Newest first: an active job older than the 1,000 newest of its list is not shown.
constexpr int kJobsLimit = 1000;

constexpr const char* kReset = "\x1b[0m";
constexpr const char* kBold = "\x1b[1m";
constexpr const char* kRed = "\x1b[31m";
constexpr const char* kGreen = "\x1b[32m";
constexpr const char* kYellow = "\x1b[33m";

// ---- Text that fits a column -------------------------------------------------

// Names come from users: no control character (C0, DEL or C1) reaches the terminal.
std::string Sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const auto ch = static_cast<unsigned char>(s[i]);
    if (ch == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(s[i + 1]) <= 0x9F) {
      out += '?';  // U+0080..U+009F: C1 controls, CSI among them
      ++i;
    } else if (ch < 0x20 || ch == 0x7F) {
      out += '?';
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out;
}

// Length of the escape sequence at s[i] (ESC [ ... final byte); 0 if none starts there.
size_t EscapeLength(std::string_view s, size_t i) {
  if (s[i] != '\x1b') return 0;
  size_t j = i + 1;
  if (j < s.size() && s[j] == '[') {
    ++j;
    while (j < s.size() && !(s[j] >= 0x40 && s[j] <= 0x7E)) ++j;
  }
  return std::min(j + 1, s.size()) - i;
}

// Columns on a terminal: one per UTF-8 code point, none for escape sequences.
int DisplayWidth(std::string_view s) {
  int w = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (size_t e = EscapeLength(s, i)) {
      i += e - 1;
      continue;
    }
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) ++w;
  }
  return w;
}

// The first `width` columns of s, escape sequences kept whole; a colour cut
// short is reset.
std::string CutToWidth(std::string_view s, int width) {
  std::string out;
  int w = 0;
  bool escapes = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (size_t e = EscapeLength(s, i)) {
      out.append(s.substr(i, e));
      escapes = true;
      i += e - 1;
      continue;
    }
    const bool starts = (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
    if (starts && w == width) {
      if (escapes) out += kReset;
      return out;
    }
    if (starts) ++w;
    out += s[i];
  }
  return out;
}

std::string Pad(const std::string& s, int width, bool right = false) {
  const int fill = std::max(0, width - DisplayWidth(s));
  return right ? std::string(fill, ' ') + s : s + std::string(fill, ' ');
}

// Plain text in a column of `width`: too long, it ends in "..." (names, flags).
std::string Fit(const std::string& text, int width, bool right = false) {
  if (width <= 0) return "";
  std::string s = Sanitize(text);
  if (DisplayWidth(s) > width) s = width >= 6 ? CutToWidth(s, width - 3) + "..." : CutToWidth(s, width);
  return Pad(s, width, right);
}

std::string Paint(const std::string& s, const char* colour, bool ansi) {
  return ansi && !s.empty() ? colour + s + kReset : s;
}

// Cells of a table row, separated by two spaces; the last one is not padded.
std::string JoinRow(const std::vector<std::string>& cells) {
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) line += (i ? "  " : "") + cells[i];
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line;
}

// ---- Fields that may be missing ------------------------------------------------

const json& Field(const json& obj, const char* key) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

std::optional<double> Number(const json& obj, const char* key) {
  const json& v = Field(obj, key);
  if (v.is_number()) return v.get<double>();
  return std::nullopt;
}

std::string Text(const json& obj, const char* key) {
  const json& v = Field(obj, key);
  if (v.is_string()) return EscapeControl(v.get<std::string>());  // names, reasons: no escapes to the terminal
  if (v.is_number() || v.is_boolean()) return v.dump();
  return "";
}

// ---- Cells ---------------------------------------------------------------------

const char* LevelColour(double fraction) {
  const double pct = fraction * 100;
  return pct < 60 ? kGreen : pct < 85 ? kYellow : kRed;
}

std::string Percent(double fraction) { return fmt::format("{:.0f}%", std::max(0.0, fraction * 100)); }

// "[|||||     ] 53%": `inner` columns of bar, then `text` right-aligned in `text_width`.
std::string Bar(double fraction, int inner, const std::string& text, int text_width, bool ansi) {
  const double f = std::isfinite(fraction) ? std::clamp(fraction, 0.0, 1.0) : 0.0;
  const int n = static_cast<int>(std::lround(f * inner));
  return "[" + Paint(std::string(n, '|'), LevelColour(fraction), ansi) + std::string(inner - n, ' ') + "] " +
         Pad(text, text_width, true);
}

// Status messages are one line, whatever the server put in them.
std::string ErrorLine(const std::string& what, const Status& st, int width, bool ansi) {
  std::string msg = st.message();
  std::replace(msg.begin(), msg.end(), '\n', ' ');
  return Paint(Fit(what + ": " + msg, width), kRed, ansi);
}

// ---- Nodes ---------------------------------------------------------------------

struct NodeRow {
  std::string name, state;
  std::optional<double> cpu;       // utilisation 0..1
  std::optional<double> mem;       // used / total
  std::string mem_text;            // "3.1G/8G"
  bool has_gpus = false;
  std::optional<double> gpu;       // average utilisation 0..1
  std::string tasks;
};

NodeRow ToNodeRow(const json& n) {
  NodeRow r;
  r.name = Text(n, "name");
  r.state = Text(n, "state");
  const json& usage = Field(n, "usage");
  r.cpu = Number(usage, "cpu_util");
  const std::optional<double> used = Number(usage, "memory_used_bytes");
  const std::optional<double> total = Number(n, "memory_bytes");
  if (used && total && *total > 0) r.mem = *used / *total;
  if (used || total) r.mem_text = (used ? ShortBytes(*used) : "?") + "/" + (total ? ShortBytes(*total) : "?");
  const json& gpus = Field(n, "gpus");
  r.has_gpus = gpus.is_array() && !gpus.empty();
  r.gpu = Number(usage, "gpu_util");
  r.tasks = Text(Field(n, "allocated"), "tasks");
  return r;
}

void RenderNodes(const json& nodes, int width, bool ansi, std::vector<std::string>* out) {
  std::vector<NodeRow> rows;
  for (const json& n : nodes) rows.push_back(ToNodeRow(n));
  int name_want = 4, mem_text = 3;
  bool any_gpus = false;
  for (const NodeRow& r : rows) {
    name_want = std::max(name_want, DisplayWidth(Sanitize(r.name)));
    mem_text = std::max(mem_text, DisplayWidth(r.mem_text));
    any_gpus = any_gpus || r.has_gpus;
  }
  name_want = std::min(name_want, 24);
  // NAME  STATE(11)  [CPU] 100%  [MEM] used/total  [GPU] 100%  TASKS(5), two spaces apart;
  // on a cluster without GPUs the GPU column is only "-".
  const int bars = any_gpus ? 3 : 2;
  const int fixed = 11 + 5 + 5 * 2 + (3 + 4) + (3 + mem_text) + (any_gpus ? 3 + 4 : 3);
  const int avail = width - fixed;  // the name and the bars share it
  const int name_w = std::min(name_want, std::max(8, avail - bars * 5));  // bars of 5 before names are cut
  const int inner = std::clamp((avail - name_w) / bars, 3, 50);
  const int cpu_w = inner + 3 + 4, mem_w = inner + 3 + mem_text, gpu_w = any_gpus ? cpu_w : 3;

  std::string head = JoinRow({Fit("NODE", name_w), Fit("STATE", 11), Fit("CPU", cpu_w), Fit("MEM", mem_w),
                              Fit("GPU", gpu_w), Fit("TASKS", 5, true)});
  out->push_back(Paint(head, kBold, ansi));
  for (const NodeRow& r : rows) {
    std::string state = Fit(r.state.empty() ? "?" : r.state, 11);
    if (r.state != "ready") state = Paint(state, kRed, ansi);
    std::string cpu = r.cpu ? Bar(*r.cpu, inner, Percent(*r.cpu), 4, ansi) : Fit("?", cpu_w);
    std::string mem = r.mem ? Bar(*r.mem, inner, r.mem_text, mem_text, ansi)
                            : Fit(r.mem_text.empty() ? "?" : r.mem_text, mem_w);
    std::string gpu = !r.has_gpus ? Fit("-", gpu_w)
                      : r.gpu     ? Bar(*r.gpu, inner, Percent(*r.gpu), 4, ansi)
                                  : Fit("?", gpu_w);
    out->push_back(JoinRow({Fit(r.name, name_w), state, cpu, mem, gpu, Fit(r.tasks.empty() ? "-" : r.tasks, 5, true)}));
  }
  if (rows.empty()) out->push_back("(no nodes)");
}

// ---- Jobs ----------------------------------------------------------------------

bool IsActive(const std::string& state) { return state == "RUNNING" || state == "SCHEDULED" || state == "PENDING"; }

std::string Flags(const json& job) {
  std::string out;
  const json& flags = Field(job, "flags");
  if (!flags.is_array()) return out;
  for (const json& f : flags) {
    std::string kind = Text(f, "kind");
    if (kind.empty()) continue;
    if (const json& rank = Field(f, "rank"); rank.is_number_integer()) kind += fmt::format(" r{}", rank.get<int64_t>());
    out += (out.empty() ? "" : ", ") + kind;
  }
  return out;
}

std::string Cores(double cores) { return cores < 10 ? fmt::format("{:.1f}", cores) : fmt::format("{:.0f}", cores); }

void RenderJobs(const json& jobs, int width, bool ansi, std::vector<std::string>* out) {
  std::vector<const json*> active;
  for (const json& j : jobs) {
    if (IsActive(Text(j, "state"))) active.push_back(&j);
  }
  // Running (and starting) first, then pending; oldest first within each.
  auto rank = [](const json* j) { return Text(*j, "state") == "PENDING" ? 1 : 0; };
  std::stable_sort(active.begin(), active.end(), [&](const json* a, const json* b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return Number(*a, "id").value_or(0) < Number(*b, "id").value_or(0);
  });
  struct Row {
    std::string id, user, name, state, replicas, cpu, mem, gpu, flags;
  };
  std::vector<Row> rows;
  int id_w = 3, user_w = 4, name_want = 4, flags_want = 5;
  for (const json* j : active) {
    const json& usage = Field(*j, "usage");
    Row r{Text(*j, "id"), Text(*j, "user"), Text(*j, "name"), Text(*j, "state"), Text(*j, "replicas"), "-", "-", "-",
          Flags(*j)};
    if (auto v = Number(usage, "cpu_cores")) r.cpu = Cores(*v);
    if (auto v = Number(usage, "memory_bytes")) r.mem = ShortBytes(*v);
    if (auto v = Number(usage, "gpu_util")) r.gpu = Percent(*v);
    id_w = std::max(id_w, DisplayWidth(r.id));
    user_w = std::max(user_w, DisplayWidth(Sanitize(r.user)));
    name_want = std::max(name_want, DisplayWidth(Sanitize(r.name)));
    flags_want = std::max(flags_want, DisplayWidth(Sanitize(r.flags)));
    rows.push_back(std::move(r));
  }
  user_w = std::min(user_w, 12);
  name_want = std::min(name_want, 32);
  // JOB USER NAME STATE(9) REPL(4) CPU(5) MEM(6) GPU%(4) FLAGS, two spaces apart.
  const int fixed = id_w + user_w + 9 + 4 + 5 + 6 + 4 + 8 * 2;
  const int avail = width - fixed;  // the name and the flags share it
  const int name_w = std::min(name_want, std::max(8, avail - flags_want));  // names are cut before flags
  const int flags_w = std::max(0, avail - name_w);

  std::string head = JoinRow({Fit("JOB", id_w, true), Fit("USER", user_w), Fit("NAME", name_w), Fit("STATE", 9),
                              Fit("REPL", 4, true), Fit("CPU", 5, true), Fit("MEM", 6, true), Fit("GPU%", 4, true),
                              "FLAGS"});
  out->push_back(Paint(head, kBold, ansi));
  for (const Row& r : rows) {
    out->push_back(JoinRow({Fit(r.id, id_w, true), Fit(r.user, user_w), Fit(r.name, name_w), Fit(r.state, 9),
                            Fit(r.replicas, 4, true), Fit(r.cpu, 5, true), Fit(r.mem, 6, true), Fit(r.gpu, 4, true),
                            Paint(Fit(r.flags, flags_w), kYellow, ansi)}));
  }
  if (rows.empty()) out->push_back("(no running or pending jobs)");
}

// ---- The header ----------------------------------------------------------------

// "ringmaster top  URL  TIME" and the counts: one line when it fits, else two.
std::vector<std::string> Header(const TopData& d, int width, bool ansi) {
  std::string nodes = "nodes ?";
  if (d.nodes.ok() && Field(*d.nodes, "nodes").is_array()) {
    int ready = 0, total = 0;
    for (const json& n : Field(*d.nodes, "nodes")) {
      ++total;
      ready += Text(n, "state") == "ready";
    }
    nodes = fmt::format("nodes {}/{} ready", ready, total);
  }
  std::string jobs = "jobs ?";
  if (d.jobs.ok() && Field(*d.jobs, "jobs").is_array()) {
    int running = 0, pending = 0;
    for (const json& j : Field(*d.jobs, "jobs")) {
      const std::string s = Text(j, "state");
      running += s == "RUNNING" || s == "SCHEDULED";
      pending += s == "PENDING";
    }
    jobs = fmt::format("jobs {} running, {} pending{}", running, pending, d.all_users ? " (all users)" : "");
  }
  const std::string where =
      fmt::format("ringmaster top  {}  {}{}", Sanitize(d.server), d.time, ansi ? "  (q quits)" : "");
  const std::string counts = nodes + "  " + jobs;
  if (DisplayWidth(where) + 2 + DisplayWidth(counts) <= width) return {where + "  " + counts};
  return {where, counts};
}

// ---- The terminal ----------------------------------------------------------------

std::string LocalTime() {
  const std::time_t now = std::time(nullptr);
  struct tm tm {};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

// Fetches one frame's data. Admins see every user's jobs: ?all=1 is tried
// until the server refuses it (403), then the caller's own are asked for.
class Fetcher {
 public:
  explicit Fetcher(client::ApiClient api) : api_(std::move(api)) {}

  TopData Fetch() {
    TopData d;
    d.server = api_.server_url();
    d.time = LocalTime();
    const client::CallOptions opts{kRequestDeadline};
    // Side by side: a silent server costs one deadline per frame, not two.
    auto nodes = std::async(std::launch::async, [this, opts] { return api_.Get("/api/v1/nodes", opts); });
    d.jobs = Jobs(opts, &d.all_users);
    d.nodes = nodes.get();
    return d;
  }

 private:
  StatusOr<json> Jobs(const client::CallOptions& opts, bool* all_users) {
    if (try_all_) {
      auto all = api_.Get(fmt::format("/api/v1/jobs?all=1&limit={}", kJobsLimit), opts);
      if (all.ok() || all.status().code() != StatusCode::kPermissionDenied) {
        *all_users = true;
        return all;
      }
      try_all_ = false;
    }
    return api_.Get(fmt::format("/api/v1/jobs?limit={}", kJobsLimit), opts);
  }

  client::ApiClient api_;
  bool try_all_ = true;
};

// The terminal's size from the fd; 80 columns (or $COLUMNS) and no height limit if unknown.
TopLayout LayoutOf(int fd) {
  TopLayout l;
  struct winsize ws {};
  if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    l.width = ws.ws_col;
    l.height = ws.ws_row;
    return l;
  }
  if (const char* cols = getenv("COLUMNS"); cols && atoi(cols) > 0) l.width = atoi(cols);
  return l;
}

void WriteAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the terminal is gone: nothing more to show
    s.remove_prefix(static_cast<size_t>(n));
  }
}

int g_wake_fd = -1;  // the self-pipe's write end: signal handlers and the fetcher wake the loop

void OnSignal(int sig) {
  const int saved = errno;
  const char c = sig == SIGWINCH ? 'w' : 'x';
  if (write(g_wake_fd, &c, 1) < 0) {
  }  // a full pipe already holds a wake-up
  errno = saved;
}

// Raw mode without echo on stdin (when it is a terminal), the alternate screen
// and a hidden cursor for as long as it lives; the signals that end or resize
// the view wake the loop. Everything is restored when it goes.
class TerminalSession {
 public:
  TerminalSession() {
    // Before the terminal is touched: dying here leaves it as it was.
    if (pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) Die(std::string("top: pipe: ") + strerror(errno));
    g_wake_fd = pipe_[1];
    raw_ = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_) == 0;
    if (raw_) {
      termios t = saved_;
      // No line buffering, no echo; Ctrl-C arrives as a byte (0x03) the loop reads.
      t.c_lflag &= ~(ICANON | ECHO | ISIG | IEXTEN);
      t.c_iflag &= ~(IXON | ICRNL);
      t.c_cc[VMIN] = 1;
      t.c_cc[VTIME] = 0;
      tcsetattr(STDIN_FILENO, TCSANOW, &t);
    }
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &sa, &old_[i]);
    WriteAll(STDOUT_FILENO, "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J");
  }
  ~TerminalSession() {
    WriteAll(STDOUT_FILENO, "\x1b[0m\x1b[?25h\x1b[?1049l");
    if (raw_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &old_[i], nullptr);
    g_wake_fd = -1;
    for (int fd : pipe_) {
      if (fd >= 0) close(fd);
    }
  }
  TerminalSession(const TerminalSession&) = delete;
  TerminalSession& operator=(const TerminalSession&) = delete;

  // The signals that end the view (and SIGWINCH, which redraws it).
  static constexpr std::array<int, 5> kSignals = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH};

  int wake_read_fd() const { return pipe_[0]; }
  int wake_write_fd() const { return pipe_[1]; }

  // One write per frame, from the top left, each line cleared to its end.
  void Draw(const std::vector<std::string>& lines) {
    std::string frame = "\x1b[H";
    for (size_t i = 0; i < lines.size(); ++i) frame += (i ? "\r\n" : "") + lines[i] + kReset + "\x1b[K";
    frame += "\x1b[J";
    WriteAll(STDOUT_FILENO, frame);
  }

 private:
  int pipe_[2] = {-1, -1};
  bool raw_ = false;
  termios saved_{};
  std::array<struct sigaction, kSignals.size()> old_{};
};

int RunOnce(client::ApiClient api) {
  TopData d = Fetcher(std::move(api)).Fetch();
  TopLayout layout = LayoutOf(STDOUT_FILENO);
  layout.height = 0;
  layout.ansi = false;
  for (const std::string& line : RenderTop(d, layout)) std::cout << line << "\n";
  std::cout.flush();
  return d.nodes.ok() && d.jobs.ok() ? 0 : kExitError;
}

int RunInteractive(client::ApiClient api, double interval_s) {
  TerminalSession term;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;              // GUARDED_BY(mu)
  std::optional<TopData> latest;  // GUARDED_BY(mu)
  const auto interval = std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000));
  // The fetcher runs with the loop's signals blocked: they wake the loop, never interrupt a request.
  sigset_t handled, before;
  sigemptyset(&handled);
  for (int sig : TerminalSession::kSignals) sigaddset(&handled, sig);
  pthread_sigmask(SIG_BLOCK, &handled, &before);
  std::thread fetcher([&, api] {
    Fetcher f(api);
    std::unique_lock<std::mutex> l(mu);
    while (!stop) {
      l.unlock();
      TopData d = f.Fetch();
      l.lock();
      if (stop) break;
      latest = std::move(d);
      const char c = 'd';
      if (write(term.wake_write_fd(), &c, 1) < 0) {
      }  // a full pipe already holds a wake-up
      cv.wait_for(l, interval, [&] { return stop; });
    }
  });
  pthread_sigmask(SIG_SETMASK, &before, nullptr);

  auto redraw = [&] {
    TopLayout layout = LayoutOf(STDOUT_FILENO);
    layout.ansi = true;
    std::lock_guard<std::mutex> l(mu);
    if (latest) {
      term.Draw(RenderTop(*latest, layout));
    } else {
      TopData waiting;
      waiting.server = api.server_url();
      waiting.time = LocalTime();
      waiting.nodes = waiting.jobs = Unavailable("waiting for the server's first answer");
      term.Draw(RenderTop(waiting, layout));
    }
  };
  redraw();
  bool stdin_open = true, quit = false;
  while (!quit) {
    pollfd fds[2] = {{term.wake_read_fd(), POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    if (poll(fds, stdin_open ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    bool draw = false;
    if (fds[0].revents) {
      char buf[64];
      ssize_t n;
      while ((n = read(term.wake_read_fd(), buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < n; ++i) {
          if (buf[i] == 'x') quit = true;
          draw = true;
        }
      }
    }
    if (stdin_open && fds[1].revents) {
      char buf[64];
      const ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) stdin_open = false;  // no keys any more: signals only
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] == 'q' || buf[i] == 'Q' || buf[i] == '\x03') quit = true;
      }
    }
    if (draw && !quit) redraw();
  }
  {
    std::lock_guard<std::mutex> l(mu);
    stop = true;
  }
  cv.notify_all();
  api.Cancel();  // a request waiting on the server ends now
  fetcher.join();
  return 0;
}

}  // namespace

std::string ShortBytes(double bytes) {
  static const char* kUnits[] = {"B", "K", "M", "G", "T", "P"};
  double v = std::max(0.0, bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f}B", v);
  if (v < 10 && std::fabs(v - std::round(v)) >= 0.05) return fmt::format("{:.1f}{}", v, kUnits[u]);
  return fmt::format("{:.0f}{}", v, kUnits[u]);
}

std::vector<std::string> RenderTop(const TopData& d, const TopLayout& layout) {
  const int width = layout.width > 0 ? layout.width : 80;
  std::vector<std::string> lines;
  lines = Header(d, width, layout.ansi);
  lines.emplace_back();
  if (!d.nodes.ok()) {
    lines.push_back(ErrorLine("nodes", d.nodes.status(), width, layout.ansi));
  } else if (!Field(*d.nodes, "nodes").is_array()) {
    lines.push_back(ErrorLine("nodes", Internal("the server's answer has no \"nodes\" list"), width, layout.ansi));
  } else {
    RenderNodes(Field(*d.nodes, "nodes"), width, layout.ansi, &lines);
  }
  lines.emplace_back();
  if (!d.jobs.ok()) {
    lines.push_back(ErrorLine("jobs", d.jobs.status(), width, layout.ansi));
  } else if (!Field(*d.jobs, "jobs").is_array()) {
    lines.push_back(ErrorLine("jobs", Internal("the server's answer has no \"jobs\" list"), width, layout.ansi));
  } else {
    RenderJobs(Field(*d.jobs, "jobs"), width, layout.ansi, &lines);
  }
  if (layout.height > 0 && static_cast<int>(lines.size()) > layout.height) {
    const size_t keep = static_cast<size_t>(std::max(layout.height - 1, 0));
    const size_t more = lines.size() - keep;
    lines.resize(keep);
    lines.push_back(fmt::format("... {} more lines (a taller terminal shows them)", more));
  }
  for (std::string& line : lines) line = CutToWidth(line, width);
  return lines;
}

int Top(const Connection& c, const TopFlags& flags) {
  if (!(flags.interval_s > 0)) Die("top: --interval must be more than 0 seconds");
  client::ApiClient api = Connect(c);
  if (flags.once || !isatty(STDOUT_FILENO)) return RunOnce(std::move(api));
  return RunInteractive(std::move(api), flags.interval_s);
}

}  // namespace ringmaster::cli
