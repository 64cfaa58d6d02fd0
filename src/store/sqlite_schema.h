// The SQLite metadata store's schema: migrations applied in order, each one
// once, recorded by number in the schema_version table. Never edit a released
// migration; append a new one.
#pragma once

#include <span>

namespace ringmaster::store {

std::span<const char* const> SqliteMigrations();

}  // namespace ringmaster::store
