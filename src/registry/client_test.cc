// Integration tests of the registry client against a real registry
// (Debian's docker-registry, distribution 2.8) started by each test on
// loopback with TLS and htpasswd auth, and against small HTTP servers of the
// test's own for what a real registry will not do (redirects, silence).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/crypto.h"
#include "common/subprocess.h"
#include "http/server.h"
#include "registry/client.h"
#include "registry/manifest.h"
#include "registry/testing/distribution.h"

namespace ringmaster::registry {
namespace {

using testing::Distribution;
using testing::Pusher;

constexpr const char* kUser = "alice";
constexpr const char* kPassword = "s3cret-Pa55";

struct PushedImage {
  std::string manifest_digest, config_digest, layer_digest, layer, config;
};

// A layer made with tar (one file saying `text`), its config and manifest,
// pushed as repository:tag ("" = by digest only).
StatusOr<PushedImage> PushImage(Pusher& push, const std::string& repository, const std::string& tag,
                                const std::string& architecture, const std::string& text, bool docker_types = false) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("rmlayer-" + RandomHex(6));
  std::filesystem::create_directories(dir / "etc");
  std::ofstream(dir / "etc/hello") << text << "\n";
  auto layer = RunTool({"tar", "--sort=name", "--mtime=@0", "--owner=0", "--group=0", "-C", dir.string(), "-cf", "-", "."});
  std::filesystem::remove_all(dir);
  if (!layer.ok()) return layer.status();
  PushedImage img;
  img.layer = *layer;
  RM_ASSIGN_OR_RETURN(img.layer_digest, push.Blob(repository, img.layer));
  img.config = R"({"architecture":")" + architecture + R"(","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":["/bin/sh"]},)"
               R"("rootfs":{"type":"layers","diff_ids":[")" + img.layer_digest + R"("]}})";
  RM_ASSIGN_OR_RETURN(img.config_digest, push.Blob(repository, img.config));
  const std::string manifest_type = docker_types ? std::string(kDockerManifest) : std::string(kOciManifest);
  const std::string config_type =
      docker_types ? "application/vnd.docker.container.image.v1+json" : "application/vnd.oci.image.config.v1+json";
  const std::string layer_type =
      docker_types ? "application/vnd.docker.image.rootfs.diff.tar" : "application/vnd.oci.image.layer.v1.tar";
  const std::string manifest = R"({"schemaVersion":2,"mediaType":")" + manifest_type + R"(","config":{"mediaType":")" +
                               config_type + R"(","digest":")" + img.config_digest + R"(","size":)" +
                               std::to_string(img.config.size()) + R"(},"layers":[{"mediaType":")" + layer_type +
                               R"(","digest":")" + img.layer_digest + R"(","size":)" + std::to_string(img.layer.size()) +
                               "}]}";
  const std::string digest = "sha256:" + Sha256Hex(manifest);
  RM_ASSIGN_OR_RETURN(img.manifest_digest, push.Manifest(repository, tag.empty() ? digest : tag, manifest_type, manifest));
  return img;
}

Distribution::Config HtpasswdConfig() {
  Distribution::Config c;
  c.user = kUser;
  c.password = kPassword;
  return c;
}

http::RouteOptions Open() {
  http::RouteOptions o;
  o.authenticate = false;
  return o;
}

http::Response Answer(int status, std::string body, std::vector<std::pair<std::string, std::string>> headers = {}) {
  http::Response r;
  r.status = status;
  r.content_type = status == 200 ? "application/octet-stream" : "application/json";
  r.body = std::move(body);
  r.headers = std::move(headers);
  return r;
}

class RegistryClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(Distribution::kBinary, X_OK) != 0) GTEST_SKIP() << "no " << Distribution::kBinary;
    const std::string why = registry_.Start(HtpasswdConfig());
    ASSERT_EQ(why, "");
    pusher_ = std::make_unique<Pusher>(registry_.Target(),
                                       "Basic " + Base64Encode(std::string(kUser) + ":" + kPassword));
  }

  Client MakeClient(Credentials credentials, Options options = {}) {
    return Client(Endpoint{.host = registry_.host(), .plain_http = false, .ca_file = registry_.ca_file()},
                  std::move(credentials), options);
  }
  Credentials Alice() const { return {.username = kUser, .password = kPassword}; }

  Distribution registry_;
  std::unique_ptr<Pusher> pusher_;
};

TEST_F(RegistryClientTest, ResolvesByTagAndByDigestAndStreamsVerifiedBlobs) {
  auto img = PushImage(*pusher_, "lab/small", "v1", "amd64", "hello");
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  Client client = MakeClient(Alice());

  auto by_tag = client.Resolve("lab/small", "v1", Platform{});
  ASSERT_TRUE(by_tag.ok()) << by_tag.status().ToString();
  EXPECT_EQ(by_tag->digest, img->manifest_digest);
  EXPECT_EQ("sha256:" + Sha256Hex(by_tag->raw), by_tag->digest);
  EXPECT_EQ(by_tag->media_type, kOciManifest);
  EXPECT_EQ(by_tag->index_digest, "");
  EXPECT_EQ(by_tag->config.digest, img->config_digest);
  ASSERT_EQ(by_tag->layers.size(), 1u);
  EXPECT_EQ(by_tag->layers[0].digest, img->layer_digest);
  EXPECT_EQ(by_tag->layers[0].size, static_cast<int64_t>(img->layer.size()));

  auto by_digest = client.Resolve("lab/small", img->manifest_digest, Platform{});
  ASSERT_TRUE(by_digest.ok()) << by_digest.status().ToString();
  EXPECT_EQ(by_digest->digest, img->manifest_digest);
  EXPECT_EQ(by_digest->raw, by_tag->raw);

  auto config = client.FetchBlob("lab/small", img->config_digest);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto parsed = ParseImageConfig(*config);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->diff_ids, std::vector<std::string>{img->layer_digest});

  std::string got;
  Status s = client.StreamBlob("lab/small", img->layer_digest, [&](const char* d, size_t n) {
    got.append(d, n);
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, img->layer);
}

TEST_F(RegistryClientTest, DockerMediaTypes) {
  auto img = PushImage(*pusher_, "lab/docker", "latest", "amd64", "docker", /*docker_types=*/true);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  auto m = MakeClient(Alice()).Resolve("lab/docker", "latest", Platform{});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->media_type, kDockerManifest);
  EXPECT_EQ(m->digest, img->manifest_digest);
}

TEST_F(RegistryClientTest, IndexChoosesThePlatform) {
  auto amd = PushImage(*pusher_, "lab/multi", "", "amd64", "amd");
  auto arm = PushImage(*pusher_, "lab/multi", "", "arm64", "arm");
  ASSERT_TRUE(amd.ok()) << amd.status().ToString();
  ASSERT_TRUE(arm.ok()) << arm.status().ToString();
  auto entry = [](const PushedImage& i, const std::string& arch, const std::string& variant) {
    std::string manifest_size = "1";  // the registry checks digests, not sizes, of index entries
    return R"({"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":")" + i.manifest_digest +
           R"(","size":)" + manifest_size + R"(,"platform":{"os":"linux","architecture":")" + arch + R"(")" +
           (variant.empty() ? "" : R"(,"variant":")" + variant + R"(")") + "}}";
  };
  const std::string index = R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[)" +
                            entry(*arm, "arm64", "v8") + "," + entry(*amd, "amd64", "") + "]}";
  auto index_digest = pusher_->Manifest("lab/multi", "2.1", std::string(kOciIndex), index);
  ASSERT_TRUE(index_digest.ok()) << index_digest.status().ToString();

  Client client = MakeClient(Alice());
  auto m = client.Resolve("lab/multi", "2.1", Platform{});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->digest, amd->manifest_digest);
  EXPECT_EQ(m->index_digest, *index_digest);
  auto a = client.Resolve("lab/multi", "2.1", {.os = "linux", .architecture = "arm64", .variant = ""});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->digest, arm->manifest_digest);

  auto none = client.Resolve("lab/multi", "2.1", {.os = "linux", .architecture = "ppc64le", .variant = ""});
  ASSERT_EQ(none.status().code(), StatusCode::kFailedPrecondition) << none.status().ToString();
  EXPECT_NE(none.status().message().find("linux/arm64/v8, linux/amd64"), std::string::npos) << none.status().message();
  EXPECT_NE(none.status().message().find("registry " + registry_.host()), std::string::npos);
}

TEST_F(RegistryClientTest, SingleManifestForAnotherPlatform) {
  ASSERT_TRUE(PushImage(*pusher_, "lab/armonly", "1", "arm64", "arm").ok());
  auto m = MakeClient(Alice()).Resolve("lab/armonly", "1", Platform{});
  ASSERT_EQ(m.status().code(), StatusCode::kFailedPrecondition) << m.status().ToString();
  EXPECT_NE(m.status().message().find("linux/arm64"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("linux/amd64"), std::string::npos) << m.status().message();
}

TEST_F(RegistryClientTest, WrongPasswordIsUnauthenticatedAndNeverQuotesIt) {
  ASSERT_TRUE(PushImage(*pusher_, "lab/small", "v1", "amd64", "hello").ok());
  auto m = MakeClient({.username = kUser, .password = "wrong-Pa55word"}).Resolve("lab/small", "v1", Platform{});
  ASSERT_EQ(m.status().code(), StatusCode::kUnauthenticated) << m.status().ToString();
  const std::string msg = m.status().message();
  EXPECT_NE(msg.find("registry " + registry_.host() + ": 401 Unauthorized (credentials of alice)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("wrong-Pa55word"), std::string::npos) << msg;
  EXPECT_EQ(msg.find(Base64Encode(std::string(kUser) + ":wrong-Pa55word")), std::string::npos) << msg;
}

TEST_F(RegistryClientTest, NoCredentialsIsUnauthenticated) {
  ASSERT_TRUE(PushImage(*pusher_, "lab/small", "v1", "amd64", "hello").ok());
  Client client = MakeClient({});
  auto m = client.Resolve("lab/small", "v1", Platform{});
  ASSERT_EQ(m.status().code(), StatusCode::kUnauthenticated) << m.status().ToString();
  EXPECT_NE(m.status().message().find("401 Unauthorized (no credentials)"), std::string::npos) << m.status().message();
  Status s = client.StreamBlob("lab/small", "sha256:" + std::string(64, 'a'), [](const char*, size_t) { return Status::Ok(); });
  EXPECT_EQ(s.code(), StatusCode::kUnauthenticated) << s.ToString();
}

TEST_F(RegistryClientTest, MissingTagRepositoryAndBlobAreNotFound) {
  ASSERT_TRUE(PushImage(*pusher_, "lab/small", "v1", "amd64", "hello").ok());
  Client client = MakeClient(Alice());
  auto tag = client.Resolve("lab/small", "nope", Platform{});
  ASSERT_EQ(tag.status().code(), StatusCode::kNotFound) << tag.status().ToString();
  EXPECT_NE(tag.status().message().find("lab/small:nope"), std::string::npos) << tag.status().message();
  EXPECT_EQ(client.Resolve("lab/none", "v1", Platform{}).status().code(), StatusCode::kNotFound);
  auto blob = client.FetchBlob("lab/small", "sha256:" + Sha256Hex("never pushed"));
  EXPECT_EQ(blob.status().code(), StatusCode::kNotFound) << blob.status().ToString();
  EXPECT_EQ(client.Resolve("Lab/../x", "v1", Platform{}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client.Resolve("lab/small", "../v1", Platform{}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(RegistryClientTest, CorruptBlobIsDataLoss) {
  auto img = PushImage(*pusher_, "lab/small", "v1", "amd64", "hello");
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  const auto file = registry_.BlobFile(img->layer_digest);
  ASSERT_TRUE(std::filesystem::exists(file)) << file;
  std::string bytes = img->layer;
  bytes[bytes.size() / 2] ^= 0x55;  // same size, other content
  std::filesystem::permissions(file, std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;

  Client client = MakeClient(Alice());
  size_t seen = 0;
  Status s = client.StreamBlob("lab/small", img->layer_digest, [&](const char*, size_t n) {
    seen += n;
    return Status::Ok();
  });
  ASSERT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("blob " + img->layer_digest + " of lab/small arrived with sha256:" + Sha256Hex(bytes)),
            std::string::npos)
      << s.message();
  EXPECT_EQ(seen, bytes.size());
}

TEST_F(RegistryClientTest, SinkErrorAndCancelEndTheStream) {
  auto img = PushImage(*pusher_, "lab/small", "v1", "amd64", "hello");
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  Client client = MakeClient(Alice());
  Status s = client.StreamBlob("lab/small", img->layer_digest,
                               [](const char*, size_t) { return InsufficientStorage("disk full"); });
  EXPECT_EQ(s.code(), StatusCode::kInsufficientStorage) << s.ToString();
  s = client.StreamBlob("lab/small", img->layer_digest, [](const char*, size_t) { return Status::Ok(); },
                        [] { return true; });
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
}

TEST_F(RegistryClientTest, ManifestOverTheLimitIsRefused) {
  ASSERT_TRUE(PushImage(*pusher_, "lab/small", "v1", "amd64", "hello").ok());
  auto m = MakeClient(Alice(), {.max_manifest_bytes = 64}).Resolve("lab/small", "v1", Platform{});
  ASSERT_EQ(m.status().code(), StatusCode::kFailedPrecondition) << m.status().ToString();
  EXPECT_NE(m.status().message().find("limit of 64"), std::string::npos) << m.status().message();
}

TEST_F(RegistryClientTest, UntrustedCertificateIsUnavailable) {
  auto m = Client(Endpoint{.host = registry_.host(), .plain_http = false, .ca_file = ""}, Alice())
               .Resolve("lab/small", "v1", Platform{});
  ASSERT_EQ(m.status().code(), StatusCode::kUnavailable) << m.status().ToString();
  EXPECT_NE(m.status().message().find("registry " + registry_.host()), std::string::npos) << m.status().message();
}

// The bearer-token flow: a registry with `auth: token` and
// tests/fixtures/token_server.py as its realm.
class RegistryBearerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(Distribution::kBinary, X_OK) != 0) GTEST_SKIP() << "no " << Distribution::kBinary;
    ASSERT_EQ(token_.Start(RM_TOKEN_SERVER, kUser, kPassword), "");
    Distribution::Config config;
    config.token_realm = token_.realm();
    config.token_cert = token_.cert_file();
    ASSERT_EQ(registry_.Start(config), "");
    // Pushing takes a token for pull and push.
    http::ClientTarget realm;
    realm.host = "127.0.0.1";
    realm.port = std::to_string(token_.port());
    http::Client token_client(realm, http::ClientOptions{});
    http::ClientRequest req;
    req.target = "/token?service=test-registry&scope=repository:lab/small:pull,push";
    req.headers.emplace_back("Authorization", "Basic " + Base64Encode(std::string(kUser) + ":" + kPassword));
    auto answer = token_client.Do(req);
    ASSERT_TRUE(answer.ok()) << answer.status().ToString();
    ASSERT_EQ(answer->status, 200) << answer->body;
    auto json = nlohmann::json::parse(answer->body);
    Pusher pusher(registry_.Target(), "Bearer " + json["token"].get<std::string>());
    auto img = PushImage(pusher, "lab/small", "v1", "amd64", "hello");
    ASSERT_TRUE(img.ok()) << img.status().ToString();
    image_ = *img;
  }

  Client MakeClient(Credentials credentials) {
    return Client(Endpoint{.host = registry_.host(), .plain_http = false, .ca_file = registry_.ca_file()},
                  std::move(credentials));
  }
  // Tokens the server issued for `user` to pull lab/small.
  int PullTokens(const std::string& user) {
    const std::string line = "token user=" + user + " scope=repository:lab/small:pull\n";
    const std::string log = token_.Log();
    int n = 0;
    for (size_t at = log.find(line); at != std::string::npos; at = log.find(line, at + 1)) ++n;
    return n;
  }

  testing::TokenServer token_;
  Distribution registry_;
  PushedImage image_;
};

TEST_F(RegistryBearerTest, PullsWithATokenFetchedOnceAndCached) {
  Client client = MakeClient({.username = kUser, .password = kPassword});
  auto m = client.Resolve("lab/small", "v1", Platform{});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->digest, image_.manifest_digest);
  std::string got;
  Status s = client.StreamBlob("lab/small", image_.layer_digest, [&](const char* d, size_t n) {
    got.append(d, n);
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, image_.layer);
  // Manifest, config and layer: one token, cached for the scope.
  EXPECT_EQ(PullTokens(kUser), 1) << token_.Log();
}

TEST_F(RegistryBearerTest, WrongPasswordIsUnauthenticated) {
  auto m = MakeClient({.username = kUser, .password = "not-it"}).Resolve("lab/small", "v1", Platform{});
  ASSERT_EQ(m.status().code(), StatusCode::kUnauthenticated) << m.status().ToString();
  const std::string msg = m.status().message();
  EXPECT_NE(msg.find("registry " + registry_.host() + ": 401 Unauthorized (credentials of alice)"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("invalid username or password"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("not-it"), std::string::npos) << msg;
}

TEST_F(RegistryBearerTest, AnAnonymousTokenIsRefused) {
  auto m = MakeClient({}).Resolve("lab/small", "v1", Platform{});
  ASSERT_EQ(m.status().code(), StatusCode::kUnauthenticated) << m.status().ToString();
  EXPECT_NE(m.status().message().find("401 Unauthorized (no credentials)"), std::string::npos) << m.status().message();
  EXPECT_EQ(PullTokens("-"), 1) << token_.Log();
  EXPECT_EQ(m.status().message().find("eyJ"), std::string::npos) << "a token in " << m.status().message();
}

// A listener that accepts connections (the kernel's backlog) and never answers.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      port_ = -1;
    } else {
      port_ = ntohs(a.sin_port);
    }
  }
  ~SilentListener() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = -1;
};

TEST(RegistryClientDeadline, ARegistryThatNeverAnswersTimesOut) {
  SilentListener silent;
  ASSERT_GT(silent.port(), 0);
  const std::string host = "127.0.0.1:" + std::to_string(silent.port());
  for (bool plain : {false, true}) {
    Client client(Endpoint{.host = host, .plain_http = plain, .ca_file = ""}, {},
                  {.connect_timeout = std::chrono::milliseconds(500), .io_timeout = std::chrono::milliseconds(500)});
    const auto start = std::chrono::steady_clock::now();
    auto m = client.Resolve("lab/small", "v1", Platform{});
    const auto took = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(m.ok());
    EXPECT_TRUE(m.status().code() == StatusCode::kDeadlineExceeded || m.status().code() == StatusCode::kUnavailable)
        << m.status().ToString();
    EXPECT_NE(m.status().message().find("registry " + host), std::string::npos) << m.status().message();
    EXPECT_LT(took, std::chrono::seconds(5));
    Status s = client.StreamBlob("lab/small", "sha256:" + std::string(64, 'a'), [](const char*, size_t) { return Status::Ok(); });
    EXPECT_TRUE(s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kUnavailable) << s.ToString();
  }
}

// A plain-HTTP "registry" that wants Basic credentials and redirects blobs to
// a storage server on another port, which records what it was sent.
class RedirectingRegistry {
 public:
  RedirectingRegistry(std::string blob, int hops) : blob_(std::move(blob)) {
    storage_.Route("GET", "/storage/{name}", Open(), [this](http::Request& r, http::Responder respond) {
      {
        std::lock_guard l(mu_);
        storage_authorization_ = r.Header("authorization");
        storage_hits_++;
      }
      respond(Answer(200, blob_));
    });
    front_.Route("GET", "/v2/{path...}", Open(), [this, hops](http::Request& r, http::Responder respond) {
      if (r.Header("authorization") != "Basic " + Base64Encode("bob:pw")) {
        respond(Answer(401, R"({"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]})",
                       {{"WWW-Authenticate", R"(Basic realm="front")"}}));
        return;
      }
      // Redirect to itself `hops` times by relative Location, then to storage.
      int hop = 0;
      if (auto q = r.Param("hop"); q.ok() && *q) hop = std::stoi(**q);
      std::string location = hop + 1 < hops ? r.path + "?hop=" + std::to_string(hop + 1)
                                            : "http://127.0.0.1:" + std::to_string(storage_.port()) + "/storage/b?sig=x";
      respond(Answer(307, "", {{"Location", location}}));
    });
  }
  Status Start() {
    RM_RETURN_IF_ERROR(storage_.Start());
    return front_.Start();
  }
  ~RedirectingRegistry() {
    front_.Stop();
    storage_.Stop();
  }
  std::string host() const { return "127.0.0.1:" + std::to_string(front_.port()); }
  std::string storage_authorization() {
    std::lock_guard l(mu_);
    return storage_authorization_;
  }
  int storage_hits() {
    std::lock_guard l(mu_);
    return storage_hits_;
  }

 private:
  std::string blob_;
  http::Server front_{http::ServerOptions{}};
  http::Server storage_{http::ServerOptions{}};
  std::mutex mu_;
  std::string storage_authorization_ = "(not called)";
  int storage_hits_ = 0;
};

TEST(RegistryClientRedirect, FollowsToAnotherHostWithoutTheRegistrysAuthorization) {
  const std::string blob = "layer bytes from storage";
  RedirectingRegistry front(blob, 3);
  ASSERT_TRUE(front.Start().ok());
  Client client(Endpoint{.host = front.host(), .plain_http = true, .ca_file = ""}, {.username = "bob", .password = "pw"});
  std::string got;
  Status s = client.StreamBlob("lab/x", "sha256:" + Sha256Hex(blob), [&](const char* d, size_t n) {
    got.append(d, n);
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, blob);
  EXPECT_EQ(front.storage_hits(), 1);
  EXPECT_EQ(front.storage_authorization(), "");
}

TEST(RegistryClientRedirect, TooManyRedirectsFail) {
  RedirectingRegistry front("x", 9);
  ASSERT_TRUE(front.Start().ok());
  Client client(Endpoint{.host = front.host(), .plain_http = true, .ca_file = ""}, {.username = "bob", .password = "pw"});
  Status s = client.StreamBlob("lab/x", "sha256:" + Sha256Hex("x"), [](const char*, size_t) { return Status::Ok(); });
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("redirects"), std::string::npos) << s.message();
  EXPECT_EQ(front.storage_hits(), 0);
}

// A registry must not point a node at its local services: no redirect to a
// unix socket (or from https to http), no login sent to a realm that is not https.
TEST(RegistryClientRedirect, NeitherARedirectNorARealmReachesAUnixSocket) {
  http::Server front{http::ServerOptions{}};
  front.Route("GET", "/v2/{path...}", Open(), [](http::Request& r, http::Responder respond) {
    if (r.path.find("/blobs/") != std::string::npos) {
      respond(Answer(307, "", {{"Location", "unix:/var/run/docker.sock"}}));
    } else {
      respond(Answer(401, "{}", {{"WWW-Authenticate", R"(Bearer realm="unix:/var/run/docker.sock",service="x")"}}));
    }
  });
  ASSERT_TRUE(front.Start().ok());
  const std::string host = "127.0.0.1:" + std::to_string(front.port());
  Client client(Endpoint{.host = host, .plain_http = true, .ca_file = ""}, {.username = "bob", .password = "pw"});
  Status s = client.StreamBlob("lab/x", "sha256:" + Sha256Hex("x"), [](const char*, size_t) { return Status::Ok(); });
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("not https"), std::string::npos) << s.message();
  auto m = client.Resolve("lab/x", "v1", Platform{});
  EXPECT_EQ(m.status().code(), StatusCode::kUnauthenticated) << m.status().ToString();
  EXPECT_NE(m.status().message().find("not https"), std::string::npos) << m.status().message();
  EXPECT_EQ(m.status().message().find("pw"), std::string::npos);
  front.Stop();
}

}  // namespace
}  // namespace ringmaster::registry
