// Registries without a registry: names, logins and whose login a job uses.
// Pinning against real registries is tested end to end (e2e.registry_images).
#include "server/registries.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/crypto.h"
#include "files/fake_store.h"
#include "server/user_images.h"
#include "store/memory/memory_meta_store.h"

namespace ringmaster::server {
namespace {

TEST(RegistriesTest, RegistryNamesAreNormalized) {
  EXPECT_EQ(*NormalizeRegistry("Registry.Example:5000"), "registry.example:5000");
  EXPECT_EQ(*NormalizeRegistry(""), "docker.io");
  EXPECT_EQ(*NormalizeRegistry("index.docker.io"), "docker.io");
  EXPECT_EQ(*NormalizeRegistry("registry-1.docker.io"), "docker.io");
  EXPECT_EQ(*NormalizeRegistry("127.0.0.1:35500"), "127.0.0.1:35500");
  for (const char* bad : {"a b", "host:", "host:0", "host:99999", "host:12a", "-host", "host/x", "ho$t", ":80"}) {
    auto r = NormalizeRegistry(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().message().rfind("registry: ", 0), 0u) << r.status().message();
    }
  }
}

TEST(RegistriesTest, DockerHubsOfficialImagesAreUnderLibrary) {
  auto at = RegistryImageOf(*protocol::ParseImageRef("ubuntu:22.04"));
  EXPECT_EQ(at.registry, "docker.io");
  EXPECT_EQ(at.repository, "library/ubuntu");
  at = RegistryImageOf(*protocol::ParseImageRef("pytorch/pytorch:2.1.0"));
  EXPECT_EQ(at.repository, "pytorch/pytorch");
  at = RegistryImageOf(*protocol::ParseImageRef("nvcr.io/nvidia/pytorch:24.01-py3"));
  EXPECT_EQ(at.registry, "nvcr.io");
  EXPECT_EQ(at.repository, "nvidia/pytorch");
  at = RegistryImageOf(*protocol::ParseImageRef("localhost:5000/torch"));
  EXPECT_EQ(at.registry, "localhost:5000");
  EXPECT_EQ(at.repository, "torch");  // only Docker Hub has library/
}

TEST(RegistriesTest, OnlyAllowedRegistriesMayBeNamed) {
  EXPECT_TRUE(registry::RegistryAllowed({}, "anything:1"));
  const std::vector<std::string> allowed = {"registry.example:5000", "*.corp.example"};
  EXPECT_TRUE(registry::RegistryAllowed(allowed, "registry.example:5000"));
  EXPECT_FALSE(registry::RegistryAllowed(allowed, "registry.example"));  // another port is another registry
  EXPECT_TRUE(registry::RegistryAllowed(allowed, "harbor.corp.example"));
  EXPECT_TRUE(registry::RegistryAllowed(allowed, "harbor.corp.example:8443"));
  EXPECT_FALSE(registry::RegistryAllowed(allowed, "corp.example"));
  EXPECT_FALSE(registry::RegistryAllowed(allowed, "evilcorp.example"));
  EXPECT_FALSE(registry::RegistryAllowed(allowed, "169.254.169.254"));
}

class RegistryLoginsTest : public ::testing::Test {
 protected:
  RegistryLoginsTest()
      : store_(store::memory::NewMemoryMetaStore()),
        registries_(store_.get(), *SecretBox::WithKey(std::string(32, 'k')), RegistryOptions{}, &clock_) {}
  FakeClock clock_;
  std::unique_ptr<store::MetaStore> store_;
  Registries registries_;
};

TEST_F(RegistryLoginsTest, AJobUsesItsOwnersLoginElseTheSitesElseNone) {
  ASSERT_TRUE(registries_.Login(7, "Reg:5000", "ada", "ada-pw").ok());
  ASSERT_TRUE(registries_.Login(0, "reg:5000", "robot", "site-pw").ok());
  std::string whose;
  auto ada = registries_.CredentialsFor(7, "reg:5000", &whose);
  ASSERT_TRUE(ada.ok()) << ada.status().ToString();
  EXPECT_EQ(ada->username, "ada");
  EXPECT_EQ(ada->password, "ada-pw");
  EXPECT_EQ(whose, "ada");
  // Another user never gets ada's: the site's, where there is one.
  auto bob = registries_.CredentialsFor(8, "reg:5000", &whose);
  EXPECT_EQ(bob->username, "robot");
  EXPECT_EQ(whose, "site");
  auto none = registries_.CredentialsFor(8, "other:5000", &whose);
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(whose, "");
  // The store holds no password in clear, and a listing none at all.
  auto row = store_->GetRegistryCredential(7, "reg:5000");
  EXPECT_EQ(row->sealed.find("ada-pw"), std::string::npos);
  auto listed = registries_.List(7);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_TRUE((*listed)[0].sealed.empty());
  ASSERT_TRUE(registries_.Logout(7, "reg:5000").ok());
  EXPECT_EQ(registries_.CredentialsFor(7, "reg:5000", &whose)->username, "robot");
  EXPECT_EQ(registries_.Logout(7, "reg:5000").code(), StatusCode::kNotFound);
}

TEST_F(RegistryLoginsTest, ASealedPasswordMovedToAnotherUserDoesNotOpen) {
  ASSERT_TRUE(registries_.Login(7, "reg:5000", "ada", "ada-pw").ok());
  auto row = *store_->GetRegistryCredential(7, "reg:5000");
  row.user_id = 8;  // someone with the database copies ada's row to theirs
  ASSERT_TRUE(store_->PutRegistryCredential(row).ok());
  auto stolen = registries_.CredentialsFor(8, "reg:5000", nullptr);
  EXPECT_EQ(stolen.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(stolen.status().message().find("ada-pw"), std::string::npos);
}

TEST_F(RegistryLoginsTest, APinOfARegistryNotAllowedNeverLeavesTheServer) {
  RegistryOptions o;
  o.allowed = {"registry.example:5000"};
  Registries limited(store_.get(), *SecretBox::WithKey(std::string(32, 'k')), o, &clock_);
  auto pinned = limited.Pin(7, *protocol::ParseImageRef("169.254.169.254/x/y:1"));
  EXPECT_EQ(pinned.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pinned.status().message(),
            "image: registry 169.254.169.254 is not one this site's jobs may use (the server's --allowed-registries)");
}

TEST_F(RegistryLoginsTest, BadLoginsAreRefusedNamingTheField) {
  EXPECT_EQ(registries_.Login(7, "reg:5000", "", "pw").message(), "username: 1 to 256 bytes");
  EXPECT_EQ(registries_.Login(7, "reg:5000", "ada", "").message(), "password: 1 to 8192 bytes");
  EXPECT_EQ(registries_.Login(7, "bad host", "ada", "pw").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(store_->ListRegistryCredentials(7)->empty());
}

}  // namespace
}  // namespace ringmaster::server

namespace ringmaster::server {
namespace {

// This server's own registry: users' images pinned from the files store.
class OwnRegistryTest : public RegistryLoginsTest {
 protected:
  void SetUp() override {
    alice_ = User("alice", store::Role::kUser);
    bob_ = User("bob", store::Role::kUser);
    admin_ = User("root", store::Role::kAdmin);
    registries_.ServeOwn("127.0.0.1:8080", files_.get());
    // A whole image of alice's: config and layer stored under their hashes.
    config_hex_ = Sha256Hex("{}");
    layer_hex_ = Sha256Hex("layer");
    Put(user_images::BlobKey("alice", config_hex_), "{}");
    Put(user_images::BlobKey("alice", layer_hex_), "layer");
    manifest_hex_ = PutManifest("alice", config_hex_, layer_hex_);
    Put(user_images::TagKey("alice", "base", "v1"), "sha256:" + manifest_hex_ + "\n");
  }
  std::string PutManifest(const std::string& user, const std::string& config, const std::string& layer) {
    const std::string m = fmt::format(
        R"({{"schemaVersion":2,"config":{{"digest":"sha256:{}"}},"layers":[{{"digest":"sha256:{}"}}]}})", config, layer);
    Put(user_images::BlobKey(user, Sha256Hex(m)), m);
    return Sha256Hex(m);
  }
  int64_t User(const std::string& name, store::Role role) {
    store::User u;
    u.name = name;
    u.role = role;
    return *store_->CreateUser(u);
  }
  void Put(const std::string& key, const std::string& bytes) {
    auto w = files_->Create(key, {});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write(bytes).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  StatusOr<std::string> Pin(int64_t user, const std::string& image) {
    return registries_.Pin(user, *protocol::ParseImageRef(image));
  }
  std::unique_ptr<files::FakeBlobStore> files_ = files::NewFakeBlobStore();
  int64_t alice_ = 0, bob_ = 0, admin_ = 0;
  std::string manifest_hex_, config_hex_, layer_hex_;
};

TEST_F(OwnRegistryTest, AUserPinsTheirOwnImagesOthersSeeNothing) {
  auto mine = Pin(alice_, "127.0.0.1:8080/alice/base:v1");
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_EQ(*mine, "127.0.0.1:8080/alice/base:v1@sha256:" + manifest_hex_);
  auto by_digest = Pin(alice_, "127.0.0.1:8080/alice/base@sha256:" + manifest_hex_);
  ASSERT_TRUE(by_digest.ok()) << by_digest.status().ToString();
  EXPECT_TRUE(Pin(admin_, "127.0.0.1:8080/alice/base:v1").ok());
  // Bob's refusal reads as a missing image's: alice's is not confirmed to exist.
  auto theirs = Pin(bob_, "127.0.0.1:8080/alice/base:v1");
  auto missing = Pin(alice_, "127.0.0.1:8080/alice/base:v2");
  ASSERT_FALSE(theirs.ok());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(theirs.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(theirs.status().message().find("not found"), std::string::npos) << theirs.status().message();
  EXPECT_NE(missing.status().message().find("not found"), std::string::npos) << missing.status().message();
  EXPECT_EQ(Pin(alice_, "127.0.0.1:8080/base:v1").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(OwnRegistryTest, AManifestNamingAnotherUsersLayersIsRefused) {
  // Bob writes a manifest that lists alice's layer (its digest leaked), hoping
  // a node that ran alice's image hands him the layer from its cache.
  Put(user_images::BlobKey("bob", config_hex_), "{}");
  const std::string hex = PutManifest("bob", config_hex_, layer_hex_);
  Put(user_images::TagKey("bob", "steal", "v1"), "sha256:" + hex + "\n");
  auto pinned = Pin(bob_, "127.0.0.1:8080/bob/steal:v1");
  ASSERT_FALSE(pinned.ok());
  EXPECT_NE(pinned.status().message().find("not among bob's images"), std::string::npos) << pinned.status().message();
  // A manifest whose stored bytes are not its digest's is refused too.
  Put(user_images::BlobKey("bob", std::string(64, 'a')), "junk");
  Put(user_images::TagKey("bob", "junk", "v1"), "sha256:" + std::string(64, 'a') + "\n");
  auto junk = Pin(bob_, "127.0.0.1:8080/bob/junk:v1");
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("does not hash to its digest"), std::string::npos) << junk.status().message();
}

}  // namespace
}  // namespace ringmaster::server
