// ImageCache against a fake files service (cpp-httplib): two names pushed
// with the same rootfs tar share its bytes but never each other's manifest.
#include "agent/container/image_cache.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
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
  EXPECT_EQ(tars.load(), 1);
  auto again = cache.Ensure("alice", digest, /*unpack=*/false);  // from the cache
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->env["WHO"], "alice");

  http.stop();
  serving.join();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ringmaster::agent
