// The files API over real HTTP against a real server: uploads, downloads with
// ranges, listing, the three namespaces and who may do what in them, bad
// paths, checksums, size limits, a client dying mid-upload and a storage
// backend going down. After every refused request the target is unchanged.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "files/fake_store.h"
#include "common/crypto.h"
#include "server/server.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;
using Headers = httplib::Headers;

class FilesApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rm_files_api_" + std::to_string(getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Start(ServerOptions o = {}) {
    o.data_dir = dir_.string();
    // These tests count files' bytes; files_quota_test.cc counts what objects cost besides.
    o.limits.file_object_cost = 0;
    server_ = std::make_unique<Server>(o);
    Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    admin_ = ReadFile((dir_ / "admin.token").string()).value();
    admin_.pop_back();
    alice_ = MakeUser("alice");
    bob_ = MakeUser("bob");
  }

  // A server on an in-memory store the test can also change behind its back.
  std::shared_ptr<files::FakeBlobStore> StartOnFakeStore() {
    std::shared_ptr<files::FakeBlobStore> fake = files::NewFakeBlobStore();
    ServerOptions o;
    o.files = fake;
    Start(o);
    return fake;
  }

  httplib::Result Do(const std::string& method, const std::string& path, const std::string& token,
                     const std::string& body = "", Headers h = {}) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(std::chrono::seconds(10));
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    if (method == "GET") return c.Get(path, h);
    if (method == "HEAD") return c.Head(path, h);
    if (method == "DELETE") return c.Delete(path, h);
    if (method == "PUT") return c.Put(path, h, body, "application/octet-stream");
    return c.Post(path, h, body, "application/json");
  }
  int Code(const std::string& method, const std::string& path, const std::string& token, const std::string& body = "",
           Headers h = {}) {
    auto r = Do(method, path, token, body, std::move(h));
    return r ? r->status : 0;
  }
  std::string MakeUser(const std::string& name) {
    EXPECT_EQ(Do("POST", "/api/v1/users", admin_, json{{"name", name}}.dump())->status, 201);
    auto r = Do("POST", "/api/v1/tokens", admin_, json{{"user", name}}.dump());
    return json::parse(r->body)["token"].get<std::string>();
  }
  std::string Body(const std::string& path, const std::string& token) {
    auto r = Do("GET", path, token);
    return r && r->status == 200 ? r->body : "<" + std::to_string(r ? r->status : 0) + ">";
  }

  std::filesystem::path dir_;
  std::unique_ptr<Server> server_;
  std::string admin_, alice_, bob_;
};

TEST_F(FilesApiTest, PutGetRangesHeadListAndDelete) {
  Start();
  const std::string path = "/api/v1/files/users/alice/notes/a%20b.txt";
  auto put = Do("PUT", path, alice_, "hello, files\n");
  ASSERT_EQ(put->status, 201) << put->body;
  json info = json::parse(put->body);
  EXPECT_EQ(info["path"], "users/alice/notes/a b.txt");
  EXPECT_EQ(info["size"], 13);
  EXPECT_EQ(info["sha256"], Sha256Hex("hello, files\n"));
  auto get = Do("GET", path, alice_);
  EXPECT_EQ(get->body, "hello, files\n");
  EXPECT_EQ(get->get_header_value("X-Ringmaster-SHA256"), Sha256Hex("hello, files\n"));
  EXPECT_EQ(get->get_header_value("X-Ringmaster-Size"), "13");
  auto part = Do("GET", path, alice_, "", {{"Range", "bytes=7-11"}});
  EXPECT_EQ(part->status, 206);
  EXPECT_EQ(part->body, "files");
  EXPECT_EQ(part->get_header_value("Content-Range"), "bytes 7-11/13");
  auto tail = Do("GET", path, alice_, "", {{"Range", "bytes=-3"}});
  EXPECT_EQ(tail->body, "es\n");
  EXPECT_EQ(Code("GET", path, alice_, "", {{"Range", "bytes=13-"}}), 416);
  EXPECT_EQ(Code("GET", path, alice_, "", {{"Range", "lines=1-2"}}), 400);
  auto head = Do("HEAD", path, alice_);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->get_header_value("X-Ringmaster-Size"), "13");
  auto list = Do("GET", "/api/v1/files?prefix=users/alice/", alice_);
  ASSERT_EQ(list->status, 200) << list->body;
  json files = json::parse(list->body)["files"];
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0]["path"], "users/alice/notes/a b.txt");
  EXPECT_EQ(files[0]["size"], 13);
  EXPECT_EQ(Code("DELETE", path, alice_), 200);
  EXPECT_EQ(Code("GET", path, alice_), 404);
  EXPECT_EQ(Code("DELETE", path, alice_), 404);
}

TEST_F(FilesApiTest, LargeFilesStreamBothWays) {
  Start();
  std::string big(40 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  auto put = Do("PUT", "/api/v1/files/users/alice/big.bin", alice_, big,
                {{"X-Ringmaster-SHA256", Sha256Hex(big)}});
  ASSERT_EQ(put->status, 201) << put->body;
  auto get = Do("GET", "/api/v1/files/users/alice/big.bin", alice_);
  ASSERT_EQ(get->status, 200);
  EXPECT_TRUE(get->body == big) << get->body.size() << " bytes back";
}

TEST_F(FilesApiTest, NamespacesUsersDatasetsAndJobs) {
  Start();
  ASSERT_EQ(Code("PUT", "/api/v1/files/users/alice/private.txt", alice_, "mine"), 201);
  // Another user's files: reads are 404 (not even confirmed), writes 403.
  auto peek = Do("GET", "/api/v1/files/users/alice/private.txt", bob_);
  EXPECT_EQ(peek->status, 404);
  EXPECT_NE(peek->body.find("no such file"), std::string::npos) << peek->body;  // as for a file that does not exist
  EXPECT_EQ(Code("HEAD", "/api/v1/files/users/alice/private.txt", bob_), 404);
  auto write = Do("PUT", "/api/v1/files/users/alice/private.txt", bob_, "overwritten");
  EXPECT_EQ(write->status, 403);
  EXPECT_NE(write->body.find("not yours"), std::string::npos) << write->body;
  EXPECT_EQ(Code("DELETE", "/api/v1/files/users/alice/private.txt", bob_), 403);
  EXPECT_EQ(Body("/api/v1/files/users/alice/private.txt", alice_), "mine");
  EXPECT_EQ(Code("GET", "/api/v1/files?prefix=users/alice/", bob_), 400);
  EXPECT_EQ(Code("GET", "/api/v1/files?prefix=users/", bob_), 400);
  EXPECT_EQ(Code("GET", "/api/v1/files?prefix=", bob_), 400);
  // Admins may read a user's files, not write them.
  EXPECT_EQ(Body("/api/v1/files/users/alice/private.txt", admin_), "mine");
  EXPECT_EQ(Code("PUT", "/api/v1/files/users/alice/private.txt", admin_, "x"), 403);
  // datasets/: everyone reads, admins write.
  auto ds = Do("PUT", "/api/v1/files/datasets/mnist/train.idx", bob_, "data");
  EXPECT_EQ(ds->status, 403);
  EXPECT_NE(ds->body.find("admins only"), std::string::npos) << ds->body;
  ASSERT_EQ(Code("PUT", "/api/v1/files/datasets/mnist/train.idx", admin_, "data"), 201);
  EXPECT_EQ(Body("/api/v1/files/datasets/mnist/train.idx", bob_), "data");
  EXPECT_EQ(Code("GET", "/api/v1/files?prefix=datasets/", bob_), 200);
  EXPECT_EQ(Code("DELETE", "/api/v1/files/datasets/mnist/train.idx", bob_), 403);
  // jobs/<id>/: the job owner's.
  auto job = Do("POST", "/api/v1/jobs", alice_, R"({"command": "true", "resources": {"cpu": 64}})");
  ASSERT_EQ(job->status, 201) << job->body;
  const std::string id = std::to_string(json::parse(job->body)["id"].get<int64_t>());
  const std::string out = "/api/v1/files/jobs/" + id + "/outputs/result.csv";
  EXPECT_EQ(Code("PUT", out, alice_, "a,b\n"), 201);
  EXPECT_EQ(Code("PUT", out, bob_, "forged"), 403);
  EXPECT_EQ(Code("GET", out, bob_), 404);
  EXPECT_EQ(Code("GET", "/api/v1/files?prefix=jobs/" + id + "/", bob_), 404);
  EXPECT_EQ(Code("GET", "/api/v1/files?prefix=jobs/" + id + "/", alice_), 200);
  EXPECT_EQ(Body(out, alice_), "a,b\n");
  EXPECT_EQ(Body(out, admin_), "a,b\n");
  EXPECT_EQ(Code("PUT", "/api/v1/files/jobs/" + id + "/secrets/x", alice_, "x"), 400);
  EXPECT_EQ(Code("PUT", "/api/v1/files/jobs/999999/outputs/x", alice_, "x"), 403);
  EXPECT_EQ(Code("PUT", "/api/v1/files/elsewhere/x", alice_, "x"), 400);
  // A read token reads but does not write.
  auto rt = Do("POST", "/api/v1/tokens", admin_, json{{"user", "alice"}, {"scope", "read"}}.dump());
  const std::string reader = json::parse(rt->body)["token"].get<std::string>();
  EXPECT_EQ(Body("/api/v1/files/users/alice/private.txt", reader), "mine");
  EXPECT_EQ(Code("PUT", "/api/v1/files/users/alice/private.txt", reader, "x"), 403);
  EXPECT_EQ(Code("GET", "/api/v1/files/users/alice/private.txt", ""), 401);
}

TEST_F(FilesApiTest, BadPathsAre400NamingThePathAndStoreNothing) {
  Start();
  for (const std::string& p : std::vector<std::string>{"users/alice/../bob/x", "users/alice/./x", "users/alice//x", "users/alice/x/", "users/alice/a%5Cb",
        "users/alice/a%01b", std::string("users/alice/") + std::string(1100, 'n')}) {
    auto r = Do("PUT", "/api/v1/files/" + p, alice_, "x");
    ASSERT_TRUE(r) << p;
    EXPECT_EQ(r->status, 400) << p << ": " << r->body;
    EXPECT_NE(r->body.find("path"), std::string::npos) << r->body;
  }
  EXPECT_EQ(Code("PUT", "/api/v1/files/users/alice/a%00b", alice_, "x"), 400);
  auto list = Do("GET", "/api/v1/files?prefix=users/alice/", alice_);
  EXPECT_EQ(json::parse(list->body)["files"].size(), 0u) << list->body;
}

TEST_F(FilesApiTest, AWrongChecksumStoresNothingAndKeepsThePreviousVersion) {
  Start();
  const std::string p = "/api/v1/files/users/alice/v.txt";
  ASSERT_EQ(Code("PUT", p, alice_, "version 1"), 201);
  auto bad = Do("PUT", p, alice_, "version 2", {{"X-Ringmaster-SHA256", Sha256Hex("other")}});
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("SHA-256 mismatch"), std::string::npos) << bad->body;
  EXPECT_EQ(Code("PUT", p, alice_, "version 2", {{"X-Ringmaster-SHA256", "XYZ"}}), 400);
  EXPECT_EQ(Body(p, alice_), "version 1");
  EXPECT_EQ(Code("PUT", p, alice_, "version 2", {{"X-Ringmaster-SHA256", Sha256Hex("version 2")}}), 201);
  EXPECT_EQ(Body(p, alice_), "version 2");
}

TEST_F(FilesApiTest, AnImageBlobIsStoredOnlyUnderItsOwnSha256) {
  Start();
  const std::string hex = Sha256Hex("layer bytes");
  const std::string p = "/api/v1/files/users/alice/images/blobs/sha256/" + hex;
  // Without the checksum, or with bytes of another hash: refused, nothing stored.
  EXPECT_EQ(Code("PUT", p, alice_, "layer bytes"), 400);
  EXPECT_EQ(Code("PUT", p, alice_, "other bytes", {{"X-Ringmaster-SHA256", Sha256Hex("other bytes")}}), 400);
  EXPECT_EQ(Code("GET", p, alice_), 404);
  EXPECT_EQ(Code("PUT", p, alice_, "layer bytes", {{"X-Ringmaster-SHA256", hex}}), 201);
}

TEST_F(FilesApiTest, OverTheSizeLimitIs413AndStoresNothing) {
  ServerOptions o;
  o.limits.max_file_bytes = 1 << 20;
  Start(o);
  const std::string p = "/api/v1/files/users/alice/q.bin";
  ASSERT_EQ(Code("PUT", p, alice_, "small"), 201);
  EXPECT_EQ(Code("PUT", p, alice_, std::string(2 << 20, 'x')), 413);  // announced by Content-Length
  httplib::Client c("127.0.0.1", server_->port());
  auto chunked = c.Put(p, {{"Authorization", "Bearer " + alice_}},
                       [](size_t offset, httplib::DataSink& sink) {  // chunked: never announced
                         if (offset >= (3u << 20)) {
                           sink.done();
                           return true;
                         }
                         std::string piece(64 << 10, 'y');
                         return sink.write(piece.data(), piece.size());
                       },
                       "application/octet-stream");
  if (chunked) EXPECT_EQ(chunked->status, 413);
  EXPECT_EQ(Body(p, alice_), "small");
}

TEST_F(FilesApiTest, AClientKilledMidUploadLeavesThePreviousVersion) {
  Start();
  const std::string p = "/api/v1/files/users/alice/k.bin";
  ASSERT_EQ(Code("PUT", p, alice_, "before"), 201);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server_->port()));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  std::string head = "PUT " + p + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + alice_ +
                     "\r\nContent-Length: 10000000\r\n\r\n";
  send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  std::string some(3 << 20, 'z');
  send(fd, some.data(), some.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  close(fd);  // killed
  // The server notices the hang-up on its own time: wait for it (a hang guard, not a timing check).
  for (int i = 0; i < 250 && !std::filesystem::is_empty(dir_ / "blobs" / ".tmp"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / "blobs" / ".tmp")) << "a temp file was left behind";
  EXPECT_EQ(Body(p, alice_), "before");
  auto list = Do("GET", "/api/v1/files?prefix=users/alice/", alice_);
  EXPECT_EQ(json::parse(list->body)["files"].size(), 1u);
}

TEST_F(FilesApiTest, QuotasRefuseWhatWouldNotFitAndCountReplacementsAndDeletes) {
  Start();
  auto usage = [&] { return json::parse(Do("GET", "/api/v1/whoami", alice_)->body)["files"]; };
  EXPECT_EQ(Code("PUT", "/api/v1/users/alice/quota", alice_, R"({"file_bytes": 1})"), 403);  // admins only
  auto q = Do("PUT", "/api/v1/users/alice/quota", admin_, R"({"file_bytes": -5})");
  EXPECT_EQ(q->status, 400);
  EXPECT_NE(q->body.find("file_bytes"), std::string::npos);
  ASSERT_EQ(Code("PUT", "/api/v1/users/alice/quota", admin_, R"({"file_bytes": 1000})"), 200);
  ASSERT_EQ(Code("PUT", "/api/v1/files/users/alice/a", alice_, std::string(600, 'a')), 201);
  EXPECT_EQ(usage()["bytes"], 600);
  // 600 more would make 1200: refused, before the body is read, and nothing changes.
  auto over = Do("PUT", "/api/v1/files/users/alice/b", alice_, std::string(600, 'b'));
  EXPECT_EQ(over->status, 413);
  EXPECT_NE(over->body.find("quota"), std::string::npos) << over->body;
  EXPECT_EQ(Code("GET", "/api/v1/files/users/alice/b", alice_), 404);
  EXPECT_EQ(usage()["bytes"], 600);
  // Clients may ask first, without sending a byte.
  auto ask = Do("PUT", "/api/v1/files/users/alice/b?dry_run=1", alice_, "", {{"X-Ringmaster-Size", "600"}});
  EXPECT_EQ(ask->status, 413);
  EXPECT_NE(ask->body.find("quota"), std::string::npos) << ask->body;
  EXPECT_EQ(Code("PUT", "/api/v1/files/users/alice/b?dry_run=1", alice_, "", {{"X-Ringmaster-Size", "400"}}), 200);
  EXPECT_EQ(Code("PUT", "/api/v1/files/users/bob/b?dry_run=1", alice_, "", {{"X-Ringmaster-Size", "1"}}), 403);
  EXPECT_EQ(Code("PUT", "/api/v1/files/users/alice/b?dry_run=1", alice_), 400);  // no size
  EXPECT_EQ(Code("GET", "/api/v1/files/users/alice/b", alice_), 404);         // a dry run stores nothing
  // The same without a Content-Length (chunked): refused while it streams.
  httplib::Client c("127.0.0.1", server_->port());
  auto chunked = c.Put("/api/v1/files/users/alice/b", {{"Authorization", "Bearer " + alice_}},
                       [](size_t offset, httplib::DataSink& sink) {
                         if (offset >= 600) {
                           sink.done();
                           return true;
                         }
                         std::string piece(100, 'c');
                         return sink.write(piece.data(), piece.size());
                       },
                       "application/octet-stream");
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->status, 413) << chunked->body;
  EXPECT_EQ(Code("GET", "/api/v1/files/users/alice/b", alice_), 404);
  // Replacing a file counts only the difference; jobs' files count too; datasets do not.
  EXPECT_EQ(Code("PUT", "/api/v1/files/users/alice/a", alice_, std::string(900, 'a')), 201);
  EXPECT_EQ(usage()["bytes"], 900);
  auto job = Do("POST", "/api/v1/jobs", alice_, R"({"command": "true", "resources": {"cpu": 64}})");
  const std::string id = std::to_string(json::parse(job->body)["id"].get<int64_t>());
  EXPECT_EQ(Code("PUT", "/api/v1/files/jobs/" + id + "/outputs/o", alice_, std::string(200, 'o')), 413);
  EXPECT_EQ(Code("PUT", "/api/v1/files/jobs/" + id + "/outputs/o", alice_, std::string(100, 'o')), 201);
  EXPECT_EQ(usage()["bytes"], 1000);
  ASSERT_EQ(Code("PUT", "/api/v1/files/datasets/big", admin_, std::string(5000, 'd')), 201);
  // Deleting gives the room back.
  EXPECT_EQ(Code("DELETE", "/api/v1/files/users/alice/a", alice_), 200);
  EXPECT_EQ(usage()["bytes"], 100);
  EXPECT_EQ(Code("PUT", "/api/v1/files/users/alice/b", alice_, std::string(600, 'b')), 201);
  EXPECT_EQ(usage()["quota_bytes"], 1000);
  // Concurrent uploads cannot both slip under the quota.
  ASSERT_EQ(Code("PUT", "/api/v1/users/alice/quota", admin_, R"({"file_bytes": 1500})"), 200);
  std::vector<std::thread> racers;
  std::atomic<int> stored{0};
  for (int i = 0; i < 6; ++i) {
    racers.emplace_back([&, i] {
      if (Code("PUT", "/api/v1/files/users/alice/race" + std::to_string(i), alice_, std::string(300, 'r')) == 201) ++stored;
    });
  }
  for (auto& t : racers) t.join();
  EXPECT_EQ(stored, 2);  // 700 used + 2 x 300 = 1300 <= 1500 < 1600
  EXPECT_EQ(usage()["bytes"], 1300);
}

// Found by probing: headers and body of one answer come from one version of
// a file being replaced; a range on an empty file; job ids with leading
// zeros; a deleted job's files.
TEST_F(FilesApiTest, AnAnswersHeadersDescribeTheVersionItsBodyComesFrom) {
  Start();
  const std::string p = "/api/v1/files/users/alice/flip";
  ASSERT_EQ(Code("PUT", p, alice_, "0123456789"), 201);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) Do("PUT", p, alice_, i % 2 ? "0123456789" : "abc");
  });
  int mismatched = 0, checked = 0;
  for (int i = 0; i < 300; ++i) {
    auto r = Do("GET", p, alice_, "", i % 2 ? Headers{{"Range", "bytes=0-9"}} : Headers{});
    if (!r) continue;
    ++checked;
    const std::string size = r->get_header_value("X-Ringmaster-Size");
    const std::string sha = r->get_header_value("X-Ringmaster-SHA256");
    const bool whole = r->status == 200;
    if ((whole && (size != std::to_string(r->body.size()) || sha != Sha256Hex(r->body))) ||
        (r->status == 206 && r->get_header_value("Content-Range") != fmt::format("bytes 0-{}/{}", r->body.size() - 1, r->body.size()))) {
      ++mismatched;
    }
  }
  stop = true;
  writer.join();
  EXPECT_EQ(mismatched, 0) << "of " << checked;
}

TEST_F(FilesApiTest, RangesOnEmptyFilesLeadingZeroJobIdsAndDeletedJobsFiles) {
  Start();
  ASSERT_EQ(Code("PUT", "/api/v1/files/users/alice/empty", alice_, ""), 201);
  auto r = Do("GET", "/api/v1/files/users/alice/empty", alice_, "", {{"Range", "bytes=0-"}});
  EXPECT_EQ(r->status, 416);
  EXPECT_EQ(r->get_header_value("Content-Range"), "bytes */0");
  EXPECT_EQ(Do("GET", "/api/v1/files/users/alice/empty", alice_)->status, 200);
  auto job = Do("POST", "/api/v1/jobs", alice_, R"({"command": "true", "resources": {"cpu": 64}})");
  const int64_t id = json::parse(job->body)["id"].get<int64_t>();
  EXPECT_EQ(Code("PUT", fmt::format("/api/v1/files/jobs/0{}/outputs/x", id), alice_, "x"), 400);
  ASSERT_EQ(Code("PUT", fmt::format("/api/v1/files/jobs/{}/outputs/x", id), alice_, std::string(100, 'x')), 201);
  ASSERT_EQ(Code("PUT", fmt::format("/api/v1/files/jobs/{}/checkpoints/c/1", id), alice_, std::string(50, 'c')), 201);
  EXPECT_EQ(json::parse(Do("GET", "/api/v1/whoami", alice_)->body)["files"]["bytes"], 150);
  ASSERT_EQ(Code("POST", fmt::format("/api/v1/jobs/{}/cancel", id), alice_, "{}"), 202);
  for (int i = 0; i < 100 && json::parse(Do("GET", fmt::format("/api/v1/jobs/{}", id), alice_)->body)["state"] != "CANCELLED"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(Code("DELETE", fmt::format("/api/v1/jobs/{}", id), alice_), 200);
  auto list = Do("GET", "/api/v1/files?prefix=jobs/", admin_);
  EXPECT_EQ(json::parse(list->body)["files"].size(), 0u) << list->body;
  EXPECT_EQ(json::parse(Do("GET", "/api/v1/whoami", alice_)->body)["files"]["bytes"], 0);
}

TEST_F(FilesApiTest, ABackendThatGoesDownIs503NamingItAndTheServerRecovers) {
  std::shared_ptr<files::FakeBlobStore> fake = StartOnFakeStore();
  const std::string p = "/api/v1/files/users/alice/d.txt";
  ASSERT_EQ(Code("PUT", p, alice_, "kept"), 201);
  fake->SetDown(true);
  for (const char* method : {"GET", "PUT", "DELETE"}) {
    auto r = Do(method, p, alice_, "new");
    EXPECT_EQ(r->status, 503) << method << ": " << r->body;
    EXPECT_NE(r->body.find("storage backend fake"), std::string::npos) << r->body;
  }
  EXPECT_EQ(Code("GET", "/api/v1/files?prefix=users/alice/", alice_), 503);
  EXPECT_EQ(Code("GET", "/api/v1/jobs", alice_), 200);  // everything else is served
  EXPECT_EQ(Code("GET", "/healthz", ""), 200);
  fake->SetDown(false);
  EXPECT_EQ(Body(p, alice_), "kept");
}

}  // namespace
}  // namespace ringmaster::server

namespace ringmaster::server {
namespace {

// The agent's side: a task's staging plan, and reads and writes of its job's
// files as the job's owner, only for the node the task is on, only for its
// current attempt, and only where a task's files belong.
TEST_F(FilesApiTest, AgentsStageAndUploadOnlyTheirOwnTasksFiles) {
  ServerOptions o;
  o.jobs.schedule_interval = std::chrono::milliseconds(50);
  Start(o);
  ASSERT_EQ(Code("PUT", "/api/v1/files/datasets/fm/a.bin", admin_, "aaaa"), 201);
  ASSERT_EQ(Code("PUT", "/api/v1/files/datasets/fm/sub/b.bin", admin_, "bb"), 201);
  ASSERT_EQ(Code("PUT", "/api/v1/files/users/bob/secret", bob_, "bob's"), 201);
  ASSERT_EQ(Code("PUT", "/api/v1/files/users/alice/notes", alice_, "alice's"), 201);

  // Submitting checks each input: there, and the submitter's to read.
  auto refused = Do("POST", "/api/v1/jobs", alice_, R"({"command": "x", "inputs": ["users/bob/secret"]})");
  EXPECT_EQ(refused->status, 400) << refused->body;
  EXPECT_NE(refused->body.find("inputs[0].from: users/bob/secret: no such file"), std::string::npos) << refused->body;
  refused = Do("POST", "/api/v1/jobs", alice_, R"({"command": "x", "inputs": ["datasets/nothing"]})");
  EXPECT_EQ(refused->status, 400) << refused->body;
  EXPECT_NE(refused->body.find("inputs[0].from: datasets/nothing: no such file or directory"), std::string::npos);
  auto sub = Do("POST", "/api/v1/jobs", alice_,
                R"({"command": "x", "inputs": [{"from": "datasets/fm", "to": "data"}, "users/alice/notes"]})");
  ASSERT_EQ(sub->status, 201) << sub->body;
  const int64_t job = json::parse(sub->body)["id"];
  const int64_t other_job = json::parse(Do("POST", "/api/v1/jobs", bob_, R"({"command": "x"})")->body)["id"];

  auto agent_token = [&](const std::string& node) {
    auto r = Do("POST", "/api/v1/tokens", admin_, json{{"scope", "agent"}, {"node", node}, {"name", node}}.dump());
    return json::parse(r->body)["token"].get<std::string>();
  };
  const std::string a = agent_token("node-a"), b = agent_token("node-b");
  auto reg = Do("POST", "/api/v1/agent/register", a, R"({"name":"node-a","cpu_milli":8000,"memory_bytes":8589934592})");
  ASSERT_EQ(reg->status, 200) << reg->body;
  const int64_t node = json::parse(reg->body)["node_id"];
  json task;
  for (int i = 0; i < 200 && task.is_null(); ++i) {  // a hang guard, not a timing assertion
    auto r = Do("GET", fmt::format("/api/v1/agent/nodes/{}/assignments?index=0&wait=1", node), a);
    const json answer = json::parse(r->body);
    for (const auto& t : answer["tasks"]) {
      if (t["job_id"] == job) task = t;
    }
  }
  ASSERT_FALSE(task.is_null()) << "job " << job << " was never placed";
  const std::string files = fmt::format("/api/v1/agent/tasks/{}/files", task["task_id"].get<int64_t>());
  const std::string q = fmt::format("?attempt={}", task["attempt"].get<int>());

  auto plan = Do("GET", files + q, a);
  ASSERT_EQ(plan->status, 200) << plan->body;
  json p = json::parse(plan->body);
  EXPECT_EQ(p["job_id"], job);
  ASSERT_EQ(p["inputs"].size(), 3u) << p.dump();
  EXPECT_EQ(p["inputs"][0]["to"], "data/a.bin");
  EXPECT_EQ(p["inputs"][0]["sha256"], Sha256Hex("aaaa"));
  EXPECT_EQ(p["inputs"][1]["to"], "data/sub/b.bin");
  EXPECT_EQ(p["inputs"][2]["to"], "notes");
  EXPECT_TRUE(p["checkpoint"].empty());
  EXPECT_EQ(p["outputs"], json({"outputs"}));

  // Reads: the job's inputs only.
  EXPECT_EQ(Body(files + "/datasets/fm/sub/b.bin" + q, a), "bb");
  EXPECT_EQ(Body(files + "/users/alice/notes" + q, a), "alice's");
  EXPECT_EQ(Code("GET", files + "/users/bob/secret" + q, a), 403);
  EXPECT_EQ(Code("GET", files + "/datasets/fmx" + q, a), 403);  // a sibling of an input is not one
  // Only the task's own node, and only its current attempt.
  EXPECT_EQ(Code("GET", files + q, b), 409);
  EXPECT_EQ(Code("GET", files + "/datasets/fm/a.bin" + q, b), 409);
  EXPECT_EQ(Code("GET", files + "?attempt=99", a), 409);
  EXPECT_EQ(Code("GET", files + q, alice_), 403);  // users cannot act as agents

  // Writes: the job's outputs and checkpoints, as alice (her usage grows).
  EXPECT_EQ(Code("PUT", files + fmt::format("/jobs/{}/outputs/p.csv", job) + q, a, "1,2\n"), 201);
  EXPECT_EQ(Body(fmt::format("/api/v1/files/jobs/{}/outputs/p.csv", job), alice_), "1,2\n");
  EXPECT_EQ(Code("PUT", files + fmt::format("/jobs/{}/outputs/p.csv", job) + q, b, "forged"), 409);
  for (const std::string& where : {fmt::format("jobs/{}/logs/rank-0.log", job), fmt::format("jobs/{}/inputs/x", job),
                                   fmt::format("jobs/{}/outputs/x", other_job), std::string("datasets/fm/a.bin"),
                                   std::string("users/alice/notes")}) {
    EXPECT_EQ(Code("PUT", files + "/" + where + q, a, "forged"), 403) << where;
  }
  EXPECT_EQ(Body("/api/v1/files/datasets/fm/a.bin", alice_), "aaaa");
  EXPECT_EQ(Body("/api/v1/files/users/alice/notes", alice_), "alice's");
  auto who = json::parse(Do("GET", "/api/v1/whoami", alice_)->body);
  EXPECT_EQ(who["files"]["bytes"], 7 + 4);  // notes + p.csv
  // The archived logs are the server's: not even the owner writes there.
  EXPECT_EQ(Code("PUT", fmt::format("/api/v1/files/jobs/{}/logs/rank-0.attempt-1.log", job), alice_, "forged"), 403);
  // A job's outputs (a directory) can be the next job's input.
  auto chained = Do("POST", "/api/v1/jobs", alice_, json{{"command", "x"}, {"inputs", {fmt::format("jobs/{}/outputs", job)}}}.dump());
  EXPECT_EQ(chained->status, 201) << chained->body;
  EXPECT_EQ(Code("POST", "/api/v1/jobs", bob_, json{{"command", "x"}, {"inputs", {fmt::format("jobs/{}/outputs", job)}}}.dump()), 400);

  // A checkpoint, `latest` last: the next attempt's plan stages it.
  ASSERT_EQ(Code("PUT", files + fmt::format("/jobs/{}/checkpoints/ckpt-5/model.pt", job) + q, a, "weights"), 201);
  ASSERT_EQ(Code("PUT", files + fmt::format("/jobs/{}/checkpoints/latest", job) + q, a, "ckpt-5\n"), 201);
  p = json::parse(Do("GET", files + q, a)->body);
  ASSERT_EQ(p["checkpoint"].size(), 2u) << p.dump();
  EXPECT_EQ(p["checkpoint"][0]["to"], "ckpt-5/model.pt");
  EXPECT_EQ(p["checkpoint"][1]["to"], "latest");
  EXPECT_EQ(Body(files + fmt::format("/jobs/{}/checkpoints/ckpt-5/model.pt", job) + q, a), "weights");

  // Old checkpoints go, the newest 3 (keep_checkpoints' default) stay.
  for (int step : {6, 7, 8}) {
    ASSERT_EQ(Code("PUT", files + fmt::format("/jobs/{}/checkpoints/ckpt-{}/model.pt", job, step) + q, a, "w"), 201);
    ASSERT_EQ(Code("PUT", files + fmt::format("/jobs/{}/checkpoints/latest", job) + q, a, fmt::format("ckpt-{}\n", step)), 201);
  }
  const std::string list = fmt::format("/api/v1/files?prefix=jobs/{}/checkpoints/", job);
  std::string kept;
  for (int i = 0; i < 500; ++i) {  // a hang guard: the pruning runs in the background
    kept.clear();
    const json listing = json::parse(Do("GET", list, alice_)->body);
    for (const auto& f : listing["files"]) kept += f["path"].get<std::string>() + " ";
    if (kept.find("ckpt-5") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(kept, fmt::format("jobs/{0}/checkpoints/ckpt-6/model.pt jobs/{0}/checkpoints/ckpt-7/model.pt "
                              "jobs/{0}/checkpoints/ckpt-8/model.pt jobs/{0}/checkpoints/latest ", job));

  // When the job ends, its task's log is archived among its files.
  const int64_t task_id = task["task_id"];
  const int attempt = task["attempt"];
  ASSERT_EQ(Code("POST", fmt::format("/api/v1/agent/tasks/{}/logs?attempt={}&offset=0", task_id, attempt), a,
                 "step 1\nstep 2\n"), 200);
  for (const char* state : {"running", "exited"}) {
    ASSERT_EQ(Code("POST", fmt::format("/api/v1/agent/tasks/{}/status", task_id), a,
                   json{{"node_id", node}, {"attempt", attempt}, {"state", state}, {"exit_code", 0}}.dump()), 200);
  }
  const std::string log = fmt::format("/api/v1/files/jobs/{}/logs/rank-0.attempt-{}.log", job, attempt);
  std::string archived;
  for (int i = 0; i < 500 && archived != "step 1\nstep 2\n"; ++i) {  // a hang guard
    archived = Body(log, alice_);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(archived, "step 1\nstep 2\n");
  EXPECT_EQ(Code("GET", log, bob_), 404);
  // Files of an ended task's attempt are closed to its agent.
  EXPECT_EQ(Code("PUT", files + fmt::format("/jobs/{}/outputs/late.csv", job) + q, a, "late"), 409);
}

}  // namespace
}  // namespace ringmaster::server

namespace ringmaster::server {
namespace {

// Usage that drifted from the store (a crash between an object's commit and
// its count, or a store changed behind the server's back) is recounted.
TEST_F(FilesApiTest, ReconcileRecountsUsageFromTheStore) {
  std::shared_ptr<files::FakeBlobStore> fake = StartOnFakeStore();
  ASSERT_EQ(Code("PUT", "/api/v1/files/users/alice/a", alice_, std::string(1000, 'a')), 201);
  ASSERT_EQ(Code("PUT", "/api/v1/files/users/alice/b", alice_, std::string(500, 'b')), 201);
  ASSERT_TRUE(fake->Delete("users/alice/a").ok());  // behind the server's back
  auto usage = [&] { return json::parse(Do("GET", "/api/v1/whoami", alice_)->body)["files"]["bytes"].get<int64_t>(); };
  EXPECT_EQ(usage(), 1500);
  EXPECT_EQ(Code("POST", "/api/v1/files/reconcile", alice_, "{}"), 403);  // admins only
  auto r = Do("POST", "/api/v1/files/reconcile", admin_, "{}");
  ASSERT_EQ(r->status, 200) << r->body;
  bool seen = false;
  const json answer = json::parse(r->body);
  for (const auto& u : answer["users"]) {
    if (u["user"] == "alice") {
      seen = true;
      EXPECT_EQ(u["before"], 1500);
      EXPECT_EQ(u["after"], 500);
    }
  }
  EXPECT_TRUE(seen);
  EXPECT_EQ(usage(), 500);
}

}  // namespace
}  // namespace ringmaster::server

namespace ringmaster::server {
namespace {

// A task stages at most 10,000 files: a job that would stage more is refused
// at submit, naming the input, not at every start of its tasks.
TEST_F(FilesApiTest, AJobWithTooManyFilesToStageIsRefusedAtSubmit) {
  std::shared_ptr<files::FakeBlobStore> fake = StartOnFakeStore();
  for (int i = 0; i < 6000; ++i) {
    for (const char* dir : {"datasets/a/", "datasets/b/"}) {
      auto w = fake->Create(dir + std::to_string(i), {});
      ASSERT_TRUE(w.ok() && (*w)->Commit().ok());
    }
  }
  EXPECT_EQ(Code("POST", "/api/v1/jobs", alice_, R"({"command": "x", "inputs": ["datasets/a"]})"), 201);
  auto r = Do("POST", "/api/v1/jobs", alice_, R"({"command": "x", "inputs": ["datasets/a", "datasets/b"]})");
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("inputs[1].from: more than 10000 files to stage over all inputs"), std::string::npos) << r->body;
}

}  // namespace
}  // namespace ringmaster::server
