// The S3 BlobStore: any S3 endpoint (Ceph RGW in tests), path-style
// addressing, SigV4-signed requests over our own HTTP/1.1 client on
// Boost.Beast (the same stack as the server), with keep-alive connections,
// a deadline on every network wait, and multipart uploads for large objects.
//
// Why not libs3 or libcurl: Debian's libs3 (2.0) is years behind S3 and its
// callbacks push data at you; libcurl is excellent but push-based too, and a
// BlobReader is pulled by the API server as its client drains the response.
// Beast and OpenSSL are already linked into the server, and SigV4 is a page
// of code with published test vectors (s3_store_test.cc).
//
// Each object's SHA-256 is its user metadata x-amz-meta-sha256. A multipart
// upload whose checksum was not known up front gets it by a copy onto itself
// (conditional on the ETag, so a concurrent writer's object is never
// relabelled); S3 limits such copies to 5 GiB, so bigger uploads should pass
// PutOptions::expected_sha256 (the CLI always does).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "files/blob_store.h"

namespace ringmaster::files {

struct S3Config {
  std::string endpoint;  // "http://127.0.0.1:7480" or https://...
  std::string bucket;
  std::string region = "us-east-1";
  std::string prefix;  // prepended to every key, e.g. "ringmaster/"
  std::string access_key, secret_key;
  std::string ca_file;  // extra CA for https (else the system's)
  size_t part_size = 8 << 20;
  int timeout_ms = 30000;  // for each connect, send or receive wait
};

// s3://BUCKET?endpoint=URL[&region=R][&prefix=P][&credentials=FILE][&ca=FILE][&part_size=BYTES][&timeout_ms=N]
StatusOr<S3Config> ParseS3Url(const std::string& url);

// Checks the bucket exists (creating it when missing).
StatusOr<std::unique_ptr<BlobStore>> NewS3BlobStore(const S3Config& config);

// SigV4, exposed for its test vectors. `headers` are the ones to sign, names
// lowercase, and must include host, x-amz-date and x-amz-content-sha256.
std::string SigV4Authorization(const std::string& method, const std::string& canonical_uri,
                               const std::map<std::string, std::string>& query,
                               const std::map<std::string, std::string>& headers, const std::string& payload_sha256,
                               const std::string& access_key, const std::string& secret_key,
                               const std::string& region);

}  // namespace ringmaster::files
