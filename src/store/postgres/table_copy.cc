// PgMetaStore's TableCopy: tables as rows of text, ids kept; the identity
// sequences carry "the highest id ever handed out".
#include <algorithm>
#include <string>

#include "store/postgres/pg_meta_store.h"
#include "store/table_copy.h"

namespace ringmaster::store::postgres {
namespace {

Status CheckTable(const std::string& table) {
  for (const char* t : kCopiedTables) {
    if (table == t) return Status::Ok();
  }
  return InvalidArgument("no table \"" + table + "\" to copy");
}

bool HasId(const std::string& table) { return table != "registry_credentials"; }

std::string Key(const std::string& table) { return HasId(table) ? "id" : "user_id, registry"; }

std::string Quoted(const std::string& name) { return "\"" + name + "\""; }

}  // namespace

StatusOr<TableRows> PgMetaStore::ReadTable(const std::string& table) {
  RM_RETURN_IF_ERROR(CheckTable(table));
  RM_ASSIGN_OR_RETURN(Result r, Read("SELECT * FROM " + table + " ORDER BY " + Key(table)));
  TableRows out;
  constexpr Oid kTextOid = 25, kVarcharOid = 1043;
  for (int c = 0; c < r.columns(); ++c) {
    out.columns.emplace_back(PQfname(r.get(), c));
    out.text.push_back(PQftype(r.get(), c) == kTextOid || PQftype(r.get(), c) == kVarcharOid);
  }
  out.rows.reserve(r.rows());
  for (int i = 0; i < r.rows(); ++i) {
    PgRow row(r, i);
    auto& values = out.rows.emplace_back();
    for (int c = 0; c < r.columns(); ++c) {
      values.push_back(row.IsNull(c) ? std::nullopt : std::optional<std::string>(row.Text(c)));
    }
  }
  return out;
}

Status PgMetaStore::WriteTable(const std::string& table, const TableRows& rows) {
  RM_RETURN_IF_ERROR(CheckTable(table));
  return InTransaction([&]() -> Status {
    // A copy is one transaction of many tables, and its source is read
    // between them: not an idle leader's transaction, so it is not ended.
    RM_RETURN_IF_ERROR(writer_.ExecScript("SET LOCAL idle_in_transaction_session_timeout = 0").status());
    RM_ASSIGN_OR_RETURN(Result shape, Read("SELECT * FROM " + table + " LIMIT 1"));
    if (shape.rows() > 0) return FailedPrecondition("table " + table + " is not empty");
    std::vector<std::string> have;
    for (int c = 0; c < shape.columns(); ++c) have.emplace_back(PQfname(shape.get(), c));
    if (have != rows.columns) return InvalidArgument("the rows' columns are not table " + table + "'s");
    std::string cols, values;
    for (size_t c = 0; c < have.size(); ++c) {
      cols += (c ? ", " : "") + Quoted(have[c]);
      values += (c ? ",$" : "$") + std::to_string(c + 1);
    }
    const std::string sql = "INSERT INTO " + table + "(" + cols + ") VALUES (" + values + ")";
    int64_t max_id = 0;
    for (const auto& row : rows.rows) {
      if (row.size() != have.size()) return InvalidArgument("a row of " + table + " has the wrong number of values");
      Params p;
      for (const auto& v : row) p.Add(v);
      RM_RETURN_IF_ERROR(Write(sql, p).status().Annotate("table " + table));
      if (HasId(table) && row[0]) max_id = std::max<int64_t>(max_id, std::strtoll(row[0]->c_str(), nullptr, 10));
    }
    for (const auto& row : rows.rows) {
      if (table == "jobs" || table == "tasks" || table == "events") {
        if (row[0]) mu_.TouchJob(std::strtoll(row[0]->c_str(), nullptr, 10));
      }
    }
    if (table == "users" || table == "tokens") mu_.TouchAuth();
    return max_id > 0 ? SetLastId(table, max_id) : Status::Ok();
  });
}

StatusOr<int64_t> PgMetaStore::LastId(const std::string& table) {
  RM_RETURN_IF_ERROR(CheckTable(table));
  if (!HasId(table)) return 0;
  RM_ASSIGN_OR_RETURN(Result seq, Read("SELECT pg_get_serial_sequence($1, 'id')", Params(table)));
  if (seq.rows() != 1 || PgRow(seq, 0).IsNull(0)) return Internal("table " + table + " has no id sequence");
  RM_ASSIGN_OR_RETURN(Result r, Read("SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM " +
                                     PgRow(seq, 0).Text(0)));
  return PgRow(r, 0).Int(0);
}

// Never back: ids already handed out stay used.
Status PgMetaStore::SetLastId(const std::string& table, int64_t id) {
  RM_RETURN_IF_ERROR(CheckTable(table));
  if (!HasId(table) || id <= 0) return Status::Ok();
  RM_ASSIGN_OR_RETURN(int64_t last, LastId(table));
  if (id <= last) return Status::Ok();
  return Write("SELECT setval(pg_get_serial_sequence($1, 'id'), $2::bigint)", Params(table, id)).status();
}

}  // namespace ringmaster::store::postgres
