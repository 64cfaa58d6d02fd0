// The SQLite MetaStore's schema: migrations applied in order, each one once,
// recorded by number in the schema_version table. Never edit a released
// migration; append a new one.
#pragma once

#include <span>

namespace ringmaster::store::sqlite {

std::span<const char* const> Migrations();

}  // namespace ringmaster::store::sqlite
