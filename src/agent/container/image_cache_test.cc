// ImageCache against a fake files service (cpp-httplib): two names pushed
// with the same rootfs tar share its bytes but never each other's manifest;
// once unpacked for runc the tar goes, unless a Docker task holds it.
#include "agent/container/image_cache.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <chrono>
#include <filesystem>
#include <thread>

#include "common/crypto.h"

namespace ringmaster::agent {
namespace {

TEST(ImageCache, TheManifestIsTheNamesOwnEvenWhenTheTarIsShared) {
  const std::string tar = "the same rootfs bytes";
  const std::string digest = Sha256Hex(tar);
  std::atomic<int> tars{0};
  httplib::Server http;
  http.Get(R"(/api/v1/agent/images/([a-z]+)/([0-9a-f]{64})\.(tar|json))", [&](const httplib::Request& req,
                                                                             httplib::Response& res) {
    const std::string name = req.matches[1], kind = req.matches[3];
    if (req.matches[2] != digest) return void(res.status = 404);
    if (kind == "tar") {
      ++tars;
      return res.set_content(tar, "application/octet-stream");
    }
    res.set_content(R"({"env":["WHO=)" + name + R"("]})", "application/json");
  });
  const int port = http.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { http.listen_after_bind(); });
  for (int i = 0; i < 200 && !http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));

  const auto dir = std::filesystem::temp_directory_path() / ("rm_image_cache_test_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  client::ApiClient api("http://127.0.0.1:" + std::to_string(port), "rm_test");
  ImageCache cache(&api, dir.string());
  auto alice = cache.Ensure("alice", digest, /*unpack=*/false);
  ASSERT_TRUE(alice.ok()) << alice.status().ToString();
  EXPECT_EQ(alice->env["WHO"], "alice");
  auto mallory = cache.Ensure("mallory", digest, /*unpack=*/false);
  ASSERT_TRUE(mallory.ok()) << mallory.status().ToString();
  EXPECT_EQ(mallory->env["WHO"], "mallory");
  EXPECT_EQ(mallory->tar, alice->tar);  // one copy of the bytes
  ASSERT_TRUE(cache.EnsureTar("alice", digest, {}, nullptr).ok());
  ASSERT_TRUE(cache.EnsureTar("mallory", digest, {}, nullptr).ok());
  EXPECT_EQ(tars.load(), 1);
  auto again = cache.Ensure("alice", digest, /*unpack=*/false);  // from the cache
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->env["WHO"], "alice");

  http.stop();
  serving.join();
  std::filesystem::remove_all(dir);
}

// A fake files service serving one image tar (a real one: runc unpacks it).
class TarServer {
 public:
  explicit TarServer(std::string tar) : tar_(std::move(tar)), digest_(Sha256Hex(tar_)) {
    http_.Get(R"(/api/v1/agent/images/([a-z]+)/([0-9a-f]{64})\.(tar|json))",
              [this](const httplib::Request& req, httplib::Response& res) {
                if (req.matches[2] != digest_) return void(res.status = 404);
                if (req.matches[3] == "tar") {
                  ++tars;
                  return res.set_content(tar_, "application/octet-stream");
                }
                res.set_content(R"({"env":[]})", "application/json");
              });
    port_ = http_.bind_to_any_port("127.0.0.1");
    serving_ = std::thread([this] { http_.listen_after_bind(); });
    for (int i = 0; i < 200 && !http_.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~TarServer() {
    http_.stop();
    serving_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& digest() const { return digest_; }
  std::atomic<int> tars{0};

 private:
  std::string tar_, digest_;
  httplib::Server http_;
  int port_ = 0;
  std::thread serving_;
};

std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A tar of one file, hello.txt, made by tar(1) as the images' tars are.
std::string SmallTar(const std::filesystem::path& scratch) {
  std::filesystem::create_directories(scratch / "root");
  std::ofstream(scratch / "root" / "hello.txt") << "hello\n";
  const std::string cmd = "tar -cf " + (scratch / "image.tar").string() + " -C " + (scratch / "root").string() + " .";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return ReadAll(scratch / "image.tar");
}

TEST(ImageCache, OnceUnpackedForRuncTheTarIsDeletedAndDockerFetchesItOnlyWhenAsked) {
  const auto dir = std::filesystem::temp_directory_path() / ("rm_image_cache_drop_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  TarServer server(SmallTar(dir / "scratch"));
  client::ApiClient api(server.url(), "rm_test");
  ImageCache cache(&api, (dir / "cache").string());
  const auto entry = dir / "cache" / server.digest();

  auto runc = cache.Ensure("base", server.digest(), /*unpack=*/true);
  ASSERT_TRUE(runc.ok()) << runc.status().ToString();
  ASSERT_EQ(runc->layers.size(), 1u);
  EXPECT_EQ(ReadAll(std::filesystem::path(runc->layers[0]) / "hello.txt"), "hello\n");
  EXPECT_TRUE(runc->tar.empty());
  EXPECT_FALSE(std::filesystem::exists(entry / "rootfs.tar"));  // one copy on the node, not two
  auto again = cache.Ensure("base", server.digest(), /*unpack=*/true);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(server.tars.load(), 1);  // the unpacked rootfs is the cache hit

  // A Docker task's Ensure fetches no tar (its dockerd may have the image)...
  auto docker = cache.Ensure("base", server.digest(), /*unpack=*/false);
  ASSERT_TRUE(docker.ok()) << docker.status().ToString();
  EXPECT_EQ(server.tars.load(), 1);
  // ...until its import asks: then it is fetched again, and held.
  std::shared_ptr<void> hold;
  ASSERT_TRUE(cache.EnsureTar("base", server.digest(), {}, &hold).ok());
  EXPECT_EQ(server.tars.load(), 2);
  EXPECT_EQ(ReadAll(docker->tar), ReadAll(dir / "scratch" / "image.tar"));
  // While the import holds it, a runc task's Ensure keeps it...
  ASSERT_TRUE(cache.Ensure("base", server.digest(), /*unpack=*/true).ok());
  EXPECT_TRUE(std::filesystem::exists(entry / "rootfs.tar"));
  // ...and the first runc Ensure after the hold is let go deletes it.
  hold.reset();
  ASSERT_TRUE(cache.Ensure("base", server.digest(), /*unpack=*/true).ok());
  EXPECT_FALSE(std::filesystem::exists(entry / "rootfs.tar"));
  EXPECT_EQ(server.tars.load(), 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ringmaster::agent
