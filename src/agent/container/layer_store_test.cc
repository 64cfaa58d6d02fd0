// LayerStore and its tar reader against crafted layers: what a hostile or
// broken registry could serve (escapes, device nodes, bombs, bad digests),
// whiteouts under a real overlayfs, and the cache's locking and eviction.
// Runs as root (owners, whiteouts, mounts); skips otherwise.
#include "agent/container/layer_store.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/crypto.h"
#include "common/small_tmpfs_for_tests.h"

namespace ringmaster::agent {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kTar = "application/vnd.oci.image.layer.v1.tar";
constexpr const char* kGzip = "application/vnd.oci.image.layer.v1.tar+gzip";
constexpr const char* kZstd = "application/vnd.oci.image.layer.v1.tar+zstd";

struct Meta {
  int mode = 0644;
  int64_t uid = 0, gid = 0, mtime = 1'600'000'000;
};

// Writes tars by hand, so tests can say exactly what is in the headers.
class TarBuilder {
 public:
  TarBuilder& File(const std::string& path, const std::string& data, Meta m = {}) {
    Header(path, '0', data.size(), m, "");
    Data(data);
    return *this;
  }
  TarBuilder& Dir(const std::string& path, Meta m = {0755}) { return Header(path, '5', 0, m, ""); }
  TarBuilder& Symlink(const std::string& path, const std::string& to) { return Header(path, '2', 0, {0777}, to); }
  TarBuilder& HardLink(const std::string& path, const std::string& to) { return Header(path, '1', 0, {}, to); }
  TarBuilder& Special(const std::string& path, char type) { return Header(path, type, 0, {}, ""); }
  // A pax extended header for the next entry.
  TarBuilder& Pax(const std::map<std::string, std::string>& records) {
    std::string body;
    for (const auto& [k, v] : records) {
      const std::string rest = " " + k + "=" + v + "\n";
      size_t len = rest.size() + 1;
      while (std::to_string(len).size() + rest.size() != len) len = std::to_string(len).size() + rest.size();
      body += std::to_string(len) + rest;
    }
    Header("PaxHeaders/x", 'x', body.size(), {}, "");
    Data(body);
    return *this;
  }
  // A GNU long name ('L') or long link ('K') for the next entry.
  TarBuilder& Gnu(char type, const std::string& name) {
    Header("././@LongLink", type, name.size() + 1, {}, "", "ustar  ");
    Data(name + '\0');
    return *this;
  }
  std::string Finish() const { return out_ + std::string(1024, '\0'); }
  const std::string& Unfinished() const { return out_; }

  TarBuilder& Header(const std::string& name, char type, uint64_t size, Meta m, const std::string& link,
                     const char* magic = "ustar") {
    char h[512] = {};
    std::memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
    std::snprintf(h + 100, 8, "%07o", m.mode);
    std::snprintf(h + 108, 8, "%07llo", static_cast<unsigned long long>(m.uid & 07777777));
    std::snprintf(h + 116, 8, "%07llo", static_cast<unsigned long long>(m.gid & 07777777));
    std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(size));
    std::snprintf(h + 136, 12, "%011llo", static_cast<unsigned long long>(m.mtime));
    std::memset(h + 148, ' ', 8);
    h[156] = type;
    std::memcpy(h + 157, link.data(), std::min<size_t>(link.size(), 100));
    std::memcpy(h + 257, magic, std::strlen(magic) + 1 > 8 ? 8 : std::strlen(magic) + 1);
    if (std::string(magic) == "ustar") std::memcpy(h + 263, "00", 2);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    out_.append(h, 512);
    return *this;
  }

 private:
  void Data(const std::string& d) {
    out_ += d;
    out_.append((512 - d.size() % 512) % 512, '\0');
  }
  std::string out_;
};

std::string Gzip(const std::string& in) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, in.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = in.size();
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = out.size();
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string Zstd(const std::string& in) {
  std::string out(ZSTD_compressBound(in.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), in.data(), in.size(), 3));
  return out;
}

struct Blob {
  LayerDescriptor desc;
  std::string bytes;
};

Blob MakeBlob(const std::string& bytes, const std::string& media_type) {
  return {{"sha256:" + Sha256Hex(bytes), media_type, static_cast<int64_t>(bytes.size())}, bytes};
}

class LayerStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (owners, whiteouts, mounts)";
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');  // parameterized: "Test/gzip"
    dir_ = fs::temp_directory_path() / fmt::format("rm-layers-{}-{}", getpid(), name);
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "outside");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string Store() const { return (dir_ / "store").string(); }

  // Serves blobs in 1000-byte pieces, counting the fetches.
  BlobFetcher Fetcher(std::vector<Blob> blobs) {
    return [this, blobs](const LayerDescriptor& l, const std::function<Status(const char*, size_t)>& sink) -> Status {
      ++fetches_;
      for (const Blob& b : blobs) {
        if (b.desc.digest != l.digest) continue;
        for (size_t at = 0; at < b.bytes.size(); at += 1000) {
          RM_RETURN_IF_ERROR(sink(b.bytes.data() + at, std::min<size_t>(1000, b.bytes.size() - at)));
        }
        return Status::Ok();
      }
      return NotFound("no such blob " + l.digest);
    };
  }

  StatusOr<LayerLease> Acquire(LayerStore& store, const std::vector<Blob>& blobs) {
    std::vector<LayerDescriptor> descs;
    for (const Blob& b : blobs) descs.push_back(b.desc);
    return store.Acquire(descs, Fetcher(blobs));
  }

  // One layer into a fresh store: the error, checking nothing was left behind.
  Status UnpackFails(const Blob& blob, UnpackLimits limits = {}) {
    LayerStore store(Store(), uint64_t{1} << 30, limits);
    auto lease = Acquire(store, {blob});
    EXPECT_FALSE(lease.ok());
    const std::string hex = blob.desc.digest.substr(7);
    EXPECT_FALSE(fs::exists(Store() + "/" + hex + ".unpacking"));
    EXPECT_FALSE(fs::exists(Store() + "/" + hex));
    EXPECT_FALSE(fs::exists(Store() + "/" + hex + ".size"));
    EXPECT_TRUE(fs::is_empty(dir_ / "outside"));
    EXPECT_EQ(store.bytes(), 0u);
    return lease.ok() ? Status::Ok() : lease.status();
  }

  fs::path dir_;
  std::atomic<int> fetches_{0};
};

class LayerFormatTest : public LayerStoreTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(LayerFormatTest, UnpacksEveryKindOfEntryWithOwnersModesAndTimes) {
  const std::string long_dir(120, 'd'), very_long(250, 'p');
  TarBuilder t;
  t.Dir("a/", {0750, 1000, 1000, 1'500'000'000})
      .File("a/f", "hello", {04755, 1234, 5678, 1'600'000'000})
      .Symlink("a/abs", "/etc/alternatives/python")  // kept as it is: resolves inside the container
      .HardLink("a/h", "a/f")
      .Special("p", '6')
      .File("/etc/x", "stripped")  // leading "/" dropped, as Docker does
      .Gnu('L', long_dir + "/gnu-long")
      .File("ignored-short-name", "gnu")
      .Pax({{"path", very_long + "/pax-long"}, {"uid", "70000"}, {"mtime", "1700000000.25"}})
      .File("ignored-too", "pax");
  const std::string tar = t.Finish();
  const std::string media = GetParam();
  const std::string bytes = media == kGzip ? Gzip(tar) : media == kZstd ? Zstd(tar) : media == "sniff-zstd" ? Zstd(tar) : tar;
  Blob blob = MakeBlob(bytes, media == "sniff-zstd" ? "" : media);
  LayerStore store(Store(), uint64_t{1} << 30);
  auto lease = Acquire(store, {blob});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_EQ(lease->dirs().size(), 1u);
  const fs::path root = lease->dirs()[0];
  EXPECT_EQ(root.string(), Store() + "/" + blob.desc.digest.substr(7));
  struct stat st {};
  ASSERT_EQ(lstat((root / "a/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 04755u);  // setuid survives the chown
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 5678u);
  EXPECT_EQ(st.st_mtim.tv_sec, 1'600'000'000);
  EXPECT_EQ(st.st_nlink, 2u);
  ASSERT_EQ(lstat((root / "a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_mtim.tv_sec, 1'500'000'000);  // set after its children were made
  EXPECT_EQ(fs::read_symlink(root / "a/abs"), "/etc/alternatives/python");
  ASSERT_EQ(lstat((root / "p").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  std::ifstream x(root / "etc/x");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(x), {}), "stripped");
  EXPECT_TRUE(fs::is_regular_file(root / long_dir / "gnu-long"));
  EXPECT_FALSE(fs::exists(root / "ignored-short-name"));
  ASSERT_EQ(lstat((root / very_long / "pax-long").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 70000u);
  EXPECT_EQ(st.st_mtim.tv_sec, 1'700'000'000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 250'000'000);
  EXPECT_FALSE(fs::exists(root / "ignored-too"));
  // The files' bytes, and the pax and long-name headers' (what a bomb could inflate).
  EXPECT_GT(store.bytes(), 5u + 8 + 3 + 3 + long_dir.size() + very_long.size());
  EXPECT_LT(store.bytes(), 1000u);
  EXPECT_EQ(fetches_, 1);
  // Held and present: a second Acquire fetches nothing.
  auto again = Acquire(store, {blob});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(fetches_, 1);
}

INSTANTIATE_TEST_SUITE_P(Compression, LayerFormatTest, ::testing::Values(kTar, kGzip, kZstd, "sniff-zstd"),
                         [](const auto& info) {
                           const std::string& m = info.param;
                           return m == kTar ? "plain" : m == kGzip ? "gzip" : m == kZstd ? "zstd" : "sniffed";
                         });

TEST_F(LayerStoreTest, ParentsALayerDoesNotListAre0755WhateverTheUmask) {
  // The agent runs with umask 077; a task (not root) must still reach opt/extra/README.
  const mode_t old = umask(077);
  LayerStore store(Store(), uint64_t{1} << 30);
  auto lease = Acquire(store, {MakeBlob(TarBuilder().File("opt/extra/README", "hi").Finish(), kTar)});
  umask(old);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const fs::path top = lease->dirs()[0];
  for (const fs::path& d : {top, top / "opt", top / "opt/extra"}) {
    EXPECT_EQ(fs::status(d).permissions() & fs::perms::all,
              fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                  fs::perms::others_exec)
        << d;
  }
}

TEST_F(LayerStoreTest, ALayerNeverFillsTheDisk) {
  // 64 MiB of disk: less than the 1 GiB every layer leaves free for the
  // node's other users, so no layer is unpacked there, and nothing is left.
  SmallTmpfs disk(64 << 20);
  if (!disk.ok()) GTEST_SKIP() << "cannot mount a tmpfs";
  LayerStore store(disk.dir() + "/store", uint64_t{1} << 30);
  const Blob blob = MakeBlob(TarBuilder().File("a", "tiny").Finish(), kTar);
  auto lease = Acquire(store, {blob});
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), StatusCode::kResourceExhausted) << lease.status().ToString();
  EXPECT_NE(lease.status().message().find("1 GiB stays free"), std::string::npos) << lease.status().message();
  EXPECT_FALSE(fs::exists(disk.dir() + "/store/" + blob.desc.digest.substr(7)));
  EXPECT_FALSE(fs::exists(disk.dir() + "/store/" + blob.desc.digest.substr(7) + ".unpacking"));
}

TEST_F(LayerStoreTest, RefusesDotDot) {
  for (const char* path : {"../x", "a/../../x", "/../x"}) {
    const Status s = UnpackFails(MakeBlob(TarBuilder().File(path, "out").Finish(), kTar));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("\"..\""), std::string::npos) << s.message();
  }
}

// ".wh..." would white out "..": the layer's parent, the store itself.
TEST_F(LayerStoreTest, RefusesWhiteoutsOfDotAndDotDot) {
  fs::create_directories(Store());
  std::ofstream(Store() + "/marker") << "x";
  for (const char* path : {".wh...", "a/.wh...", "a/.wh..", ".wh."}) {
    const Status s = UnpackFails(MakeBlob(TarBuilder().File("a/f", "x").File(path, "").Finish(), kTar));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << path << ": " << s.ToString();
    EXPECT_TRUE(fs::exists(Store() + "/marker")) << path;
  }
}

TEST_F(LayerStoreTest, RefusesAPaxPathWithANul) {
  for (const std::string& key : {"path", "linkpath"}) {
    TarBuilder t;
    t.Pax({{key, std::string("..\0x/escaped", 12)}});
    key == "path" ? t.File("f", "x") : t.HardLink("h", "f");
    const Status s = UnpackFails(MakeBlob(t.Finish(), kTar));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << key << ": " << s.ToString();
  }
  EXPECT_FALSE(fs::exists(Store() + "/escaped"));  // the layer dir's parent
}

TEST_F(LayerStoreTest, NeverWritesThroughASymlink) {
  const std::string outside = (dir_ / "outside").string();
  Status s = UnpackFails(MakeBlob(TarBuilder().Symlink("a", outside).File("a/b", "out").Finish(), kTar));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("path a/b goes through the symlink a"), std::string::npos) << s.message();
  s = UnpackFails(MakeBlob(TarBuilder().Symlink("up", "..").Dir("up/d/").Finish(), kGzip));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  // A symlink, then a file by the same name: the file replaces the link.
  LayerStore store(Store(), uint64_t{1} << 30);
  Blob ok = MakeBlob(TarBuilder().Symlink("f", outside + "/f").File("f", "in").Finish(), kTar);
  auto lease = Acquire(store, {ok});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(fs::path(lease->dirs()[0]) / "f")));
  EXPECT_TRUE(fs::is_empty(dir_ / "outside"));
}

TEST_F(LayerStoreTest, RefusesHardLinksOutOfTheLayer) {
  for (const char* to : {"/etc/passwd", "../outside/x", "absent"}) {
    const Status s = UnpackFails(MakeBlob(TarBuilder().HardLink("h", to).Finish(), kTar));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << to << ": " << s.ToString();
  }
  // Nor through a symlink to a file outside.
  fs::create_directories(dir_ / "secrets");
  std::ofstream((dir_ / "secrets" / "secret").string()) << "x";
  const Status s = UnpackFails(
      MakeBlob(TarBuilder().Symlink("l", (dir_ / "secrets").string()).HardLink("h", "l/secret").Finish(), kTar));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(fs::hard_link_count(dir_ / "secrets" / "secret"), 1u);
}

TEST_F(LayerStoreTest, RefusesDeviceNodes) {
  for (char type : {'3', '4'}) {
    const Status s = UnpackFails(MakeBlob(TarBuilder().Special("dev/sda", type).Finish(), kTar));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("dev/sda is a device node"), std::string::npos) << s.message();
  }
}

TEST_F(LayerStoreTest, StopsADecompressionBomb) {
  Blob bomb = MakeBlob(Gzip(TarBuilder().File("zeros", std::string(16 << 20, '\0')).Finish()), kGzip);
  EXPECT_LT(bomb.bytes.size(), 100'000u);
  UnpackLimits limits;
  limits.max_bytes = 1 << 20;
  const Status s = UnpackFails(bomb, limits);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
}

TEST_F(LayerStoreTest, StopsAtMaxEntries) {
  TarBuilder t;
  for (int i = 0; i < 11; ++i) t.File("f" + std::to_string(i), "x");
  UnpackLimits limits;
  limits.max_entries = 10;
  EXPECT_EQ(UnpackFails(MakeBlob(t.Finish(), kTar), limits).code(), StatusCode::kResourceExhausted);
}

TEST_F(LayerStoreTest, RefusesTruncatedAndGarbageTars) {
  const std::string tar = TarBuilder().File("big", std::string(5000, 'b')).Finish();
  std::string garbage(4096, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 7919 % 251);
  for (const Blob& b : {MakeBlob(tar.substr(0, 2000), kTar), MakeBlob(Gzip(tar).substr(0, 60), kGzip),
                        MakeBlob(TarBuilder().File("f", "x").Unfinished(), kTar), MakeBlob(garbage, kTar),
                        MakeBlob(garbage, kGzip), MakeBlob(garbage, kZstd), MakeBlob("", kTar)}) {
    const Status s = UnpackFails(b);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  }
}

TEST_F(LayerStoreTest, ADigestMismatchIsDataLoss) {
  Blob b = MakeBlob(TarBuilder().File("f", "x").Finish(), kTar);
  Blob wrong = b;
  wrong.desc.digest = "sha256:" + Sha256Hex("something else");
  wrong.desc.size = 0;
  const Status s = UnpackFails(wrong);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find(wrong.desc.digest), std::string::npos);
  Blob longer = b;
  longer.desc.size = 100;  // the registry sends more than the manifest says
  EXPECT_EQ(UnpackFails(longer).code(), StatusCode::kDataLoss);
}

TEST_F(LayerStoreTest, FetcherErrorsAndCancellationNameTheLayer) {
  LayerStore store(Store(), uint64_t{1} << 30);
  Blob b = MakeBlob(TarBuilder().File("f", "x").Finish(), kTar);
  auto lease = store.Acquire({b.desc}, Fetcher({}));
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), StatusCode::kNotFound);
  EXPECT_NE(lease.status().message().find("layer " + b.desc.digest), std::string::npos);
  lease = store.Acquire({b.desc}, Fetcher({b}), [] { return true; });
  EXPECT_EQ(lease.status().code(), StatusCode::kAborted);
  EXPECT_EQ(store.Acquire({{"sha256:nothex", kTar, 1}}, Fetcher({})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.bytes(), 0u);
}

// Whiteouts as overlayfs reads them: a real mount of two layers.
TEST_F(LayerStoreTest, WhiteoutsHideLowerFilesUnderOverlayfs) {
  Blob lower = MakeBlob(Gzip(TarBuilder().File("a/x", "x").File("a/keep", "k").File("d/y", "y").Finish()), kGzip);
  Blob upper =
      MakeBlob(Gzip(TarBuilder().File("a/.wh.x", "").File("d/.wh..wh..opq", "").File("d/z", "z").Finish()), kGzip);
  LayerStore store(Store(), uint64_t{1} << 30);
  auto lease = Acquire(store, {lower, upper});  // bottom first
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_EQ(lease->dirs().size(), 2u);
  EXPECT_EQ(lease->dirs()[0], Store() + "/" + upper.desc.digest.substr(7));  // top first
  struct stat st {};
  ASSERT_EQ(lstat((lease->dirs()[0] + "/a/x").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, makedev(0, 0));
  char v[4] = {};
  EXPECT_EQ(getxattr((lease->dirs()[0] + "/d").c_str(), "trusted.overlay.opaque", v, sizeof(v)), 1);
  for (const char* d : {"upper", "work", "merged"}) fs::create_directories(dir_ / d);
  const std::string opts = fmt::format("lowerdir={}:{},upperdir={},workdir={}", lease->dirs()[0], lease->dirs()[1],
                                       (dir_ / "upper").string(), (dir_ / "work").string());
  if (mount("overlay", (dir_ / "merged").c_str(), "overlay", 0, opts.c_str()) != 0) {
    GTEST_SKIP() << "overlayfs mount: " << std::strerror(errno);
  }
  EXPECT_FALSE(fs::exists(dir_ / "merged/a/x"));
  EXPECT_TRUE(fs::exists(dir_ / "merged/a/keep"));
  std::vector<std::string> in_d;
  for (const auto& e : fs::directory_iterator(dir_ / "merged/d")) in_d.push_back(e.path().filename());
  EXPECT_EQ(in_d, std::vector<std::string>{"z"});
  EXPECT_EQ(umount2((dir_ / "merged").c_str(), 0), 0);
}

// Four threads over two stores on one directory (two agents of a host, as
// far as locking goes: their mutexes differ, the flock is shared).
TEST_F(LayerStoreTest, ConcurrentAcquiresFetchOnce) {
  Blob b = MakeBlob(Gzip(TarBuilder().File("f", std::string(100'000, 'f')).Finish()), kGzip);
  LayerStore one(Store(), uint64_t{1} << 30), two(Store(), uint64_t{1} << 30);
  BlobFetcher inner = Fetcher({b});
  BlobFetcher slow = [&](const LayerDescriptor& l, const std::function<Status(const char*, size_t)>& sink) {
    std::this_thread::sleep_for(50ms);  // the others arrive while this one fetches
    return inner(l, sink);
  };
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto lease = (i % 2 ? one : two).Acquire({b.desc}, slow);
      if (lease.ok() && lease->dirs().size() == 1 && fs::exists(lease->dirs()[0] + "/f")) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(fetches_, 1);
}

TEST_F(LayerStoreTest, ALayerAnImageRepeatsIsFetchedOnce) {
  Blob empty = MakeBlob(Gzip(TarBuilder().Finish()), kGzip), f = MakeBlob(TarBuilder().File("f", "x").Finish(), kTar);
  LayerStore store(Store(), uint64_t{1} << 30);
  auto lease = Acquire(store, {empty, f, empty});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->dirs().size(), 3u);
  EXPECT_EQ(lease->dirs()[0], lease->dirs()[2]);
  EXPECT_EQ(fetches_, 2);
}

Blob KiloLayer(char c) { return MakeBlob(TarBuilder().File("f", std::string(1000, c)).Finish(), kTar); }

TEST_F(LayerStoreTest, EvictsLeastRecentlyUsed) {
  Blob a = KiloLayer('a'), b = KiloLayer('b'), c = KiloLayer('c');
  LayerStore store(Store(), 2500);
  for (const Blob* x : {&a, &b, &a}) {  // a used after b
    ASSERT_TRUE(Acquire(store, {*x}).ok());
    std::this_thread::sleep_for(20ms);  // mtimes are coarse
  }
  ASSERT_TRUE(Acquire(store, {c}).ok());
  EXPECT_TRUE(fs::exists(Store() + "/" + a.desc.digest.substr(7)));
  EXPECT_FALSE(fs::exists(Store() + "/" + b.desc.digest.substr(7)));
  EXPECT_FALSE(fs::exists(Store() + "/" + b.desc.digest.substr(7) + ".size"));
  EXPECT_TRUE(fs::exists(Store() + "/" + c.desc.digest.substr(7)));
  EXPECT_EQ(store.bytes(), 2000u);
  // b again: fetched anew.
  ASSERT_TRUE(Acquire(store, {b}).ok());
  EXPECT_EQ(fetches_, 4);
}

TEST_F(LayerStoreTest, AHeldLeasePreventsEviction) {
  Blob a = KiloLayer('a'), b = KiloLayer('b'), c = KiloLayer('c');
  LayerStore store(Store(), 1500);
  auto held = Acquire(store, {a});
  ASSERT_TRUE(held.ok());
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(Acquire(store, {b}).ok());  // a is older but held; b was just acquired
  EXPECT_EQ(store.bytes(), 2000u);
  std::this_thread::sleep_for(20ms);
  {
    auto both = Acquire(store, {b, c});  // over again: a is still held, b and c just acquired
    ASSERT_TRUE(both.ok());
    EXPECT_EQ(store.bytes(), 3000u);
  }
  *held = LayerLease();  // released: the next fetch may evict it
  ASSERT_TRUE(Acquire(store, {KiloLayer('d')}).ok());
  EXPECT_FALSE(fs::exists(Store() + "/" + a.desc.digest.substr(7)));
  EXPECT_LE(store.bytes(), 1500u);
}

}  // namespace
}  // namespace ringmaster::agent
