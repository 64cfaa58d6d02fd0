// The Context: argument checks, the rendezvous that builds its Links, the
// order of operations (sync calls, the async worker) and its teardown. The
// data path lives elsewhere: progress_engine.cc and one file per algorithm
// for collectives, p2p.cc and p2p_engine.cc for point to point.
#include "comm/context.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/algorithms.h"
#include "comm/failure.h"
#include "comm/p2p_engine.h"
#include "comm/progress_engine.h"
#include "comm/shm_device.h"
#include "comm/tcp_device.h"

namespace ringmaster::comm {
namespace {

using SteadyClock = std::chrono::steady_clock;

// CUDA device memory cannot go through these transports: reject it clearly.
// The driver is probed with dlopen, so hosts without CUDA pay nothing.
bool IsDevicePointer(const void* p) {
  using GetAttr = int (*)(void*, int, const void*);
  using Init = int (*)(unsigned);
  static GetAttr get_attr = [] () -> GetAttr {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return nullptr;
    auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
    if (!init || init(0) != 0) return nullptr;
    return reinterpret_cast<GetAttr>(dlsym(lib, "cuPointerGetAttribute"));
  }();
  if (!get_attr || !p) return false;
  unsigned int type = 0;
  constexpr int kMemoryTypeAttr = 2, kDeviceMemory = 2;
  return get_attr(&type, kMemoryTypeAttr, p) == 0 && type == kDeviceMemory;
}

std::string Host() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// This process's IPC namespace, e.g. "ipc:[4026531839]"; "" if unknown.
std::string IpcNamespace() {
  char buf[64] = {0};
  const ssize_t n = readlink("/proc/self/ns/ipc", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

Status CheckBuffer(const char* op, const char* name, const void* p, size_t count) {
  if (count > 0 && p == nullptr) return InvalidArgument(fmt::format("{}: {} is null", op, name));
  if (count > 0 && IsDevicePointer(p)) {
    return InvalidArgument(fmt::format("{}: {} is in GPU memory; ringcomm's tcp and shm transports need host memory "
                                       "(copy it to the host first; a CUDA transport is not built yet)",
                                       op, name));
  }
  return Status::Ok();
}

Status CheckRank(const char* op, const char* name, int r, int size) {
  if (r < 0 || r >= size) return InvalidArgument(fmt::format("{}: {} must be in [0, {}), got {}", op, name, size, r));
  return Status::Ok();
}

// A peer's published endpoints, from JSON that anyone able to write to the
// store could have put there: every field is checked.
StatusOr<PeerInfo> ParsePeer(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j["host"].is_string() || !j["addr"].is_string() || !j["shm"].is_string() ||
      !j["port"].is_number_integer() || !j["pid"].is_number_integer()) {
    return InvalidArgument("malformed rank record in the store");
  }
  PeerInfo peer{j["host"], j["addr"], j["shm"], j["port"], j["pid"]};
  if (j.contains("ipc") && j["ipc"].is_string()) peer.ipc = j["ipc"];
  return peer;
}

}  // namespace

const char* AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kRecursiveDoubling: return "recursive-doubling";
    case Algorithm::kParameterServer: return "parameter-server";
  }
  return "?";
}

// ---------------------------------------------------------------- Work

Status Work::Wait() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return done_; });
  return status_;
}

bool Work::WaitFor(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, timeout, [&] { return done_; });
}

bool Work::Done() {
  std::lock_guard<std::mutex> l(mu_);
  return done_;
}

void Work::OnDone(std::function<void(const Status&)> fn) {
  Status st;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!done_) {
      callbacks_.push_back(std::move(fn));
      return;
    }
    st = status_;
  }
  fn(st);
}

void Work::Finish(Status st) {
  std::vector<std::function<void(const Status&)>> cbs;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (done_) return;
    done_ = true;
    status_ = st;
    cbs.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& fn : cbs) fn(st);
}

// ---------------------------------------------------------------- Impl

struct Context::Impl {
  Impl(int rank, int size, const Options& options, Links links, Store* base_store)
      : rank(rank),
        size(size),
        opt(options),
        store(base_store ? std::make_unique<PrefixStore>(fmt::format("gen/{}/", options.generation), base_store) : nullptr),
        peers(std::move(links.peers)),
        keep_alive(std::move(links.keep_alive)),
        failure(store.get(), Describe(rank), [this](StatusCode code, const std::string& cause) { BreakLinks(code, cause); }),
        engine(rank, size, options, std::move(links.collective), &failure, [this](int r) { return Describe(r); }),
        p2p(rank, size, options, std::move(links.p2p), &failure, [this](int r) { return Describe(r); }) {}

  std::string Describe(int r) const {
    if (r < 0 || r >= size || static_cast<int>(peers.size()) != size) return fmt::format("rank {}", r);
    return fmt::format("rank {} (host {}, pid {})", r, peers[r].host, peers[r].pid);
  }

  void BreakLinks(StatusCode code, const std::string& cause) {
    engine.BreakLinks(code, cause);
    p2p.BreakLinks(code, cause);
  }

  const int rank, size;
  const Options opt;
  std::unique_ptr<PrefixStore> store;  // failure notes are shared through it
  std::vector<PeerInfo> peers;
  std::vector<std::shared_ptr<void>> keep_alive;  // declared before the pairs that point into it
  Failure failure;
  Engine engine;
  P2pEngine p2p;
};

// ---------------------------------------------------------------- setup

StatusOr<std::unique_ptr<Context>> Context::Create(Store* base_store, int rank, int size, const Options& options) {
  if (size < 1) return InvalidArgument(fmt::format("size: must be >= 1, got {}", size));
  if (rank < 0 || rank >= size) return InvalidArgument(fmt::format("rank: must be in [0, {}), got {}", size, rank));
  if (options.streams < 1 || options.streams > 16) return InvalidArgument("streams: must be between 1 and 16");
  if (options.chunk_bytes < 1024) return InvalidArgument("chunk_bytes: must be at least 1024");
  const auto deadline = SteadyClock::now() + options.timeout;
  auto left = [&] {
    return std::max<std::chrono::milliseconds>(
        std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()));
  };
  PrefixStore store(fmt::format("gen/{}/", options.generation), base_store);
  const std::string host = options.hostname.empty() ? Host() : options.hostname;
  Links links;
  links.peers.resize(size);
  links.collective.resize(size);
  links.p2p.resize(size);
  auto describe = [&](int r) {
    if (r < 0 || r >= size) return fmt::format("rank {}", r);
    return fmt::format("rank {} (host {}, pid {})", r, links.peers[r].host, links.peers[r].pid);
  };

  // This rank's endpoints.
  std::optional<TcpListener> listener;
  if (options.transport != TransportKind::kShm && size > 1) {
    auto l = TcpListener::Listen(options.address);
    if (!l.ok()) return l.status();
    listener.emplace(std::move(*l));
  }
  std::shared_ptr<ShmSegment> my_seg;
  if (options.transport != TransportKind::kTcp && size > 1) {
    auto seg = ShmCreateSegment(rank, size, options.shm_ring_bytes, options.shm_p2p_ring_bytes);
    if (!seg.ok()) return seg.status();
    my_seg = std::move(*seg);
    links.keep_alive.push_back(my_seg);
  }

  nlohmann::json me = {{"host", host},
                       {"addr", options.address},
                       {"port", listener ? listener->port() : 0},
                       {"pid", getpid()},
                       {"ipc", IpcNamespace()},
                       {"shm", my_seg ? my_seg->name() : std::string()}};
  RM_RETURN_IF_ERROR(store.Set(fmt::format("rank/{}", rank), me.dump(), left()));
  for (int p = 0; p < size; ++p) {
    auto v = store.Get(fmt::format("rank/{}", p), left());
    if (!v.ok()) {
      return DeadlineExceeded(fmt::format("connect: rank {} did not join generation {} within {:.1f} s", p,
                                          options.generation, options.timeout.count() / 1000.0));
    }
    auto peer = ParsePeer(*v);
    if (!peer.ok()) return peer.status().Annotate(fmt::format("connect: rank {}", p));
    links.peers[p] = std::move(*peer);
  }

  // Decide every link, then connect.
  std::vector<bool> use_shm(size, false), use_tcp(size, false);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    // Shared memory needs one host and one IPC namespace: two containers
    // with the host's network (and name) each have their own /dev/shm.
    const std::string my_ipc = IpcNamespace();
    bool same_host = links.peers[p].host == host &&
                     (links.peers[p].ipc.empty() || my_ipc.empty() || links.peers[p].ipc == my_ipc);
    if (options.transport == TransportKind::kShm) {
      if (!same_host) {
        return InvalidArgument(fmt::format("transport: shm needs every rank on one host, but {} is on {}", describe(p),
                                           links.peers[p].host));
      }
      use_shm[p] = true;
    } else if (options.transport == TransportKind::kAuto) {
      use_shm[p] = same_host && !links.peers[p].shm.empty() && my_seg;
    }
    use_tcp[p] = !use_shm[p];
  }
  if (listener) {
    TcpMeshOptions mo{rank, size, options.streams, options.generation, deadline};
    mo.secret = options.secret;
    RM_RETURN_IF_ERROR(TcpConnectMesh(*listener, mo, links.peers, use_tcp, describe, &links));
    listener.reset();  // nobody else may connect once the group has formed
  }
  if (my_seg) RM_RETURN_IF_ERROR(ShmConnect(my_seg.get(), rank, links.peers, use_shm, describe, &links));
  // Everyone has mapped every segment: unlink names so a crash leaves nothing behind.
  RM_RETURN_IF_ERROR(store.Set(fmt::format("ready/{}", rank), "1", left()));
  for (int p = 0; p < size; ++p) {
    if (!store.Get(fmt::format("ready/{}", p), left()).ok()) {
      return DeadlineExceeded(fmt::format("connect: {} did not finish connecting", describe(p)));
    }
  }
  if (my_seg) my_seg->Unlink();
  return FromLinks(rank, size, options, std::move(links), base_store);
}

StatusOr<std::unique_ptr<Context>> Context::FromLinks(int rank, int size, const Options& options, Links links,
                                                      Store* store) {
  if (size < 1 || rank < 0 || rank >= size) return InvalidArgument(fmt::format("rank {} of {}", rank, size));
  links.peers.resize(size);
  links.collective.resize(size);
  links.p2p.resize(size);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    if (links.collective[p].empty() || !links.collective[p][0] || !links.p2p[p]) {
      return InvalidArgument(fmt::format("connect: no link to rank {}", p));
    }
  }
  return std::unique_ptr<Context>(new Context(std::make_unique<Impl>(rank, size, options, std::move(links), store)));
}

Context::Context(std::unique_ptr<Impl> impl) : impl_(std::move(impl)), rank_(impl_->rank), size_(impl_->size) {}

Context::~Context() {
  Impl& I = *impl_;
  const auto deadline = SteadyClock::now() + I.opt.timeout;
  const std::string reason = "the context was destroyed while this operation was in flight";
  {
    // Queued async collectives get the deadline to finish; then they are aborted.
    std::unique_lock<std::mutex> l(queue_mu_);
    stopping_ = true;
    if (!queue_cv_.wait_until(l, deadline, [&] { return queue_.empty() && !running_; })) {
      I.failure.RequestAbort(reason);
      I.engine.Wake();
    }
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  I.p2p.Drain(deadline, reason);
  I.p2p.Close(/*goodbye=*/I.failure.ok());
  I.engine.SayGoodbye();
}

std::string Context::Describe(int rank) const { return impl_->Describe(rank); }

void Context::Abort(const std::string& reason) {
  impl_->failure.RequestAbort(reason);
  impl_->engine.Wake();
  impl_->p2p.Wake();
}

// ---------------------------------------------------------------- order of operations

Status Context::Exec(const char* name, const std::function<Status()>& body) {
  Impl& I = *impl_;
  RM_RETURN_IF_ERROR(I.engine.Begin(name));
  Status st = body();
  I.engine.End();
  if (!st.ok() && I.failure.ok() && st.code() != StatusCode::kInvalidArgument) {
    st = I.failure.Fail(name, st.code(), st.message());
  }
  return st;
}

Status Context::Sync(const char* name, const std::function<Status()>& body) {
  {
    // Calls keep their order: queued async work goes first.
    std::unique_lock<std::mutex> l(queue_mu_);
    queue_cv_.wait(l, [&] { return queue_.empty() && !running_; });
  }
  std::lock_guard<std::mutex> l(exec_mu_);
  return Exec(name, body);
}

std::shared_ptr<Work> Context::Enqueue(const char* name, std::function<Status()> body) {
  auto work = std::make_shared<Work>();
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    if (!worker_.joinable()) worker_ = std::thread([this] { WorkerLoop(); });
    queue_.push_back({name, std::move(body), work});
  }
  queue_cv_.notify_all();
  return work;
}

void Context::WorkerLoop() {
  while (true) {
    std::unique_lock<std::mutex> l(queue_mu_);
    queue_cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    // Take exec_mu_ before the item leaves the queue, so no sync call slips in between.
    std::unique_lock<std::mutex> exec(exec_mu_);
    Item item = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    l.unlock();
    Status st = Exec(item.name, item.body);
    exec.unlock();
    l.lock();
    running_ = false;
    l.unlock();
    queue_cv_.notify_all();
    item.work->Finish(st);
  }
}

// ---------------------------------------------------------------- collectives

Status Context::AllReduceBody(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                              Algorithm algorithm) {
  RM_RETURN_IF_ERROR(CheckBuffer("allreduce", "input", in, count));
  RM_RETURN_IF_ERROR(CheckBuffer("allreduce", "output", out, count));
  Engine& e = impl_->engine;
  const size_t bytes = count * ElementSize(type);
  char* buf = static_cast<char*>(out);
  Algorithm a = algorithm;
  if (a == Algorithm::kAuto) a = bytes < impl_->opt.small_bytes ? Algorithm::kRecursiveDoubling : Algorithm::kRing;
  // The ring copies `in` chunk by chunk as it goes: a copy of the whole
  // buffer first would leave the link idle (about 15 ms for 64 MiB here).
  const bool ring = size_ > 1 && count > 0 && a == Algorithm::kRing;
  if (in != out && bytes > 0 && !ring) std::memcpy(buf, in, bytes);
  if (size_ > 1 && count > 0) {
    if (ring) RM_RETURN_IF_ERROR(AllReduceRing(e, in == out ? nullptr : static_cast<const char*>(in), buf, count, type, op));
    else if (a == Algorithm::kRecursiveDoubling) RM_RETURN_IF_ERROR(AllReduceRecursiveDoubling(e, buf, count, type, op));
    else RM_RETURN_IF_ERROR(AllReduceParameterServer(e, buf, count, type, op));
  }
  if (op == ReduceOp::kAvg) DivideBy(buf, count, type, size_);
  return Status::Ok();
}

Status Context::ReduceScatterBody(const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  RM_RETURN_IF_ERROR(CheckBuffer("reduce_scatter", "input", in, count));
  RM_RETURN_IF_ERROR(CheckBuffer("reduce_scatter", "output", out, count));
  const size_t bytes = count * ElementSize(type);
  if (size_ > 1 && count > 0) {
    RM_RETURN_IF_ERROR(ReduceScatterRing(impl_->engine, static_cast<const char*>(in), static_cast<char*>(out), count,
                                         type, op));
  } else if (bytes > 0) {
    std::memmove(out, static_cast<const char*>(in) + rank_ * bytes, bytes);
  }
  if (op == ReduceOp::kAvg) DivideBy(out, count, type, size_);
  return Status::Ok();
}

Status Context::AllGatherBody(const void* in, void* out, size_t count, DataType type) {
  RM_RETURN_IF_ERROR(CheckBuffer("allgather", "input", in, count));
  RM_RETURN_IF_ERROR(CheckBuffer("allgather", "output", out, count));
  const size_t bytes = count * ElementSize(type);
  char* o = static_cast<char*>(out);
  if (bytes > 0 && o + rank_ * bytes != in) std::memmove(o + rank_ * bytes, in, bytes);
  if (size_ == 1 || count == 0) return Status::Ok();
  return AllGatherRing(impl_->engine, o, count, type);
}

Status Context::BroadcastBody(void* buf, size_t count, DataType type, int root) {
  RM_RETURN_IF_ERROR(CheckRank("broadcast", "root", root, size_));
  RM_RETURN_IF_ERROR(CheckBuffer("broadcast", "buffer", buf, count));
  if (size_ == 1 || count == 0) return Status::Ok();
  return BroadcastFromRoot(impl_->engine, static_cast<char*>(buf), count * ElementSize(type), root);
}

Status Context::ReduceBody(const void* in, void* out, size_t count, DataType type, ReduceOp op, int root) {
  RM_RETURN_IF_ERROR(CheckRank("reduce", "root", root, size_));
  RM_RETURN_IF_ERROR(CheckBuffer("reduce", "input", in, count));
  if (rank_ == root) RM_RETURN_IF_ERROR(CheckBuffer("reduce", "output", out, count));
  const size_t bytes = count * ElementSize(type);
  if (size_ > 1 && count > 0) {
    RM_RETURN_IF_ERROR(ReduceToRoot(impl_->engine, static_cast<const char*>(in), static_cast<char*>(out), count, type,
                                    op, root));
  } else if (rank_ == root && bytes > 0 && in != out) {
    std::memmove(out, in, bytes);
  }
  if (rank_ == root && op == ReduceOp::kAvg) DivideBy(out, count, type, size_);
  return Status::Ok();
}

Status Context::AllReduce(const void* in, void* out, size_t count, DataType type, ReduceOp op, Algorithm algorithm) {
  return Sync("allreduce", [&] { return AllReduceBody(in, out, count, type, op, algorithm); });
}
Status Context::ReduceScatter(const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  return Sync("reduce_scatter", [&] { return ReduceScatterBody(in, out, count, type, op); });
}
Status Context::AllGather(const void* in, void* out, size_t count, DataType type) {
  return Sync("allgather", [&] { return AllGatherBody(in, out, count, type); });
}
Status Context::Broadcast(void* buf, size_t count, DataType type, int root) {
  return Sync("broadcast", [&] { return BroadcastBody(buf, count, type, root); });
}
Status Context::Reduce(const void* in, void* out, size_t count, DataType type, ReduceOp op, int root) {
  return Sync("reduce", [&] { return ReduceBody(in, out, count, type, op, root); });
}
Status Context::Barrier() {
  return Sync("barrier", [&] { return DisseminationBarrier(impl_->engine); });
}

std::shared_ptr<Work> Context::AllReduceAsync(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                                              Algorithm algorithm) {
  return Enqueue("allreduce", [=, this] { return AllReduceBody(in, out, count, type, op, algorithm); });
}
std::shared_ptr<Work> Context::ReduceScatterAsync(const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  return Enqueue("reduce_scatter", [=, this] { return ReduceScatterBody(in, out, count, type, op); });
}
std::shared_ptr<Work> Context::AllGatherAsync(const void* in, void* out, size_t count, DataType type) {
  return Enqueue("allgather", [=, this] { return AllGatherBody(in, out, count, type); });
}
std::shared_ptr<Work> Context::BroadcastAsync(void* buf, size_t count, DataType type, int root) {
  return Enqueue("broadcast", [=, this] { return BroadcastBody(buf, count, type, root); });
}
std::shared_ptr<Work> Context::ReduceAsync(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                                           int root) {
  return Enqueue("reduce", [=, this] { return ReduceBody(in, out, count, type, op, root); });
}
std::shared_ptr<Work> Context::BarrierAsync() {
  return Enqueue("barrier", [this] { return DisseminationBarrier(impl_->engine); });
}

// ---------------------------------------------------------------- point to point

std::shared_ptr<Work> Context::PostPointToPoint(const char* name, bool send, void* buf, size_t count, DataType type,
                                                int peer, int tag) {
  auto work = std::make_shared<Work>();
  Status st = CheckRank(name, "peer", peer, size_);
  if (st.ok() && peer == rank_) st = InvalidArgument(fmt::format("{}: peer must not be this rank", name));
  if (st.ok()) st = CheckBuffer(name, "buffer", buf, count);
  if (!st.ok()) {
    work->Finish(st);
    return work;
  }
  impl_->p2p.Post(send, peer, tag, static_cast<char*>(buf), count * ElementSize(type),
                  [work](const Status& s) { work->Finish(s); });
  return work;
}

Status Context::Send(const void* buf, size_t count, DataType type, int peer, int tag) {
  return SendAsync(buf, count, type, peer, tag)->Wait();
}
Status Context::Recv(void* buf, size_t count, DataType type, int peer, int tag) {
  return RecvAsync(buf, count, type, peer, tag)->Wait();
}
std::shared_ptr<Work> Context::SendAsync(const void* buf, size_t count, DataType type, int peer, int tag) {
  return PostPointToPoint("send", true, const_cast<void*>(buf), count, type, peer, tag);
}
std::shared_ptr<Work> Context::RecvAsync(void* buf, size_t count, DataType type, int peer, int tag) {
  return PostPointToPoint("recv", false, buf, count, type, peer, tag);
}

}  // namespace ringmaster::comm
