#include "train/trainer.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/environment.h"
#include "common/files.h"
#include "train/checkpoint.h"
#include "train/fashion_mnist.h"
#include "train/models.h"
#include "train/pipeline.h"
#include "train/sampler.h"
#include "train/strategy.h"

namespace ringmaster::train {
namespace fs = std::filesystem;
using json = nlohmann::json;
using Seconds = std::chrono::duration<double>;

namespace {

// Set by SIGTERM: the platform is stopping the gang (cancel, a failed peer, a
// resize, a preemption). The ranks agree on it every step and checkpoint.
std::atomic<bool> g_stop_requested{false};
void OnSigterm(int) { g_stop_requested = true; }

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// One line: torch's exceptions carry a backtrace after the first.
int Fail(const Status& st) {
  std::string msg = st.message();
  msg = msg.substr(0, msg.find('\n'));
  std::cerr << "ringmaster-train: " << msg << "\n";
  return 1;
}

// One JSON object per line, appended with a single write so a reader never
// sees half a record unless the process dies mid-write.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path) {
    if (!path.empty()) fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  ~MetricsWriter() {
    if (fd_ >= 0) close(fd_);
  }
  void Write(json record) {
    if (fd_ < 0) return;
    record["time_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    std::string line = record.dump() + "\n";
    (void)!write(fd_, line.data(), line.size());
  }

 private:
  int fd_ = -1;
};

class Progress {
 public:
  Progress(std::string mode, bool enabled) : enabled_(enabled) {
    bar_ = mode == "bar" || (mode == "auto" && isatty(STDOUT_FILENO));
    enabled_ = enabled && mode != "none";
  }
  // Called every step; draws a bar on a terminal, else a line every 10%.
  void Update(int epoch, int epochs, int64_t done, int64_t total, double loss, double samples_per_s) {
    if (!enabled_ || total == 0) return;
    const int tenth = static_cast<int>(10 * done / total);
    if (!bar_ && (tenth == last_tenth_ || done == total)) return;
    last_tenth_ = tenth;
    const int width = 30, filled = static_cast<int>(width * done / total);
    std::string line = fmt::format("epoch {}/{} [{}{}] {:3d}%  step {}/{}  loss {:.4f}  {:.0f} samples/s", epoch,
                                   epochs, std::string(filled, '#'), std::string(width - filled, '.'),
                                   static_cast<int>(100 * done / total), done, total, loss, samples_per_s);
    if (bar_) {
      std::cout << "\r" << line << std::flush;
      if (done == total) std::cout << "\n";
    } else {
      std::cout << line << std::endl;
    }
  }
  void StartEpoch() { last_tenth_ = 0; }

 private:
  bool enabled_, bar_ = false;
  int last_tenth_ = 0;
};

// Rows of index,label,predicted,class,confidence for the whole split.
StatusOr<double> WritePredictions(Model& model, const Dataset& data, const std::string& path) {
  torch::NoGradGuard no_grad;
  model.module->eval();
  std::string csv = "index,label,predicted,class,confidence\n";
  int64_t correct = 0;
  for (int64_t b = 0; b < data.size(); b += 1000) {
    const int64_t n = std::min<int64_t>(1000, data.size() - b);
    auto probs = torch::softmax(model.forward(data.images.narrow(0, b, n)), 1);
    auto [conf, pred] = probs.max(1);
    auto p = pred.accessor<int64_t, 1>();
    auto c = conf.accessor<float, 1>();
    auto l = data.labels.narrow(0, b, n).contiguous();
    auto la = l.accessor<int64_t, 1>();
    for (int64_t i = 0; i < n; ++i) {
      correct += p[i] == la[i];
      csv += fmt::format("{},{},{},{},{:.6f}\n", b + i, la[i], p[i], kFashionMnistClasses[p[i]], c[i]);
    }
  }
  RM_RETURN_IF_ERROR(MakeDirs(fs::path(path).parent_path().string()));
  RM_RETURN_IF_ERROR(WriteFileAtomic(path, csv, 0644));
  return static_cast<double>(correct) / static_cast<double>(data.size());
}

StatusOr<comm::DataType> WireType(const std::string& name) {
  if (name == "float32") return comm::DataType::kFloat32;
  if (name == "bfloat16") return comm::DataType::kBFloat16;
  if (name == "float16") return comm::DataType::kFloat16;
  return InvalidArgument(fmt::format("wire: '{}' is not one of float32, bfloat16, float16", name));
}

// The model name a checkpoint directory's latest checkpoint was trained with.
StatusOr<std::string> CheckpointModel(const std::string& dir) {
  auto latest = LatestCheckpointPath(dir);
  if (!latest.ok()) return NotFound(fmt::format("checkpoint-dir: no checkpoint in {}", dir));
  RM_ASSIGN_OR_RETURN(std::string meta, ReadFile(*latest + "/meta.json"));
  json m = json::parse(meta, nullptr, false);
  if (!m.is_object()) return InvalidArgument(fmt::format("{}/meta.json is not JSON", *latest));
  return m["extra"].value("model", std::string("lenet5"));
}

void ResolveDefaults(TrainerOptions& o) {
  // Absolute paths: they are printed and reported for other programs to open.
  auto absolute = [](std::string& p) {
    if (!p.empty()) p = fs::absolute(p).lexically_normal().string();
  };
  if (o.data_dir.empty()) {
    o.data_dir = EnvOr("RINGMASTER_DATASETS_DIR", EnvOr("HOME", "/tmp") + "/.cache/ringmaster/datasets") +
                 "/fashion-mnist";
  }
  if (o.checkpoint_dir.empty()) o.checkpoint_dir = EnvOr("RINGMASTER_CHECKPOINT_DIR", "checkpoints");
  if (o.output_dir.empty()) o.output_dir = EnvOr("RINGMASTER_OUTPUT_DIR", "outputs");
  if (o.metrics_file.empty()) o.metrics_file = EnvOr("RINGMASTER_METRICS_FILE", "");
  absolute(o.data_dir);
  absolute(o.checkpoint_dir);
  absolute(o.output_dir);
  if (o.threads == 0) {
    // The node's cores shared among the gang's tasks on it (LOCAL_WORLD_SIZE
    // is 1: each task is its own node-local group, docs/jobspec.md).
    int local = std::max(1, std::atoi(EnvOr("RINGMASTER_LOCAL_TASKS", "1").c_str()));
    o.threads = std::max<int>(1, static_cast<int>(std::thread::hardware_concurrency()) / local);
  }
}

int Predict(TrainerOptions& o) {
  auto model_name = CheckpointModel(o.checkpoint_dir);
  if (!model_name.ok()) return Fail(model_name.status());
  if (!o.model.empty() && o.model != *model_name) {
    return Fail(InvalidArgument(fmt::format("model: the checkpoint in {} is a {}, not a {}", o.checkpoint_dir,
                                            *model_name, o.model)));
  }
  // A data-parallel checkpoint is one model; a pipeline's, one part per stage.
  auto info = LoadLatestCheckpointMeta(o.checkpoint_dir);
  if (!info.ok()) return Fail(info.status());
  const json extra = json::parse(info->extra_json, nullptr, false);
  std::optional<Model> model;
  if (extra.is_object() && extra.contains("stages")) {
    auto m = LoadPipelineModel(info->path, extra);
    if (!m.ok()) return Fail(m.status());
    model = std::move(*m);
  } else {
    model = MakeModel(*model_name, {extra.value("hidden", int64_t{128}), extra.value("layers", 1)});
    if (!model) return Fail(InvalidArgument(fmt::format("model: '{}' in the checkpoint is not one of {}", *model_name, kModelNames)));
    if (Status st = LoadModuleFile(info->path + "/model.pt", *model->module); !st.ok()) return Fail(st);
  }
  if (Status st = PrepareFashionMnist(o.source, o.data_dir); !st.ok()) return Fail(st);
  auto data = LoadFashionMnist(o.data_dir, o.split);
  if (!data.ok()) return Fail(data.status());
  const std::string path = fmt::format("{}/predictions-{}.csv", o.output_dir, o.split);
  auto acc = WritePredictions(*model, *data, path);
  if (!acc.ok()) return Fail(acc.status());
  std::cout << fmt::format("predicted {} {} samples with {} (step {}): accuracy {:.4f}\npredictions: {}\n",
                           data->size(), o.split, info->path, info->step, *acc, path);
  MetricsWriter(o.metrics_file).Write({{"predictions", path}, {"predict_accuracy", *acc}});
  return 0;
}

int Train(TrainerOptions& o) {
  auto wire = WireType(o.wire);
  if (!wire.ok()) return Fail(wire.status());
  const bool pipeline = o.parallel == "pipeline";
  if (pipeline && !o.predict_split.empty()) {
    return Fail(InvalidArgument("predict: not with --parallel pipeline; run `ringmaster-train predict` on its checkpoint"));
  }
  // A distributed job: join the gang's ringcomm group.
  std::optional<comm::Group> group;
  int rank = 0, world = 1;
  if (std::getenv("RINGMASTER_STORE") && std::atoi(EnvOr("WORLD_SIZE", "1").c_str()) > 1) {
    comm::Options copts;
    copts.timeout = std::chrono::seconds(120);  // covers the slowest rank's dataset load
    auto g = comm::JoinFromEnvironment(copts);
    if (!g.ok()) return Fail(g.status());
    group = std::move(*g);
    rank = group->context->rank();
    world = group->context->size();
  }
  comm::Context* ctx = group ? group->context.get() : nullptr;
  const bool lead = rank == 0;

  if (Status st = PrepareFashionMnist(o.source, o.data_dir); !st.ok()) return Fail(st);
  auto train = LoadFashionMnist(o.data_dir, "train");
  if (!train.ok()) return Fail(train.status());
  auto test = LoadFashionMnist(o.data_dir, "test");
  if (!test.ok()) return Fail(test.status());

  torch::manual_seed(o.seed);
  std::unique_ptr<Strategy> strategy;
  if (pipeline) {
    auto p = MakePipeline(o, group ? &*group : nullptr, *wire, &*train);
    if (!p.ok()) return Fail(p.status());
    strategy = std::move(*p);
  } else {
    auto model = MakeModel(o.model, {o.hidden, o.layers});
    if (!model) return Fail(InvalidArgument(fmt::format("model: '{}' is not one of {}", o.model, kModelNames)));
    strategy = MakeDataParallel(o, std::move(*model), ctx, *wire, &*train);
  }
  torch::optim::Optimizer& opt = strategy->optimizer();
  const int data_rank = strategy->data_rank(), data_world = strategy->data_world();

  // Resume from the latest checkpoint: every rank loads the same one.
  int64_t step = 0, epoch = 0, batch = 0;
  int saved_world = 0;  // the data-parallel width the checkpoint was written with
  if (fs::exists(o.checkpoint_dir + "/latest")) {
    auto saved = CheckpointModel(o.checkpoint_dir);
    if (!saved.ok()) return Fail(saved.status());
    if (*saved != o.model) {
      return Fail(InvalidArgument(fmt::format("model: {} holds a {} checkpoint, not a {}", o.checkpoint_dir,
                                              *saved, o.model)));
    }
    auto info = strategy->Load(o.checkpoint_dir);
    if (!info.ok()) return Fail(info.status());
    json extra = json::parse(info->extra_json, nullptr, false);
    step = info->step;
    epoch = extra.value("epoch", int64_t{0});
    batch = extra.value("batch", int64_t{0});
    saved_world = extra.value("world", data_world);
    // Every rank says what it loaded: its log alone shows where it resumed.
    std::cout << fmt::format("resuming from {} (step {}, epoch {}, batch {})", info->path, step, epoch + 1, batch) << std::endl;
  }
  if (ctx) {
    std::vector<double> steps = {static_cast<double>(step), -static_cast<double>(step)};
    // max and min over ranks must agree: every rank resumed from the same checkpoint.
    if (Status st = ctx->AllReduce(steps.data(), steps.data(), 2, comm::DataType::kFloat64, comm::ReduceOp::kMax); !st.ok()) return Fail(st);
    if (steps[0] != -steps[1]) return Fail(FailedPrecondition("ranks resumed from different checkpoints"));
  }
  if (Status st = strategy->Start(); !st.ok()) return Fail(st);

  DistributedSampler sampler(static_cast<size_t>(train->size()), data_rank, data_world, o.seed);
  const int64_t per_rank = static_cast<int64_t>(sampler.samples_per_rank());
  const int64_t steps_per_epoch = (per_rank + o.batch_size - 1) / o.batch_size;
  const int64_t total_steps = steps_per_epoch * o.epochs;
  if (saved_world > 0 && saved_world != data_world) {
    // An elastic job resized: keep the samples already seen this epoch, in this
    // world's batches, and the step (and so the learning rate) that matches.
    const int64_t seen = batch * o.batch_size * saved_world;
    batch = std::min(steps_per_epoch, (seen + o.batch_size * data_world - 1) / (o.batch_size * data_world));
    step = epoch * steps_per_epoch + batch;
    if (lead) {
      std::cout << fmt::format("the job now has {} workers (the checkpoint had {}): epoch {} continues at batch {}, step {}",
                               data_world, saved_world, epoch + 1, batch, step)
                << std::endl;
    }
  }
  // Every rank writes its own step times (each task has a metrics file of its
  // own): the server finds stragglers by them. Rank 0 also writes the run's
  // records (loss, accuracy, throughput).
  MetricsWriter metrics(o.metrics_file);
  double compute_s = 0, wait_s = 0;
  int timed_steps = 0;
  Progress progress(o.progress, lead);
  if (lead) {
    std::cout << fmt::format("training {} on fashion-mnist: {}, batch {} per {}, {} steps per epoch, "
                             "{} threads each",
                             o.model, strategy->Describe(), o.batch_size, pipeline ? "pipeline" : "worker",
                             steps_per_epoch, o.threads)
              << std::endl;
  }
  auto save = [&](int64_t at_epoch, int64_t at_batch) -> Status {
    json extra = {{"model", o.model}, {"epoch", at_epoch}, {"batch", at_batch}, {"world", data_world}};
    if (o.model == "mlp") extra["hidden"] = o.hidden, extra["layers"] = o.layers;
    return strategy->Save(o.checkpoint_dir, step, extra);
  };
  Evaluation eval;
  double samples_per_s = 0;
  bool stopped_early = false;
  bool terminated = false;  // by SIGTERM, not --max-steps
  for (; epoch < o.epochs && !stopped_early; ++epoch, batch = 0) {
    sampler.SetEpoch(epoch);
    auto indices = sampler.Indices();
    auto all = torch::from_blob(indices.data(), {static_cast<int64_t>(indices.size())}, torch::kInt64).clone();
    std::vector<double> loss_sum = {0, 0};  // sum of per-sample loss, samples
    const auto start = std::chrono::steady_clock::now();
    int64_t samples = 0;
    progress.StartEpoch();
    for (; batch < steps_per_epoch; ++batch) {
      auto idx = all.slice(0, batch * o.batch_size, std::min<int64_t>((batch + 1) * o.batch_size, per_rank));
      // The step's learning rate is a function of the step alone, so a resumed run follows the same curve.
      const double lr = o.schedule == "cosine"
                            ? 0.5 * o.lr * (1 + std::cos(M_PI * static_cast<double>(step) / static_cast<double>(total_steps)))
                            : o.lr;
      for (auto& group : opt.param_groups()) static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
      auto stats = strategy->Step(idx);
      if (!stats.ok()) return Fail(stats.status());
      compute_s += stats->compute_s;
      wait_s += stats->wait_s;
      ++step;
      if (++timed_steps == 10) {
        metrics.Write({{"kind", "timing"}, {"rank", rank}, {"step", step}, {"step_time_s", compute_s / timed_steps},
                       {"allreduce_wait_s", wait_s / timed_steps}});
        compute_s = wait_s = 0;
        timed_steps = 0;
      }
      // One all-reduce per step: a stop request on any rank (it stops every
      // rank at the same step, with a checkpoint), and the step's loss, which
      // in a pipeline only the last stages compute.
      std::vector<double> shared = {g_stop_requested ? 1.0 : 0.0, stats->loss_sum, stats->samples};
      if (ctx) {
        if (Status st = ctx->AllReduce(shared.data(), shared.data(), 3, comm::DataType::kFloat64, comm::ReduceOp::kSum); !st.ok()) {
          return Fail(st);
        }
      }
      const double stop = shared[0];
      samples += idx.size(0) * data_world;
      loss_sum[0] += shared[1];
      loss_sum[1] += shared[2];
      samples_per_s = static_cast<double>(samples) / Seconds(std::chrono::steady_clock::now() - start).count();
      progress.Update(static_cast<int>(epoch + 1), o.epochs, batch + 1, steps_per_epoch, loss_sum[0] / loss_sum[1],
                      samples_per_s);
      if (lead && step % 50 == 0) {
        metrics.Write({{"kind", "step"}, {"step", step}, {"epoch", epoch + 1}, {"loss", shared[1] / shared[2]},
                       {"samples_per_s", samples_per_s}});
      }
      const bool last_of_epoch = batch + 1 == steps_per_epoch;
      if (o.max_steps > 0 && step >= o.max_steps && !last_of_epoch) {
        if (Status st = save(epoch, batch + 1); !st.ok()) return Fail(st);
        stopped_early = true;
        break;
      }
      if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && !last_of_epoch) {
        if (Status st = save(epoch, batch + 1); !st.ok()) return Fail(st);
      }
      if (stop > 0 && !last_of_epoch) {
        if (Status st = save(epoch, batch + 1); !st.ok()) return Fail(st);
        stopped_early = terminated = true;
        break;
      }
    }
    if (stopped_early) break;
    const double train_s = Seconds(std::chrono::steady_clock::now() - start).count();
    auto ev = strategy->Evaluate(*test);
    if (!ev.ok()) return Fail(ev.status());
    eval = *ev;
    if (Status st = save(epoch + 1, 0); !st.ok()) return Fail(st);
    samples_per_s = static_cast<double>(samples) / train_s;
    const double train_loss = loss_sum[1] > 0 ? loss_sum[0] / loss_sum[1] : 0;
    if (lead) {
      std::cout << fmt::format("epoch {}/{}  train loss {:.4f}  test loss {:.4f}  test accuracy {:.4f}  {:.0f} samples/s  "
                               "(step {}, {:.1f} s)",
                               epoch + 1, o.epochs, train_loss, eval.loss, eval.accuracy, samples_per_s, step, train_s)
                << std::endl;
      metrics.Write({{"kind", "epoch"}, {"step", step}, {"epoch", epoch + 1}, {"loss", train_loss},
                     {"test_loss", eval.loss}, {"accuracy", eval.accuracy}, {"samples_per_s", samples_per_s}});
    }
  }
  if (!stopped_early && eval.accuracy == 0) {  // resumed after the last epoch: nothing trained, evaluate anyway
    auto ev = strategy->Evaluate(*test);
    if (!ev.ok()) return Fail(ev.status());
    eval = *ev;
  }
  if (stopped_early) {
    if (lead) {
      std::cout << fmt::format("stopped at step {} ({}); checkpoint in {}", step,
                               terminated ? "SIGTERM: the job is being stopped or resized" : "--max-steps",
                               o.checkpoint_dir)
                << std::endl;
    }
    // Leave together: rank 0 serves the store the others still use.
    if (ctx) (void)ctx->Barrier();
    return terminated ? 128 + SIGTERM : 0;
  }
  if (lead) {
    auto latest = LatestCheckpointPath(o.checkpoint_dir);
    const std::string ckpt = latest.ok() ? *latest : o.checkpoint_dir;
    json final_record = {{"kind", "final"}, {"step", step}, {"accuracy", eval.accuracy}, {"checkpoint", ckpt}};
    std::cout << fmt::format("final test accuracy {:.4f}\ncheckpoint: {}", eval.accuracy, ckpt) << std::endl;
    if (!o.predict_split.empty()) {
      auto data = o.predict_split == "test" ? std::move(*test) : std::move(*train);
      const std::string path = fmt::format("{}/predictions-{}.csv", o.output_dir, o.predict_split);
      auto acc = WritePredictions(*strategy->model(), data, path);
      if (!acc.ok()) return Fail(acc.status());
      std::cout << "predictions: " << path << std::endl;
      final_record["predictions"] = path;
    }
    metrics.Write(final_record);
  }
  // Leave together: rank 0 serves the store the others still use.
  if (ctx) {
    if (Status st = ctx->Barrier(); !st.ok()) return Fail(st);
  }
  return 0;
}

}  // namespace

int RunTrainer(TrainerOptions options) {
  ResolveDefaults(options);
  struct sigaction sa {};
  sa.sa_handler = OnSigterm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  torch::set_num_threads(options.threads);
  try {
    return options.mode == "predict" ? Predict(options) : Train(options);
  } catch (const std::exception& e) {
    return Fail(Internal(e.what()));
  }
}

}  // namespace ringmaster::train
