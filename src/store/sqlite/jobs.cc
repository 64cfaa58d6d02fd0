// SqliteMetaStore's jobs, tasks, events and audit log.
#include <algorithm>
#include <iterator>

#include "store/sqlite/sqlite_meta_store.h"

namespace ringmaster::store::sqlite {

StatusOr<int64_t> SqliteMetaStore::CreateJob(const Job& j, const Task& tmpl) {
  int64_t id = 0;
  Status st = InTransaction([&]() -> Status {
    Stmt s(cache_,
           "INSERT INTO jobs(user_id, name, kind, state, reason, spec_json, priority, replicas, "
           "max_restarts, restarts, stop_state, stop_reason, created_ms, updated_ms, started_ms, "
           "finished_ms, not_before_ms, resize_to, service_s, submit_key) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    BindJob(s, j);
    s.Bind(j.submit_key);
    const int rc = s.Step();
    if (rc == SQLITE_CONSTRAINT && !j.submit_key.empty() && GetJobBySubmitKey(j.user_id, j.submit_key).ok()) {
      return AlreadyExists("a job with this submit key exists");
    }
    RM_RETURN_IF_ERROR(Check(rc, "insert job"));
    id = sqlite3_last_insert_rowid(db_);
    mu_.TouchJob(id);  // an id never reused: for a view cached while it was "not found"
    return InsertTasks(id, 0, j.replicas, tmpl);
  });
  if (!st.ok()) return st;
  return id;
}

StatusOr<Job> SqliteMetaStore::GetJob(int64_t id) {
  return One<Job>(std::string("SELECT ") + kJobCols + " FROM jobs WHERE id=?", ReadJob,
                  "job " + std::to_string(id), id);
}

StatusOr<Job> SqliteMetaStore::GetJobBySubmitKey(int64_t user_id, const std::string& key) {
  if (key.empty()) return InvalidArgument("an empty submit key names no job");
  return One<Job>(std::string("SELECT ") + kJobCols + " FROM jobs WHERE user_id=? AND submit_key=?", ReadJob,
                  "job of submit key", user_id, key);
}

// Dynamic SQL, bounded: one statement per combination of the filter's
// clauses (and count of states) is cached. Indexes: (user_id, state, id)
// serves a user's jobs by state, (state) everyone's, both in id order.
StatusOr<JobPage> SqliteMetaStore::ListJobs(const JobFilter& f) {
  std::string where;
  std::vector<SqlValue> binds;
  const auto add = [&where](const std::string& clause) { where += (where.empty() ? " WHERE " : " AND ") + clause; };
  if (f.user_id != 0) {
    add("user_id = ?");
    binds.emplace_back(f.user_id);
  }
  if (!f.states.empty()) {
    std::string in = "state IN (";
    for (size_t i = 0; i < f.states.size(); ++i) {
      in += i ? ",?" : "?";
      binds.emplace_back(std::string(StateName(f.states[i])));
    }
    add(in + ")");
  }
  if (!f.kind.empty()) {
    add("kind = ?");
    binds.emplace_back(f.kind);
  }
  if (!f.name.empty()) {
    add("LOWER(name) LIKE ? ESCAPE '\\'");
    binds.emplace_back(NameLikePattern(f.name));
  }
  Lock l(mu_);  // the count and the page from one state of the table
  JobPage page;
  {
    Stmt s(cache_, "SELECT COUNT(*) FROM jobs" + where);
    if (!s.valid()) return Internal(Err("prepare count jobs"));
    s.Bind(binds);
    const int rc = s.Step();
    if (rc != SQLITE_ROW) return Error(rc, "count jobs");
    page.total = s.Int(0);
  }
  RM_ASSIGN_OR_RETURN(page.jobs, Many<Job>(std::string("SELECT ") + kJobCols + " FROM jobs" + where +
                                               " ORDER BY id DESC LIMIT ? OFFSET ?",
                                           ReadJob, binds, static_cast<int64_t>(f.limit), f.offset));
  return page;
}

// In pages of kActivePage jobs, each under the lock on its own: a queue of
// 50,000 jobs does not hold every submit and read behind one long scan.
// Each page is a range of the (state, id) index; the states' lists are
// merged by id. Not one snapshot: a job added meanwhile (a higher id) may
// or may not be in.
StatusOr<std::vector<Job>> SqliteMetaStore::ListActiveJobs() {
  constexpr int kActivePage = 1000;
  std::vector<Job> out;
  for (const char* state : {"PENDING", "SCHEDULED", "RUNNING"}) {
    int64_t after = 0;
    while (true) {
      Lock l(mu_);  // the page and what Many read with it
      RM_ASSIGN_OR_RETURN(auto page, Many<Job>(std::string("SELECT ") + kJobCols +
                                                   " FROM jobs WHERE state = ? AND id > ? ORDER BY id LIMIT ?",
                                               ReadJob, state, after, kActivePage));
      // By the rows read: a damaged row left out of the page does not end the paging.
      if (last_rows_read_ == 0) break;
      after = last_row_id_;
      const bool last = last_rows_read_ < static_cast<size_t>(kActivePage);
      out.insert(out.end(), std::make_move_iterator(page.begin()), std::make_move_iterator(page.end()));
      if (last) break;
    }
  }
  std::sort(out.begin(), out.end(), [](const Job& x, const Job& y) { return x.id < y.id; });
  // A job that changed state between two states' pages is listed twice: once.
  out.erase(std::unique(out.begin(), out.end(), [](const Job& x, const Job& y) { return x.id == y.id; }), out.end());
  return out;
}

StatusOr<int64_t> SqliteMetaStore::CountJobs(int64_t user_id, State state) {
  Lock l(mu_);
  Stmt s(cache_, "SELECT COUNT(*) FROM jobs WHERE user_id=? AND state=?");
  s.Bind(user_id).Bind(StateName(state));
  if (s.Step() != SQLITE_ROW) return Internal(Err("count jobs"));
  return s.Int(0);
}

StatusOr<std::map<std::pair<int64_t, State>, int64_t>> SqliteMetaStore::CountJobsByUserAndState() {
  Lock l(mu_);
  Stmt s(cache_, "SELECT user_id, state, COUNT(*) FROM jobs GROUP BY user_id, state");
  std::map<std::pair<int64_t, State>, int64_t> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    auto state = ParseState(s.Text(1));
    if (!state) continue;  // a damaged row: counted nowhere (the damage list names it)
    out[{s.Int(0), *state}] = s.Int(2);
  }
  if (rc != SQLITE_DONE) return Internal(Err("count jobs by state"));
  return out;
}

Status SqliteMetaStore::UpdateJob(const Job& j) {
  Lock l(mu_);
  mu_.TouchJob(j.id);
  Stmt s(cache_,
         "UPDATE jobs SET user_id=?, name=?, kind=?, state=?, reason=?, spec_json=?, priority=?, "
         "replicas=?, max_restarts=?, restarts=?, stop_state=?, stop_reason=?, created_ms=?, "
         "updated_ms=?, started_ms=?, finished_ms=?, not_before_ms=?, resize_to=?, service_s=? WHERE id=?");
  BindJob(s, j);
  s.Bind(j.id);
  return StepOne(s, "job " + std::to_string(j.id));
}

Status SqliteMetaStore::ResizeTasks(int64_t job_id, int replicas, const Task& tmpl) {
  Lock l(mu_);
  mu_.TouchJob(job_id);
  return InTransaction([&]() -> Status {
    Stmt del(cache_, "DELETE FROM tasks WHERE job_id=? AND rank>=?");
    del.Bind(job_id).Bind(replicas);
    RM_RETURN_IF_ERROR(Check(del.Step(), "drop tasks"));
    Stmt count(cache_, "SELECT COUNT(*) FROM tasks WHERE job_id=?");
    count.Bind(job_id);
    const int have = count.Step() == SQLITE_ROW ? static_cast<int>(count.Int(0)) : 0;
    return InsertTasks(job_id, have, replicas, tmpl);
  });
}

Status SqliteMetaStore::DeleteJob(int64_t id) {
  Lock l(mu_);
  mu_.TouchJob(id);
  Stmt s(cache_, "DELETE FROM jobs WHERE id=?");
  s.Bind(id);
  return StepOne(s, "job " + std::to_string(id));
}

StatusOr<Task> SqliteMetaStore::GetTask(int64_t id) {
  return One<Task>(std::string("SELECT ") + kTaskCols + " FROM tasks WHERE id=?", ReadTask,
                   "task " + std::to_string(id), id);
}

StatusOr<std::vector<Task>> SqliteMetaStore::ListTasks(int64_t job_id) {
  return ManyWhole<Task>(std::string("SELECT ") + kTaskCols + " FROM tasks WHERE job_id=? ORDER BY rank",
                    ReadTask, job_id);
}

StatusOr<std::vector<Task>> SqliteMetaStore::ListPlacedTasks() {
  return ManyWhole<Task>(std::string("SELECT ") + kTaskCols +
                        " FROM tasks WHERE state IN ('SCHEDULED','RUNNING') ORDER BY id",
                    ReadTask);
}

Status SqliteMetaStore::UpdateTask(const Task& t) {
  Lock l(mu_);
  mu_.TouchJob(t.job_id);
  Stmt s(cache_,
         "UPDATE tasks SET job_id=?, rank=?, state=?, reason=?, node_id=?, attempt=?, desired=?, "
         "exit_code=?, cpu_milli=?, memory_bytes=?, gpus=?, created_ms=?, started_ms=?, "
         "finished_ms=?, port=?, gpu_indices=?, overlay_ip=? WHERE id=?");
  BindTaskBody(s, t);
  s.Bind(t.id);
  return StepOne(s, "task " + std::to_string(t.id));
}

Status SqliteMetaStore::AddEvent(const Event& e) {
  Lock l(mu_);
  mu_.TouchJob(e.job_id);
  Stmt s(cache_,
         "INSERT INTO events(job_id, task_id, rank, ts_ms, from_state, to_state, reason) "
         "VALUES (?,?,?,?,?,?,?)");
  s.Bind(e.job_id).Bind(e.task_id).Bind(e.rank).Bind(e.ts_ms).Bind(e.from_state).Bind(e.to_state)
      .Bind(e.reason);
  return Check(s.Step(), "insert event");
}

StatusOr<std::vector<Event>> SqliteMetaStore::ListEvents(int64_t job_id) {
  return Many<Event>(std::string("SELECT ") + kEventCols + " FROM events WHERE job_id=? ORDER BY id",
                     ReadEvent, job_id);
}

Status SqliteMetaStore::AddAudit(const AuditEntry& a) {
  Lock l(mu_);
  Stmt s(cache_, "INSERT INTO audit(ts_ms, \"user\", address, action, target, outcome, detail) VALUES (?,?,?,?,?,?,?)");
  s.Bind(a.ts_ms).Bind(a.user).Bind(a.address).Bind(a.action).Bind(a.target).Bind(a.outcome).Bind(a.detail);
  return Check(s.Step(), "insert audit entry");
}

StatusOr<std::vector<AuditEntry>> SqliteMetaStore::ListAudit(int limit, const std::string& user, const std::string& action) {
  return Many<AuditEntry>(
      std::string("SELECT ") + kAuditCols + " FROM audit "
      "WHERE (?1 = '' OR \"user\" = ?1) AND (?2 = '' OR action = ?2) ORDER BY id DESC LIMIT ?3",
      ReadAudit, user, action, limit);
}

Status SqliteMetaStore::PruneAudit(int64_t keep) {
  Lock l(mu_);
  Stmt s(cache_, "DELETE FROM audit WHERE id <= (SELECT MAX(id) FROM audit) - ?");
  s.Bind(keep);
  return Check(s.Step(), "prune audit");
}

// Task rows of ranks [from, to) from a template.
Status SqliteMetaStore::InsertTasks(int64_t job_id, int from, int to, const Task& tmpl) {
  for (int r = from; r < to; ++r) {
    Task t = tmpl;
    t.job_id = job_id;
    t.rank = r;
    Stmt ts(cache_,
            "INSERT INTO tasks(job_id, rank, state, reason, node_id, attempt, desired, exit_code, "
            "cpu_milli, memory_bytes, gpus, created_ms, started_ms, finished_ms, port, gpu_indices, overlay_ip) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    BindTaskBody(ts, t);
    RM_RETURN_IF_ERROR(Check(ts.Step(), "insert task"));
  }
  return Status::Ok();
}

void SqliteMetaStore::BindJob(Stmt& s, const Job& j) {
  s.Bind(j.user_id).Bind(j.name).Bind(j.kind).Bind(StateName(j.state)).Bind(j.reason)
      .Bind(j.spec_json).Bind(j.priority).Bind(j.replicas).Bind(j.max_restarts).Bind(j.restarts)
      .Bind(j.stop_state ? StateName(*j.stop_state) : "").Bind(j.stop_reason).Bind(j.created_ms)
      .Bind(j.updated_ms).Bind(j.started_ms).Bind(j.finished_ms).Bind(j.not_before_ms).Bind(j.resize_to)
      .Bind(j.service_s);
}

void SqliteMetaStore::BindTaskBody(Stmt& s, const Task& t) {
  s.Bind(t.job_id).Bind(t.rank).Bind(StateName(t.state)).Bind(t.reason).Bind(t.node_id)
      .Bind(t.attempt).Bind(t.desired == Desired::kStop ? "stop" : "run").Bind(t.exit_code)
      .Bind(t.cpu_milli).Bind(t.memory_bytes).Bind(t.gpus).Bind(t.created_ms).Bind(t.started_ms)
      .Bind(t.finished_ms).Bind(t.port).Bind(t.gpu_indices).Bind(t.overlay_ip);
}

}  // namespace ringmaster::store::sqlite
