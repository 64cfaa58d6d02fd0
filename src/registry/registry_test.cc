// Unit tests of the registry client's parsing: challenges, manifests,
// indexes, platform choice, image configs and error wording.
#include <gtest/gtest.h>

#include "common/crypto.h"
#include "registry/client.h"
#include "registry/manifest.h"

namespace ringmaster::registry {
namespace {

std::string D(char c) { return "sha256:" + std::string(64, c); }

TEST(ParseChallenge, DockerHub) {
  auto c = ParseChallenge(
      R"(Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/ubuntu:pull")");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->scheme, "Bearer");
  EXPECT_EQ(c->Param("realm"), "https://auth.docker.io/token");
  EXPECT_EQ(c->Param("service"), "registry.docker.io");
  EXPECT_EQ(c->Param("scope"), "repository:library/ubuntu:pull");
  EXPECT_EQ(c->Param("SERVICE"), "registry.docker.io");
  EXPECT_EQ(c->Param("error"), "");
}

TEST(ParseChallenge, QuotedCommasEscapesAndTokens) {
  auto c = ParseChallenge(
      R"(Bearer  realm = "https://a/t?x=1,y=2" , scope="repository:a/b:pull,push",error=insufficient_scope, note="say \"hi\" \\ ok")");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->Param("realm"), "https://a/t?x=1,y=2");
  EXPECT_EQ(c->Param("scope"), "repository:a/b:pull,push");
  EXPECT_EQ(c->Param("error"), "insufficient_scope");
  EXPECT_EQ(c->Param("note"), R"(say "hi" \ ok)");
}

TEST(ParseChallenge, BasicAndSecondChallenge) {
  auto c = ParseChallenge(R"(Basic realm="Registry Realm", Bearer realm="x")");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->scheme, "Basic");
  EXPECT_EQ(c->Param("realm"), "Registry Realm");
  ASSERT_EQ(c->params.size(), 1u);
}

TEST(ParseChallenge, BadInput) {
  for (const char* bad : {"", "   ", "=x", R"(Bearer realm="unterminated)", "Bearer realm", "Bearer realm=",
                          R"(Bearer realm="a" service="b")", "Bearer,realm=x", "Bearer realm=@"}) {
    auto c = ParseChallenge(bad);
    EXPECT_FALSE(c.ok()) << "'" << bad << "' parsed";
    if (!c.ok()) {
      EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(DescribeRegistryError, RegistryWordsAndPlainText) {
  EXPECT_EQ(DescribeRegistryError("r.example:5000", 401,
                                  R"({"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":null}]})"),
            "registry r.example:5000: 401 Unauthorized: authentication required");
  EXPECT_EQ(DescribeRegistryError("h", 404, R"({"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"},)"
                                            R"({"code":"X","message":"second"}]})"),
            "registry h: 404 Not Found: manifest unknown; second");
  EXPECT_EQ(DescribeRegistryError("h", 503, "  down for maintenance\n"), "registry h: 503 Service Unavailable: down for maintenance");
  EXPECT_EQ(DescribeRegistryError("h", 502, "<html><body>Bad gateway</body></html>"), "registry h: 502 Bad Gateway");
  EXPECT_EQ(DescribeRegistryError("h", 418, ""), "registry h: 418");
  // Control characters from the registry never reach a terminal as they are.
  EXPECT_EQ(DescribeRegistryError("h", 500, "a\x1b[2Jb").find('\x1b'), std::string::npos);
}

std::string OciManifest(const std::string& media_type_field = "") {
  return R"({"schemaVersion":2,)" + media_type_field + R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")" +
         D('c') + R"(","size":123},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":")" + D('1') +
         R"(","size":10},{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":")" + D('2') + R"(","size":20}]})";
}

TEST(ParseManifestDocument, OciManifestWithoutMediaType) {
  auto doc = ParseManifestDocument(OciManifest(), "application/vnd.oci.image.manifest.v1+json");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_FALSE(doc->is_index);
  EXPECT_EQ(doc->manifest.media_type, kOciManifest);
  EXPECT_EQ(doc->manifest.config.digest, D('c'));
  EXPECT_EQ(doc->manifest.config.size, 123);
  ASSERT_EQ(doc->manifest.layers.size(), 2u);
  EXPECT_EQ(doc->manifest.layers[0].digest, D('1'));  // bottom first
  EXPECT_EQ(doc->manifest.layers[1].size, 20);
  // Shape tells when neither the document nor the header does.
  auto bare = ParseManifestDocument(OciManifest(), "application/json");
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->manifest.media_type, kOciManifest);
}

TEST(ParseManifestDocument, DockerSchema2) {
  auto doc = ParseManifestDocument(
      OciManifest(R"("mediaType":"application/vnd.docker.distribution.manifest.v2+json",)"), "text/plain");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ(doc->manifest.media_type, kDockerManifest);
  EXPECT_EQ(doc->manifest.layers.size(), 2u);
}

TEST(ParseManifestDocument, SchemaOneRefused) {
  auto doc = ParseManifestDocument(R"({"schemaVersion":1,"name":"a","tag":"b","fsLayers":[]})",
                                   "application/vnd.docker.distribution.manifest.v1+prettyjws");
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(doc.status().message().find("schema 1"), std::string::npos) << doc.status().message();
}

TEST(ParseManifestDocument, BadDocuments) {
  for (const std::string& bad :
       {std::string("not json"), std::string("[]"), std::string(R"({"schemaVersion":2})"),
        std::string(R"({"config":{"digest":"sha256:abc","size":1},"layers":[]})"),
        std::string(R"({"config":{"digest":")") + D('c') + R"("},"layers":[]})",
        std::string(R"({"config":{"digest":")") + D('c') + R"(","size":1},"layers":{}})",
        std::string(R"({"config":{"digest":")") + D('c') + R"(","size":1},"layers":[{"digest":"sha256:../../x","size":1}]})",
        std::string(R"({"manifests":{}})")}) {
    auto doc = ParseManifestDocument(bad, "");
    EXPECT_FALSE(doc.ok()) << bad;
    if (!doc.ok()) {
      EXPECT_EQ(doc.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

std::string Index(const std::string& media_type) {
  return R"({"schemaVersion":2,"mediaType":")" + media_type + R"(","manifests":[)"
         R"({"mediaType":"m","digest":")" + D('a') + R"(","size":1,"platform":{"os":"linux","architecture":"amd64"}},)"
         R"({"mediaType":"m","digest":")" + D('b') + R"(","size":2,"platform":{"os":"linux","architecture":"arm64","variant":"v8"}},)"
         R"({"mediaType":"m","digest":")" + D('c') + R"(","size":3,"platform":{"os":"linux","architecture":"arm","variant":"v7"}},)"
         R"({"mediaType":"m","digest":")" + D('d') + R"(","size":4,"platform":{"os":"unknown","architecture":"unknown"}}]})";
}

TEST(ChoosePlatform, OciAndDockerIndexes) {
  for (std::string_view type : {kOciIndex, kDockerList}) {
    auto doc = ParseManifestDocument(Index(std::string(type)), "");
    ASSERT_TRUE(doc.ok()) << doc.status().ToString();
    ASSERT_TRUE(doc->is_index);
    ASSERT_EQ(doc->entries.size(), 4u);
    auto amd64 = ChoosePlatform(doc->entries, Platform{});
    ASSERT_TRUE(amd64.ok()) << amd64.status().ToString();
    EXPECT_EQ(amd64->digest, D('a'));
    auto arm64 = ChoosePlatform(doc->entries, {.os = "linux", .architecture = "arm64", .variant = ""});
    ASSERT_TRUE(arm64.ok());
    EXPECT_EQ(arm64->digest, D('b'));
    auto v7 = ChoosePlatform(doc->entries, {.os = "linux", .architecture = "arm", .variant = "v7"});
    ASSERT_TRUE(v7.ok());
    EXPECT_EQ(v7->digest, D('c'));
    EXPECT_FALSE(ChoosePlatform(doc->entries, {.os = "linux", .architecture = "arm", .variant = "v6"}).ok());
  }
}

TEST(ChoosePlatform, Arm64WithoutVariantIsV8) {
  std::vector<IndexEntry> entries{{.descriptor = {.media_type = "", .digest = D('e'), .size = 1},
                                   .platform = {.os = "linux", .architecture = "arm64", .variant = ""}}};
  auto v8 = ChoosePlatform(entries, {.os = "linux", .architecture = "arm64", .variant = "v8"});
  ASSERT_TRUE(v8.ok()) << v8.status().ToString();
  EXPECT_EQ(v8->digest, D('e'));
}

TEST(ChoosePlatform, MissingPlatformListsThoseThereAre) {
  auto doc = ParseManifestDocument(Index(std::string(kOciIndex)), "");
  ASSERT_TRUE(doc.ok());
  auto none = ChoosePlatform(doc->entries, {.os = "linux", .architecture = "ppc64le", .variant = ""});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.status().message(),
            "no manifest for linux/ppc64le in the index; it has linux/amd64, linux/arm64/v8, linux/arm/v7");
  EXPECT_NE(ChoosePlatform({}, Platform{}).status().message().find("no platform"), std::string::npos);
}

TEST(ParseImageConfig, OciConfig) {
  auto c = ParseImageConfig(R"({"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/bin","A=b"],)"
                            R"("Entrypoint":["/bin/sh","-c"],"Cmd":["echo hi"],"WorkingDir":"/w","User":"1000:1000"},)"
                            R"("rootfs":{"type":"layers","diff_ids":[")" + D('1') + R"(",")" + D('2') + R"("]}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->os, "linux");
  EXPECT_EQ(c->architecture, "amd64");
  EXPECT_EQ(c->env, (std::vector<std::string>{"PATH=/usr/bin", "A=b"}));
  EXPECT_EQ(c->entrypoint, (std::vector<std::string>{"/bin/sh", "-c"}));
  EXPECT_EQ(c->cmd, (std::vector<std::string>{"echo hi"}));
  EXPECT_EQ(c->working_dir, "/w");
  EXPECT_EQ(c->user, "1000:1000");
  EXPECT_EQ(c->diff_ids, (std::vector<std::string>{D('1'), D('2')}));
}

TEST(ParseImageConfig, DockerConfigWithNulls) {
  // Docker writes null for absent lists and a variant for arm.
  auto c = ParseImageConfig(R"({"architecture":"arm","variant":"v7","os":"linux","config":{"Env":null,"Cmd":null,)"
                            R"("Entrypoint":null},"rootfs":{"type":"layers","diff_ids":[]}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->variant, "v7");
  EXPECT_TRUE(c->env.empty());
  EXPECT_TRUE(c->cmd.empty());
}

TEST(ParseImageConfig, BadConfigs) {
  for (const char* bad :
       {"", "{}", R"({"os":"linux","architecture":"amd64"})", R"({"os":"linux","rootfs":{"diff_ids":[]}})",
        R"({"os":"linux","architecture":"amd64","rootfs":{"diff_ids":["sha256:1"]}})",
        R"({"os":"linux","architecture":"amd64","config":{"Env":"A=b"},"rootfs":{"diff_ids":[]}})",
        R"({"os":"linux","architecture":"amd64","config":{"Cmd":[1]},"rootfs":{"diff_ids":[]}})"}) {
    auto c = ParseImageConfig(bad);
    EXPECT_FALSE(c.ok()) << bad;
    if (!c.ok()) {
      EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

TEST(Platform, ToString) {
  EXPECT_EQ(Platform{}.ToString(), "linux/amd64");
  EXPECT_EQ((Platform{.os = "linux", .architecture = "arm64", .variant = "v8"}).ToString(), "linux/arm64/v8");
}

TEST(IsSha256Digest, Forms) {
  EXPECT_TRUE(IsSha256Digest("sha256:" + Sha256Hex("x")));
  EXPECT_FALSE(IsSha256Digest("sha256:" + std::string(64, 'A')));
  EXPECT_FALSE(IsSha256Digest("sha512:" + std::string(64, 'a')));
  EXPECT_FALSE(IsSha256Digest("sha256:" + std::string(63, 'a')));
}

}  // namespace
}  // namespace ringmaster::registry
