#include "store/memory/memory_meta_store.h"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/rows.h"
#include "store/store_mutex.h"

namespace ringmaster::store::memory {
namespace {

// Everything stored, and the last id each table handed out (ids are never
// reused, as SQLite's AUTOINCREMENT). Ordered by id, as SQLite's lists are.
struct Data {
  std::map<int64_t, User> users;
  std::map<int64_t, Token> tokens;
  std::map<int64_t, Node> nodes;
  std::map<int64_t, Job> jobs;
  std::map<int64_t, Task> tasks;
  std::map<int64_t, Event> events;
  std::map<int64_t, AuditEntry> audit;
  std::map<std::pair<int64_t, std::string>, RegistryCredential> registry_credentials;
  int64_t last_user = 0, last_token = 0, last_node = 0, last_job = 0, last_task = 0, last_event = 0, last_audit = 0;
};

template <typename T>
StatusOr<T> Find(const std::map<int64_t, T>& table, int64_t id, const std::string& what) {
  auto it = table.find(id);
  if (it == table.end()) return NotFound(what + " " + std::to_string(id) + " not found");
  return it->second;
}

template <typename T, typename Pred>
StatusOr<T> FindIf(const std::map<int64_t, T>& table, Pred match, const std::string& what) {
  for (const auto& [id, row] : table) {
    if (match(row)) return row;
  }
  return NotFound(what + " not found");
}

// Adds `row` under the table's next id, which it returns.
template <typename T>
int64_t Insert(std::map<int64_t, T>& table, int64_t& last_id, T row) {
  row.id = ++last_id;
  const int64_t id = row.id;
  table[id] = std::move(row);
  return id;
}

// InvalidArgument for text the SQL backends cannot store (TextProblem), so
// that memory: refuses what they refuse.
Status Storable(std::initializer_list<std::string_view> texts) {
  for (std::string_view t : texts) {
    if (const char* why = TextProblem(t)) return InvalidArgument(why);
  }
  return Status::Ok();
}

template <typename T, typename Pred>
std::vector<T> Select(const std::map<int64_t, T>& table, Pred keep) {
  std::vector<T> out;
  for (const auto& [id, row] : table) {
    if (keep(row)) out.push_back(row);
  }
  return out;
}

// A negative limit is no limit (as SQLite's LIMIT).
template <typename T>
std::vector<T> NewestFirst(std::vector<T> rows, int limit) {
  std::reverse(rows.begin(), rows.end());
  if (limit >= 0 && rows.size() > static_cast<size_t>(limit)) rows.resize(static_cast<size_t>(limit));
  return rows;
}

// What SQLite's foreign keys and unique constraints answer.
Status Constraint(const std::string& what, const std::string& which) {
  return Internal(what + ": " + which + " constraint failed");
}

class MemoryMetaStore final : public MetaStore {
 public:
  Status InTransaction(const std::function<Status()>& fn) override {
    Lock l(mu_);
    if (in_tx_) return fn();
    Data before = data_;
    in_tx_ = true;
    // A throwing fn leaves nothing of what it wrote either.
    struct Undo {
      MemoryMetaStore* s;
      Data* before;
      bool undo = true;
      ~Undo() {
        s->in_tx_ = false;
        if (undo) s->data_ = std::move(*before);
      }
    };
    Status st;
    {
      Undo undo{this, &before};
      st = fn();
      undo.undo = !st.ok();
    }
    if (!st.ok()) return st;
    mu_.NoteCommit();
    return st;
  }
  uint64_t CommitTicket() override { return mu_.Commits(); }
  Status AwaitDurable(uint64_t) override { return Status::Ok(); }
  uint64_t JobVersion(int64_t job_id) override { return mu_.versions().Job(job_id); }
  uint64_t AuthVersion() override { return mu_.versions().Auth(); }
  std::vector<std::string> Damage() override { return {}; }

  StatusOr<int64_t> CreateUser(const User& u) override {
    RM_RETURN_IF_ERROR(Storable({u.name, u.password_hash}));
    Lock l(mu_);
    for (const auto& [id, other] : data_.users) {
      if (other.name == u.name) return AlreadyExists("user \"" + u.name + "\" already exists");
    }
    Write();
    mu_.TouchAuth();
    User row = u;
    row.file_quota_bytes = 0;
    row.file_bytes = 0;
    row.max_priority = 0;
    row.host_network = false;
    return Insert(data_.users, data_.last_user, row);
  }
  StatusOr<User> GetUser(int64_t id) override {
    Lock l(mu_);
    return Find(data_.users, id, "user");
  }
  StatusOr<User> GetUserByName(const std::string& name) override {
    RM_RETURN_IF_ERROR(Storable({name}));
    Lock l(mu_);
    return FindIf(data_.users, [&](const User& u) { return u.name == name; }, "user \"" + name + "\"");
  }
  StatusOr<std::vector<User>> ListUsers() override {
    Lock l(mu_);
    return Select(data_.users, [](const User&) { return true; });
  }
  StatusOr<int64_t> CountUsers() override {
    Lock l(mu_);
    return static_cast<int64_t>(data_.users.size());
  }
  Status SetUserDisabled(int64_t id, bool disabled) override {
    return UpdateUser(id, [&](User& u) { u.disabled = disabled; });
  }
  Status SetUserFileQuota(int64_t id, int64_t bytes) override {
    return UpdateUser(id, [&](User& u) { u.file_quota_bytes = bytes; });
  }
  Status SetUserPrivileges(int64_t id, int max_priority, bool host_network) override {
    return UpdateUser(id, [&](User& u) {
      u.max_priority = max_priority;
      u.host_network = host_network;
    });
  }
  Status AddUserFileBytes(int64_t id, int64_t delta) override {
    return UpdateUser(id, [&](User& u) { u.file_bytes = std::max<int64_t>(0, u.file_bytes + delta); });
  }
  Status SetUserFileBytes(int64_t id, int64_t bytes) override {
    return UpdateUser(id, [&](User& u) { u.file_bytes = bytes; });
  }

  StatusOr<int64_t> CreateToken(const Token& t) override {
    RM_RETURN_IF_ERROR(Storable({t.name, t.hash, t.scope, t.node}));
    Lock l(mu_);
    if (!data_.users.count(t.user_id)) return Constraint("insert token", "FOREIGN KEY");
    for (const auto& [id, other] : data_.tokens) {
      if (other.hash == t.hash) return Constraint("insert token", "UNIQUE");
    }
    Write();
    mu_.TouchAuth();
    return Insert(data_.tokens, data_.last_token, t);
  }
  StatusOr<Token> GetToken(int64_t id) override {
    Lock l(mu_);
    return Find(data_.tokens, id, "token");
  }
  StatusOr<Token> GetTokenByHash(const std::string& hash) override {
    RM_RETURN_IF_ERROR(Storable({hash}));
    Lock l(mu_);
    return FindIf(data_.tokens, [&](const Token& t) { return t.hash == hash; }, "token");
  }
  StatusOr<std::vector<Token>> ListTokens(int64_t user_id) override {
    Lock l(mu_);
    return Select(data_.tokens, [&](const Token& t) { return user_id == 0 || t.user_id == user_id; });
  }
  StatusOr<int64_t> CountTokens(int64_t user_id) override {
    Lock l(mu_);
    return static_cast<int64_t>(Select(data_.tokens, [&](const Token& t) { return t.user_id == user_id; }).size());
  }
  Status DeleteToken(int64_t token_id) override {
    Lock l(mu_);
    mu_.TouchAuth();
    if (!data_.tokens.erase(token_id)) return NotFound("token " + std::to_string(token_id) + " not found");
    Write();
    return Status::Ok();
  }

  StatusOr<int64_t> UpsertNode(const Node& n) override {
    RM_RETURN_IF_ERROR(Storable({n.name, n.gpus_json, n.gpu_model, n.agent_version, n.address, n.labels_json,
                                  n.executors, n.network}));
    Lock l(mu_);
    Write();
    for (auto& [id, row] : data_.nodes) {
      if (row.name != n.name) continue;
      // The inventory an agent registers; what the server keeps of its own
      // (status, cordon, drain) stays.
      Node kept = row;
      row = n;
      row.id = id;
      row.cpu_util = kept.cpu_util;
      row.memory_used_bytes = kept.memory_used_bytes;
      row.cordoned = kept.cordoned;
      row.cordon_reason = kept.cordon_reason;
      row.draining = kept.draining;
      return id;
    }
    Node row = n;
    row.cpu_util = 0;
    row.memory_used_bytes = 0;
    row.cordoned = false;
    row.cordon_reason.clear();
    row.draining = false;
    return Insert(data_.nodes, data_.last_node, row);
  }
  Status UpdateNodeStatus(int64_t id, int64_t heartbeat_ms, double cpu_util, int64_t memory_used_bytes) override {
    return UpdateNode(id, [&](Node& n) {
      n.last_heartbeat_ms = heartbeat_ms;
      n.cpu_util = cpu_util;
      n.memory_used_bytes = memory_used_bytes;
    });
  }
  StatusOr<Node> GetNode(int64_t id) override {
    Lock l(mu_);
    return Find(data_.nodes, id, "node");
  }
  StatusOr<std::vector<Node>> ListNodes() override {
    Lock l(mu_);
    return Select(data_.nodes, [](const Node&) { return true; });
  }
  Status SetNodeCordon(int64_t id, bool cordoned, const std::string& reason, bool draining) override {
    RM_RETURN_IF_ERROR(Storable({reason}));
    return UpdateNode(id, [&](Node& n) {
      n.cordoned = cordoned;
      n.cordon_reason = reason;
      n.draining = draining;
    });
  }
  Status SetNodeFence(int64_t id, int64_t fence_after_ms) override {
    return UpdateNode(id, [&](Node& n) { n.fence_after_ms = fence_after_ms; });
  }
  Status DeleteNode(int64_t id) override {
    Lock l(mu_);
    if (!data_.nodes.erase(id)) return NotFound("node " + std::to_string(id) + " not found");
    Write();
    return Status::Ok();
  }

  StatusOr<int64_t> CreateJob(const Job& j, const Task& tmpl) override {
    RM_RETURN_IF_ERROR(Storable({j.name, j.kind, j.reason, j.spec_json, j.stop_reason, j.submit_key, tmpl.reason,
                                  tmpl.gpu_indices, tmpl.overlay_ip}));
    Lock l(mu_);
    if (!data_.users.count(j.user_id)) return Constraint("insert job", "FOREIGN KEY");
    if (!j.submit_key.empty() && GetJobBySubmitKey(j.user_id, j.submit_key).ok()) {
      return AlreadyExists("a job with this submit key exists");
    }
    Write();
    const int64_t id = Insert(data_.jobs, data_.last_job, j);
    mu_.TouchJob(id);
    AddTasks(id, 0, j.replicas, tmpl);
    return id;
  }
  StatusOr<Job> GetJob(int64_t id) override {
    Lock l(mu_);
    return Find(data_.jobs, id, "job");
  }
  StatusOr<Job> GetJobBySubmitKey(int64_t user_id, const std::string& key) override {
    RM_RETURN_IF_ERROR(Storable({key}));
    if (key.empty()) return InvalidArgument("an empty submit key names no job");
    Lock l(mu_);
    for (const auto& [id, j] : data_.jobs) {
      if (j.user_id == user_id && j.submit_key == key) return j;
    }
    return NotFound("job of submit key not found");
  }
  StatusOr<JobPage> ListJobs(const JobFilter& f) override {
    Lock l(mu_);
    std::vector<Job> all = NewestFirst(Select(data_.jobs, [&](const Job& j) { return JobFilterSelects(f, j); }), -1);
    JobPage page;
    page.total = static_cast<int64_t>(all.size());
    const size_t from = static_cast<size_t>(std::clamp<int64_t>(f.offset, 0, page.total));
    const size_t to = f.limit < 0 ? all.size() : std::min(all.size(), from + static_cast<size_t>(f.limit));
    page.jobs.assign(std::make_move_iterator(all.begin() + from), std::make_move_iterator(all.begin() + to));
    return page;
  }
  StatusOr<std::vector<Job>> ListActiveJobs() override {
    Lock l(mu_);
    return Select(data_.jobs, [](const Job& j) { return !IsTerminal(j.state); });
  }
  StatusOr<int64_t> CountJobs(int64_t user_id, State state) override {
    Lock l(mu_);
    return static_cast<int64_t>(
        Select(data_.jobs, [&](const Job& j) { return j.user_id == user_id && j.state == state; }).size());
  }
  StatusOr<std::map<std::pair<int64_t, State>, int64_t>> CountJobsByUserAndState() override {
    Lock l(mu_);
    std::map<std::pair<int64_t, State>, int64_t> out;
    for (const auto& [id, j] : data_.jobs) ++out[{j.user_id, j.state}];
    return out;
  }
  Status UpdateJob(const Job& j) override {
    RM_RETURN_IF_ERROR(Storable({j.name, j.kind, j.reason, j.spec_json, j.stop_reason}));
    Lock l(mu_);
    mu_.TouchJob(j.id);
    auto it = data_.jobs.find(j.id);
    if (it == data_.jobs.end()) return NotFound("job " + std::to_string(j.id) + " not found");
    if (!data_.users.count(j.user_id)) return Constraint("job " + std::to_string(j.id), "FOREIGN KEY");
    Write();
    const std::string key = it->second.submit_key;  // set at creation only
    it->second = j;
    it->second.submit_key = key;
    return Status::Ok();
  }
  Status DeleteJob(int64_t id) override {
    Lock l(mu_);
    mu_.TouchJob(id);
    if (!data_.jobs.erase(id)) return NotFound("job " + std::to_string(id) + " not found");
    Write();
    std::erase_if(data_.tasks, [&](const auto& kv) { return kv.second.job_id == id; });
    std::erase_if(data_.events, [&](const auto& kv) { return kv.second.job_id == id; });
    return Status::Ok();
  }

  StatusOr<Task> GetTask(int64_t id) override {
    Lock l(mu_);
    return Find(data_.tasks, id, "task");
  }
  StatusOr<std::vector<Task>> ListTasks(int64_t job_id) override {
    Lock l(mu_);
    auto out = Select(data_.tasks, [&](const Task& t) { return t.job_id == job_id; });
    std::sort(out.begin(), out.end(), [](const Task& a, const Task& b) { return a.rank < b.rank; });
    return out;
  }
  StatusOr<std::vector<Task>> ListPlacedTasks() override {
    Lock l(mu_);
    return Select(data_.tasks, [](const Task& t) { return t.state == State::kScheduled || t.state == State::kRunning; });
  }
  Status UpdateTask(const Task& t) override {
    RM_RETURN_IF_ERROR(Storable({t.reason, t.gpu_indices, t.overlay_ip}));
    Lock l(mu_);
    mu_.TouchJob(t.job_id);
    auto it = data_.tasks.find(t.id);
    if (it == data_.tasks.end()) return NotFound("task " + std::to_string(t.id) + " not found");
    if (!data_.jobs.count(t.job_id)) return Constraint("task " + std::to_string(t.id), "FOREIGN KEY");
    for (const auto& [id, other] : data_.tasks) {
      if (id != t.id && other.job_id == t.job_id && other.rank == t.rank) {
        return Constraint("task " + std::to_string(t.id), "UNIQUE");
      }
    }
    Write();
    it->second = t;
    return Status::Ok();
  }
  Status ResizeTasks(int64_t job_id, int replicas, const Task& tmpl) override {
    Lock l(mu_);
    mu_.TouchJob(job_id);
    Write();
    std::erase_if(data_.tasks, [&](const auto& kv) { return kv.second.job_id == job_id && kv.second.rank >= replicas; });
    const int have = static_cast<int>(Select(data_.tasks, [&](const Task& t) { return t.job_id == job_id; }).size());
    AddTasks(job_id, have, replicas, tmpl);
    return Status::Ok();
  }

  Status AddEvent(const Event& e) override {
    RM_RETURN_IF_ERROR(Storable({e.from_state, e.to_state, e.reason}));
    Lock l(mu_);
    mu_.TouchJob(e.job_id);
    if (!data_.jobs.count(e.job_id)) return Constraint("insert event", "FOREIGN KEY");
    Write();
    Insert(data_.events, data_.last_event, e);
    return Status::Ok();
  }
  StatusOr<std::vector<Event>> ListEvents(int64_t job_id) override {
    Lock l(mu_);
    return Select(data_.events, [&](const Event& e) { return e.job_id == job_id; });
  }

  Status AddAudit(const AuditEntry& a) override {
    RM_RETURN_IF_ERROR(Storable({a.user, a.address, a.action, a.target, a.outcome, a.detail}));
    Lock l(mu_);
    Write();
    Insert(data_.audit, data_.last_audit, a);
    return Status::Ok();
  }
  StatusOr<std::vector<AuditEntry>> ListAudit(int limit, const std::string& user, const std::string& action) override {
    Lock l(mu_);
    return NewestFirst(Select(data_.audit,
                              [&](const AuditEntry& a) {
                                return (user.empty() || a.user == user) && (action.empty() || a.action == action);
                              }),
                       limit);
  }
  Status PruneAudit(int64_t keep) override {
    Lock l(mu_);
    if (data_.audit.empty()) return Status::Ok();
    Write();
    // As SQLite's: by id, below the newest id less `keep`.
    const int64_t below = data_.audit.rbegin()->first - keep;
    std::erase_if(data_.audit, [&](const auto& kv) { return kv.first <= below; });
    return Status::Ok();
  }

  Status PutRegistryCredential(const RegistryCredential& c) override {
    RM_RETURN_IF_ERROR(Storable({c.registry, c.username, c.sealed}));
    Lock l(mu_);
    Write();
    data_.registry_credentials[{c.user_id, c.registry}] = c;
    return Status::Ok();
  }
  StatusOr<RegistryCredential> GetRegistryCredential(int64_t user_id, const std::string& registry) override {
    Lock l(mu_);
    auto it = data_.registry_credentials.find({user_id, registry});
    if (it == data_.registry_credentials.end()) return NotFound("registry login " + registry + " not found");
    return it->second;
  }
  StatusOr<std::vector<RegistryCredential>> ListRegistryCredentials(int64_t user_id) override {
    Lock l(mu_);
    std::vector<RegistryCredential> out;
    for (const auto& [key, c] : data_.registry_credentials) {
      if (key.first == user_id) out.push_back(c);
    }
    return out;
  }
  Status DeleteRegistryCredential(int64_t user_id, const std::string& registry) override {
    Lock l(mu_);
    if (!data_.registry_credentials.erase({user_id, registry})) return NotFound("registry login " + registry + " not found");
    Write();
    return Status::Ok();
  }

 private:
  using Lock = std::lock_guard<StoreMutex>;

  // REQUIRES: mu_ held. A write outside a transaction is a commit of its own.
  void Write() {
    if (!in_tx_) mu_.NoteCommit();
  }

  template <typename Fn>
  Status UpdateUser(int64_t id, Fn change) {
    Lock l(mu_);
    mu_.TouchAuth();
    auto it = data_.users.find(id);
    if (it == data_.users.end()) return NotFound("user " + std::to_string(id) + " not found");
    Write();
    change(it->second);
    return Status::Ok();
  }

  template <typename Fn>
  Status UpdateNode(int64_t id, Fn change) {
    Lock l(mu_);
    auto it = data_.nodes.find(id);
    if (it == data_.nodes.end()) return NotFound("node " + std::to_string(id) + " not found");
    Write();
    change(it->second);
    return Status::Ok();
  }

  // REQUIRES: mu_ held. Task rows of ranks [from, to) from a template.
  void AddTasks(int64_t job_id, int from, int to, const Task& tmpl) {
    for (int r = from; r < to; ++r) {
      Task t = tmpl;
      t.job_id = job_id;
      t.rank = r;
      Insert(data_.tasks, data_.last_task, t);
    }
  }

  StoreMutex mu_;
  Data data_;          // GUARDED_BY(mu_)
  bool in_tx_ = false;  // GUARDED_BY(mu_)
};

}  // namespace

std::unique_ptr<MetaStore> NewMemoryMetaStore() { return std::make_unique<MemoryMetaStore>(); }

}  // namespace ringmaster::store::memory
