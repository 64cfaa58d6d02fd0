// ProcessGroupRingmaster: ringcomm as a torch.distributed backend, for
// Debian's torch 1.13. `import ringmaster_torch` registers it under the name
// "ringmaster", so init_process_group(backend="ringmaster") and DDP run their
// collectives on ringcomm.
//
// The group forms a ringcomm Context over torch's own rendezvous store (the
// TCPStore or FileStore init_process_group made), adapted to ringcomm's
// Store with every call bounded: the store may be served by a rank that has
// gone. Like ProcessGroupGloo, collectives are queued to one worker thread
// that runs them in issue order (the order must match across ranks); each
// returns a Work whose Future completes when the collective has, which is
// what DDP's reducer chains its bucket callbacks on. Point to point does not
// queue: send/recv are posted to ringcomm at once, with their tags, and
// complete on ringcomm's point-to-point thread, so receives posted before
// sends (batch_isend_irecv) never hold the sends back.
//
// Teardown never hangs: destroying the group gives queued and in-flight
// work the group's timeout to finish, then aborts it; it releases the GIL
// while it waits, and no thread of the backend ever drops the last
// reference to a Python-owned tensor (that takes the GIL): finished work
// is handed back to the next Python-side call or to the destructor.
//
// CPU tensors of float32/64, float16, bfloat16, int32/64, uint8 and bool.
// RINGMASTER_TRANSPORT (tcp, shm or auto) chooses ringcomm's transport,
// RINGMASTER_ADDR the address other ranks reach this one at.
#include <Python.h>
#include <pybind11/chrono.h>
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/auth.h"
#include "comm/context.h"
#include "comm/store.h"

namespace ringmaster::torch_backend {
namespace {

using comm::DataType;
using SteadyClock = std::chrono::steady_clock;

// ringcomm's Store over torch's c10d::Store. torch's store calls cannot be
// given a deadline of their own (a TCPStore whose server is wedged blocks
// for the store's whole timeout), so each runs on a helper thread that holds
// its own reference to the store, and the caller waits only as long as it
// was told to. A helper that outlives its caller finishes on its own.
class C10dStore final : public comm::Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  Status Set(const std::string& key, const std::string& value, std::chrono::milliseconds timeout) override {
    auto r = Bounded<bool>("store set " + key, timeout, [key, value](c10d::Store& s) {
      s.set(key, std::vector<uint8_t>(value.begin(), value.end()));
      return true;
    });
    return r.status();
  }
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    return Bounded<std::string>("store get " + key, timeout + std::chrono::milliseconds(250), [key, timeout](c10d::Store& s) {
      s.wait({key}, timeout);
      auto v = s.get(key);
      return std::string(v.begin(), v.end());
    });
  }
  StatusOr<int64_t> Add(const std::string& key, int64_t delta, std::chrono::milliseconds timeout) override {
    return Bounded<int64_t>("store add " + key, timeout, [key, delta](c10d::Store& s) { return s.add(key, delta); });
  }

 private:
  template <typename T>
  StatusOr<T> Bounded(const std::string& what, std::chrono::milliseconds timeout, std::function<T(c10d::Store&)> fn) {
    struct Slot {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      std::optional<T> value;
      std::string error;
    };
    auto slot = std::make_shared<Slot>();
    std::thread([slot, store = store_, fn = std::move(fn)] {
      std::optional<T> value;
      std::string error;
      try {
        value = fn(*store);
      } catch (const std::exception& e) {
        error = e.what();
      } catch (...) {
        error = "unknown error";
      }
      {
        std::lock_guard<std::mutex> l(slot->mu);
        slot->value = std::move(value);
        slot->error = std::move(error);
        slot->done = true;
      }
      slot->cv.notify_all();
    }).detach();
    std::unique_lock<std::mutex> l(slot->mu);
    if (!slot->cv.wait_for(l, timeout, [&] { return slot->done; })) {
      return DeadlineExceeded(what + ": no answer within " + std::to_string(timeout.count()) +
                              " ms (has the rank serving the store gone?)");
    }
    if (!slot->value) return Unavailable(what + ": " + slot->error);
    return std::move(*slot->value);
  }

  c10::intrusive_ptr<c10d::Store> store_;
};

DataType ToDataType(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    case at::kByte: return DataType::kUInt8;
    case at::kBool: return DataType::kUInt8;
    default: TORCH_CHECK(false, "ringmaster backend: tensors of type ", t.scalar_type(), " are not supported");
  }
}

comm::ReduceOp ToReduceOp(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return comm::ReduceOp::kSum;
    case c10d::ReduceOp::AVG: return comm::ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT: return comm::ReduceOp::kProduct;
    case c10d::ReduceOp::MIN: return comm::ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return comm::ReduceOp::kMax;
    default: TORCH_CHECK(false, "ringmaster backend: reduce op ", static_cast<int>(op.op_), " is not supported");
  }
}

comm::TransportKind TransportFromEnv() {
  const char* t = std::getenv("RINGMASTER_TRANSPORT");
  const std::string v = t ? t : "";
  if (v.empty() || v == "auto") return comm::TransportKind::kAuto;
  if (v == "tcp") return comm::TransportKind::kTcp;
  if (v == "shm") return comm::TransportKind::kShm;
  TORCH_CHECK(false, "ringmaster backend: RINGMASTER_TRANSPORT must be tcp, shm or auto, got \"", v, "\"");
}

void CheckTensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.device().is_cpu(), "ringmaster backend: ", op, " needs CPU tensors, got one on ", t.device());
  TORCH_CHECK(!t.is_sparse(), "ringmaster backend: ", op, " does not take sparse tensors");
}

void CheckSingle(const std::vector<at::Tensor>& ts, const char* op) {
  TORCH_CHECK(ts.size() == 1, "ringmaster backend: ", op, " takes one tensor per rank, got ", ts.size());
  CheckTensor(ts[0], op);
}

std::exception_ptr ToException(const Status& st) {
  if (st.ok()) return nullptr;
  return std::make_exception_ptr(std::runtime_error("ringmaster: " + st.ToString()));
}

void Throw(const Status& st) {
  if (!st.ok()) throw std::runtime_error("ringmaster: " + st.ToString());
}

// What the backend's threads finished with. Dropping the last reference to
// a tensor Python created takes the GIL, which a thread of ours must never
// wait for (the destructor may hold it; at interpreter shutdown it would
// never come), so references go here and Python-side calls let them go.
class Graveyard {
 public:
  void Bury(std::function<void()> body) {
    std::lock_guard<std::mutex> l(mu_);
    bodies_.push_back(std::move(body));
  }
  void Bury(c10::intrusive_ptr<c10d::Work> work) {
    std::lock_guard<std::mutex> l(mu_);
    works_.push_back(std::move(work));
  }
  void Bury(std::vector<at::Tensor> tensors) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& t : tensors) tensors_.push_back(std::move(t));
  }
  // On a Python-side thread: the references go now.
  void Clear() {
    std::vector<std::function<void()>> bodies;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::vector<at::Tensor> tensors;
    {
      std::lock_guard<std::mutex> l(mu_);
      bodies.swap(bodies_);
      works.swap(works_);
      tensors.swap(tensors_);
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::function<void()>> bodies_;
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::vector<at::Tensor> tensors_;
};

class RingmasterWork final : public c10d::Work {
 public:
  RingmasterWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout)
      : Work(rank, type),
        outputs_(std::move(outputs)),
        timeout_(timeout),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  void Complete(std::exception_ptr error) {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
    finish(error);
  }
  // Every operation ends by ringcomm's deadline, and destroying the group
  // completes whatever is left, so kNoTimeout waits for that. The fallback
  // bound only guards against a bug: a wait never outlives the op's
  // deadline by more than a minute.
  bool wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> l(mutex_);
    if (timeout == kNoTimeout) {
      while (!completed_) {
        if (!cv_.wait_for(l, std::chrono::seconds(1), [&] { return completed_; }) && Overdue()) {
          TORCH_CHECK(false, "ringmaster backend: operation did not finish within its deadline");
        }
      }
    } else if (!cv_.wait_for(l, timeout, [&] { return completed_; })) {
      TORCH_CHECK(false, "ringmaster backend: operation timed out after ", timeout.count(), " ms");
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Set when the op starts (collectives) or is posted (point to point).
  void Started() { started_ = SteadyClock::now(); }

 private:
  bool Overdue() const {
    auto s = started_.load();
    return s != SteadyClock::time_point{} && SteadyClock::now() > s + timeout_ + std::chrono::minutes(1);
  }
  std::vector<at::Tensor> outputs_;
  const std::chrono::milliseconds timeout_;
  std::atomic<SteadyClock::time_point> started_{};
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupRingmaster final : public c10d::ProcessGroup {
 public:
  ProcessGroupRingmaster(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout)
      : ProcessGroup(rank, size), store_(std::move(store)), timeout_(timeout) {
    comm::Options o;
    o.timeout = timeout;
    o.transport = TransportFromEnv();
    if (const char* addr = std::getenv("RINGMASTER_ADDR"); addr && *addr) o.address = addr;
    // The ranks' hellos prove the job's secret: a stranger who reads torch's
    // store cannot pose as a rank.
    o.secret = comm::JobSecretFromEnvironment();
    auto ctx = comm::Context::Create(&store_, rank, size, o);
    Throw(ctx.status());
    context_ = std::move(*ctx);
    worker_ = std::thread([this] { Loop(); });
  }

  ~ProcessGroupRingmaster() override {
    // The GIL goes while this waits: the work it waits for may need it.
    PyThreadState* saved = (Py_IsInitialized() && PyGILState_Check()) ? PyEval_SaveThread() : nullptr;
    const auto deadline = SteadyClock::now() + timeout_;
    {
      std::unique_lock<std::mutex> l(mu_);
      stop_ = true;
      cv_.notify_all();
      // Queued collectives and posted point to point get the group's
      // timeout to finish (their peers may still be in them); then the
      // context is aborted and the rest fail at once.
      if (!idle_cv_.wait_until(l, deadline, [&] { return queue_.empty() && !running_ && p2p_pending_ == 0; })) {
        l.unlock();
        context_->Abort("the process group was destroyed with this operation in flight");
      }
    }
    worker_.join();
    context_.reset();  // says goodbye to the peers, or breaks the links if it failed
    if (saved) PyEval_RestoreThread(saved);
    graveyard_->Clear();
  }

  const std::string getBackendName() const override { return "ringmaster"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    CheckSingle(tensors, "broadcast");
    at::Tensor t = tensors[0];
    const int root = static_cast<int>(opts.rootRank);
    return Post(c10d::OpType::BROADCAST, tensors, [this, t, root] {
      InPlace(t, [&](at::Tensor& c) { return context_->Broadcast(c.data_ptr(), c.numel(), ToDataType(c), root); });
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    CheckSingle(tensors, "allreduce");
    at::Tensor t = tensors[0];
    const comm::ReduceOp op = ToReduceOp(opts.reduceOp);
    return Post(c10d::OpType::ALLREDUCE, tensors, [this, t, op] {
      InPlace(t, [&](at::Tensor& c) {
        return context_->AllReduce(c.data_ptr(), c.data_ptr(), c.numel(), ToDataType(c), op);
      });
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                    const c10d::AllreduceCoalescedOptions& opts) override {
    for (const auto& t : tensors) CheckTensor(t, "allreduce_coalesced");
    const comm::ReduceOp op = ToReduceOp(opts.reduceOp);
    std::vector<at::Tensor> ts = tensors;
    return Post(c10d::OpType::ALLREDUCE_COALESCED, tensors, [this, ts, op] {
      // One all-reduce of the tensors flattened together (all of one dtype, as torch requires).
      at::Tensor flat = at::cat(c10::fmap(ts, [](const at::Tensor& t) { return t.reshape(-1); }));
      Throw(context_->AllReduce(flat.data_ptr(), flat.data_ptr(), flat.numel(), ToDataType(flat), op));
      int64_t at = 0;
      for (const auto& t : ts) {
        t.copy_(flat.narrow(0, at, t.numel()).view_as(t));
        at += t.numel();
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    CheckSingle(tensors, "reduce");
    at::Tensor t = tensors[0];
    const comm::ReduceOp op = ToReduceOp(opts.reduceOp);
    const int root = static_cast<int>(opts.rootRank);
    return Post(c10d::OpType::REDUCE, tensors, [this, t, op, root] {
      InPlace(t, [&](at::Tensor& c) {
        return context_->Reduce(c.data_ptr(), c.data_ptr(), c.numel(), ToDataType(c), op, root);
      });
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllgatherOptions&) override {
    CheckSingle(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                "ringmaster backend: allgather needs one list of ", getSize(), " output tensors");
    at::Tensor in = inputs[0].contiguous();
    std::vector<at::Tensor> outs = outputs[0];
    for (const auto& o : outs) {
      TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                  "ringmaster backend: allgather outputs must match the input's size and type");
    }
    return Post(c10d::OpType::ALLGATHER, outs, [this, in, outs] {
      at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
      Throw(context_->AllGather(in.data_ptr(), flat.data_ptr(), in.numel(), ToDataType(in)));
      for (int r = 0; r < getSize(); ++r) outs[r].copy_(flat.narrow(0, r * in.numel(), in.numel()).view_as(outs[r]));
    });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                const c10d::AllgatherOptions&) override {
    CheckTensor(input, "_allgather_base");
    TORCH_CHECK(output.numel() == input.numel() * getSize(), "ringmaster backend: _allgather_base output must hold ",
                getSize(), " inputs");
    at::Tensor in = input.contiguous(), out = output;
    return Post(c10d::OpType::_ALLGATHER_BASE, {output}, [this, in, out] {
      InPlace(out, [&](at::Tensor& c) { return context_->AllGather(in.data_ptr(), c.data_ptr(), in.numel(), ToDataType(in)); });
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                               std::vector<std::vector<at::Tensor>>& inputs,
                                               const c10d::ReduceScatterOptions& opts) override {
    CheckSingle(outputs, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                "ringmaster backend: reduce_scatter needs one list of ", getSize(), " input tensors");
    at::Tensor out = outputs[0];
    std::vector<at::Tensor> ins = inputs[0];
    const comm::ReduceOp op = ToReduceOp(opts.reduceOp);
    return Post(c10d::OpType::REDUCE_SCATTER, outputs, [this, out, ins, op] {
      at::Tensor flat = at::cat(c10::fmap(ins, [](const at::Tensor& t) { return t.reshape(-1); }));
      InPlace(out, [&](at::Tensor& c) {
        return context_->ReduceScatter(flat.data_ptr(), c.data_ptr(), c.numel(), ToDataType(c), op);
      });
    });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                     const c10d::ReduceScatterOptions& opts) override {
    CheckTensor(input, "_reduce_scatter_base");
    TORCH_CHECK(input.numel() == output.numel() * getSize(), "ringmaster backend: _reduce_scatter_base input must hold ",
                getSize(), " outputs");
    at::Tensor in = input.contiguous(), out = output;
    const comm::ReduceOp op = ToReduceOp(opts.reduceOp);
    return Post(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, [this, in, out, op] {
      InPlace(out, [&](at::Tensor& c) {
        return context_->ReduceScatter(in.data_ptr(), c.data_ptr(), c.numel(), ToDataType(c), op);
      });
    });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return Post(c10d::OpType::BARRIER, {}, [this] { Throw(context_->Barrier()); });
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    CheckSingle(tensors, "send");
    at::Tensor t = tensors[0].contiguous();
    return PostPointToPoint(c10d::OpType::SEND, tensors, t, t, dst, tag);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    CheckSingle(tensors, "recv");
    at::Tensor t = tensors[0];
    return PostPointToPoint(c10d::OpType::RECV, tensors, t.contiguous(), t, src, tag);
  }

  static c10::intrusive_ptr<c10d::ProcessGroup> Create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                       const std::chrono::duration<float>& timeout) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
    return c10::make_intrusive<ProcessGroupRingmaster>(store, rank, size, ms);
  }

 private:
  // Runs `op` on a contiguous view of `t`, copying back if `t` was not contiguous.
  template <typename F>
  static void InPlace(const at::Tensor& t, F op) {
    at::Tensor c = t.contiguous();
    Throw(op(c));
    if (!c.is_same(t)) t.copy_(c);
  }

  c10::intrusive_ptr<c10d::Work> Post(c10d::OpType type, std::vector<at::Tensor> outputs, std::function<void()> body) {
    graveyard_->Clear();
    auto work = c10::make_intrusive<RingmasterWork>(getRank(), type, std::move(outputs), timeout_);
    {
      std::lock_guard<std::mutex> l(mu_);
      TORCH_CHECK(!stop_, "ringmaster backend: the process group is being destroyed");
      queue_.push_back({work, std::move(body)});
    }
    cv_.notify_one();
    return work;
  }

  // Posted to ringcomm at once; completes on ringcomm's point-to-point thread.
  // `buf` is the contiguous tensor the bytes move through; a receive copies
  // it into `t` when they differ.
  c10::intrusive_ptr<c10d::Work> PostPointToPoint(c10d::OpType type, std::vector<at::Tensor> outputs, at::Tensor buf,
                                                 at::Tensor t, int peer, int tag) {
    graveyard_->Clear();
    TORCH_CHECK(peer >= 0 && peer < getSize() && peer != getRank(), "ringmaster backend: ",
                type == c10d::OpType::SEND ? "send to" : "recv from", " rank ", peer, " in a group of ", getSize(),
                " (this is rank ", getRank(), ")");
    // Every check that can throw comes before the pending count is taken: a
    // count taken and never returned would hold up destroy_process_group.
    const comm::DataType dtype = ToDataType(buf);
    auto work = c10::make_intrusive<RingmasterWork>(getRank(), type, std::move(outputs), timeout_);
    work->Started();
    {
      std::lock_guard<std::mutex> l(mu_);
      TORCH_CHECK(!stop_, "ringmaster backend: the process group is being destroyed");
      ++p2p_pending_;
    }
    const bool send = type == c10d::OpType::SEND;
    std::shared_ptr<comm::Work> cw = send ? context_->SendAsync(buf.data_ptr(), buf.numel(), dtype, peer, tag)
                                          : context_->RecvAsync(buf.data_ptr(), buf.numel(), dtype, peer, tag);
    cw->OnDone([this, work, buf, t, send, graveyard = graveyard_](const Status& st) mutable {
      if (st.ok() && !send && !buf.is_same(t)) t.copy_(buf);
      work->Complete(ToException(st));
      // The last references may be Python's: they go on a Python-side thread.
      graveyard->Bury(c10::intrusive_ptr<c10d::Work>(std::move(work)));
      graveyard->Bury(std::vector<at::Tensor>{std::move(buf), std::move(t)});
      std::lock_guard<std::mutex> l(mu_);
      --p2p_pending_;
      idle_cv_.notify_all();
    });
    return work;
  }

  void Loop() {
    for (;;) {
      std::pair<c10::intrusive_ptr<RingmasterWork>, std::function<void()>> item;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
      }
      item.first->Started();
      std::exception_ptr error;
      try {
        item.second();
      } catch (...) {
        error = std::current_exception();
      }
      item.first->Complete(error);
      graveyard_->Bury(std::move(item.second));
      graveyard_->Bury(c10::intrusive_ptr<c10d::Work>(std::move(item.first)));
      std::lock_guard<std::mutex> l(mu_);
      running_ = false;
      idle_cv_.notify_all();
    }
  }

  C10dStore store_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<Graveyard> graveyard_ = std::make_shared<Graveyard>();
  std::unique_ptr<comm::Context> context_;
  std::mutex mu_;
  std::condition_variable cv_;       // work for the worker
  std::condition_variable idle_cv_;  // the worker finished an item, or a point-to-point op completed
  std::deque<std::pair<c10::intrusive_ptr<RingmasterWork>, std::function<void()>>> queue_;  // GUARDED_BY(mu_)
  bool running_ = false;   // GUARDED_BY(mu_)
  int p2p_pending_ = 0;    // GUARDED_BY(mu_)
  bool stop_ = false;      // GUARDED_BY(mu_)
  std::thread worker_;
};

}  // namespace
}  // namespace ringmaster::torch_backend

PYBIND11_MODULE(_C, m) {
  m.doc() = "ringcomm as a torch.distributed backend";
  m.def("create_process_group", &ringmaster::torch_backend::ProcessGroupRingmaster::Create, py::arg("store"),
        py::arg("rank"), py::arg("size"), py::arg("timeout"),
        "Creates a ProcessGroup on ringcomm (what init_process_group(backend='ringmaster') calls).");
}
