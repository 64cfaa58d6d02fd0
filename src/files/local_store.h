// The local BlobStore: objects are files under one directory.
//
// Layout: a key's directories are "d.<segment>" and its object "o.<segment>",
// so "a" and "a/b" can both exist, as in S3. Each object file starts with a
// 128-byte header holding its SHA-256, then its bytes. Writes go to
// <root>/.tmp, are fsynced, and renamed into place (then the directory is
// fsynced): a reader sees the old or the new object, never a torn one, and a
// crash leaves at most a temp file, removed at the next open.
#pragma once

#include <memory>
#include <string>

#include "files/blob_store.h"

namespace ringmaster::files {

// Creates `root` (0700) when missing.
StatusOr<std::unique_ptr<BlobStore>> NewLocalBlobStore(const std::string& root);

}  // namespace ringmaster::files
