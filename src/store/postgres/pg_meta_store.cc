#include "store/postgres/pg_meta_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace ringmaster::store::postgres {
namespace {

// The store whose transaction this thread is inside (its writer connection
// then serves this thread's reads too, so they see the transaction's writes).
thread_local const PgMetaStore* tx_owner = nullptr;

// A session's settings. A transaction left idle (its server paused halfway)
// is ended by the database within kIdleInTransaction, below the leader's
// 10 s lease, so that it never blocks a takeover for longer; a lock waited
// for gives up within the statement's own bound at most.
constexpr int kIdleInTransactionMs = 5000;

std::vector<std::string> Setup(int statement_timeout_ms, bool synchronous_commit) {
  return {"SET statement_timeout = " + std::to_string(statement_timeout_ms),
          "SET lock_timeout = " + std::to_string(std::min(statement_timeout_ms, kIdleInTransactionMs)),
          "SET idle_in_transaction_session_timeout = " + std::to_string(kIdleInTransactionMs),
          std::string("SET synchronous_commit = ") + (synchronous_commit ? "on" : "off")};
}

constexpr std::chrono::milliseconds kLeaseTimeout{2000};

}  // namespace

StatusOr<std::unique_ptr<MetaStore>> Open(const std::string& url) {
  RM_ASSIGN_OR_RETURN(ConnInfo info, ParseUrl(url));
  auto store = std::make_unique<PgMetaStore>(info);
  RM_RETURN_IF_ERROR(store->Init().Annotate("opening " + info.redacted));
  store->CheckAtOpen();
  return std::unique_ptr<MetaStore>(std::move(store));
}

StatusOr<UrlForms> PrintableUrl(const std::string& url) {
  RM_ASSIGN_OR_RETURN(ConnInfo info, ParseUrl(url));
  return UrlForms{info.redacted, info.tool_url};
}

PgMetaStore::PgMetaStore(const ConnInfo& info)
    : info_(info),
      call_timeout_(info.statement_timeout_ms + 2000),
      // Commits do not wait for the disk; acknowledgements do (AwaitDurable).
      writer_(info, Setup(info.statement_timeout_ms, false), call_timeout_, &retry_at_ms_),
      // Never backs off: a leader learns within its lease whether it keeps it.
      lease_conn_(info, Setup(static_cast<int>(kLeaseTimeout.count()), true), kLeaseTimeout + std::chrono::milliseconds(500)),
      sync_conn_(info, Setup(info.statement_timeout_ms, true), call_timeout_, &retry_at_ms_) {}

bool PgMetaStore::InMyTransaction() const { return tx_owner == this; }

Status PgMetaStore::Begin(int64_t* seen) {
  const int64_t fence = fence_.load();
  if (fence == 0) return Unavailable("this server is a standby: writes go to the leader");
  if (fence < 0) return writer_.ExecScript("BEGIN").status();
  // The share lock makes a takeover (UPDATE leader) wait for this
  // transaction, and this one see the takeover if it came first.
  auto checked = writer_.ExecScript("BEGIN; SELECT epoch FROM leader WHERE id = 1 FOR SHARE");
  if (!checked.ok()) {
    (void)writer_.ExecScript("ROLLBACK");  // the script may have left the transaction open
    return checked.status();
  }
  const Result& r = *checked;
  const int64_t epoch = r.rows() == 1 ? PgRow(r, 0).Int(0) : -1;
  if (epoch == fence) return Status::Ok();
  (void)writer_.ExecScript("ROLLBACK");
  *seen = epoch;
  return Unavailable("not the leader: epoch moved from " + std::to_string(fence) + " to " + std::to_string(epoch));
}

Status PgMetaStore::InTransaction(const std::function<Status()>& fn) {
  int64_t seen = -1;
  Status st;
  {
    std::unique_lock<StoreMutex> lock(mu_);
    if (InMyTransaction()) return fn();  // nested: joins the outer one
    st = Begin(&seen);
    if (st.ok()) {
      // Ends the transaction however fn leaves (a throw included): rolled
      // back unless committed, the connection unpinned, this thread out.
      struct Open {
        Connection& writer;
        bool rollback = true;
        ~Open() {
          tx_owner = nullptr;
          if (rollback) (void)writer.ExecScript("ROLLBACK");
          writer.Pin(false);
        }
      } open{writer_};
      writer_.Pin(true);
      tx_owner = this;
      st = fn();
      tx_owner = nullptr;
      if (st.ok()) {
        auto commit = writer_.ExecScript("COMMIT");
        st = commit.status();
        // COMMIT of a transaction a failed statement aborted answers ROLLBACK.
        if (st.ok() && std::string(PQcmdStatus(commit->get())) != "COMMIT") {
          st = Internal("the transaction was rolled back: a statement in it failed");
        }
        if (st.ok()) mu_.NoteCommit();
      }
      open.rollback = !st.ok();
    }
  }
  if (seen >= 0) {
    std::function<void(int64_t)> cb;
    {
      std::lock_guard<std::mutex> l(fenced_mu_);
      cb = on_fenced_;
    }
    if (cb) cb(seen);
  }
  return Noted(st);
}

void PgMetaStore::OnFenced(std::function<void(int64_t seen_epoch)> on_fenced) {
  std::lock_guard<std::mutex> l(fenced_mu_);
  on_fenced_ = std::move(on_fenced);
}

StatusOr<Result> PgMetaStore::Write(const std::string& sql, const Params& params, Touch touch) {
  if (!params.problem().empty()) return InvalidArgument(params.problem());
  const auto touch_locked = [&] {
    if (touch.job) mu_.TouchJob(touch.job);
    if (touch.auth) mu_.TouchAuth();
  };
  {
    Lock l(mu_);
    if (InMyTransaction()) {
      touch_locked();
      return writer_.Exec(sql, params);
    }
    if (fence_.load() < 0) {  // unfenced, alone: the statement is its own transaction
      touch_locked();
      auto r = writer_.Exec(sql, params);
      if (!r.ok()) return Noted(r.status());
      mu_.NoteCommit();
      return r;
    }
  }
  StatusOr<Result> out = Result();
  RM_RETURN_IF_ERROR(InTransaction([&]() -> Status {
    touch_locked();  // InTransaction holds the lock
    out = writer_.Exec(sql, params);
    return out.status();
  }));
  return out;
}

Status PgMetaStore::WriteOne(const std::string& sql, const Params& params, const std::string& what, Touch touch) {
  RM_ASSIGN_OR_RETURN(Result r, Write(sql, params, touch));
  if (r.affected() == 0) return NotFound(what + " not found");
  return Status::Ok();
}

StatusOr<Result> PgMetaStore::Read(const std::string& sql, const Params& params) {
  if (InMyTransaction()) {
    Lock l(mu_);
    return writer_.Exec(sql, params);
  }
  std::unique_ptr<Connection> conn;
  {
    // No longer than the call itself would take: a pool whose connections
    // all wait on a database that does not answer fails its queue in time.
    std::unique_lock<std::mutex> l(pool_mu_);
    if (!pool_cv_.wait_for(l, call_timeout_, [&] { return !idle_.empty() || pool_made_ < info_.pool; })) {
      return Unavailable("PostgreSQL at " + info_.redacted + ": no connection came free within " +
                         std::to_string(call_timeout_.count()) + " ms");
    }
    if (!idle_.empty()) {
      conn = std::move(idle_.back());
      idle_.pop_back();
    } else {
      ++pool_made_;
    }
  }
  if (!conn) {
    conn = std::make_unique<Connection>(info_, Setup(info_.statement_timeout_ms, false), call_timeout_, &retry_at_ms_);
  }
  auto r = conn->Exec(sql, params);
  {
    std::lock_guard<std::mutex> l(pool_mu_);
    idle_.push_back(std::move(conn));  // a broken one reconnects at its next use
  }
  pool_cv_.notify_one();
  if (!r.ok()) return Noted(r.status());
  return r;
}

Status PgMetaStore::Noted(Status st) {
  if (st.code() == StatusCode::kDataLoss) NoteDamage(std::string(st.message()));
  return st;
}

std::vector<std::string> PgMetaStore::Damage() {
  std::lock_guard<std::mutex> l(damage_mu_);
  return damage_;
}

// Damage seen (kept for /healthz; bounded), logged once each.
void PgMetaStore::NoteDamage(const std::string& what) {
  std::lock_guard<std::mutex> l(damage_mu_);
  if (std::find(damage_.begin(), damage_.end(), what) != damage_.end() || damage_.size() >= 64) return;
  spdlog::error("database damaged: {}", what);
  damage_.push_back(what);
}

// One synchronous commit of a one-row write: its WAL flush covers every
// commit made before it began, so it serves every waiter up to then.
Status PgMetaStore::AwaitDurable(uint64_t ticket) {
  std::unique_lock<std::mutex> l(sync_mu_);
  while (durable_ < ticket) {
    if (syncing_) {
      sync_cv_.wait(l);
      continue;
    }
    syncing_ = true;
    const uint64_t target = mu_.Commits();
    l.unlock();
    Status st = sync_conn_.Exec("UPDATE sync_marker SET n = n + 1 WHERE id = 1").status();
    l.lock();
    syncing_ = false;
    if (st.ok()) durable_ = std::max(durable_, target);
    sync_cv_.notify_all();
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

StatusOr<int64_t> PgMetaStore::CreateUser(const User& u) {
  RM_ASSIGN_OR_RETURN(Result r, Write("INSERT INTO users(name, role, password_hash, created_ms, disabled) "
                                      "VALUES ($1,$2,$3,$4,$5) ON CONFLICT (name) DO NOTHING RETURNING id",
                                      Params(u.name, RoleName(u.role), u.password_hash, u.created_ms, u.disabled),
                                      {.auth = true}));
  if (r.rows() == 0) return AlreadyExists("user \"" + u.name + "\" already exists");
  return PgRow(r, 0).Int(0);
}

StatusOr<User> PgMetaStore::GetUser(int64_t id) {
  return One<User>(std::string("SELECT ") + kUserCols + " FROM users WHERE id=$1", ReadUser,
                   "user " + std::to_string(id), Params(id));
}

StatusOr<User> PgMetaStore::GetUserByName(const std::string& name) {
  return One<User>(std::string("SELECT ") + kUserCols + " FROM users WHERE name=$1", ReadUser,
                   "user \"" + name + "\"", Params(name));
}

StatusOr<std::vector<User>> PgMetaStore::ListUsers() {
  return Many<User>(std::string("SELECT ") + kUserCols + " FROM users ORDER BY id", ReadUser);
}

StatusOr<int64_t> PgMetaStore::CountUsers() {
  RM_ASSIGN_OR_RETURN(Result r, Read("SELECT COUNT(*) FROM users"));
  return PgRow(r, 0).Int(0);
}

Status PgMetaStore::SetUserDisabled(int64_t id, bool disabled) {
  return WriteOne("UPDATE users SET disabled=$1 WHERE id=$2", Params(disabled, id), "user " + std::to_string(id),
                  {.auth = true});
}

Status PgMetaStore::SetUserFileQuota(int64_t id, int64_t bytes) {
  return WriteOne("UPDATE users SET file_quota_bytes=$1 WHERE id=$2", Params(bytes, id), "user " + std::to_string(id),
                  {.auth = true});
}

Status PgMetaStore::SetUserPrivileges(int64_t id, int max_priority, bool host_network) {
  return WriteOne("UPDATE users SET max_priority=$1, host_network=$2 WHERE id=$3",
                  Params(int64_t{max_priority}, int64_t{host_network ? 1 : 0}, id), "user " + std::to_string(id),
                  {.auth = true});
}

Status PgMetaStore::AddUserFileBytes(int64_t id, int64_t delta) {
  return WriteOne("UPDATE users SET file_bytes=GREATEST(0, file_bytes + $1) WHERE id=$2", Params(delta, id),
                  "user " + std::to_string(id), {.auth = true});
}

Status PgMetaStore::SetUserFileBytes(int64_t id, int64_t bytes) {
  return WriteOne("UPDATE users SET file_bytes=$1 WHERE id=$2", Params(bytes, id), "user " + std::to_string(id),
                  {.auth = true});
}

StatusOr<int64_t> PgMetaStore::CreateToken(const Token& t) {
  RM_ASSIGN_OR_RETURN(Result r, Write("INSERT INTO tokens(user_id, name, hash, created_ms, scope, node, expires_ms, "
                                      "session) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT (hash) DO NOTHING "
                                      "RETURNING id",
                                      Params(t.user_id, t.name, t.hash, t.created_ms, t.scope, t.node, t.expires_ms,
                                             t.session),
                                      {.auth = true}));
  if (r.rows() == 0) return AlreadyExists("a token with this hash exists");
  return PgRow(r, 0).Int(0);
}

StatusOr<Token> PgMetaStore::GetToken(int64_t id) {
  return One<Token>(std::string("SELECT ") + kTokenCols + " FROM tokens WHERE id=$1", ReadToken,
                    "token " + std::to_string(id), Params(id));
}

StatusOr<Token> PgMetaStore::GetTokenByHash(const std::string& hash) {
  return One<Token>(std::string("SELECT ") + kTokenCols + " FROM tokens WHERE hash=$1", ReadToken, "token",
                    Params(hash));
}

StatusOr<std::vector<Token>> PgMetaStore::ListTokens(int64_t user_id) {
  if (user_id == 0) return Many<Token>(std::string("SELECT ") + kTokenCols + " FROM tokens ORDER BY id", ReadToken);
  return Many<Token>(std::string("SELECT ") + kTokenCols + " FROM tokens WHERE user_id=$1 ORDER BY id", ReadToken,
                     Params(user_id));
}

StatusOr<int64_t> PgMetaStore::CountTokens(int64_t user_id) {
  RM_ASSIGN_OR_RETURN(Result r, Read("SELECT COUNT(*) FROM tokens WHERE user_id=$1", Params(user_id)));
  return PgRow(r, 0).Int(0);
}

Status PgMetaStore::DeleteToken(int64_t token_id) {
  return WriteOne("DELETE FROM tokens WHERE id=$1", Params(token_id), "token " + std::to_string(token_id),
                  {.auth = true});
}

StatusOr<int64_t> PgMetaStore::UpsertNode(const Node& n) {
  Params p(n.name, n.cpu_milli, n.memory_bytes, n.gpu_count, n.gpus_json, n.gpu_model, n.registered_ms,
           n.last_heartbeat_ms, n.agent_version, n.address, n.port_lo, n.port_hi, n.labels_json, n.executors);
  p.Add(n.network).Add(n.overlay_block).Add(n.fence_after_ms);
  RM_ASSIGN_OR_RETURN(
      Result r,
      Write("INSERT INTO nodes(name, cpu_milli, memory_bytes, gpu_count, gpus_json, gpu_model, registered_ms, "
            "last_heartbeat_ms, agent_version, address, port_lo, port_hi, labels_json, executors, network, "
            "overlay_block, fence_after_ms) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17) "
            "ON CONFLICT (name) DO UPDATE SET cpu_milli=excluded.cpu_milli, memory_bytes=excluded.memory_bytes, "
            "gpu_count=excluded.gpu_count, gpus_json=excluded.gpus_json, gpu_model=excluded.gpu_model, "
            "registered_ms=excluded.registered_ms, last_heartbeat_ms=excluded.last_heartbeat_ms, "
            "agent_version=excluded.agent_version, address=excluded.address, port_lo=excluded.port_lo, "
            "port_hi=excluded.port_hi, labels_json=excluded.labels_json, executors=excluded.executors, "
            "network=excluded.network, overlay_block=excluded.overlay_block, "
            "fence_after_ms=excluded.fence_after_ms RETURNING id",
            p));
  if (r.rows() != 1) return Internal("upsert node: no id returned");
  return PgRow(r, 0).Int(0);
}

Status PgMetaStore::UpdateNodeStatus(int64_t id, int64_t hb, double cpu, int64_t mem) {
  return WriteOne("UPDATE nodes SET last_heartbeat_ms=$1, cpu_util=$2, memory_used_bytes=$3 WHERE id=$4",
                  Params(hb, cpu, mem, id), "node " + std::to_string(id));
}

StatusOr<Node> PgMetaStore::GetNode(int64_t id) {
  return One<Node>(std::string("SELECT ") + kNodeCols + " FROM nodes WHERE id=$1", ReadNode,
                   "node " + std::to_string(id), Params(id));
}

StatusOr<std::vector<Node>> PgMetaStore::ListNodes() {
  return Many<Node>(std::string("SELECT ") + kNodeCols + " FROM nodes ORDER BY id", ReadNode);
}

Status PgMetaStore::SetNodeCordon(int64_t id, bool cordoned, const std::string& reason, bool draining) {
  return WriteOne("UPDATE nodes SET cordoned=$1, cordon_reason=$2, draining=$3 WHERE id=$4",
                  Params(cordoned, reason, draining, id), "node " + std::to_string(id));
}

Status PgMetaStore::SetNodeFence(int64_t id, int64_t fence_after_ms) {
  return WriteOne("UPDATE nodes SET fence_after_ms=$1 WHERE id=$2", Params(fence_after_ms, id),
                  "node " + std::to_string(id));
}

Status PgMetaStore::DeleteNode(int64_t id) {
  return WriteOne("DELETE FROM nodes WHERE id=$1", Params(id), "node " + std::to_string(id));
}

}  // namespace ringmaster::store::postgres
