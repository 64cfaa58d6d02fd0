// The MetaStore contract's fixture, shared by its test files: a fresh store
// per test from the backend it is instantiated with (each test binary names
// its backends: MetaStoreContract.*/sqlite, .../memory, .../postgres), and
// small builders. Test-only.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "store/meta_store.h"

namespace ringmaster::store::contract {

struct Backend {
  std::string name;
  // Opens a new, empty store; `dir` is an empty directory the test owns.
  std::function<std::unique_ptr<MetaStore>(const std::string& dir)> open;
  // After the store is closed: what `open` made outside `dir` (a database).
  std::function<void(const std::string& dir)> cleanup;
  // Why the backend cannot run here ("" = it can): the case is skipped.
  std::function<std::string()> unavailable;
};

inline Job AJob(int64_t uid, int replicas = 1) {
  Job j;
  j.user_id = uid;
  j.spec_json = "{}";
  j.replicas = replicas;
  return j;
}

inline User AUser(const std::string& name) {
  User u;
  u.name = name;
  return u;
}

inline std::ostream& operator<<(std::ostream& os, const Backend& b) { return os << b.name; }

inline JobFilter Where(int64_t user_id, std::vector<State> states = {}, std::string kind = "", std::string name = "",
                int limit = 100, int64_t offset = 0) {
  JobFilter f;
  f.user_id = user_id;
  f.states = std::move(states);
  f.kind = std::move(kind);
  f.name = std::move(name);
  f.limit = limit;
  f.offset = offset;
  return f;
}

class MetaStoreContract : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam().unavailable) {
      if (const std::string why = GetParam().unavailable(); !why.empty()) GTEST_SKIP() << why;
    }
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("rm_store_contract_" + std::to_string(getpid()) + "_" + GetParam().name + "_" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    store_ = GetParam().open(dir_.string());
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    store_.reset();
    if (GetParam().cleanup && !dir_.empty()) GetParam().cleanup(dir_.string());
    std::filesystem::remove_all(dir_);
  }

  int64_t MakeUser(const std::string& name) {
    auto id = store_->CreateUser(User{0, name, Role::kUser, "", 1});
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : 0;
  }
  int64_t MakeJob(int64_t uid, int replicas = 1, const std::string& name = "j") {
    Job job;
    job.user_id = uid;
    job.name = name;
    job.spec_json = "{}";
    job.replicas = replicas;
    auto id = store_->CreateJob(job, Task{});
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : 0;
  }

  std::filesystem::path dir_;
  std::unique_ptr<MetaStore> store_;
};

}  // namespace ringmaster::store::contract
