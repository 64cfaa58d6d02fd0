// The BlobStore contract: one suite, run unchanged against every backend.
// local and fake run as unit tests; s3 runs against a real Ceph RGW that the
// CTest fixture `ceph` starts once (tests/fixtures/ceph.sh) and names in the
// file $RM_TEST_S3_URL_FILE. Each test works under a prefix of its own, so
// tests can share one RGW in parallel.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "common/crypto.h"
#include "common/files.h"
#include "common/small_tmpfs_for_tests.h"
#include "files/blob_store.h"
#include "common/crypto.h"
#include "files/local_store.h"
#include "files/s3_store.h"

namespace ringmaster::files {
namespace {

std::string S3UrlOrDie() {
  const char* file = std::getenv("RM_TEST_S3_URL_FILE");
  if (!file) {
    ADD_FAILURE() << "RM_TEST_S3_URL_FILE is not set: run the s3 cases through ctest (fixture `ceph`)";
    return "";
  }
  auto url = ReadFile(file);
  if (!url.ok()) {
    ADD_FAILURE() << "no S3 fixture: " << url.status().ToString() << " (did fixture.ceph_up pass?)";
    return "";
  }
  std::string u = *url;
  while (!u.empty() && (u.back() == '\n' || u.back() == ' ')) u.pop_back();
  return u;
}

PutOptions WithSha(std::string sha) {
  PutOptions o;
  o.expected_sha256 = std::move(sha);
  return o;
}
PutOptions AtMost(uint64_t bytes) {
  PutOptions o;
  o.max_bytes = bytes;
  return o;
}
ByteRange Range(uint64_t offset, std::optional<uint64_t> length = std::nullopt) {
  ByteRange r;
  r.offset = offset;
  r.length = length;
  return r;
}

// Bytes that differ at every offset, so a wrong range or a torn copy shows.
std::string Pattern(size_t n, unsigned seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s[i] = static_cast<char>(x);
  }
  return s;
}

class BlobStoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& backend = GetParam();
    if (backend == "local") {
      dir_ = std::filesystem::temp_directory_path() / ("rm-blob-" + RandomHex(6));
      auto s = OpenBlobStore("local:" + dir_.string());
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      store_ = std::move(*s);
    } else if (backend == "fake") {
      store_ = std::move(OpenBlobStore("fake:")).value();
    } else {
      std::string url = S3UrlOrDie();
      ASSERT_FALSE(url.empty());
      // A prefix per test: tests share the RGW. Small parts so multipart runs.
      auto s = OpenBlobStore(url + "&prefix=t-" + RandomHex(6) + "&part_size=" + std::to_string(5 << 20));
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      store_ = std::move(*s);
    }
  }
  void TearDown() override {
    store_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  size_t PartSize() const { return 5 << 20; }

  std::unique_ptr<BlobStore> store_;
  std::filesystem::path dir_;
};

TEST_P(BlobStoreContract, PutThenGetHeadAndDelete) {
  auto put = store_->Put("users/alice/a.txt", "hello, world\n");
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->size, 13u);
  EXPECT_EQ(put->sha256, Sha256Hex("hello, world\n"));
  auto head = store_->Head("users/alice/a.txt");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->size, 13u);
  EXPECT_EQ(head->sha256, put->sha256);
  EXPECT_GT(head->mtime_ms, 1700000000000);
  EXPECT_EQ(*store_->ReadAll("users/alice/a.txt"), "hello, world\n");
  ASSERT_TRUE(store_->Delete("users/alice/a.txt").ok());
  EXPECT_EQ(store_->Head("users/alice/a.txt").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Open("users/alice/a.txt", {}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Delete("users/alice/a.txt").code(), StatusCode::kNotFound);
}

TEST_P(BlobStoreContract, EmptyObjectsAndAKeyThatIsAlsoADirectory) {
  ASSERT_TRUE(store_->Put("a", "").ok());
  ASSERT_TRUE(store_->Put("a/b", "inner").ok());  // S3 allows both; so must every backend
  EXPECT_EQ(store_->Head("a")->size, 0u);
  EXPECT_EQ(store_->Head("a")->sha256, Sha256Hex(""));
  EXPECT_EQ(*store_->ReadAll("a"), "");
  EXPECT_EQ(*store_->ReadAll("a/b"), "inner");
  ASSERT_TRUE(store_->Delete("a").ok());
  EXPECT_EQ(*store_->ReadAll("a/b"), "inner");
}

TEST_P(BlobStoreContract, StreamsALargeObjectInPiecesAndReadsItBackExactly) {
  // Three and a half parts: exercises the multipart path on s3.
  std::string data = Pattern(PartSize() * 7 / 2, 1);
  auto w = store_->Create("big/blob.bin", {});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (size_t off = 0; off < data.size(); off += 1 << 20) {
    ASSERT_TRUE((*w)->Write(std::string_view(data).substr(off, 1 << 20)).ok());
  }
  EXPECT_EQ((*w)->bytes_written(), data.size());
  auto info = (*w)->Commit();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, data.size());
  EXPECT_EQ(info->sha256, Sha256Hex(data));
  EXPECT_EQ(store_->Head("big/blob.bin")->sha256, Sha256Hex(data));
  auto r = store_->Open("big/blob.bin", {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->info().size, data.size());
  std::string back;
  char buf[100000];  // not a divisor of anything above
  while (true) {
    auto n = (*r)->Read(buf, sizeof buf);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    if (*n == 0) break;
    back.append(buf, *n);
  }
  EXPECT_TRUE(back == data) << "read back " << back.size() << " bytes of " << data.size();
}

TEST_P(BlobStoreContract, AnExpectedChecksumIsKnownUpFrontOnLargeUploadsToo) {
  std::string data = Pattern(PartSize() + 12345, 2);
  auto info = store_->Put("big/known.bin", data, WithSha(Sha256Hex(data)));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(store_->Head("big/known.bin")->sha256, Sha256Hex(data));
}

TEST_P(BlobStoreContract, ByteRanges) {
  std::string data = Pattern(10000, 3);
  ASSERT_TRUE(store_->Put("r.bin", data).ok());
  EXPECT_EQ(*store_->ReadAll("r.bin", Range(10, 20)), data.substr(10, 20));
  EXPECT_EQ(*store_->ReadAll("r.bin", Range(9990)), data.substr(9990));
  EXPECT_EQ(*store_->ReadAll("r.bin", Range(9000, 5000)), data.substr(9000));  // clipped at the end
  EXPECT_EQ(*store_->ReadAll("r.bin", Range(5, 0)), "");
  auto past = store_->Open("r.bin", Range(10000));
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument) << past.status().ToString();
  auto r = store_->Open("r.bin", Range(100, 1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->info().size, 10000u);  // the object's size, not the range's
  EXPECT_EQ((*r)->info().sha256, Sha256Hex(data));
}

TEST_P(BlobStoreContract, AWrongChecksumStoresNothingAndKeepsThePreviousVersion) {
  ASSERT_TRUE(store_->Put("v.txt", "version 1").ok());
  auto bad = store_->Put("v.txt", "version 2", WithSha(Sha256Hex("something else")));
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("SHA-256 mismatch"), std::string::npos) << bad.status().ToString();
  EXPECT_EQ(*store_->ReadAll("v.txt"), "version 1");
  // Large (multipart on s3): the same.
  std::string big = Pattern(PartSize() * 2 + 1, 4);
  EXPECT_FALSE(store_->Put("w.bin", big, WithSha(Sha256Hex("x"))).ok());
  EXPECT_EQ(store_->Head("w.bin").status().code(), StatusCode::kNotFound);
}

TEST_P(BlobStoreContract, AnAbandonedUploadLeavesNoObjectAndThePreviousVersionIntact) {
  ASSERT_TRUE(store_->Put("keep.bin", "old").ok());
  {
    auto w = store_->Create("keep.bin", {});
    ASSERT_TRUE(w.ok());
    std::string data = Pattern(PartSize() + 7, 5);  // past the first part on s3
    ASSERT_TRUE((*w)->Write(data).ok());
    // Dropped without Commit(), as when a client dies mid-upload.
  }
  EXPECT_EQ(*store_->ReadAll("keep.bin"), "old");
  {
    auto w = store_->Create("fresh.bin", {});
    ASSERT_TRUE((*w)->Write("partial").ok());
    (*w)->Abort();
    EXPECT_FALSE((*w)->Commit().ok());
  }
  EXPECT_EQ(store_->Head("fresh.bin").status().code(), StatusCode::kNotFound);
  auto list = store_->List("", "", 100);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->objects.size(), 1u);
  EXPECT_EQ(list->objects[0].key, "keep.bin");
}

TEST_P(BlobStoreContract, OverTheSizeLimitStoresNothing) {
  ASSERT_TRUE(store_->Put("q.bin", "previous").ok());
  auto w = store_->Create("q.bin", AtMost(100));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(std::string(60, 'x')).ok());
  Status s = (*w)->Write(std::string(60, 'y'));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_FALSE((*w)->Commit().ok());
  EXPECT_EQ(*store_->ReadAll("q.bin"), "previous");
}

TEST_P(BlobStoreContract, ReplacingIsAtomicForConcurrentReaders) {
  // Two versions of the same size; readers must only ever see one or the other.
  const size_t n = 300000;
  std::string v1 = std::string(n, 'a'), v2 = std::string(n, 'b');
  ASSERT_TRUE(store_->Put("atomic.bin", v1).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0}, reads{0};
  std::thread reader([&] {
    while (!stop) {
      auto got = store_->ReadAll("atomic.bin");
      if (!got.ok()) continue;
      ++reads;
      if (*got != v1 && *got != v2) ++torn;
    }
  });
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(store_->Put("atomic.bin", i % 2 ? v1 : v2).ok());
  while (reads < 5) std::this_thread::yield();
  stop = true;
  reader.join();
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
}

TEST_P(BlobStoreContract, ListsByPrefixInKeyOrderAndPages) {
  for (const char* k : {"jobs/1/a", "jobs/1/b/c", "jobs/10/x", "jobs/1-x", "jobs/2/y", "other"}) {
    ASSERT_TRUE(store_->Put(k, k).ok()) << k;
  }
  auto keys = [&](const std::string& prefix, const std::string& after, size_t limit) {
    std::vector<std::string> out;
    auto r = store_->List(prefix, after, limit);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) {
      for (auto& o : r->objects) out.push_back(o.key);
    }
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(keys("jobs/1", "", 100), (V{"jobs/1-x", "jobs/1/a", "jobs/1/b/c", "jobs/10/x"}));
  EXPECT_EQ(keys("jobs/1/", "", 100), (V{"jobs/1/a", "jobs/1/b/c"}));
  EXPECT_EQ(keys("", "", 100), (V{"jobs/1-x", "jobs/1/a", "jobs/1/b/c", "jobs/10/x", "jobs/2/y", "other"}));
  EXPECT_EQ(keys("jobs/", "jobs/1/a", 100), (V{"jobs/1/b/c", "jobs/10/x", "jobs/2/y"}));
  EXPECT_EQ(keys("nothing/", "", 100), V{});
  // Pages of two, chained through next_after.
  V all;
  std::string after;
  for (int page = 0; page < 10; ++page) {
    auto r = store_->List("", after, 2);
    ASSERT_TRUE(r.ok());
    EXPECT_LE(r->objects.size(), 2u);
    for (auto& o : r->objects) all.push_back(o.key);
    if (!r->next_after) break;
    after = *r->next_after;
  }
  EXPECT_EQ(all, (V{"jobs/1-x", "jobs/1/a", "jobs/1/b/c", "jobs/10/x", "jobs/2/y", "other"}));
  auto r = store_->List("jobs/2/", "", 10);
  ASSERT_EQ(r->objects.size(), 1u);
  EXPECT_EQ(r->objects[0].size, 8u);
  EXPECT_GT(r->objects[0].mtime_ms, 1700000000000);
  EXPECT_FALSE(r->next_after);
  EXPECT_EQ(store_->List("", "", 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->List("", "", 1001).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(BlobStoreContract, KeysWithSpacesUnicodeAndPunctuationRoundTrip) {
  for (std::string k : {"datasets/fashion mnist/train+test.gz", "users/zoë/αβγ/日本.txt", "a/b=c&d?e#f%20g", "x/~y/(z)'!*"}) {
    ASSERT_TRUE(store_->Put(k, "v:" + k).ok()) << k;
    EXPECT_EQ(*store_->ReadAll(k), "v:" + k) << k;
    auto r = store_->List(k, "", 10);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->objects.size(), 1u) << k;
    EXPECT_EQ(r->objects[0].key, k);
  }
}

TEST_P(BlobStoreContract, BadKeysAreRefusedNamingTheProblem) {
  struct Case {
    std::string key, says;
  };
  std::vector<Case> cases = {{"", "empty"},
                             {"/etc/passwd", "relative"},
                             {"../escape", "'..'"},
                             {"a/../../b", "'..'"},
                             {"a/./b", "'.'"},
                             {"a//b", "empty segment"},
                             {"a/", "empty segment"},
                             {"a\\b", "backslash"},
                             {std::string("a\0b", 3), "control"},
                             {"a\nb", "control"},
                             {"\xff\xfe", "UTF-8"},
                             {std::string(1025, 'k'), "over the limit"}};
  for (const Case& c : cases) {
    auto put = store_->Put(c.key, "x");
    EXPECT_EQ(put.status().code(), StatusCode::kInvalidArgument) << c.key;
    EXPECT_NE(put.status().message().find(c.says), std::string::npos) << put.status().message();
    EXPECT_EQ(store_->Open(c.key, {}).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->Head(c.key).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->Delete(c.key).code(), StatusCode::kInvalidArgument);
  }
  auto list = store_->List("", "", 10);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->objects.empty());
  // The longest key the store takes is fine (1024 bytes, less an S3 prefix); one more byte is not.
  size_t max = store_->max_key_bytes();
  ASSERT_GT(max, 1000u);
  std::string longest = std::string(200, 'a') + "/" + std::string(200, 'b') + "/" + std::string(200, 'c') + "/" +
                        std::string(200, 'd') + "/";
  longest += std::string(max - longest.size(), 'e');
  auto put = store_->Put(longest, "ok");
  EXPECT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(store_->Put(longest + "e", "no").status().code(), StatusCode::kInvalidArgument);
}

TEST_P(BlobStoreContract, ManySmallObjectsFromManyThreads) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        std::string k = "many/" + std::to_string(t) + "/" + std::to_string(i);
        if (!store_->Put(k, k).ok() || *store_->ReadAll(k) != k) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  size_t total = 0;
  std::string after;
  while (true) {
    auto r = store_->List("many/", after, 30);
    ASSERT_TRUE(r.ok());
    total += r->objects.size();
    if (!r->next_after) break;
    after = *r->next_after;
  }
  EXPECT_EQ(total, 100u);
}

TEST_P(BlobStoreContract, PutsAndDeletesRacingInOneDirectoryNeverFail) {
  // A delete removes directories that became empty while a put re-creates them.
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      const std::string k = "race/a/b/f" + std::to_string(t);
      for (int i = 0; i < (GetParam() == "s3" ? 20 : 200); ++i) {
        auto put = store_->Put(k, "x");
        if (!put.ok()) {
          ++failures;
          ADD_FAILURE() << put.status().ToString();
        }
        Status d = store_->Delete(k);
        if (!d.ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, BlobStoreContract, ::testing::Values("local", "fake", "s3"),
                         [](const auto& info) { return info.param; });

// ---- backend-specific behaviour

TEST(S3Store, AnUnreachableEndpointIsUnavailableAndNamesTheBackend) {
  ::setenv("AWS_ACCESS_KEY_ID", "k", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "s", 1);
  auto s = OpenBlobStore("s3://ringmaster?endpoint=http://127.0.0.1:1&timeout_ms=2000");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find("storage backend s3 (http://127.0.0.1:1)"), std::string::npos)
      << s.status().message();
}

TEST(S3Store, BadUrlsAreRefusedNamingTheProblem) {
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  EXPECT_NE(ParseS3Url("s3://ok-bucket?endpoint=http://h:1").status().message().find("no S3 credentials"),
            std::string::npos);
  ::setenv("AWS_ACCESS_KEY_ID", "k", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "s", 1);
  EXPECT_NE(ParseS3Url("s3://ok-bucket").status().message().find("endpoint="), std::string::npos);
  EXPECT_NE(ParseS3Url("s3://A?endpoint=http://h:1").status().message().find("bucket name"), std::string::npos);
  EXPECT_NE(ParseS3Url("s3://ok-bucket?endpoint=ftp://h").status().message().find("http:// or https://"),
            std::string::npos);
  EXPECT_NE(ParseS3Url("s3://ok-bucket?endpoint=http://h:1&color=red").status().message().find("unknown S3 parameter"),
            std::string::npos);
  auto ok = ParseS3Url("s3://ok-bucket?endpoint=http://h:1&region=eu&prefix=rm");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->prefix, "rm/");
  EXPECT_EQ(ok->region, "eu");
  EXPECT_EQ(ok->access_key, "k");
}

TEST(LocalStore, ACrashedWritersTempFileIsRemovedAtTheNextOpen) {
  auto dir = std::filesystem::temp_directory_path() / ("rm-blob-" + RandomHex(6));
  {
    auto s = NewLocalBlobStore(dir.string());
    ASSERT_TRUE(s.ok());
    auto w = (*s)->Create("x", {});
    ASSERT_TRUE((*w)->Write("partial").ok());
    std::filesystem::copy(dir / ".tmp", dir / "crash-copy", std::filesystem::copy_options::recursive);
  }
  for (auto& e : std::filesystem::directory_iterator(dir / "crash-copy")) {
    std::filesystem::copy(e.path(), dir / ".tmp" / e.path().filename());
  }
  EXPECT_FALSE(std::filesystem::is_empty(dir / ".tmp"));
  auto s = NewLocalBlobStore(dir.string());
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir / ".tmp"));
  EXPECT_EQ((*s)->Head("x").status().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

// Issue 14: the local backend on a full disk refuses a write with
// InsufficientStorage (507), not ResourceExhausted (read as a quota), and
// leaves no file, not even a temp one; the old objects are intact, and the
// same upload succeeds once space is freed.
TEST(LocalStoreDiskFullTest, AFullDiskRefusesTheWriteAndLeavesNothing) {
  SmallTmpfs fs(1 << 20);
  if (!fs.ok()) GTEST_SKIP() << "mounting a tmpfs needs root";
  auto opened = NewLocalBlobStore(fs.dir() + "/files");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto& store = *opened;
  ASSERT_TRUE(store->Put("keep.bin", "old").ok());
  const std::string body = Pattern(300 << 10, 3);

  fs.Fill();
  Status st = [&]() -> Status {
    RM_ASSIGN_OR_RETURN(auto w, store->Create("new.bin", {}));
    RM_RETURN_IF_ERROR(w->Write(body));
    return w->Commit().status();
  }();
  EXPECT_EQ(st.code(), StatusCode::kInsufficientStorage) << st.ToString();
  EXPECT_NE(st.message().find("the server's disk is full"), std::string::npos) << st.message();
  EXPECT_EQ(store->Head("new.bin").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(std::filesystem::is_empty(fs.dir() + "/files/.tmp"));
  EXPECT_EQ(*store->ReadAll("keep.bin"), "old");

  fs.Free();
  ASSERT_TRUE(store->Put("new.bin", body).ok());
  EXPECT_EQ(*store->ReadAll("new.bin"), body);
}

}  // namespace
}  // namespace ringmaster::files
