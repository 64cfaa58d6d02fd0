// Fuzz target `layer_tar`: LayerUnpacker on any bytes, as a registry may
// serve a layer (the compression sniffed). It must never crash, hang or
// write outside the layer's directory: afterwards the directory beside it
// is still the only thing in their common parent.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "agent/container/layer_unpack.h"
#include "agent/executor/safe_fs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/rm-fuzz-layer-XXXXXX";
  if (!mkdtemp(tmpl)) std::abort();
  const fs::path parent = tmpl;
  fs::create_directory(parent / "root");
  {
    ringmaster::agent::UniqueFd root(open((parent / "root").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ringmaster::agent::UnpackLimits limits;
    limits.max_bytes = 1 << 20;
    limits.max_entries = 1000;
    ringmaster::agent::LayerUnpacker u(root.get(), "layer fuzz", ringmaster::agent::LayerCompression::kNone,
                                       /*sniff=*/true, limits);
    // In two pieces, so state carried between writes is exercised too.
    const size_t half = size / 2;
    if (u.Write(reinterpret_cast<const char*>(data), half).ok() &&
        u.Write(reinterpret_cast<const char*>(data) + half, size - half).ok()) {
      (void)u.Finish();
    }
  }
  for (const auto& e : fs::directory_iterator(parent)) {
    if (e.path().filename() != "root") std::abort();
  }
  int parent_fd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (!ringmaster::agent::RemoveTree(parent_fd, parent.filename()).ok()) std::abort();
  close(parent_fd);
  return 0;
}
