// Fuzz target `image_ref`: ParseImageRef and ParseJobImageRef on any bytes,
// as a job spec, a route or dockerd may hand them over. They must never crash
// or throw, and what they accept must print back to the same text and parse
// to the same reference.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "protocol/image_ref.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ringmaster::protocol;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto ref = ParseImageRef(text);
  if (ref.ok()) {
    if (ref->ToString() != text) std::abort();
    auto again = ParseImageRef(ref->ToString());
    if (!again.ok() || !(*again == *ref)) std::abort();
  }
  auto job = ParseJobImageRef(text);
  if (job.ok() && (!ref.ok() || !job->registry.empty() || !job->tag.empty() || job->repository.size() > kMaxJobImageNameBytes)) {
    std::abort();
  }
  return 0;
}
