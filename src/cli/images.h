// `ringmaster images build|push|ls` (images.cc): tasks' images built from
// Debian packages and kept in the files service, no registry.
#pragma once

#include <string>

#include "cli/connect.h"

namespace ringmaster::cli {

// Builds base, torch, tfjs, tensorflow or mxnet into OUT_DIR/NAME.tar (+ NAME.json).
int ImagesBuild(const std::string& name, const std::string& out_dir);
// Stores FROM_DIR/NAME.tar and .json as images/NAME/<sha256>.* and points images/NAME/latest at it (admin).
int ImagesPush(const Connection& c, const std::string& name, const std::string& from_dir);
int ImagesLs(const Connection& c);

}  // namespace ringmaster::cli
