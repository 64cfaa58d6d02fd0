// Moving a site's metadata from one store to another (`ringmaster admin
// migrate`): every table of kCopiedTables through the stores' TableCopy, ids
// kept, the destination's ids advanced past every id the source ever handed
// out, the row counts and the text checked; all in one transaction of the
// destination. Offline: nothing else may write either store while it runs.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/meta_store.h"

namespace ringmaster::store {

struct CopiedTable {
  std::string table;
  int64_t rows = 0;     // copied, and found in the destination after
  int64_t last_id = 0;  // the source's highest id ever (0: a table without ids)
  // Values whose NUL bytes or bytes that are not UTF-8 were replaced by
  // U+FFFD: no backend stores them now (an old SQLite site may hold some).
  int64_t repaired = 0;
};

// Called as a table starts (`done` false: only `table` is set) and once it
// is copied and checked (`done` true).
using CopyProgress = std::function<void(const CopiedTable& table, bool done)>;

// Copies `from` into `to`, in one transaction of `to`: a failure anywhere
// leaves `to` as it was (only its id sequences may have moved on).
// FailedPrecondition when either store has no TableCopy (memory:) or `to`
// holds any row; DataLoss when a table's rows in `to` are not the source's
// (their count, or a checksum of their text values after the repairs).
StatusOr<std::vector<CopiedTable>> CopyStore(MetaStore& from, MetaStore& to, const CopyProgress& progress = nullptr);

}  // namespace ringmaster::store
