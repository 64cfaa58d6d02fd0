// `ringmaster files put|get|ls|rm|cat|du` over /api/v1/files (docs/api.md).
//
// Paths: users/<name>/..., datasets/... or jobs/<id>/...; any other path is
// taken under your own users/<you>/. Uploads hash the file first and send
// the SHA-256, so the server stores it only if every byte arrived; downloads
// go to a new NAME.part.<random> (O_EXCL, no symlink followed), are checked against the size and SHA-256 the server
// reports, then renamed. Directories are copied recursively. Transient
// failures (the server or its storage unreachable) are retried 3 times. On a
// terminal, transfers draw a progress bar with rate and ETA.
#include "cli/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/files.h"
#include "common/strings.h"

namespace ringmaster::cli {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kAttempts = 4;

// The full files path of what the user typed.
std::string Remote(client::ApiClient& api, const std::string& path) {
  std::string p = path;
  while (!p.empty() && p.front() == '/') p.erase(0, 1);
  for (const char* ns : {"users/", "datasets/", "images/", "jobs/"}) {
    if (p.rfind(ns, 0) == 0 || p + "/" == ns) return p;
  }
  static std::string me;
  if (me.empty()) me = Must(api.Get("/api/v1/whoami")).at("name").get<std::string>();
  return "users/" + me + "/" + p;
}

std::string Human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

// A progress bar on stderr when it is a terminal: bytes, rate, ETA.
class Progress {
 public:
  Progress(std::string label, uint64_t total) : label_(std::move(label)), total_(total), tty_(isatty(2)) {}
  void Add(uint64_t n) {
    done_ += n;
    auto now = Clock::now();
    if (tty_ && now - last_ > std::chrono::milliseconds(100)) {
      last_ = now;
      Draw(false);
    }
  }
  void Finish() {
    if (tty_) Draw(true);
  }

 private:
  void Draw(bool end) {
    double secs = std::chrono::duration<double>(Clock::now() - start_).count();
    double rate = secs > 0 ? done_ / secs : 0;
    double frac = total_ ? static_cast<double>(done_) / total_ : 1;
    int width = 24, filled = static_cast<int>(frac * width);
    std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
    std::string eta = rate > 0 && done_ < total_ ? fmt::format(" ETA {:.0f}s", (total_ - done_) / rate) : "";
    fmt::print(stderr, "\r{} [{}] {:3.0f}% {} / {}  {}/s{}\033[K{}", label_, bar, frac * 100, Human(done_),
               Human(total_), Human(rate), eta, end ? "\n" : "");
    std::fflush(stderr);
  }

  std::string label_;
  uint64_t total_, done_ = 0;
  bool tty_;
  Clock::time_point start_ = Clock::now(), last_{};
};

bool Transient(const Status& st) {
  return st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded ||
         st.code() == StatusCode::kAborted;
}

template <typename Fn>
auto Retry(const std::string& what, Fn fn) {
  for (int attempt = 1;; ++attempt) {
    auto r = fn();
    Status st = [&] {
      if constexpr (std::is_same_v<decltype(r), Status>) return r;
      else return r.status();
    }();
    if (st.ok() || !Transient(st) || attempt == kAttempts) return r;
    std::cerr << fmt::format("{}: {} (retrying, {} of {})\n", what, st.message(), attempt + 1, kAttempts);
    std::this_thread::sleep_for(std::chrono::seconds(1 << (attempt - 1)));
  }
}


void PutFile(client::ApiClient& api, const std::string& local, const std::string& remote) {
  struct stat st {};
  if (stat(local.c_str(), &st) != 0) Die(fmt::format("{}: {}", local, std::strerror(errno)));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const std::string sha = HashFile(local);
  // Ask first: a refusal (quota, permission) sent while we write a large
  // body would reach us as a broken connection instead of its reason.
  const std::string url = "/api/v1/files/" + PercentEncode(remote, true);
  Must(Retry("put " + remote, [&] {
    return api.Upload(url + "?dry_run=1", 0, {{"X-Ringmaster-Size", std::to_string(size)}, {"X-Ringmaster-SHA256", sha}},
                      [](uint64_t, char*, size_t) -> long { return 0; });
  }));
  auto r = Retry("put " + remote, [&]() -> StatusOr<json> {
    int fd = open(local.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Aborted(fmt::format("{}: {}", local, std::strerror(errno)));
    Progress bar(remote, size);
    auto res = api.Upload(url, size,
                          {{"X-Ringmaster-SHA256", sha}}, [&](uint64_t offset, char* buf, size_t n) -> long {
                            ssize_t got = pread(fd, buf, n, static_cast<off_t>(offset));
                            if (got > 0) bar.Add(static_cast<uint64_t>(got));
                            return got;
                          });
    close(fd);
    if (res.ok()) bar.Finish();
    return res;
  });
  json info = Must(r);
  std::cout << fmt::format("{}  {}  {}\n", info.value("path", remote), Human(static_cast<double>(size)), sha.substr(0, 12));
}

// Every object under `prefix`, page by page.
std::vector<json> ListAll(client::ApiClient& api, const std::string& prefix) {
  std::vector<json> out;
  std::string after;
  while (true) {
    std::string q = "/api/v1/files?prefix=" + PercentEncode(prefix, true);
    if (!after.empty()) q += "&after=" + PercentEncode(after, true);
    json page = Must(Retry("list " + prefix, [&] { return api.Get(q); }));
    for (auto& f : page["files"]) out.push_back(f);
    if (!page.contains("next_after")) return out;
    after = page["next_after"].get<std::string>();
  }
}

void GetFile(client::ApiClient& api, const std::string& remote, const std::string& local) {
  // A fresh NAME.part.<random> each try, never opened through a planted symlink.
  std::string part;
  auto st = Retry("get " + remote, [&]() -> Status {
    if (!part.empty()) std::remove(part.c_str());
    StatusOr<NewTempFile> made = CreateTempBeside(local, ".part.", 0666);
    if (!made.ok()) return Aborted(made.status().message());
    part = made->path;
    FILE* f = fdopen(made->fd, "wb");
    if (!f) {
      close(made->fd);
      return Aborted(fmt::format("{}: {}", part, std::strerror(errno)));
    }
    uint64_t size = 0, got = 0;
    std::string want_sha;
    std::unique_ptr<Progress> bar;
    Sha256 h;
    bool write_failed = false;
    Status s = api.Download(
        "/api/v1/files/" + PercentEncode(remote, true), {},
        [&](const std::function<std::string(const std::string&)>& header) {
          size = std::strtoull(header("X-Ringmaster-Size").c_str(), nullptr, 10);
          want_sha = header("X-Ringmaster-SHA256");
          bar = std::make_unique<Progress>(remote, size);
        },
        [&](const char* d, size_t n) {
          if (std::fwrite(d, 1, n, f) != n) {
            write_failed = true;
            return false;
          }
          h.Update(std::string_view(d, n));
          got += n;
          if (bar) bar->Add(n);
          return true;
        });
    const bool closed = std::fclose(f) == 0;
    if (!s.ok()) return s;
    if (write_failed || !closed) {
      const std::string why = std::strerror(errno);
      std::remove(part.c_str());
      Die(fmt::format("{}: could not write: {}", part, why));
    }
    if (got != size) return Unavailable(fmt::format("{}: got {} of {} bytes", remote, got, size));
    if (!want_sha.empty() && h.FinishHex() != want_sha) {
      return Unavailable(fmt::format("{}: the bytes received do not match the SHA-256 the server reported", remote));
    }
    if (bar) bar->Finish();
    return Status::Ok();
  });
  if (!st.ok()) {
    std::remove(part.c_str());
    Die(st.message());
  }
  if (std::rename(part.c_str(), local.c_str()) != 0) Die(fmt::format("{}: {}", local, std::strerror(errno)));
}

}  // namespace

std::string HashFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Die(fmt::format("{}: {}", path, std::strerror(errno)));
  Sha256 h;
  std::string buf(1 << 20, '\0');
  ssize_t n;
  while ((n = read(fd, buf.data(), buf.size())) > 0) h.Update(std::string_view(buf.data(), static_cast<size_t>(n)));
  close(fd);
  if (n < 0) Die(fmt::format("{}: {}", path, std::strerror(errno)));
  return h.FinishHex();
}

int FilesPut(const Connection& c, const std::string& local, const std::string& remote_in) {
  auto api = Connect(c);
  std::error_code ec;
  if (fs::is_directory(local, ec)) {
    std::string base = Remote(api, remote_in.empty() ? fs::path(local).filename().string() : remote_in);
    while (!base.empty() && base.back() == '/') base.pop_back();
    int n = 0;
    for (auto it = fs::recursive_directory_iterator(local, ec); !ec && it != fs::recursive_directory_iterator(); ++it) {
      if (!it->is_regular_file()) continue;
      PutFile(api, it->path().string(), base + "/" + fs::relative(it->path(), local).generic_string());
      ++n;
    }
    if (ec) Die(fmt::format("{}: {}", local, ec.message()));
    std::cerr << fmt::format("{} files under {}/\n", n, base);
    return 0;
  }
  if (!fs::is_regular_file(local, ec)) Die(local + ": no such file (put takes a file or a directory)");
  std::string remote = remote_in.empty() ? fs::path(local).filename().string() : remote_in;
  if (remote.back() == '/') remote += fs::path(local).filename().string();
  PutFile(api, local, Remote(api, remote));
  return 0;
}

int FilesGet(const Connection& c, const std::string& remote_in, const std::string& local_in) {
  auto api = Connect(c);
  std::string remote = Remote(api, remote_in);
  while (!remote.empty() && remote.back() == '/') remote.pop_back();
  std::string local = local_in.empty() ? fs::path(remote).filename().string() : local_in;
  // A file, or a directory: everything under remote/.
  auto head = api.Get("/api/v1/files?prefix=" + PercentEncode(remote, true) + "&limit=1");
  std::vector<json> under = ListAll(api, remote + "/");
  bool is_file = head.ok() && !(*head)["files"].empty() && (*head)["files"][0]["path"] == remote;
  if (is_file) {
    if (fs::is_directory(local)) local = (fs::path(local) / fs::path(remote).filename()).string();
    GetFile(api, remote, local);
    std::cerr << fmt::format("{} -> {}\n", remote, local);
    return 0;
  }
  if (under.empty()) Die(remote + ": no such file or directory");
  for (const json& f : under) {
    const std::string path = f["path"].get<std::string>();
    fs::path dest = fs::path(local) / path.substr(remote.size() + 1);
    std::error_code ec;
    fs::create_directories(dest.parent_path(), ec);
    if (ec || fs::is_directory(dest)) {
      Die(fmt::format("{}: cannot be written to {} ({}): the store holds both a file and a directory of that name; "
                      "get them one at a time", path, dest.string(), ec ? ec.message() : "a directory is in the way"));
    }
    GetFile(api, path, dest.string());
  }
  std::cerr << fmt::format("{} files -> {}/\n", under.size(), local);
  return 0;
}

int FilesLs(const Connection& c, const std::string& prefix_in, bool as_json) {
  auto api = Connect(c);
  std::string prefix = prefix_in.empty() ? Remote(api, "") : Remote(api, prefix_in);
  std::vector<json> all = ListAll(api, prefix);
  if (as_json) {
    std::cout << json(all).dump(2) << "\n";
    return 0;
  }
  for (const json& f : all) {
    std::cout << fmt::format("{:>12}  {}  {}\n", f["size"].get<uint64_t>(), f["mtime"].get<std::string>(),
                             f["path"].get<std::string>());
  }
  return 0;
}

int FilesCat(const Connection& c, const std::string& remote) {
  auto api = Connect(c);
  Status st = api.Download(
      "/api/v1/files/" + PercentEncode(Remote(api, remote), true), {},
      [](const std::function<std::string(const std::string&)>&) {},
      [](const char* d, size_t n) {
        std::cout.write(d, static_cast<std::streamsize>(n));
        return static_cast<bool>(std::cout);
      });
  std::cout.flush();
  if (!st.ok()) Die(st.message());
  return 0;
}

int FilesRm(const Connection& c, const std::string& remote_in, bool recursive) {
  auto api = Connect(c);
  std::string remote = Remote(api, remote_in);
  if (!recursive) {
    Must(api.Delete("/api/v1/files/" + PercentEncode(remote, true)));
    return 0;
  }
  while (!remote.empty() && remote.back() == '/') remote.pop_back();
  std::vector<json> under = ListAll(api, remote + "/");
  for (const json& f : under) Must(api.Delete("/api/v1/files/" + PercentEncode(f["path"].get<std::string>(), true)));
  std::cerr << fmt::format("removed {} files under {}/\n", under.size(), remote);
  return 0;
}

int FilesReconcile(const Connection& c) {
  auto api = Connect(c);
  json r = Must(api.Post("/api/v1/files/reconcile", json::object(), {std::chrono::seconds(3600)}));
  int changed = 0;
  for (const json& u : r["users"]) {
    const int64_t before = u["before"], after = u["after"];
    if (before == after) continue;
    ++changed;
    std::cout << fmt::format("{}\t{} -> {}\n", u["user"].get<std::string>(), Human(static_cast<double>(before)),
                             Human(static_cast<double>(after)));
  }
  std::cerr << fmt::format("{} users' usage checked against the store, {} corrected\n", r["users"].size(), changed);
  return 0;
}

int FilesDu(const Connection& c, const std::string& prefix_in) {
  auto api = Connect(c);
  std::string prefix = prefix_in.empty() ? Remote(api, "") : Remote(api, prefix_in);
  uint64_t bytes = 0;
  std::vector<json> all = ListAll(api, prefix);
  for (const json& f : all) bytes += f["size"].get<uint64_t>();
  std::cout << fmt::format("{}\t{} files\t{}\n", Human(static_cast<double>(bytes)), all.size(), prefix);
  if (prefix_in.empty()) {  // your own: the quota too
    json me = Must(api.Get("/api/v1/whoami"));
    const auto used = me["files"].value("bytes", int64_t{0}), quota = me["files"].value("quota_bytes", int64_t{0});
    std::cout << fmt::format("quota: {} used (your files and your jobs'), of {}\n", Human(static_cast<double>(used)),
                             quota > 0 ? Human(static_cast<double>(quota)) : std::string("no quota"));
  }
  return 0;
}

}  // namespace ringmaster::cli
