// The server's TLS: TLS 1.2 clients get AEAD suites only (a CBC-only client
// fails the handshake); TLS 1.3 works as it is.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "http/server.h"
#include "http/testing/loopback.h"
#include "http/tls_cert.h"

namespace ringmaster::http {
namespace {

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("rm_tls_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto files = EnsureSelfSignedTls(dir_.string(), {"127.0.0.1"});
    ASSERT_TRUE(files.ok()) << files.status().ToString();
    ServerOptions o;
    o.tls_cert = files->server_cert;
    o.tls_key = files->server_key;
    server_ = std::make_unique<Server>(o);
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    server_->Stop();
    std::filesystem::remove_all(dir_);
  }
  // Whether a handshake with this client configuration succeeds.
  bool Handshake(int max_version, const char* ciphers) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_max_proto_version(ctx, max_version);
    if (ciphers) {
      EXPECT_EQ(SSL_CTX_set_cipher_list(ctx, ciphers), 1);
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    SSL* ssl = SSL_new(ctx);
    int fd = testing::Dial(server_->port());
    SSL_set_fd(ssl, fd);
    const bool ok = SSL_connect(ssl) == 1;
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    close(fd);
    return ok;
  }
  std::filesystem::path dir_;
  std::unique_ptr<Server> server_;
};

TEST_F(TlsTest, Tls12OffersAeadSuitesOnly) {
  EXPECT_FALSE(Handshake(TLS1_2_VERSION, "ECDHE-ECDSA-AES128-SHA:ECDHE-RSA-AES128-SHA:AES128-SHA:AES256-SHA256"));
  EXPECT_FALSE(Handshake(TLS1_2_VERSION, "ECDHE-ECDSA-AES256-SHA384:ECDHE-RSA-AES256-SHA384"));
  EXPECT_TRUE(Handshake(TLS1_2_VERSION, "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256"));
  EXPECT_TRUE(Handshake(TLS1_3_VERSION, nullptr));
}

}  // namespace
}  // namespace ringmaster::http
