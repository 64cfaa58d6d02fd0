// The in-memory BlobStore for unit tests of its users: the same contract as
// the real backends, plus faults on demand.
#pragma once

#include <memory>

#include "common/clock.h"
#include "files/blob_store.h"

namespace ringmaster::files {

class FakeBlobStore : public BlobStore {
 public:
  // While set, every call fails with Unavailable naming the backend, as a
  // real backend does when its service is down.
  virtual void SetDown(bool down) = 0;
};

// Objects' mtimes come from `clock` (nullptr = the real one).
std::unique_ptr<FakeBlobStore> NewFakeBlobStore(Clock* clock = nullptr);

}  // namespace ringmaster::files
