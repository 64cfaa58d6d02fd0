// The fixture of JobService's tests (job_service_test.cc, job_overlay_test.cc):
// a FakeClock, the in-memory MetaStore, one user; agents played by direct calls.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "server/job_service.h"
#include "store/meta_store.h"

namespace ringmaster::server {

class JobServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rm_jobsvc_" + std::to_string(getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    store_ = std::move(store::OpenMetaStore("memory:")).value();
    user_.name = "ada";
    user_.id = *store_->CreateUser(user_);
    // Granted any priority and the host's network: the scheduling tests use both
    // (the submit checks are tested on a user without them).
    EXPECT_TRUE(store_->SetUserPrivileges(user_.id, protocol::kMaxPriority, true).ok());
    user_ = *store_->GetUser(user_.id);
    svc_ = std::make_unique<JobService>(store_.get(), &clock_);
  }
  void TearDown() override {
    svc_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A server restart on the same store (and a way to start with other options).
  void Restart(const JobServiceOptions& options = {}) {
    svc_.reset();
    svc_ = std::make_unique<JobService>(store_.get(), &clock_, options);
  }

  int64_t AddNode(const std::string& name, int64_t cpu_milli, int gpus = 0) {
    store::Node n;
    n.name = name;
    n.cpu_milli = cpu_milli;
    n.memory_bytes = 8LL << 30;
    n.gpu_count = gpus;
    return *svc_->RegisterNode(n);
  }

  // A node of 8 cpus with runc, on `network` (host, vxlan, ovs-gre) at `address`.
  int64_t AddRuncNode(const std::string& name, const std::string& network, const std::string& address) {
    store::Node n;
    n.name = name;
    n.cpu_milli = 8000;
    n.memory_bytes = 8LL << 30;
    n.executors = "process,runc";
    n.network = network;
    n.address = address;
    return *svc_->RegisterNode(n);
  }

  int64_t Submit(const std::string& yaml) {
    auto spec = protocol::ParseJobSpec(yaml);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    return *svc_->Submit(user_, *spec);
  }

  // Time passes in 5 s steps; the `alive` nodes heartbeat at each.
  void AdvanceWith(int64_t ms, const std::vector<int64_t>& alive) {
    for (int64_t done = 0; done < ms; done += 5'000) {
      clock_.AdvanceMs(std::min<int64_t>(5'000, ms - done));
      for (int64_t n : alive) ASSERT_TRUE(svc_->Heartbeat(n, 0, 0).ok());
    }
  }

  // Every task of the job still alive ends, as its agent reports a stop.
  void EndAll(int64_t job) {
    for (const auto& t : Tasks(job)) {
      if (!store::IsTerminal(t.state)) {
        ASSERT_TRUE(Report(t, "exited", -1, 15).ok());
      }
    }
  }

  store::Job Job(int64_t id) { return *store_->GetJob(id); }
  std::vector<store::Task> Tasks(int64_t id) { return *store_->ListTasks(id); }

  Status Report(const store::Task& t, const std::string& state, int exit_code = -1, int signal = 0) {
    TaskReport r;
    r.node_id = t.node_id;
    r.attempt = t.attempt;
    r.state = state;
    r.exit_code = exit_code;
    r.signal = signal;
    return svc_->ReportTask(t.id, r);
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  std::unique_ptr<store::MetaStore> store_;
  store::User user_;
  std::unique_ptr<JobService> svc_;
};

}  // namespace ringmaster::server
