// ProcessGroupRingmaster: ringcomm as a torch.distributed backend, for
// Debian's torch 1.13. `import ringmaster_torch` registers it under the name
// "ringmaster", so init_process_group(backend="ringmaster") and DDP run their
// collectives on ringcomm.
//
// The group forms a ringcomm Context over torch's own rendezvous store (the
// TCPStore or FileStore init_process_group made), adapted to ringcomm's
// Store. Like ProcessGroupGloo, every operation is queued to one worker
// thread that runs them in issue order (the order must match across ranks);
// each returns a Work whose Future completes when the collective has, which
// is what DDP's reducer chains its bucket callbacks on. CPU tensors of
// float32/64, float16, bfloat16, int32/64 and uint8.
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
#include <thread>

#include "comm/context.h"
#include "comm/store.h"

namespace ringmaster::torch_backend {
namespace {

using comm::DataType;

// ringcomm's Store over torch's c10d::Store.
class C10dStore final : public comm::Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  Status Set(const std::string& key, const std::string& value) override {
    try {
      store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
      return Status::Ok();
    } catch (const std::exception& e) {
      return Unavailable(std::string("store set ") + key + ": " + e.what());
    }
  }
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    try {
      store_->wait({key}, timeout);
      auto v = store_->get(key);
      return std::string(v.begin(), v.end());
    } catch (const std::exception& e) {
      return DeadlineExceeded(std::string("store get ") + key + ": " + e.what());
    }
  }
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    try {
      return store_->add(key, delta);
    } catch (const std::exception& e) {
      return Unavailable(std::string("store add ") + key + ": " + e.what());
    }
  }

 private:
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

void CheckTensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.device().is_cpu(), "ringmaster backend: ", op, " needs CPU tensors, got one on ", t.device());
  TORCH_CHECK(!t.is_sparse(), "ringmaster backend: ", op, " does not take sparse tensors");
}

void CheckSingle(const std::vector<at::Tensor>& ts, const char* op) {
  TORCH_CHECK(ts.size() == 1, "ringmaster backend: ", op, " takes one tensor per rank, got ", ts.size());
  CheckTensor(ts[0], op);
}

void Throw(const Status& st) {
  if (!st.ok()) throw std::runtime_error("ringmaster: " + st.ToString());
}

class RingmasterWork final : public c10d::Work {
 public:
  RingmasterWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  void Complete(std::exception_ptr error) {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
    finish(error);
  }
  bool wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> l(mutex_);
    if (timeout == kNoTimeout) {
      cv_.wait(l, [&] { return completed_; });
    } else if (!cv_.wait_for(l, timeout, [&] { return completed_; })) {
      TORCH_CHECK(false, "ringmaster backend: operation timed out after ", timeout.count(), " ms");
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupRingmaster final : public c10d::ProcessGroup {
 public:
  ProcessGroupRingmaster(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout)
      : ProcessGroup(rank, size), store_(std::move(store)) {
    comm::Options o;
    o.timeout = timeout;
    if (const char* addr = std::getenv("RINGMASTER_ADDR"); addr && *addr) o.address = addr;
    auto ctx = comm::Context::Create(&store_, rank, size, o);
    Throw(ctx.status());
    context_ = std::move(*ctx);
    worker_ = std::thread([this] { Loop(); });
  }
  ~ProcessGroupRingmaster() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
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

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) override {
    CheckSingle(tensors, "send");
    at::Tensor t = tensors[0].contiguous();
    return Post(c10d::OpType::SEND, tensors,
                [this, t, dst] { Throw(context_->Send(t.data_ptr(), t.numel(), ToDataType(t), dst)); });
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) override {
    CheckSingle(tensors, "recv");
    at::Tensor t = tensors[0];
    return Post(c10d::OpType::RECV, tensors, [this, t, src] {
      InPlace(t, [&](at::Tensor& c) { return context_->Recv(c.data_ptr(), c.numel(), ToDataType(c), src); });
    });
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
    auto work = c10::make_intrusive<RingmasterWork>(getRank(), type, std::move(outputs));
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.push_back({work, std::move(body)});
    }
    cv_.notify_one();
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
      }
      std::exception_ptr error;
      try {
        item.second();
      } catch (...) {
        error = std::current_exception();
      }
      item.first->Complete(error);
    }
  }

  C10dStore store_;
  std::unique_ptr<comm::Context> context_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<c10::intrusive_ptr<RingmasterWork>, std::function<void()>>> queue_;
  bool stop_ = false;
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
