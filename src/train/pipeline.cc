#include "train/pipeline.h"

#include <chrono>
#include <deque>

#include <fmt/format.h>

#include "train/data_parallel.h"
#include "train/model_layers.h"
#include "train/pipeline_plan.h"

namespace ringmaster::train {
namespace {

using Seconds = std::chrono::duration<double>;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

// Point-to-point tags: one per kind of message, so each kind keeps its own order.
enum Tag : int { kActivation = 1, kGradient = 2, kEvalActivation = 3, kShape = 4, kCheckpointSizes = 5, kCheckpointBytes = 6 };
constexpr int kMaxDims = 8;

std::vector<int64_t> WithBatch(int64_t n, const std::vector<int64_t>& per_sample) {
  std::vector<int64_t> s = {n};
  s.insert(s.end(), per_sample.begin(), per_sample.end());
  return s;
}

class PipelineStrategy final : public Strategy {
 public:
  PipelineStrategy(const TrainerOptions& o, comm::Group* group, StagePlace place, std::vector<int> bounds,
                   std::vector<LayerDef> layers, const Dataset* train)
      : o_(o),
        group_(group),
        ctx_(group ? group->context.get() : nullptr),
        place_(place),
        bounds_(std::move(bounds)),
        replicas_(ctx_ ? ctx_->size() / o.stages : 1),
        train_(train),
        module_(layers, bounds_[place.stage], bounds_[place.stage + 1]),
        opt_(module_->parameters(), torch::optim::SGDOptions(o.lr).momentum(o.momentum)) {
    for (int i = bounds_[place.stage]; i < bounds_[place.stage + 1]; ++i) layer_names_.push_back(layers[i].name);
  }

  // The stage's replicas form their group; DataParallel averages over it.
  Status JoinStageGroup(comm::DataType wire) {
    if (replicas_ == 1) return Status::Ok();
    RM_ASSIGN_OR_RETURN(stage_group_, comm::JoinSubgroup(group_->store.get(), fmt::format("stage-{}", place_.stage),
                                                         place_.replica, replicas_, group_->options));
    DataParallelOptions dpo;
    dpo.wire = wire;
    dp_.emplace(*module_, *stage_group_.context, dpo);
    return Status::Ok();
  }

  int data_rank() const override { return place_.replica; }
  int data_world() const override { return replicas_; }
  std::string Describe() const override {
    return fmt::format("{} stages x {} replica{} (1F1B, {} micro-batches)", o_.stages, replicas_, replicas_ == 1 ? "" : "s",
                       o_.micro_batches);
  }
  torch::optim::Optimizer& optimizer() override { return opt_; }
  bool first() const { return place_.stage == 0; }
  bool last() const { return place_.stage + 1 == o_.stages; }

  std::string StageLine() const {
    int64_t params = 0;
    for (const auto& p : module_->parameters()) params += p.numel();
    return fmt::format("pipeline stage {} of {} (replica {} of {}): layers {}, {} parameters", place_.stage, o_.stages,
                       place_.replica, replicas_, fmt::join(layer_names_, " "), params);
  }

  StatusOr<CheckpointInfo> Load(const std::string& dir) override {
    RM_ASSIGN_OR_RETURN(CheckpointInfo info, LoadLatestCheckpointMeta(dir));
    json extra = json::parse(info.extra_json, nullptr, false);
    if (!extra.is_object() || !extra.contains("stages")) {
      return FailedPrecondition(fmt::format("parallel: {} holds a data-parallel checkpoint; train it without --parallel pipeline", dir));
    }
    if (extra["stages"] != o_.stages || extra.value("split", std::vector<int>{}) != bounds_) {
      return FailedPrecondition(fmt::format("stages: {} holds a checkpoint of {} stages (layers split at {}), not {} (split at {})", dir,
                                            extra["stages"].dump(), extra.value("split", json::array()).dump(), o_.stages,
                                            json(bounds_).dump()));
    }
    const std::string part = fmt::format("{}/stage-{}", info.path, place_.stage);
    RM_RETURN_IF_ERROR(LoadModuleFile(part + "/model.pt", *module_));
    RM_RETURN_IF_ERROR(LoadOptimizerFile(part + "/optimizer.pt", opt_));
    return info;
  }

  // Each stage learns the shape of its input from the stage before.
  Status Start() override {
    std::cout << StageLine() << std::endl;
    if (first()) {
      in_shape_ = {1, 28, 28};
    } else {
      std::vector<int64_t> msg(kMaxDims + 1);
      RM_RETURN_IF_ERROR(ctx_->Recv(msg.data(), msg.size(), comm::DataType::kInt64, place_.prev, kShape));
      in_shape_.assign(msg.begin() + 1, msg.begin() + 1 + msg[0]);
    }
    {
      torch::NoGradGuard no_grad;
      module_->eval();
      auto out = module_->forward(torch::zeros(WithBatch(1, in_shape_)));
      module_->train();
      out_shape_.assign(out.sizes().begin() + 1, out.sizes().end());
    }
    if (!last()) {
      if (out_shape_.size() > kMaxDims) return Internal("pipeline: an activation has more than 8 dimensions");
      std::vector<int64_t> msg(kMaxDims + 1, 0);
      msg[0] = static_cast<int64_t>(out_shape_.size());
      std::copy(out_shape_.begin(), out_shape_.end(), msg.begin() + 1);
      RM_RETURN_IF_ERROR(ctx_->Send(msg.data(), msg.size(), comm::DataType::kInt64, place_.next, kShape));
    }
    return dp_ ? dp_->BroadcastParameters() : Status::Ok();
  }

  StatusOr<StepStats> Step(const torch::Tensor& idx) override {
    const auto start = Clock::now();
    double waited = 0;
    auto timed = [&waited](const auto& fn) {
      const auto t = Clock::now();
      Status st = fn();
      waited += Seconds(Clock::now() - t).count();
      return st;
    };
    const int64_t n = idx.size(0);
    const auto sizes = MicroBatchSizes(n, o_.micro_batches);
    std::vector<int64_t> offsets = {0};
    for (int64_t s : sizes) offsets.push_back(offsets.back() + s);
    const int m = static_cast<int>(sizes.size());
    struct InFlight {
      torch::Tensor input, output, loss;
    };
    std::vector<InFlight> held(m);
    StepStats stats;
    opt_.zero_grad();
    const auto ops = OneForwardOneBackward(place_.stage, o_.stages, m);
    int backwards_left = m;
    for (const PipelineOp& op : ops) {
      InFlight& f = held[op.micro_batch];
      const int64_t nm = sizes[op.micro_batch];
      if (op.kind == PipelineOp::kForward) {
        if (first()) {
          f.input = train_->images.index_select(0, idx.slice(0, offsets[op.micro_batch], offsets[op.micro_batch + 1]));
        } else {
          f.input = torch::empty(WithBatch(nm, in_shape_));
          RM_RETURN_IF_ERROR(timed([&] { return Recv(f.input, kActivation, place_.prev); }));
          f.input.requires_grad_(true);
        }
        f.output = module_->forward(f.input);
        if (last()) {
          auto y = train_->labels.index_select(0, idx.slice(0, offsets[op.micro_batch], offsets[op.micro_batch + 1]));
          auto loss = torch::nn::functional::cross_entropy(f.output, y);
          stats.loss_sum += loss.item<double>() * static_cast<double>(nm);
          stats.samples += static_cast<double>(nm);
          // Weighted by its share of the batch: the sum of the micro-batches'
          // gradients is the batch's mean-loss gradient.
          f.loss = loss * (static_cast<double>(nm) / static_cast<double>(n));
        } else {
          PostSend(f.output.detach().contiguous(), kActivation, place_.next);
        }
      } else {
        if (dp_) dp_->set_accumulating(--backwards_left > 0);  // the last backward all-reduces the sum
        if (last()) {
          f.loss.backward();
        } else {
          auto grad = torch::empty(f.output.sizes());
          RM_RETURN_IF_ERROR(timed([&] { return Recv(grad, kGradient, place_.next); }));
          f.output.backward(grad);
        }
        if (!first()) PostSend(f.input.grad().contiguous(), kGradient, place_.prev);
        f = InFlight{};  // this micro-batch's activations are done with
      }
    }
    RM_RETURN_IF_ERROR(timed([&] { return FinishSends(); }));
    if (dp_) RM_RETURN_IF_ERROR(timed([&] { return dp_->FinishGradients(); }));
    opt_.step();
    stats.wait_s = waited;
    stats.compute_s = Seconds(Clock::now() - start).count() - waited;
    return stats;
  }

  // Each pipeline evaluates every replicas-th test sample, in chunks that
  // stream through its stages; the last stages' sums are combined.
  StatusOr<Evaluation> Evaluate(const Dataset& test) override {
    torch::NoGradGuard no_grad;
    module_->eval();
    auto idx = torch::arange(place_.replica, test.size(), replicas_, torch::kInt64);
    std::vector<double> sums = {0, 0, 0};  // loss, correct, count
    Status st;
    for (int64_t b = 0; b < idx.size(0) && st.ok(); b += 500) {
      auto i = idx.slice(0, b, std::min<int64_t>(b + 500, idx.size(0)));
      torch::Tensor x;
      if (first()) {
        x = test.images.index_select(0, i);
      } else {
        x = torch::empty(WithBatch(i.size(0), in_shape_));
        st = Recv(x, kEvalActivation, place_.prev);
        if (!st.ok()) break;
      }
      auto out = module_->forward(x);
      if (!last()) {
        PostSend(out.contiguous(), kEvalActivation, place_.next);
        continue;
      }
      auto y = test.labels.index_select(0, i);
      sums[0] += torch::nn::functional::cross_entropy(out, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)).item<double>();
      sums[1] += out.argmax(1).eq(y).sum().item<double>();
      sums[2] += static_cast<double>(i.size(0));
    }
    module_->train();
    if (st.ok()) st = FinishSends();
    RM_RETURN_IF_ERROR(st);
    if (ctx_) RM_RETURN_IF_ERROR(ctx_->AllReduce(sums.data(), sums.data(), 3, comm::DataType::kFloat64, comm::ReduceOp::kSum));
    return Evaluation{sums[0] / sums[2], sums[1] / sums[2]};
  }

  // Stage s's first replica (rank s) sends its part to rank 0, which writes
  // the whole checkpoint, one part in memory at a time.
  Status Save(const std::string& dir, int64_t step, json extra) override {
    if (place_.replica != 0) return Status::Ok();
    std::unique_ptr<CheckpointWriter> writer;
    if (first()) {
      RM_ASSIGN_OR_RETURN(writer, CheckpointWriter::Begin(dir, step));
    }
    for (int k = 0; k < 2; ++k) {
      const std::string file = fmt::format("stage-{{}}/{}", k == 0 ? "model.pt" : "optimizer.pt");
      std::string bytes;
      try {
        bytes = k == 0 ? SerializeModule(*module_) : SerializeOptimizer(opt_);
      } catch (const std::exception& e) {
        return Internal(fmt::format("checkpoint of stage {}: {}", place_.stage, e.what()));
      }
      if (!first()) {
        const int64_t size = static_cast<int64_t>(bytes.size());
        RM_RETURN_IF_ERROR(ctx_->Send(&size, 1, comm::DataType::kInt64, 0, kCheckpointSizes));
        RM_RETURN_IF_ERROR(ctx_->Send(bytes.data(), bytes.size(), comm::DataType::kUInt8, 0, kCheckpointBytes));
        continue;
      }
      RM_RETURN_IF_ERROR(writer->Add(fmt::format(fmt::runtime(file), 0), bytes));
      bytes = std::string();
      for (int s = 1; s < o_.stages; ++s) {
        int64_t size = 0;
        RM_RETURN_IF_ERROR(ctx_->Recv(&size, 1, comm::DataType::kInt64, s, kCheckpointSizes));
        bytes.assign(static_cast<size_t>(size), '\0');
        RM_RETURN_IF_ERROR(ctx_->Recv(bytes.data(), bytes.size(), comm::DataType::kUInt8, s, kCheckpointBytes));
        RM_RETURN_IF_ERROR(writer->Add(fmt::format(fmt::runtime(file), s), bytes));
        bytes = std::string();
      }
    }
    if (!first()) return Status::Ok();
    extra["parallel"] = "pipeline";
    extra["stages"] = o_.stages;
    extra["split"] = bounds_;
    return writer->Commit(extra.dump());
  }

 private:
  Status Recv(torch::Tensor& t, int tag, int peer) {
    return ctx_->Recv(t.data_ptr<float>(), static_cast<size_t>(t.numel()), comm::DataType::kFloat32, peer, tag);
  }
  // Sends never block the schedule: the tensor is held until its send is done.
  void PostSend(torch::Tensor t, int tag, int peer) {
    sends_.push_back({t, ctx_->SendAsync(t.data_ptr<float>(), static_cast<size_t>(t.numel()), comm::DataType::kFloat32, peer, tag)});
    while (!sends_.empty() && sends_.front().second->Done()) sends_.pop_front();
  }
  Status FinishSends() {
    Status first_error;
    for (auto& [t, work] : sends_) {
      Status st = work->Wait();
      if (first_error.ok() && !st.ok()) first_error = st;
    }
    sends_.clear();
    return first_error;
  }

  const TrainerOptions o_;
  comm::Group* group_;
  comm::Context* ctx_;
  const StagePlace place_;
  const std::vector<int> bounds_;
  const int replicas_;
  const Dataset* train_;
  StageModule module_;
  torch::optim::SGD opt_;
  std::vector<std::string> layer_names_;
  comm::Subgroup stage_group_;
  std::optional<DataParallel> dp_;
  std::vector<int64_t> in_shape_, out_shape_;  // per sample
  std::deque<std::pair<torch::Tensor, std::shared_ptr<comm::Work>>> sends_;
};

}  // namespace

StatusOr<std::unique_ptr<Strategy>> MakePipeline(const TrainerOptions& o, comm::Group* group, comm::DataType wire,
                                                 const Dataset* train) {
  const int world = group ? group->context->size() : 1, rank = group ? group->context->rank() : 0;
  RM_ASSIGN_OR_RETURN(StagePlace place, PlaceRank(rank, world, o.stages));
  if (o.stages > 1 && !group) {
    return InvalidArgument(fmt::format("stages: {} stages need {} ranks (a distributed job with replicas: {})", o.stages,
                                       o.stages, o.stages));
  }
  RM_ASSIGN_OR_RETURN(std::vector<LayerDef> layers, ModelLayers(o.model, {o.hidden, o.layers}));
  RM_ASSIGN_OR_RETURN(std::vector<int> bounds, BalancedSplit(LayerParameterCounts(layers), o.stages));
  torch::manual_seed(o.seed);  // counting the parameters drew from the generator: start again
  auto p = std::make_unique<PipelineStrategy>(o, group, place, std::move(bounds), std::move(layers), train);
  RM_RETURN_IF_ERROR(p->JoinStageGroup(wire));
  return std::unique_ptr<Strategy>(std::move(p));
}

StatusOr<Model> LoadPipelineModel(const std::string& checkpoint_path, const json& extra) {
  const std::string name = extra.value("model", std::string("lenet5"));
  RM_ASSIGN_OR_RETURN(std::vector<LayerDef> layers,
                      ModelLayers(name, {extra.value("hidden", int64_t{128}), extra.value("layers", 1)}));
  const auto bounds = extra.value("split", std::vector<int>{});
  if (bounds.size() < 2 || bounds.front() != 0 || bounds.back() != static_cast<int>(layers.size())) {
    return InvalidArgument(fmt::format("{}: split {} does not cut the {} layers of {}", checkpoint_path,
                                       extra.value("split", json::array()).dump(), layers.size(), name));
  }
  auto whole = std::make_shared<torch::nn::Module>();
  std::vector<StageModule> stages;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    stages.push_back(whole->register_module(fmt::format("stage{}", s), StageModule(layers, bounds[s], bounds[s + 1])));
    RM_RETURN_IF_ERROR(LoadModuleFile(fmt::format("{}/stage-{}/model.pt", checkpoint_path, s), *stages.back()));
  }
  return Model{whole, [stages](torch::Tensor x) mutable {
                 for (auto& s : stages) x = s->forward(x);
                 return x;
               }};
}

}  // namespace ringmaster::train
