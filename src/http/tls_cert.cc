#include "http/tls_cert.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/files.h"

namespace ringmaster::http {
namespace {

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using PKey = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;

constexpr int64_t kDay = 86400;

bool IsIp(const std::string& s) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, s.c_str(), &a4) == 1 || inet_pton(AF_INET6, s.c_str(), &a6) == 1;
}

PKey NewKey() { return PKey(EVP_EC_gen("P-256")); }

Status AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) return Internal(fmt::format("tls: cannot make extension {} = {}", OBJ_nid2sn(nid), value));
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return Status::Ok();
}

StatusOr<Cert> MakeCert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key, int64_t days,
                        bool ca, const std::vector<std::string>& names) {
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof serial);
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days * kDay));
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("Ringmaster"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* signer = issuer ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  if (ca) {
    RM_RETURN_IF_ERROR(AddExt(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
    RM_RETURN_IF_ERROR(AddExt(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign"));
  } else {
    RM_RETURN_IF_ERROR(AddExt(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE"));
    RM_RETURN_IF_ERROR(AddExt(cert.get(), signer, NID_key_usage, "critical,digitalSignature,keyEncipherment"));
    RM_RETURN_IF_ERROR(AddExt(cert.get(), signer, NID_ext_key_usage, "serverAuth"));
    std::string san;
    for (const auto& n : names) san += (san.empty() ? "" : ",") + std::string(IsIp(n) ? "IP:" : "DNS:") + n;
    RM_RETURN_IF_ERROR(AddExt(cert.get(), signer, NID_subject_alt_name, san));
  }
  RM_RETURN_IF_ERROR(AddExt(cert.get(), signer, NID_subject_key_identifier, "hash"));
  if (X509_sign(cert.get(), issuer_key ? issuer_key : key, EVP_sha256()) == 0) {
    return Internal("tls: signing the certificate failed");
  }
  return cert;
}

StatusOr<std::string> Pem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_X509(bio.get(), cert)) return Internal("tls: cannot encode a certificate");
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

StatusOr<std::string> Pem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr)) {
    return Internal("tls: cannot encode a key");
  }
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// True if the certificate at `path` is still good for 30 days; the names in
// `names` it does not cover go to *missing. A certificate is kept even when a
// name is missing (a new interface, a renamed host): minting a new CA would
// cut off every client and agent that trusts the old one.
bool Reusable(const std::string& path, const std::vector<std::string>& names, std::vector<std::string>* missing) {
  auto text = ReadFile(path);
  if (!text.ok()) return false;
  Bio bio(BIO_new_mem_buf(text->data(), static_cast<int>(text->size())));
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return false;
  time_t soon = time(nullptr) + 30 * kDay;
  if (X509_cmp_time(X509_get0_notAfter(cert.get()), &soon) <= 0) return false;
  for (const auto& n : names) {
    int ok = IsIp(n) ? X509_check_ip_asc(cert.get(), n.c_str(), 0) : X509_check_host(cert.get(), n.c_str(), n.size(), 0, nullptr);
    if (ok != 1) missing->push_back(n);
  }
  return true;
}

}  // namespace

std::vector<std::string> ServerNames(const std::string& host) {
  std::set<std::string> names = {"localhost", "127.0.0.1", "::1"};
  char hn[256] = {0};
  if (gethostname(hn, sizeof hn - 1) == 0 && hn[0]) names.insert(hn);
  if (host == "0.0.0.0" || host == "::") {
    ifaddrs* ifs = nullptr;
    if (getifaddrs(&ifs) == 0) {
      for (ifaddrs* i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr) continue;
        char buf[INET6_ADDRSTRLEN] = {0};
        if (i->ifa_addr->sa_family == AF_INET) {
          inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
        } else if (i->ifa_addr->sa_family == AF_INET6) {
          auto* a6 = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
          if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;
          inet_ntop(AF_INET6, &a6->sin6_addr, buf, sizeof buf);
        }
        if (buf[0]) names.insert(buf);
      }
      freeifaddrs(ifs);
    }
  } else if (!host.empty()) {
    names.insert(host);
  }
  return {names.begin(), names.end()};
}

StatusOr<TlsFiles> EnsureSelfSignedTls(const std::string& dir, const std::vector<std::string>& names) {
  TlsFiles f{dir + "/ca.crt", dir + "/server.crt", dir + "/server.key"};
  std::vector<std::string> missing;
  if (Reusable(f.server_cert, names, &missing) && ReadFile(f.ca_cert).ok() && ReadFile(f.server_key).ok()) {
    if (!missing.empty()) {
      std::string list;
      for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
      spdlog::warn("tls: {} does not name {}; clients using those names will refuse it. Keeping it (a new one "
                   "would need a new CA that no client trusts yet); delete {} to make a new one",
                   f.server_cert, list, dir);
    }
    return f;
  }
  RM_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  PKey ca_key = NewKey(), key = NewKey();
  if (!ca_key || !key) return Internal("tls: cannot generate a P-256 key");
  char hn[256] = {0};
  gethostname(hn, sizeof hn - 1);
  RM_ASSIGN_OR_RETURN(Cert ca, MakeCert(ca_key.get(), fmt::format("Ringmaster CA ({})", hn), nullptr, nullptr,
                                        3650, true, {}));
  RM_ASSIGN_OR_RETURN(Cert cert, MakeCert(key.get(), names.empty() ? "localhost" : names.front(), ca.get(),
                                          ca_key.get(), 825, false, names));
  RM_ASSIGN_OR_RETURN(std::string ca_pem, Pem(ca.get()));
  RM_ASSIGN_OR_RETURN(std::string cert_pem, Pem(cert.get()));
  RM_ASSIGN_OR_RETURN(std::string key_pem, Pem(key.get()));
  // The CA's key is never written: this CA signs exactly one certificate.
  RM_RETURN_IF_ERROR(WriteFileAtomic(f.server_key, key_pem, 0600));
  RM_RETURN_IF_ERROR(WriteFileAtomic(f.server_cert, cert_pem + ca_pem, 0644));
  RM_RETURN_IF_ERROR(WriteFileAtomic(f.ca_cert, ca_pem, 0644));
  return f;
}

}  // namespace ringmaster::http
