#include "cli/image_tar.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/crypto.h"

namespace ringmaster::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class ImageTarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "image_tar_test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    fs::create_directories(root_ / "src" / "rootfs");
    fs::create_directories(root_ / "out");
    Write(root_ / "src" / "rootfs" / "hello", "hello\n");
    ASSERT_EQ(Sh("tar -cf " + (root_ / "layer.tar").string() + " -C " + (root_ / "src" / "rootfs").string() + " hello"), 0);
  }
  void TearDown() override { fs::remove_all(root_); }

  static void Write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
  }
  static std::string Read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static int Sh(const std::string& cmd) { return system(cmd.c_str()); }
  std::string Tar(const std::string& dir, const std::string& name) {
    const std::string tar = (root_ / name).string();
    EXPECT_EQ(Sh("tar -cf " + tar + " -C " + dir + " ."), 0);
    return tar;
  }

  // A `docker save` tar as skopeo's docker-archive writes it; `tamper` changes the layer after naming it.
  std::string DockerSave(bool tamper = false) {
    const fs::path d = root_ / "save";
    const std::string layer = Read(root_ / "layer.tar"), layer_hex = Sha256Hex(layer);
    const std::string config = R"({"architecture":"amd64","os":"linux","config":{"Env":["A=1"]}})";
    config_hex_ = Sha256Hex(config);
    Write(d / (layer_hex + ".tar"), tamper ? layer + std::string(512, '\0') : layer);
    Write(d / (config_hex_ + ".json"), config);
    layer_hex_ = layer_hex;
    Write(d / "manifest.json", json::array({{{"Config", config_hex_ + ".json"},
                                             {"RepoTags", {"lab/base:v1"}},
                                             {"Layers", {layer_hex + ".tar"}}}}).dump());
    return Tar(d.string(), tamper ? "tampered.tar" : "save.tar");
  }

  fs::path root_;
  std::string config_hex_, layer_hex_;
};

TEST_F(ImageTarTest, DockerSaveGetsAnOciManifestOfItsConfigAndLayers) {
  const std::string tar = DockerSave();
  auto image = ReadImageTar(tar, (root_ / "out").string());
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->name, "base");
  EXPECT_EQ(image->tag, "v1");
  ASSERT_EQ(image->blobs.size(), 2u);
  EXPECT_EQ(image->blobs[0].hex, config_hex_);
  EXPECT_EQ(image->blobs[1].hex, layer_hex_);
  EXPECT_EQ(image->manifest_hex, Sha256Hex(image->manifest));
  const json m = json::parse(image->manifest);
  EXPECT_EQ(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
  EXPECT_EQ(m["config"]["digest"], "sha256:" + config_hex_);
  EXPECT_EQ(m["layers"][0]["mediaType"], "application/vnd.oci.image.layer.v1.tar");
  EXPECT_EQ(m["layers"][0]["digest"], "sha256:" + layer_hex_);
  EXPECT_EQ(m["layers"][0]["size"], image->blobs[1].size);
}

TEST_F(ImageTarTest, OciLayoutKeepsItsManifestAndNamesTheTag) {
  const fs::path d = root_ / "oci";
  const std::string layer = Read(root_ / "layer.tar"), config = R"({"os":"linux"})";
  Write(d / "blobs/sha256" / Sha256Hex(layer), layer);
  Write(d / "blobs/sha256" / Sha256Hex(config), config);
  const std::string manifest =
      json{{"schemaVersion", 2},
           {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
           {"config", {{"mediaType", "application/vnd.oci.image.config.v1+json"}, {"digest", "sha256:" + Sha256Hex(config)}, {"size", config.size()}}},
           {"layers", {{{"mediaType", "application/vnd.oci.image.layer.v1.tar"}, {"digest", "sha256:" + Sha256Hex(layer)}, {"size", layer.size()}}}}}
          .dump(2);
  Write(d / "blobs/sha256" / Sha256Hex(manifest), manifest);
  Write(d / "oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  Write(d / "index.json", json{{"schemaVersion", 2},
                               {"manifests", {{{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                                               {"digest", "sha256:" + Sha256Hex(manifest)},
                                               {"size", manifest.size()},
                                               {"annotations", {{"org.opencontainers.image.ref.name", "v2"}}}}}}}
                              .dump());
  auto image = ReadImageTar(Tar(d.string(), "oci.tar"), (root_ / "out").string());
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->manifest, manifest);
  EXPECT_EQ(image->manifest_hex, Sha256Hex(manifest));
  EXPECT_EQ(image->name, "");
  EXPECT_EQ(image->tag, "v2");
  ASSERT_EQ(image->blobs.size(), 2u);
}

TEST_F(ImageTarTest, ABlobWhoseDigestDoesNotMatchIsRefused) {
  auto image = ReadImageTar(DockerSave(/*tamper=*/true), (root_ / "out").string());
  ASSERT_FALSE(image.ok());
  EXPECT_NE(image.status().message().find("not the " + layer_hex_), std::string::npos) << image.status().message();
}

TEST_F(ImageTarTest, NotATarNoManifestAndDotDotAreRefused) {
  Write(root_ / "junk.tar", "this is not a tar at all");
  auto junk = ReadImageTar((root_ / "junk.tar").string(), (root_ / "out").string());
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("not a tar"), std::string::npos) << junk.status().message();

  Write(root_ / "empty" / "readme", "nothing here");
  auto none = ReadImageTar(Tar((root_ / "empty").string(), "none.tar"), (root_ / "out").string());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no manifest.json"), std::string::npos) << none.status().message();

  const std::string bad = (root_ / "dotdot.tar").string();
  ASSERT_EQ(Sh("cd " + root_.string() + " && tar -cPf " + bad + " src/../layer.tar"), 0);
  auto dotdot = ReadImageTar(bad, (root_ / "out").string());
  ASSERT_FALSE(dotdot.ok());
  EXPECT_NE(dotdot.status().message().find("\"..\""), std::string::npos) << dotdot.status().message();
}

TEST(NameAndTagTest, LastComponentAndTag) {
  EXPECT_EQ(NameAndTag("lab/base:v1"), std::make_pair(std::string("base"), std::string("v1")));
  EXPECT_EQ(NameAndTag("base"), std::make_pair(std::string("base"), std::string("latest")));
  EXPECT_EQ(NameAndTag("host:5000/lab/base"), std::make_pair(std::string("base"), std::string("latest")));
}

}  // namespace
}  // namespace ringmaster::cli
