// Moving a site's metadata from one store to another (`ringmaster admin
// migrate`): every table of kCopiedTables through the stores' TableCopy, ids
// kept, the destination's ids advanced past every id the source ever handed
// out, the row counts checked. Offline: nothing else may write either store
// while it runs. Thread-compatible.
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
};

// Called as a table starts (`done` false: only `table` is set) and once it
// is copied and checked (`done` true).
using CopyProgress = std::function<void(const CopiedTable& table, bool done)>;

// Copies `from` into `to`. FailedPrecondition (copying nothing) when either
// store has no TableCopy (memory:) or `to` holds any row; DataLoss when a
// table's rows in `to` are not the source's count after the copy. A failure
// halfway leaves `to` partly written: it must be emptied (or made anew)
// before another try, which the check above enforces.
StatusOr<std::vector<CopiedTable>> CopyStore(MetaStore& from, MetaStore& to, const CopyProgress& progress = nullptr);

}  // namespace ringmaster::store
