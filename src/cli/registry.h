// `ringmaster registry login|logout|ls` (registry.cc): a user's logins to OCI
// registries, kept sealed on the server and used only for their own jobs'
// images; admins set the site's with --site (docs/containers.md).
#pragma once

#include <string>

#include "cli/connect.h"

namespace ringmaster::cli {

// The password (or access token) is read from stdin, one line.
int RegistryLogin(const Connection& c, const std::string& registry, const std::string& username, bool site);
int RegistryLogout(const Connection& c, const std::string& registry, bool site);
int RegistryLs(const Connection& c, bool as_json);

}  // namespace ringmaster::cli
