// The MetaStore contract (meta_store_contract.h), its jobs part: jobs with
// their tasks, updates, the filtered and paged list, active jobs and counts,
// resizes, and events. Instantiated on every backend in meta_store_contract_test.cc.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "store/meta_store.h"
#include "store/meta_store_contract.h"

namespace ringmaster::store {
namespace {

using namespace contract;  // NOLINT: the fixture and builders of this suite

TEST_P(MetaStoreContract, AJobIsCreatedWithItsPendingTasks) {
  const int64_t uid = MakeUser("ada");
  Job job;
  job.user_id = uid;
  job.name = "train";
  job.kind = "distributed";
  job.replicas = 3;
  job.spec_json = "{\"x\":1}";
  job.priority = 5;
  Task tmpl;
  tmpl.cpu_milli = 500;
  tmpl.gpus = 1;
  auto id = store_->CreateJob(job, tmpl);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto got = store_->GetJob(*id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->id, *id);
  EXPECT_EQ(got->name, "train");
  EXPECT_EQ(got->kind, "distributed");
  EXPECT_EQ(got->spec_json, "{\"x\":1}");
  EXPECT_EQ(got->priority, 5);
  EXPECT_EQ(got->state, State::kPending);
  EXPECT_FALSE(got->stop_state.has_value());
  auto tasks = store_->ListTasks(*id);
  ASSERT_TRUE(tasks.ok());
  ASSERT_EQ(tasks->size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ((*tasks)[r].rank, r);
    EXPECT_EQ((*tasks)[r].job_id, *id);
    EXPECT_EQ((*tasks)[r].state, State::kPending);
    EXPECT_EQ((*tasks)[r].cpu_milli, 500);
    EXPECT_FALSE((*tasks)[r].exit_code.has_value());
    EXPECT_EQ(store_->GetTask((*tasks)[r].id)->rank, r);
  }
  EXPECT_EQ(store_->GetJob(*id + 100).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->GetTask(999999).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->ListTasks(*id + 100)->empty());
  job.user_id = 999;
  EXPECT_FALSE(store_->CreateJob(job, tmpl).ok());  // of no user
}

TEST_P(MetaStoreContract, ASubmitKeyMakesOneJobPerUser) {
  const int64_t ada = MakeUser("ada");
  const int64_t bob = MakeUser("bob");
  Job job;
  job.user_id = ada;
  job.name = "once";
  job.kind = "training";
  job.submit_key = "k-1";
  auto first = store_->CreateJob(job, Task{});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto again = store_->CreateJob(job, Task{});
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists) << again.status().ToString();
  auto found = store_->GetJobBySubmitKey(ada, "k-1");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->id, *first);
  EXPECT_EQ(found->submit_key, "k-1");
  EXPECT_EQ(store_->ListTasks(*first)->size(), 1u);
  // Another user's key space is their own; jobs without a key never collide.
  EXPECT_EQ(store_->GetJobBySubmitKey(bob, "k-1").status().code(), StatusCode::kNotFound);
  job.user_id = bob;
  ASSERT_TRUE(store_->CreateJob(job, Task{}).ok());
  job.submit_key = "";
  ASSERT_TRUE(store_->CreateJob(job, Task{}).ok());
  ASSERT_TRUE(store_->CreateJob(job, Task{}).ok());
  EXPECT_FALSE(store_->GetJobBySubmitKey(bob, "").ok());
  // The key is set at creation: an update keeps it.
  Job changed = *found;
  changed.submit_key = "other";
  changed.reason = "updated";
  ASSERT_TRUE(store_->UpdateJob(changed).ok());
  EXPECT_EQ(store_->GetJob(*first)->submit_key, "k-1");
  EXPECT_EQ(store_->GetJobBySubmitKey(ada, "k-1")->reason, "updated");
  // A deleted job's key is free again (its id is not).
  ASSERT_TRUE(store_->DeleteJob(*first).ok());
  job.user_id = ada;
  job.submit_key = "k-1";
  auto reborn = store_->CreateJob(job, Task{});
  ASSERT_TRUE(reborn.ok());
  EXPECT_GT(*reborn, *first);
}

TEST_P(MetaStoreContract, UpdateJobKeepsEveryField) {
  const int64_t uid = MakeUser("ada");
  Job j = *store_->GetJob(MakeJob(uid));
  j.name = "renamed";
  j.state = State::kRunning;
  j.reason = "placed";
  j.restarts = 2;
  j.max_restarts = 3;
  j.stop_state = State::kCancelled;
  j.stop_reason = "user";
  j.updated_ms = 10;
  j.started_ms = 11;
  j.finished_ms = 12;
  j.not_before_ms = 13;
  j.resize_to = 4;
  j.service_s = 12.5;
  ASSERT_TRUE(store_->UpdateJob(j).ok());
  auto got = *store_->GetJob(j.id);
  EXPECT_EQ(got.name, "renamed");
  EXPECT_EQ(got.state, State::kRunning);
  EXPECT_EQ(got.reason, "placed");
  EXPECT_EQ(got.restarts, 2);
  EXPECT_EQ(got.max_restarts, 3);
  EXPECT_EQ(got.stop_state, State::kCancelled);
  EXPECT_EQ(got.stop_reason, "user");
  EXPECT_EQ(got.updated_ms, 10);
  EXPECT_EQ(got.started_ms, 11);
  EXPECT_EQ(got.finished_ms, 12);
  EXPECT_EQ(got.not_before_ms, 13);
  EXPECT_EQ(got.resize_to, 4);
  EXPECT_EQ(got.service_s, 12.5);
  got.stop_state.reset();
  ASSERT_TRUE(store_->UpdateJob(got).ok());
  EXPECT_FALSE(store_->GetJob(j.id)->stop_state.has_value());
  j.id += 100;
  EXPECT_EQ(store_->UpdateJob(j).code(), StatusCode::kNotFound);
}

TEST_P(MetaStoreContract, TaskUpdatesAndPlacedTasks) {
  const int64_t uid = MakeUser("ada");
  const int64_t jid = MakeJob(uid, 3);
  auto tasks = *store_->ListTasks(jid);
  tasks[1].state = State::kRunning;
  tasks[1].node_id = 7;
  tasks[1].exit_code = 3;
  tasks[1].attempt = 2;
  tasks[1].desired = Desired::kStop;
  tasks[1].port = 41001;
  tasks[1].gpu_indices = "0,1";
  tasks[1].overlay_ip = "10.0.0.5";
  tasks[1].reason = "started";
  tasks[1].started_ms = 5;
  ASSERT_TRUE(store_->UpdateTask(tasks[1]).ok());
  tasks[2].state = State::kScheduled;
  ASSERT_TRUE(store_->UpdateTask(tasks[2]).ok());
  tasks[0].state = State::kSucceeded;
  ASSERT_TRUE(store_->UpdateTask(tasks[0]).ok());
  auto placed = *store_->ListPlacedTasks();
  ASSERT_EQ(placed.size(), 2u);
  EXPECT_LT(placed[0].id, placed[1].id);  // by id
  const Task& t = placed[0];
  EXPECT_EQ(t.node_id, 7);
  EXPECT_EQ(t.exit_code, 3);
  EXPECT_EQ(t.attempt, 2);
  EXPECT_EQ(t.desired, Desired::kStop);
  EXPECT_EQ(t.port, 41001);
  EXPECT_EQ(t.gpu_indices, "0,1");
  EXPECT_EQ(t.overlay_ip, "10.0.0.5");
  EXPECT_EQ(t.reason, "started");
  EXPECT_EQ(t.started_ms, 5);
  Task missing = tasks[0];
  missing.id = 999999;
  EXPECT_EQ(store_->UpdateTask(missing).code(), StatusCode::kNotFound);
}

TEST_P(MetaStoreContract, ListJobsIsNewestFirstByUserWithALimit) {
  const int64_t ada = MakeUser("ada"), bob = MakeUser("bob");
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(MakeJob(i % 2 ? bob : ada));
  auto all = store_->ListJobs(Where(0, {}, "", "", 10))->jobs;
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[0].id, ids[4]);
  EXPECT_EQ(all[4].id, ids[0]);
  auto two = *store_->ListJobs(Where(0, {}, "", "", 2));
  ASSERT_EQ(two.jobs.size(), 2u);
  EXPECT_EQ(two.jobs[1].id, ids[3]);
  EXPECT_EQ(two.total, 5);
  auto bobs = *store_->ListJobs(Where(bob, {}, "", "", 10));
  ASSERT_EQ(bobs.jobs.size(), 2u);
  EXPECT_EQ(bobs.jobs[0].id, ids[3]);
  EXPECT_EQ(bobs.jobs[1].id, ids[1]);
  EXPECT_EQ(bobs.total, 2);
  auto none = *store_->ListJobs(Where(0, {}, "", "", 0));
  EXPECT_TRUE(none.jobs.empty());
  EXPECT_EQ(none.total, 5);
  EXPECT_EQ(store_->ListJobs(Where(0, {}, "", "", -1))->jobs.size(), 5u);
}

TEST_P(MetaStoreContract, ListJobsFiltersCombineAndPage) {
  const int64_t ada = MakeUser("ada"), bob = MakeUser("bob");
  // ada: 12 jobs, kinds alternating, every third one running.
  std::vector<int64_t> ada_ids;
  for (int i = 0; i < 12; ++i) {
    Job j = *store_->GetJob(MakeJob(ada, 1, "Train-" + std::to_string(i)));
    j.kind = i % 2 ? "dev" : "train";
    if (i % 3 == 0) j.state = State::kRunning;
    ASSERT_TRUE(store_->UpdateJob(j).ok());
    ada_ids.push_back(j.id);
  }
  MakeJob(bob, 1, "train-bob");
  const auto ids_of = [](const JobPage& p) {
    std::vector<int64_t> out;
    for (const Job& j : p.jobs) out.push_back(j.id);
    return out;
  };
  // Running dev jobs of ada's: i = 3 and 9.
  auto page = *store_->ListJobs(Where(ada, {State::kRunning}, "dev"));
  EXPECT_EQ(ids_of(page), (std::vector<int64_t>{ada_ids[9], ada_ids[3]}));
  EXPECT_EQ(page.total, 2);
  // Two states: running (0,3,6,9) or pending (the rest): all 12; paged by 5 from 10.
  page = *store_->ListJobs(Where(ada, {State::kPending, State::kRunning}, "", "", 5, 10));
  EXPECT_EQ(ids_of(page), (std::vector<int64_t>{ada_ids[1], ada_ids[0]}));
  EXPECT_EQ(page.total, 12);
  // An offset past the end: an empty page, the total still counted.
  page = *store_->ListJobs(Where(ada, {}, "", "", 5, 100));
  EXPECT_TRUE(page.jobs.empty());
  EXPECT_EQ(page.total, 12);
  // Name: a case-insensitive substring, across users.
  page = *store_->ListJobs(Where(0, {}, "", "TRAIN-1"));
  EXPECT_EQ(ids_of(page), (std::vector<int64_t>{ada_ids[11], ada_ids[10], ada_ids[1]}));
  page = *store_->ListJobs(Where(0, {}, "", "bob", 10));
  EXPECT_EQ(page.total, 1);
  EXPECT_EQ(store_->ListJobs(Where(0, {}, "nope"))->total, 0);
}

TEST_P(MetaStoreContract, ListJobsNameFilterTakesWildcardsLiterally) {
  const int64_t ada = MakeUser("ada");
  const int64_t pct = MakeJob(ada, 1, "100%_done");
  const int64_t back = MakeJob(ada, 1, "a\\b");
  MakeJob(ada, 1, "100 xdone");
  MakeJob(ada, 1, "ab");
  for (const auto& [needle, want] : std::vector<std::pair<std::string, int64_t>>{
           {"%", pct}, {"_", pct}, {"0%_d", pct}, {"\\", back}, {"a\\b", back}}) {
    auto page = *store_->ListJobs(Where(0, {}, "", needle));
    ASSERT_EQ(page.jobs.size(), 1u) << needle;
    EXPECT_EQ(page.jobs[0].id, want) << needle;
  }
}

TEST_P(MetaStoreContract, ActiveJobsAreOldestFirstAndCountsByUserAndState) {
  const int64_t ada = MakeUser("ada"), bob = MakeUser("bob");
  std::vector<int64_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(MakeJob(i < 4 ? ada : bob));
  const State states[] = {State::kRunning, State::kSucceeded, State::kScheduled,
                          State::kFailed, State::kPending, State::kCancelled};
  for (int i = 0; i < 6; ++i) {
    Job j = *store_->GetJob(ids[i]);
    j.state = states[i];
    ASSERT_TRUE(store_->UpdateJob(j).ok());
  }
  auto active = *store_->ListActiveJobs();
  ASSERT_EQ(active.size(), 3u);
  EXPECT_EQ(active[0].id, ids[0]);
  EXPECT_EQ(active[1].id, ids[2]);
  EXPECT_EQ(active[2].id, ids[4]);
  EXPECT_EQ(*store_->CountJobs(ada, State::kRunning), 1);
  EXPECT_EQ(*store_->CountJobs(ada, State::kPending), 0);
  EXPECT_EQ(*store_->CountJobs(bob, State::kPending), 1);
  auto by = *store_->CountJobsByUserAndState();
  std::map<std::pair<int64_t, State>, int64_t> want = {
      {{ada, State::kRunning}, 1}, {{ada, State::kSucceeded}, 1}, {{ada, State::kScheduled}, 1},
      {{ada, State::kFailed}, 1},  {{bob, State::kPending}, 1},   {{bob, State::kCancelled}, 1}};
  EXPECT_EQ(by, want);
}

TEST_P(MetaStoreContract, ResizeTasksDropsAndAddsRanks) {
  const int64_t uid = MakeUser("ada");
  const int64_t jid = MakeJob(uid, 4);
  const auto before = *store_->ListTasks(jid);
  Task tmpl;
  tmpl.cpu_milli = 250;
  ASSERT_TRUE(store_->ResizeTasks(jid, 2, tmpl).ok());
  auto two = *store_->ListTasks(jid);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].id, before[0].id);  // the ranks that stay are the same rows
  EXPECT_EQ(two[1].id, before[1].id);
  EXPECT_EQ(store_->GetTask(before[3].id).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->ResizeTasks(jid, 5, tmpl).ok());
  auto five = *store_->ListTasks(jid);
  ASSERT_EQ(five.size(), 5u);
  for (int r = 0; r < 5; ++r) EXPECT_EQ(five[r].rank, r);
  EXPECT_EQ(five[1].cpu_milli, 0);
  EXPECT_EQ(five[2].cpu_milli, 250);
  EXPECT_EQ(five[4].job_id, jid);
  EXPECT_GT(five[2].id, before[3].id);  // new rows, new ids
}

TEST_P(MetaStoreContract, EventsAreKeptInOrderPerJobAndGoWithTheirJob) {
  const int64_t uid = MakeUser("ada");
  const int64_t a = MakeJob(uid, 2), b = MakeJob(uid);
  const int64_t a_task = (*store_->ListTasks(a))[1].id;
  ASSERT_TRUE(store_->AddEvent({0, a, 0, -1, 1, "", "PENDING", "submitted"}).ok());
  ASSERT_TRUE(store_->AddEvent({0, b, 0, -1, 2, "", "PENDING", "submitted"}).ok());
  ASSERT_TRUE(store_->AddEvent({0, a, a_task, 1, 3, "PENDING", "RUNNING", "started"}).ok());
  auto ev = *store_->ListEvents(a);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_LT(ev[0].id, ev[1].id);
  EXPECT_EQ(ev[0].reason, "submitted");
  EXPECT_EQ(ev[1].task_id, a_task);
  EXPECT_EQ(ev[1].rank, 1);
  EXPECT_EQ(ev[1].ts_ms, 3);
  EXPECT_EQ(ev[1].from_state, "PENDING");
  EXPECT_EQ(ev[1].to_state, "RUNNING");
  EXPECT_FALSE(store_->AddEvent({0, 999, 0, -1, 4, "", "PENDING", "x"}).ok());  // of no job
  // A deleted job takes its tasks and events with it.
  ASSERT_TRUE(store_->DeleteJob(a).ok());
  EXPECT_EQ(store_->GetJob(a).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->GetTask(a_task).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->ListEvents(a)->empty());
  EXPECT_TRUE(store_->ListTasks(a)->empty());
  EXPECT_EQ(store_->ListEvents(b)->size(), 1u);
  EXPECT_EQ(store_->DeleteJob(a).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ringmaster::store
