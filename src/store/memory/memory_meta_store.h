// In-memory backend of MetaStore, for tests and throwaway servers: the same
// contract as SQLite's (meta_store_contract_test.cc) with nothing on disk.
// A transaction keeps a copy of the data to put back if it fails; commits are
// durable at once; Damage() is always empty. Thread-safe (one lock).
#pragma once

#include <memory>

#include "store/meta_store.h"

namespace ringmaster::store::memory {

std::unique_ptr<MetaStore> NewMemoryMetaStore();

}  // namespace ringmaster::store::memory
