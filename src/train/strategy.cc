// Data parallelism: every rank holds the whole model and trains on its shard
// of each batch; DataParallel averages the gradients while backward runs.
#include "train/strategy.h"

#include <chrono>

#include <fmt/format.h>

#include "train/data_parallel.h"

namespace ringmaster::train {
namespace {

using Seconds = std::chrono::duration<double>;

class DataParallelStrategy final : public Strategy {
 public:
  DataParallelStrategy(const TrainerOptions& o, Model model, comm::Context* ctx, comm::DataType wire, const Dataset* train)
      : model_(std::move(model)),
        ctx_(ctx),
        train_(train),
        opt_(model_.module->parameters(), torch::optim::SGDOptions(o.lr).momentum(o.momentum)) {
    if (ctx_) {
      DataParallelOptions dpo;
      dpo.wire = wire;
      dp_.emplace(*model_.module, *ctx_, dpo);
    }
  }
  int data_rank() const override { return ctx_ ? ctx_->rank() : 0; }
  int data_world() const override { return ctx_ ? ctx_->size() : 1; }
  std::string Describe() const override { return fmt::format("{} worker{}", data_world(), data_world() == 1 ? "" : "s"); }
  torch::optim::Optimizer& optimizer() override { return opt_; }
  Model* model() override { return &model_; }

  StatusOr<CheckpointInfo> Load(const std::string& dir) override {
    RM_ASSIGN_OR_RETURN(CheckpointInfo info, LoadLatestCheckpointMeta(dir));
    auto extra = nlohmann::json::parse(info.extra_json, nullptr, false);
    if (extra.is_object() && extra.contains("stages")) {
      return FailedPrecondition(fmt::format("parallel: {} holds a pipeline checkpoint ({} stages); train it with --parallel pipeline",
                                            dir, extra["stages"].dump()));
    }
    RM_RETURN_IF_ERROR(LoadModuleFile(info.path + "/model.pt", *model_.module));
    RM_RETURN_IF_ERROR(LoadOptimizerFile(info.path + "/optimizer.pt", opt_));
    return info;
  }
  Status Start() override { return dp_ ? dp_->BroadcastParameters() : Status::Ok(); }

  StatusOr<StepStats> Step(const torch::Tensor& idx) override {
    const auto start = std::chrono::steady_clock::now();
    auto x = train_->images.index_select(0, idx), y = train_->labels.index_select(0, idx);
    opt_.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model_.forward(x), y);
    loss.backward();
    const auto computed = std::chrono::steady_clock::now();
    if (dp_) RM_RETURN_IF_ERROR(dp_->FinishGradients());
    StepStats s;
    // A rank's step time is its own work, not the wait for the others in
    // the all-reduce (which is the same for all of them).
    s.compute_s = Seconds(computed - start).count();
    s.wait_s = Seconds(std::chrono::steady_clock::now() - computed).count();
    opt_.step();
    s.samples = static_cast<double>(idx.size(0));
    s.loss_sum = loss.item<double>() * s.samples;
    return s;
  }

  // Each rank evaluates every world-th test sample; the sums are combined.
  StatusOr<Evaluation> Evaluate(const Dataset& test) override {
    torch::NoGradGuard no_grad;
    model_.module->eval();
    auto idx = torch::arange(data_rank(), test.size(), data_world(), torch::kInt64);
    std::vector<double> sums = {0, 0, 0};  // loss, correct, count
    for (int64_t b = 0; b < idx.size(0); b += 1000) {
      auto i = idx.slice(0, b, std::min<int64_t>(b + 1000, idx.size(0)));
      auto out = model_.forward(test.images.index_select(0, i));
      auto y = test.labels.index_select(0, i);
      sums[0] += torch::nn::functional::cross_entropy(out, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)).item<double>();
      sums[1] += out.argmax(1).eq(y).sum().item<double>();
      sums[2] += static_cast<double>(i.size(0));
    }
    model_.module->train();
    if (ctx_) RM_RETURN_IF_ERROR(ctx_->AllReduce(sums.data(), sums.data(), 3, comm::DataType::kFloat64, comm::ReduceOp::kSum));
    return Evaluation{sums[0] / sums[2], sums[1] / sums[2]};
  }

  Status Save(const std::string& dir, int64_t step, nlohmann::json extra) override {
    if (data_rank() != 0) return Status::Ok();  // every rank holds the same parameters
    return SaveCheckpoint(dir, step, *model_.module, opt_, extra.dump());
  }

 private:
  Model model_;
  comm::Context* ctx_;
  const Dataset* train_;
  torch::optim::SGD opt_;
  std::optional<DataParallel> dp_;
};

}  // namespace

std::unique_ptr<Strategy> MakeDataParallel(const TrainerOptions& o, Model model, comm::Context* ctx, comm::DataType wire,
                                           const Dataset* train) {
  return std::make_unique<DataParallelStrategy>(o, std::move(model), ctx, wire, train);
}

}  // namespace ringmaster::train
