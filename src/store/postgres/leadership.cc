// PgMetaStore's Leadership: the lease row `leader` (id 1), timed by the
// database's clock_timestamp(). Each call is one statement on the lease
// connection, never behind the store's write lock.
#include <string>

#include "store/postgres/pg_meta_store.h"

namespace ringmaster::store::postgres {
namespace {

constexpr const char* kLeaseCols =
    "epoch, holder, holder_url, (EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000)::bigint";

LeaseState ReadLease(const Row& row, const std::string& me) {
  LeaseState s;
  s.epoch = row.Int(0);
  s.holder = row.Text(1);
  s.holder_url = row.Text(2);
  s.remaining_ms = row.Int(3);
  s.mine = !me.empty() && s.holder == me && s.remaining_ms > 0;
  return s;
}

}  // namespace

StatusOr<Result> PgMetaStore::LeaseExec(const std::string& sql, const Params& params) {
  std::lock_guard<std::mutex> l(lease_mu_);
  return lease_conn_.Exec(sql, params);
}

// Renewal keeps the epoch; a takeover moves it on. The takeover's UPDATE
// waits for the write transactions holding the row's share lock (Begin).
StatusOr<LeaseState> PgMetaStore::Acquire(const std::string& me, const std::string& my_url, int64_t epoch,
                                          std::chrono::milliseconds lease) {
  if (me.empty()) return InvalidArgument("a leader needs a non-empty id");
  RM_ASSIGN_OR_RETURN(
      Result r,
      LeaseExec(std::string("WITH taken AS (UPDATE leader SET epoch = CASE WHEN holder = $1 AND epoch = $3 THEN epoch "
                            "ELSE epoch + 1 END, holder = $1, holder_url = $2, expires_at = clock_timestamp() + "
                            "$4::bigint * interval '1 millisecond' WHERE id = 1 AND ((holder = $1 AND epoch = $3) OR "
                            "expires_at <= clock_timestamp()) RETURNING *) SELECT ") +
                    kLeaseCols + " FROM taken UNION ALL SELECT " + kLeaseCols +
                    " FROM leader WHERE id = 1 AND NOT EXISTS (SELECT 1 FROM taken)",
                Params(me, my_url, epoch, static_cast<int64_t>(lease.count()))));
  if (r.rows() != 1) return Internal("the leader table has no lease row");
  return ReadLease(PgRow(r, 0), me);
}

StatusOr<LeaseState> PgMetaStore::Current() {
  RM_ASSIGN_OR_RETURN(Result r, LeaseExec(std::string("SELECT ") + kLeaseCols + " FROM leader WHERE id = 1", Params()));
  if (r.rows() != 1) return Internal("the leader table has no lease row");
  return ReadLease(PgRow(r, 0), "");
}

Status PgMetaStore::Release(const std::string& me, int64_t epoch) {
  return LeaseExec("UPDATE leader SET expires_at = clock_timestamp() WHERE id = 1 AND holder = $1 AND epoch = $2",
                   Params(me, epoch))
      .status();
}

}  // namespace ringmaster::store::postgres
