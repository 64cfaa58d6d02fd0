#include "files/fake_store.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/crypto.h"

namespace ringmaster::files {
namespace {

struct Object {
  std::shared_ptr<const std::string> data;  // shared with open readers
  ObjectInfo info;
};

struct State {
  std::mutex mu;
  std::map<std::string, Object> objects;
  std::atomic<bool> down{false};
  Clock* clock = RealClock::Get();  // objects' mtimes

  Status CheckUp() const {
    if (down) return Unavailable("storage backend fake: down");
    return Status::Ok();
  }
};

class FakeWriter : public BlobWriter {
 public:
  FakeWriter(std::shared_ptr<State> state, std::string key, PutOptions options)
      : state_(std::move(state)), key_(std::move(key)), options_(std::move(options)) {}

  Status Write(std::string_view data) override {
    if (done_) return FailedPrecondition("write after commit or abort");
    RM_RETURN_IF_ERROR(state_->CheckUp());
    if (options_.max_bytes && data_.size() + data.size() > *options_.max_bytes) {
      Abort();
      return ResourceExhausted(fmt::format("{}: over the limit of {} bytes", key_, *options_.max_bytes));
    }
    data_.append(data);
    hash_.Update(data);
    return Status::Ok();
  }

  StatusOr<ObjectInfo> Commit() override {
    if (done_) return FailedPrecondition("commit after commit or abort");
    done_ = true;
    RM_RETURN_IF_ERROR(state_->CheckUp());
    std::string sha = hash_.FinishHex();
    if (!options_.expected_sha256.empty() && sha != options_.expected_sha256) {
      return InvalidArgument(fmt::format("{}: SHA-256 mismatch: the bytes hash to {}, expected {}", key_, sha,
                                         options_.expected_sha256));
    }
    ObjectInfo info{key_, data_.size(), sha, state_->clock->NowMs()};
    std::lock_guard lock(state_->mu);
    state_->objects[key_] = Object{std::make_shared<const std::string>(std::move(data_)), info};
    return info;
  }

  void Abort() override {
    done_ = true;
    data_.clear();
  }

  uint64_t bytes_written() const override { return data_.size(); }

 private:
  std::shared_ptr<State> state_;
  std::string key_;
  PutOptions options_;
  std::string data_;
  Sha256 hash_;
  bool done_ = false;
};

class FakeReader : public BlobReader {
 public:
  FakeReader(std::shared_ptr<State> state, Object object, uint64_t pos, uint64_t end)
      : state_(std::move(state)), object_(std::move(object)), pos_(pos), end_(end) {}
  const ObjectInfo& info() const override { return object_.info; }
  StatusOr<size_t> Read(char* buf, size_t n) override {
    RM_RETURN_IF_ERROR(state_->CheckUp());
    size_t take = static_cast<size_t>(std::min<uint64_t>(n, end_ - pos_));
    std::copy_n(object_.data->data() + pos_, take, buf);
    pos_ += take;
    return take;
  }

 private:
  std::shared_ptr<State> state_;
  Object object_;
  uint64_t pos_, end_;
};

class FakeStore : public FakeBlobStore {
 public:
  std::string Describe() const override { return "fake"; }
  void SetDown(bool down) override { state_->down = down; }
  void SetClock(Clock* clock) { state_->clock = clock; }

  StatusOr<std::unique_ptr<BlobWriter>> Create(const std::string& key, const PutOptions& options) override {
    RM_RETURN_IF_ERROR(ValidateFilesKey(key));
    RM_RETURN_IF_ERROR(state_->CheckUp());
    return std::unique_ptr<BlobWriter>(new FakeWriter(state_, key, options));
  }

  StatusOr<std::unique_ptr<BlobReader>> Open(const std::string& key, const ByteRange& range) override {
    RM_RETURN_IF_ERROR(ValidateFilesKey(key));
    RM_RETURN_IF_ERROR(state_->CheckUp());
    std::lock_guard lock(state_->mu);
    auto it = state_->objects.find(key);
    if (it == state_->objects.end()) return NotFound(key + ": no such file");
    uint64_t size = it->second.info.size;
    if (range.offset > size || (range.offset == size && size > 0)) {
      return InvalidArgument(fmt::format("range not satisfiable: offset {} of a {}-byte file", range.offset, size));
    }
    uint64_t end = range.length ? std::min(size, range.offset + *range.length) : size;
    return std::unique_ptr<BlobReader>(new FakeReader(state_, it->second, range.offset, end));
  }

  StatusOr<ObjectInfo> Head(const std::string& key) override {
    RM_RETURN_IF_ERROR(ValidateFilesKey(key));
    RM_RETURN_IF_ERROR(state_->CheckUp());
    std::lock_guard lock(state_->mu);
    auto it = state_->objects.find(key);
    if (it == state_->objects.end()) return NotFound(key + ": no such file");
    return it->second.info;
  }

  StatusOr<ListResult> List(const std::string& prefix, const std::string& after, size_t limit) override {
    RM_RETURN_IF_ERROR(state_->CheckUp());
    if (limit == 0 || limit > 1000) return InvalidArgument("limit: must be 1..1000");
    ListResult out;
    std::lock_guard lock(state_->mu);
    auto it = after < prefix ? state_->objects.lower_bound(prefix) : state_->objects.upper_bound(after);
    for (; it != state_->objects.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      if (out.objects.size() == limit) {
        out.next_after = out.objects.back().key;
        break;
      }
      out.objects.push_back(it->second.info);
    }
    return out;
  }

  Status Delete(const std::string& key) override {
    RM_RETURN_IF_ERROR(ValidateFilesKey(key));
    RM_RETURN_IF_ERROR(state_->CheckUp());
    std::lock_guard lock(state_->mu);
    if (state_->objects.erase(key) == 0) return NotFound(key + ": no such file");
    return Status::Ok();
  }

 private:
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace

std::unique_ptr<FakeBlobStore> NewFakeBlobStore(Clock* clock) {
  auto store = std::make_unique<FakeStore>();
  if (clock) store->SetClock(clock);
  return store;
}

}  // namespace ringmaster::files
