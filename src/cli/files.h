// `ringmaster files ...`: users' files over /api/v1/files (see files.cc).
#pragma once

#include <string>

#include "cli/connect.h"

namespace ringmaster::cli {

// A file or a directory (recursively) to REMOTE (default: its name under users/<you>/).
int FilesPut(const Connection& c, const std::string& local, const std::string& remote);
// A file, or every file under a directory, to LOCAL (default: its name here).
int FilesGet(const Connection& c, const std::string& remote, const std::string& local);
int FilesLs(const Connection& c, const std::string& prefix, bool as_json);
int FilesCat(const Connection& c, const std::string& remote);
int FilesRm(const Connection& c, const std::string& remote, bool recursive);
// Bytes and files under a prefix.
int FilesDu(const Connection& c, const std::string& prefix);
// A local file's SHA-256 (hex); dies with one line if it cannot be read.
std::string HashFile(const std::string& path);
// Admin: recounts every user's file usage from the store.
int FilesReconcile(const Connection& c);

}  // namespace ringmaster::cli
