// files-client: the measuring end of bench/files_throughput. Moves bytes
// through Ringmaster's files API, or straight through a BlobStore (the
// anchor for small files: the same store without the API in between), and
// prints one line of figures per run.
//
//   files-client --url U --token T large-put FILE PATH
//   files-client --url U --token T large-get PATH OUT
//   files-client --url U --token T small N BYTES THREADS PREFIX
//   files-client --store STORE_URL small N BYTES THREADS PREFIX      (direct, no API)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "files/blob_store.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::unique_ptr<httplib::Client> Client(const std::string& url, const std::string& token) {
  auto c = std::make_unique<httplib::Client>(url);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);
  c->set_read_timeout(std::chrono::seconds(120));
  c->set_write_timeout(std::chrono::seconds(120));
  c->set_bearer_token_auth(token);
  return c;
}

int LargePut(const std::string& url, const std::string& token, const std::string& file, const std::string& path) {
  int fd = open(file.c_str(), O_RDONLY);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return fmt::print(stderr, "{}: cannot open\n", file), 2;
  auto c = Client(url, token);
  std::string buf(1 << 20, '\0');
  auto t = Clock::now();
  auto res = c->Put("/api/v1/files/" + path, {}, static_cast<size_t>(st.st_size),
                    [&](size_t offset, size_t length, httplib::DataSink& sink) {
                      ssize_t n = pread(fd, buf.data(), std::min(length, buf.size()), static_cast<off_t>(offset));
                      return n > 0 && sink.write(buf.data(), static_cast<size_t>(n));
                    },
                    "application/octet-stream");
  double s = Since(t);
  close(fd);
  if (!res || res->status != 201) return fmt::print(stderr, "put failed: {}\n", res ? res->body : "no answer"), 1;
  fmt::print("{:.1f} MB/s ({} bytes in {:.2f} s)\n", st.st_size / s / 1e6, st.st_size, s);
  return 0;
}

int LargeGet(const std::string& url, const std::string& token, const std::string& path, const std::string& out) {
  FILE* f = std::fopen(out.c_str(), "wb");
  if (!f) return 2;
  auto c = Client(url, token);
  uint64_t got = 0;
  auto t = Clock::now();
  auto res = c->Get("/api/v1/files/" + path, [&](const char* d, size_t n) {
    got += n;
    return std::fwrite(d, 1, n, f) == n;
  });
  std::fflush(f);
  fsync(fileno(f));
  std::fclose(f);
  double s = Since(t);
  if (!res || res->status != 200) return fmt::print(stderr, "get failed\n"), 1;
  fmt::print("{:.1f} MB/s ({} bytes in {:.2f} s)\n", got / s / 1e6, got, s);
  return 0;
}

// N files of BYTES each from THREADS threads: puts/s, then gets/s.
int Small(const std::string& url, const std::string& token, const std::string& store_url, int n, int bytes,
          int threads, const std::string& prefix) {
  std::unique_ptr<ringmaster::files::BlobStore> store;
  if (!store_url.empty()) {
    auto s = ringmaster::files::OpenBlobStore(store_url);
    if (!s.ok()) return fmt::print(stderr, "{}\n", s.status().ToString()), 2;
    store = std::move(*s);
  }
  const std::string body(static_cast<size_t>(bytes), 'f');
  std::atomic<int> next{0}, failed{0};
  auto run = [&](bool put) {
    next = 0;
    std::vector<std::thread> ts;
    auto t = Clock::now();
    for (int i = 0; i < threads; ++i) {
      ts.emplace_back([&] {
        auto c = store ? nullptr : Client(url, token);
        for (int k; (k = next++) < n;) {
          const std::string key = fmt::format("{}/f{:05}", prefix, k);
          bool ok;
          if (store) {
            ok = put ? store->Put(key, body).ok() : store->ReadAll(key).ok();
          } else {
            auto r = put ? c->Put("/api/v1/files/" + key, body, "application/octet-stream")
                         : c->Get("/api/v1/files/" + key);
            ok = r && r->status == (put ? 201 : 200);
          }
          if (!ok) ++failed;
        }
      });
    }
    for (auto& th : ts) th.join();
    return n / Since(t);
  };
  double puts = run(true), gets = run(false);
  if (failed) return fmt::print(stderr, "{} requests failed\n", failed.load()), 1;
  fmt::print("{:.0f} puts/s {:.0f} gets/s ({} files of {} bytes, {} threads)\n", puts, gets, n, bytes, threads);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("files-client: measures transfers through the files API or a BlobStore");
  std::string url, token, store;
  app.add_option("--url", url, "server URL");
  app.add_option("--token", token, "API token");
  app.add_option("--store", store, "a BlobStore URL to use directly (no API)");
  std::string a, b, prefix;
  int n = 0, bytes = 0, threads = 1;
  auto* lp = app.add_subcommand("large-put");
  lp->add_option("file", a)->required();
  lp->add_option("path", b)->required();
  auto* lg = app.add_subcommand("large-get");
  lg->add_option("path", a)->required();
  lg->add_option("out", b)->required();
  auto* sm = app.add_subcommand("small");
  sm->add_option("n", n)->required();
  sm->add_option("bytes", bytes)->required();
  sm->add_option("threads", threads)->required();
  sm->add_option("prefix", prefix)->required();
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  if (*lp) return LargePut(url, token, a, b);
  if (*lg) return LargeGet(url, token, a, b);
  return Small(url, token, store, n, bytes, threads, prefix);
}
