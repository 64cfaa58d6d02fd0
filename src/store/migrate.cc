#include "store/migrate.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "store/rows.h"

namespace ringmaster::store {
namespace {

// The highest value of the `id` column in `rows`; 0 if it has none.
int64_t MaxId(const TableRows& rows) {
  auto col = std::find(rows.columns.begin(), rows.columns.end(), "id");
  if (col == rows.columns.end()) return 0;
  const size_t i = col - rows.columns.begin();
  int64_t max = 0;
  for (const auto& row : rows.rows) {
    if (i < row.size() && row[i]) max = std::max<int64_t>(max, std::strtoll(row[i]->c_str(), nullptr, 10));
  }
  return max;
}

// An order-free checksum of the text columns' values: a sum over the rows
// of FNV-1a of each row's text values (with their column), so that rows
// read back in another order still match.
uint64_t TextChecksum(const TableRows& rows) {
  uint64_t sum = 0;
  for (const auto& row : rows.rows) {
    uint64_t h = 14695981039346656037ull;
    const auto mix = [&](std::string_view bytes) {
      for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
      h = (h ^ 0xff) * 1099511628211ull;  // ends the value: "ab","c" is not "a","bc"
    };
    for (size_t c = 0; c < row.size() && c < rows.columns.size(); ++c) {
      if (c >= rows.text.size() || !rows.text[c]) continue;
      mix(rows.columns[c]);
      mix(row[c] ? std::string_view(*row[c]) : std::string_view("\xff NULL"));
    }
    sum += h;
  }
  return sum;
}

// The rows with each value no backend can store made storable (StorableText); the values changed.
int64_t Repair(TableRows& rows) {
  int64_t changed = 0;
  for (auto& row : rows.rows) {
    for (auto& v : row) {
      if (v && TextProblem(*v)) *v = StorableText(*v, &changed);
    }
  }
  return changed;
}

}  // namespace

StatusOr<std::vector<CopiedTable>> CopyStore(MetaStore& from, MetaStore& to, const CopyProgress& progress) {
  TableCopy* src = from.tables();
  TableCopy* dst = to.tables();
  if (src == nullptr) return FailedPrecondition("the source store cannot be copied from (memory: keeps nothing to move)");
  if (dst == nullptr) return FailedPrecondition("the destination store cannot be copied into (memory: keeps nothing)");
  std::vector<CopiedTable> out;
  Status st = to.InTransaction([&]() -> Status {
    for (const char* table : kCopiedTables) {
      RM_ASSIGN_OR_RETURN(TableRows rows, dst->ReadTable(table));
      if (!rows.rows.empty()) {
        return FailedPrecondition("the destination already holds data (" + std::to_string(rows.rows.size()) +
                                  " rows in " + table + "): migrate only into an empty store");
      }
    }
    for (const char* table : kCopiedTables) {
      CopiedTable done{table};
      if (progress) progress(done, false);
      RM_ASSIGN_OR_RETURN(TableRows rows, src->ReadTable(table));
      done.repaired = Repair(rows);
      RM_RETURN_IF_ERROR(dst->WriteTable(table, rows).Annotate("copy " + std::string(table)));
      // Ids are never reused: a deleted job's id must not come back in the new
      // store, so the sequence moves past every id the source handed out.
      RM_ASSIGN_OR_RETURN(int64_t last, src->LastId(table));
      done.last_id = std::max(last, MaxId(rows));
      RM_RETURN_IF_ERROR(dst->SetLastId(table, done.last_id).Annotate("advance the ids of " + std::string(table)));
      RM_ASSIGN_OR_RETURN(TableRows copied, dst->ReadTable(table));
      if (copied.rows.size() != rows.rows.size()) {
        return DataLoss("table " + std::string(table) + ": " + std::to_string(rows.rows.size()) + " rows copied, " +
                        std::to_string(copied.rows.size()) + " found in the destination");
      }
      if (TextChecksum(copied) != TextChecksum(rows)) {
        return DataLoss("table " + std::string(table) + ": the text found in the destination is not the source's");
      }
      done.rows = static_cast<int64_t>(copied.rows.size());
      if (progress) progress(done, true);
      out.push_back(done);
    }
    return Status::Ok();
  });
  RM_RETURN_IF_ERROR(st);
  return out;
}

}  // namespace ringmaster::store
