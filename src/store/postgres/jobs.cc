// PgMetaStore's jobs, tasks, events, audit log and registry logins.
#include <string>
#include <vector>

#include "store/postgres/pg_meta_store.h"

namespace ringmaster::store::postgres {
namespace {

Params& AddJobBody(Params& p, const Job& j) {
  return p.Add(j.user_id).Add(j.name).Add(j.kind).Add(StateName(j.state)).Add(j.reason).Add(j.spec_json)
      .Add(j.priority).Add(j.replicas).Add(j.max_restarts).Add(j.restarts)
      .Add(j.stop_state ? StateName(*j.stop_state) : "").Add(j.stop_reason).Add(j.created_ms).Add(j.updated_ms)
      .Add(j.started_ms).Add(j.finished_ms).Add(j.not_before_ms).Add(j.resize_to).Add(j.service_s);
}

Params& AddTaskBody(Params& p, const Task& t) {
  return p.Add(t.job_id).Add(t.rank).Add(StateName(t.state)).Add(t.reason).Add(t.node_id).Add(t.attempt)
      .Add(t.desired == Desired::kStop ? "stop" : "run").Add(t.exit_code).Add(t.cpu_milli).Add(t.memory_bytes)
      .Add(t.gpus).Add(t.created_ms).Add(t.started_ms).Add(t.finished_ms).Add(t.port).Add(t.gpu_indices)
      .Add(t.overlay_ip);
}

// A text[] literal of the states: {"PENDING","RUNNING"}.
std::string StateArray(const std::vector<State>& states) {
  std::string out = "{";
  for (size_t i = 0; i < states.size(); ++i) out += std::string(i ? "," : "") + "\"" + StateName(states[i]) + "\"";
  return out + "}";
}

}  // namespace

StatusOr<int64_t> PgMetaStore::CreateJob(const Job& j, const Task& tmpl) {
  int64_t id = 0;
  RM_RETURN_IF_ERROR(InTransaction([&]() -> Status {
    Params p;
    AddJobBody(p, j).Add(j.submit_key);
    // DO NOTHING rather than an error: an error would abort the caller's transaction.
    RM_ASSIGN_OR_RETURN(
        Result r, Write("INSERT INTO jobs(user_id, name, kind, state, reason, spec_json, priority, replicas, "
                        "max_restarts, restarts, stop_state, stop_reason, created_ms, updated_ms, started_ms, "
                        "finished_ms, not_before_ms, resize_to, service_s, submit_key) VALUES ($1,$2,$3,$4,$5,$6,$7,"
                        "$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20) ON CONFLICT (user_id, submit_key) "
                        "WHERE submit_key <> '' DO NOTHING RETURNING id",
                        p));
    if (r.rows() == 0) return AlreadyExists("a job with this submit key exists");
    id = PgRow(r, 0).Int(0);
    mu_.TouchJob(id);  // an id never reused: for a view cached while it was "not found"
    return InsertTasks(id, 0, j.replicas, tmpl);
  }));
  return id;
}

StatusOr<Job> PgMetaStore::GetJob(int64_t id) {
  return One<Job>(std::string("SELECT ") + kJobCols + " FROM jobs WHERE id=$1", ReadJob, "job " + std::to_string(id),
                  Params(id));
}

StatusOr<Job> PgMetaStore::GetJobBySubmitKey(int64_t user_id, const std::string& key) {
  if (key.empty()) return InvalidArgument("an empty submit key names no job");
  return One<Job>(std::string("SELECT ") + kJobCols + " FROM jobs WHERE user_id=$1 AND submit_key=$2", ReadJob,
                  "job of submit key", Params(user_id, key));
}

// One statement per combination of the filter's clauses (the states are one
// array parameter); the page and the count from one snapshot: the count is
// a scalar subquery of the statement that reads the page, which yields one
// row of NULLs when the page is empty.
StatusOr<JobPage> PgMetaStore::ListJobs(const JobFilter& f) {
  std::string where;
  Params p;
  const auto add = [&](const std::string& clause) {
    where += (where.empty() ? " WHERE " : " AND ") + clause + std::to_string(p.size());
  };
  if (f.user_id != 0) {
    p.Add(f.user_id);
    add("user_id = $");
  }
  if (!f.states.empty()) {
    p.Add(StateArray(f.states));
    add("state = ANY($");
    where += "::text[])";
  }
  if (!f.kind.empty()) {
    p.Add(f.kind);
    add("kind = $");
  }
  if (!f.name.empty()) {
    p.Add(NameLikePattern(f.name));
    add("LOWER(name) LIKE $");
    where += " ESCAPE '\\'";
  }
  p.Add(f.limit < 0 ? std::optional<std::string>() : std::optional<std::string>(std::to_string(f.limit)));
  p.Add(f.offset);
  const std::string n = std::to_string(p.size());
  const std::string sql = std::string("SELECT j.*, (SELECT COUNT(*) FROM jobs") + where + ") FROM (SELECT 1) one " +
                          "LEFT JOIN LATERAL (SELECT " + kJobCols + " FROM jobs" + where + " ORDER BY id DESC LIMIT $" +
                          std::to_string(p.size() - 1) + "::bigint OFFSET $" + n + "::bigint) j ON true ORDER BY j.id DESC";
  RM_ASSIGN_OR_RETURN(Result r, Read(sql, p));
  JobPage page;
  const int count_col = r.columns() - 1;
  for (int i = 0; i < r.rows(); ++i) {
    PgRow row(r, i);
    page.total = row.Int(count_col);
    if (row.IsNull(0)) break;  // the empty page's row
    RowDamage().clear();
    Job job = ReadJob(row);
    if (RowDamage().empty()) {
      page.jobs.push_back(std::move(job));
    } else {
      NoteDamage(std::exchange(RowDamage(), {}));
    }
  }
  return page;
}

// Readers never block writers here (MVCC): one statement, one snapshot.
StatusOr<std::vector<Job>> PgMetaStore::ListActiveJobs() {
  return Many<Job>(std::string("SELECT ") + kJobCols +
                       " FROM jobs WHERE state IN ('PENDING','SCHEDULED','RUNNING') ORDER BY id",
                   ReadJob);
}

StatusOr<int64_t> PgMetaStore::CountJobs(int64_t user_id, State state) {
  RM_ASSIGN_OR_RETURN(Result r, Read("SELECT COUNT(*) FROM jobs WHERE user_id=$1 AND state=$2",
                                     Params(user_id, StateName(state))));
  return PgRow(r, 0).Int(0);
}

StatusOr<std::map<std::pair<int64_t, State>, int64_t>> PgMetaStore::CountJobsByUserAndState() {
  RM_ASSIGN_OR_RETURN(Result r, Read("SELECT user_id, state, COUNT(*) FROM jobs GROUP BY user_id, state"));
  std::map<std::pair<int64_t, State>, int64_t> out;
  for (int i = 0; i < r.rows(); ++i) {
    PgRow row(r, i);
    auto state = ParseState(row.Text(1));
    if (!state) continue;  // a damaged row: counted nowhere (the damage list names it)
    out[{row.Int(0), *state}] = row.Int(2);
  }
  return out;
}

Status PgMetaStore::UpdateJob(const Job& j) {
  Params p;
  AddJobBody(p, j).Add(j.id);
  return WriteOne("UPDATE jobs SET user_id=$1, name=$2, kind=$3, state=$4, reason=$5, spec_json=$6, priority=$7, "
                  "replicas=$8, max_restarts=$9, restarts=$10, stop_state=$11, stop_reason=$12, created_ms=$13, "
                  "updated_ms=$14, started_ms=$15, finished_ms=$16, not_before_ms=$17, resize_to=$18, service_s=$19 "
                  "WHERE id=$20",
                  p, "job " + std::to_string(j.id), {.job = j.id});
}

Status PgMetaStore::DeleteJob(int64_t id) {
  return WriteOne("DELETE FROM jobs WHERE id=$1", Params(id), "job " + std::to_string(id), {.job = id});
}

StatusOr<Task> PgMetaStore::GetTask(int64_t id) {
  return One<Task>(std::string("SELECT ") + kTaskCols + " FROM tasks WHERE id=$1", ReadTask,
                   "task " + std::to_string(id), Params(id));
}

StatusOr<std::vector<Task>> PgMetaStore::ListTasks(int64_t job_id) {
  return Many<Task>(std::string("SELECT ") + kTaskCols + " FROM tasks WHERE job_id=$1 ORDER BY rank", ReadTask,
                    Params(job_id), /*whole=*/true);
}

StatusOr<std::vector<Task>> PgMetaStore::ListPlacedTasks() {
  return Many<Task>(std::string("SELECT ") + kTaskCols + " FROM tasks WHERE state IN ('SCHEDULED','RUNNING') ORDER BY id",
                    ReadTask, Params(), /*whole=*/true);
}

Status PgMetaStore::UpdateTask(const Task& t) {
  Params p;
  AddTaskBody(p, t).Add(t.id);
  return WriteOne("UPDATE tasks SET job_id=$1, rank=$2, state=$3, reason=$4, node_id=$5, attempt=$6, desired=$7, "
                  "exit_code=$8, cpu_milli=$9, memory_bytes=$10, gpus=$11, created_ms=$12, started_ms=$13, "
                  "finished_ms=$14, port=$15, gpu_indices=$16, overlay_ip=$17 WHERE id=$18",
                  p, "task " + std::to_string(t.id), {.job = t.job_id});
}

Status PgMetaStore::ResizeTasks(int64_t job_id, int replicas, const Task& tmpl) {
  return InTransaction([&]() -> Status {
    RM_RETURN_IF_ERROR(
        Write("DELETE FROM tasks WHERE job_id=$1 AND rank>=$2", Params(job_id, replicas), {.job = job_id}).status());
    RM_ASSIGN_OR_RETURN(Result r, Read("SELECT COUNT(*) FROM tasks WHERE job_id=$1", Params(job_id)));
    return InsertTasks(job_id, static_cast<int>(PgRow(r, 0).Int(0)), replicas, tmpl);
  });
}

// One statement for every rank: a gang of 64 is one round trip.
Status PgMetaStore::InsertTasks(int64_t job_id, int from, int to, const Task& tmpl) {
  if (from >= to) return Status::Ok();
  Task t = tmpl;
  t.job_id = job_id;
  t.rank = from;
  Params p;
  AddTaskBody(p, t).Add(to - 1);
  return Write("INSERT INTO tasks(job_id, rank, state, reason, node_id, attempt, desired, exit_code, cpu_milli, "
               "memory_bytes, gpus, created_ms, started_ms, finished_ms, port, gpu_indices, overlay_ip) "
               "SELECT $1::bigint, r, $3::text, $4::text, $5::bigint, $6::bigint, $7::text, $8::bigint, $9::bigint, "
               "$10::bigint, $11::bigint, $12::bigint, $13::bigint, $14::bigint, $15::bigint, $16::text, $17::text "
               "FROM generate_series($2::bigint, $18::bigint) AS r ORDER BY r",
               p, {.job = job_id})
      .status();
}

Status PgMetaStore::AddEvent(const Event& e) {
  return Write("INSERT INTO events(job_id, task_id, rank, ts_ms, from_state, to_state, reason) "
               "VALUES ($1,$2,$3,$4,$5,$6,$7)",
               Params(e.job_id, e.task_id, e.rank, e.ts_ms, e.from_state, e.to_state, e.reason), {.job = e.job_id})
      .status();
}

StatusOr<std::vector<Event>> PgMetaStore::ListEvents(int64_t job_id) {
  return Many<Event>(std::string("SELECT ") + kEventCols + " FROM events WHERE job_id=$1 ORDER BY id", ReadEvent,
                     Params(job_id));
}

Status PgMetaStore::AddAudit(const AuditEntry& a) {
  return Write("INSERT INTO audit(ts_ms, \"user\", address, action, target, outcome, detail) "
               "VALUES ($1,$2,$3,$4,$5,$6,$7)",
               Params(a.ts_ms, a.user, a.address, a.action, a.target, a.outcome, a.detail))
      .status();
}

StatusOr<std::vector<AuditEntry>> PgMetaStore::ListAudit(int limit, const std::string& user, const std::string& action) {
  Params p(user, action);
  p.Add(limit < 0 ? std::optional<std::string>() : std::optional<std::string>(std::to_string(limit)));
  return Many<AuditEntry>(std::string("SELECT ") + kAuditCols + " FROM audit WHERE ($1::text = '' OR \"user\" = $1) "
                              "AND ($2::text = '' OR action = $2) ORDER BY id DESC LIMIT $3::bigint",
                          ReadAudit, p);
}

Status PgMetaStore::PruneAudit(int64_t keep) {
  return Write("DELETE FROM audit WHERE id <= (SELECT MAX(id) FROM audit) - $1", Params(keep)).status();
}

Status PgMetaStore::PutRegistryCredential(const RegistryCredential& c) {
  return Write("INSERT INTO registry_credentials(user_id, registry, username, sealed, updated_ms) "
               "VALUES ($1,$2,$3,$4,$5) ON CONFLICT (user_id, registry) DO UPDATE SET username=excluded.username, "
               "sealed=excluded.sealed, updated_ms=excluded.updated_ms",
               Params(c.user_id, c.registry, c.username, c.sealed, c.updated_ms))
      .status();
}

StatusOr<RegistryCredential> PgMetaStore::GetRegistryCredential(int64_t user_id, const std::string& registry) {
  return One<RegistryCredential>(std::string("SELECT ") + kCredentialCols +
                                     " FROM registry_credentials WHERE user_id=$1 AND registry=$2",
                                 ReadCredential, "registry login " + registry, Params(user_id, registry));
}

StatusOr<std::vector<RegistryCredential>> PgMetaStore::ListRegistryCredentials(int64_t user_id) {
  return Many<RegistryCredential>(std::string("SELECT ") + kCredentialCols +
                                      " FROM registry_credentials WHERE user_id=$1 ORDER BY registry",
                                  ReadCredential, Params(user_id));
}

Status PgMetaStore::DeleteRegistryCredential(int64_t user_id, const std::string& registry) {
  return WriteOne("DELETE FROM registry_credentials WHERE user_id=$1 AND registry=$2", Params(user_id, registry),
                  "registry login " + registry);
}

}  // namespace ringmaster::store::postgres
