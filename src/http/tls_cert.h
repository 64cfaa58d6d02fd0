// Self-signed TLS for servers that are not given a certificate: a private CA
// made for one data dir signs the server's certificate, and its key is thrown
// away at once, so nothing can mint another certificate that clients trust.
// Clients trust <dir>/ca.crt (the CLI finds it in the data dir; remote agents
// and other clients take it with --ca). Thread-compatible (file writes).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::http {

struct TlsFiles {
  std::string ca_cert;      // what clients trust
  std::string server_cert;  // PEM chain the server presents
  std::string server_key;   // PEM, mode 0600
};

// Makes a CA and a server certificate for `names` under `dir`, or reuses the
// ones there while they are valid for 30 more days (a name they lack is
// logged as a warning, not a reason to mint a new CA that clients do not trust).
// Names that parse as IP addresses become IP SANs, the rest DNS SANs.
StatusOr<TlsFiles> EnsureSelfSignedTls(const std::string& dir, const std::vector<std::string>& names);

// The names a server listening on `host` answers to: localhost, 127.0.0.1,
// ::1, the hostname, and `host` itself, or every local address for 0.0.0.0.
std::vector<std::string> ServerNames(const std::string& host);

}  // namespace ringmaster::http
