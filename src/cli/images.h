// `ringmaster images build|push|ls` (images.cc): the site's images built from
// Debian packages and kept in the files service, and users' own images
// pushed from a saved tar, which the server serves as a registry.
#pragma once

#include <string>

#include "cli/connect.h"

namespace ringmaster::cli {

// Builds base, torch, tfjs, tensorflow or mxnet into OUT_DIR/NAME.tar (+ NAME.json).
int ImagesBuild(const std::string& name, const std::string& out_dir);
// Stores FROM_DIR/NAME.tar and .json as images/NAME/<sha256>.* and points images/NAME/latest at it (admin).
int ImagesPush(const Connection& c, const std::string& name, const std::string& from_dir);
// Pushes a `docker save` or OCI layout tar into users/USER/images/ (the
// caller's own by default) as NAME:TAG ("" = what the tar names).
int ImagesPushTar(const Connection& c, const std::string& name_tag, const std::string& tar, const std::string& user);
// The site's images, then the caller's own.
int ImagesLs(const Connection& c);

}  // namespace ringmaster::cli
