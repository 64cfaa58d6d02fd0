#include "server/testing/shared_meta_store.h"

#include <fmt/format.h>

#include "store/memory/memory_meta_store.h"

namespace ringmaster::server::testing {
namespace {

// One server's store: the shared data behind its own fence.
class FencedView final : public store::MetaStore, public store::Leadership {
 public:
  FencedView(SharedMetaStore* shared, std::string name) : shared_(shared), name_(std::move(name)) {}

  Status InTransaction(const std::function<Status()>& fn) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().InTransaction(fn);
  }
  uint64_t CommitTicket() override { return data().CommitTicket(); }
  Status AwaitDurable(uint64_t ticket) override { return data().AwaitDurable(ticket); }
  uint64_t JobVersion(int64_t id) override { return data().JobVersion(id); }
  uint64_t AuthVersion() override { return data().AuthVersion(); }
  std::vector<std::string> Damage() override { return data().Damage(); }
  store::Leadership* leadership() override { return this; }

  StatusOr<store::LeaseState> Acquire(const std::string& me, const std::string& url, int64_t epoch,
                                      std::chrono::milliseconds lease) override {
    return shared_->Acquire(name_, me, url, epoch, lease);
  }
  StatusOr<store::LeaseState> Current() override { return shared_->Acquire(name_, "", "", 0, std::chrono::milliseconds(0)); }
  Status Release(const std::string& me, int64_t epoch) override { return shared_->Release(name_, me, epoch); }
  void SetFence(int64_t epoch) override {
    fence_ = epoch;
    fenced_ = true;
  }
  void OnFenced(std::function<void(int64_t)> on_fenced) override {
    std::lock_guard<std::mutex> l(mu_);
    on_fenced_ = std::move(on_fenced);
  }

  StatusOr<int64_t> CreateUser(const store::User& a) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().CreateUser(a);
  }
  Status SetUserDisabled(int64_t a, bool b) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().SetUserDisabled(a, b);
  }
  Status SetUserFileQuota(int64_t a, int64_t b) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().SetUserFileQuota(a, b);
  }
  Status SetUserPrivileges(int64_t a, int b, bool c) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().SetUserPrivileges(a, b, c);
  }
  Status AddUserFileBytes(int64_t a, int64_t b) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().AddUserFileBytes(a, b);
  }
  Status SetUserFileBytes(int64_t a, int64_t b) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().SetUserFileBytes(a, b);
  }
  StatusOr<int64_t> CreateToken(const store::Token& a) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().CreateToken(a);
  }
  Status DeleteToken(int64_t a) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().DeleteToken(a);
  }
  StatusOr<int64_t> UpsertNode(const store::Node& a) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().UpsertNode(a);
  }
  Status UpdateNodeStatus(int64_t a, int64_t b, double c, int64_t d) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().UpdateNodeStatus(a, b, c, d);
  }
  Status SetNodeCordon(int64_t a, bool b, const std::string& c, bool d) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().SetNodeCordon(a, b, c, d);
  }
  Status SetNodeFence(int64_t a, int64_t b) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().SetNodeFence(a, b);
  }
  Status DeleteNode(int64_t a) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().DeleteNode(a);
  }
  StatusOr<int64_t> CreateJob(const store::Job& a, const store::Task& b) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().CreateJob(a, b);
  }
  Status UpdateJob(const store::Job& a) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().UpdateJob(a);
  }
  Status DeleteJob(int64_t a) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().DeleteJob(a);
  }
  Status UpdateTask(const store::Task& a) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().UpdateTask(a);
  }
  Status ResizeTasks(int64_t a, int b, const store::Task& c) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().ResizeTasks(a, b, c);
  }
  Status AddEvent(const store::Event& a) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().AddEvent(a);
  }
  Status AddAudit(const store::AuditEntry& a) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().AddAudit(a);
  }
  Status PruneAudit(int64_t a) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().PruneAudit(a);
  }
  Status PutRegistryCredential(const store::RegistryCredential& a) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().PutRegistryCredential(a);
  }
  Status DeleteRegistryCredential(int64_t a, const std::string& b) override {
    RM_RETURN_IF_ERROR(CheckFence());
    return data().DeleteRegistryCredential(a, b);
  }
  StatusOr<store::User> GetUser(int64_t a) override { return data().GetUser(a); }
  StatusOr<store::User> GetUserByName(const std::string& a) override { return data().GetUserByName(a); }
  StatusOr<std::vector<store::User>> ListUsers() override { return data().ListUsers(); }
  StatusOr<int64_t> CountUsers() override { return data().CountUsers(); }
  StatusOr<store::Token> GetToken(int64_t a) override { return data().GetToken(a); }
  StatusOr<store::Token> GetTokenByHash(const std::string& a) override { return data().GetTokenByHash(a); }
  StatusOr<std::vector<store::Token>> ListTokens(int64_t a) override { return data().ListTokens(a); }
  StatusOr<int64_t> CountTokens(int64_t a) override { return data().CountTokens(a); }
  StatusOr<store::Node> GetNode(int64_t a) override { return data().GetNode(a); }
  StatusOr<std::vector<store::Node>> ListNodes() override { return data().ListNodes(); }
  StatusOr<store::Job> GetJob(int64_t a) override { return data().GetJob(a); }
  StatusOr<store::Job> GetJobBySubmitKey(int64_t a, const std::string& b) override { return data().GetJobBySubmitKey(a, b); }
  StatusOr<store::JobPage> ListJobs(const store::JobFilter& a) override { return data().ListJobs(a); }
  StatusOr<std::vector<store::Job>> ListActiveJobs() override { return data().ListActiveJobs(); }
  StatusOr<int64_t> CountJobs(int64_t a, store::State b) override { return data().CountJobs(a, b); }
  StatusOr<std::map<std::pair<int64_t, store::State>, int64_t>> CountJobsByUserAndState() override { return data().CountJobsByUserAndState(); }
  StatusOr<store::Task> GetTask(int64_t a) override { return data().GetTask(a); }
  StatusOr<std::vector<store::Task>> ListTasks(int64_t a) override { return data().ListTasks(a); }
  StatusOr<std::vector<store::Task>> ListPlacedTasks() override { return data().ListPlacedTasks(); }
  StatusOr<std::vector<store::Event>> ListEvents(int64_t a) override { return data().ListEvents(a); }
  StatusOr<std::vector<store::AuditEntry>> ListAudit(int a, const std::string& b, const std::string& c) override { return data().ListAudit(a, b, c); }
  StatusOr<store::RegistryCredential> GetRegistryCredential(int64_t a, const std::string& b) override { return data().GetRegistryCredential(a, b); }
  StatusOr<std::vector<store::RegistryCredential>> ListRegistryCredentials(int64_t a) override { return data().ListRegistryCredentials(a); }

 private:
  store::MetaStore& data() { return shared_->data(); }
  Status CheckFence() {
    if (!fenced_) return Status::Ok();
    const int64_t fence = fence_;
    if (fence == 0) return Unavailable("this server is a standby: writes go to the leader");
    const int64_t now = shared_->epoch();
    if (now == fence) return Status::Ok();
    std::function<void(int64_t)> f;
    {
      std::lock_guard<std::mutex> l(mu_);
      f = on_fenced_;
    }
    if (f) f(now);
    return Unavailable(fmt::format("not the leader: epoch moved from {} to {}", fence, now));
  }

  SharedMetaStore* const shared_;
  const std::string name_;
  std::atomic<int64_t> fence_{0};
  std::atomic<bool> fenced_{false};
  std::mutex mu_;
  std::function<void(int64_t)> on_fenced_;  // GUARDED_BY(mu_)
};

}  // namespace

SharedMetaStore::SharedMetaStore(Clock* clock) : clock_(clock), data_(store::memory::NewMemoryMetaStore()) {}

std::shared_ptr<store::MetaStore> SharedMetaStore::View(const std::string& name) {
  return std::make_shared<FencedView>(this, name);
}

void SharedMetaStore::Cut(const std::string& name, bool cut) {
  std::lock_guard<std::mutex> l(mu_);
  if (cut) {
    cut_.insert(name);
  } else {
    cut_.erase(name);
  }
}

void SharedMetaStore::Steal(const std::string& holder, const std::string& url, std::chrono::milliseconds lease) {
  std::lock_guard<std::mutex> l(mu_);
  ++epoch_;
  holder_ = holder;
  holder_url_ = url;
  expires_ms_ = clock_->SteadyMs() + lease.count();
}

int64_t SharedMetaStore::epoch() {
  std::lock_guard<std::mutex> l(mu_);
  return epoch_;
}

store::LeaseState SharedMetaStore::Lease() {
  std::lock_guard<std::mutex> l(mu_);
  return {epoch_, holder_, holder_url_, expires_ms_ - clock_->SteadyMs(), false};
}

// me == "": only reads the lease (Current).
StatusOr<store::LeaseState> SharedMetaStore::Acquire(const std::string& view, const std::string& me,
                                                     const std::string& url, int64_t epoch,
                                                     std::chrono::milliseconds lease) {
  std::lock_guard<std::mutex> l(mu_);
  if (cut_.count(view)) return Unavailable("the database cannot be reached");
  const int64_t now = clock_->SteadyMs();
  if (!me.empty()) {
    if (holder_ == me && epoch_ == epoch && expires_ms_ > now) {
      expires_ms_ = now + lease.count();
    } else if (holder_.empty() || expires_ms_ <= now) {
      ++epoch_;
      holder_ = me;
      holder_url_ = url;
      expires_ms_ = now + lease.count();
    }
  }
  return store::LeaseState{epoch_, holder_, holder_url_, expires_ms_ - now, !me.empty() && holder_ == me};
}

Status SharedMetaStore::Release(const std::string& view, const std::string& me, int64_t epoch) {
  std::lock_guard<std::mutex> l(mu_);
  if (cut_.count(view)) return Unavailable("the database cannot be reached");
  if (holder_ == me && epoch_ == epoch) {
    holder_.clear();
    expires_ms_ = 0;
  }
  return Status::Ok();
}

}  // namespace ringmaster::server::testing
