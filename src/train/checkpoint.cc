#include "train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <mutex>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/files.h"

namespace ringmaster::train {
namespace fs = std::filesystem;

namespace {
template <typename T>
std::string Serialize(T& what) {
  torch::serialize::OutputArchive a;
  what.save(a);
  std::ostringstream out;
  a.save_to(out);
  return out.str();
}
}  // namespace

std::string SerializeModule(torch::nn::Module& module) { return Serialize(module); }
std::string SerializeOptimizer(torch::optim::Optimizer& optimizer) { return Serialize(optimizer); }

namespace {
// Reads a .pt file into an archive and hands it to `load`.
template <typename Fn>
Status LoadArchive(const std::string& path, Fn load) {
  try {
    torch::serialize::InputArchive a;
    a.load_from(path);
    load(a);
  } catch (const std::exception& e) {
    return Internal(fmt::format("loading {}: {}", path, e.what()));
  }
  return Status::Ok();
}
}  // namespace

Status LoadModuleFile(const std::string& path, torch::nn::Module& module) {
  return LoadArchive(path, [&](torch::serialize::InputArchive& a) { module.load(a); });
}

Status LoadOptimizerFile(const std::string& path, torch::optim::Optimizer& optimizer) {
  return LoadArchive(path, [&](torch::serialize::InputArchive& a) { optimizer.load(a); });
}

StatusOr<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Begin(const std::string& dir, int64_t step) {
  RM_RETURN_IF_ERROR(MakeDirs(dir, 0755));
  const std::string name = fmt::format("ckpt-{}", step);
  const fs::path tmp = fs::path(dir) / fmt::format(".tmp-{}-{}", name, getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  RM_RETURN_IF_ERROR(MakeDirs(tmp.string(), 0755));
  return std::unique_ptr<CheckpointWriter>(new CheckpointWriter(dir, step, name, tmp.string()));
}

CheckpointWriter::~CheckpointWriter() {
  std::error_code ec;
  if (!committed_) fs::remove_all(tmp_, ec);
}

Status CheckpointWriter::Add(const std::string& path, const std::string& bytes) {
  const fs::path p = fs::path(tmp_) / path;
  Status st = MakeDirs(p.parent_path().string(), 0755);
  if (st.ok()) st = WriteFileAtomic(p.string(), bytes, 0644);
  return st.ok() ? st : Internal(fmt::format("checkpoint {}: {}", name_, st.message()));
}

Status CheckpointWriter::Commit(const std::string& extra_json) {
  const fs::path tmp = tmp_;
  try {
    torch::Tensor rng;
    {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng = gen.get_state();
    }
    torch::save(rng, (tmp / "rng.pt").string());
  } catch (const std::exception& e) {
    return Internal(fmt::format("checkpoint {}: {}", name_, e.what()));
  }
  nlohmann::json meta = {{"step", step_}, {"extra", nlohmann::json::parse(extra_json, nullptr, false)}};
  RM_RETURN_IF_ERROR(WriteFileAtomic((tmp / "meta.json").string(), meta.dump(), 0644));
  const fs::path final_path = fs::path(dir_) / name_;
  std::error_code ec;
  fs::remove_all(final_path, ec);
  fs::rename(tmp, final_path, ec);
  if (ec) return Internal(fmt::format("checkpoint {}: rename: {}", name_, ec.message()));
  committed_ = true;
  return WriteFileAtomic((fs::path(dir_) / "latest").string(), name_ + "\n", 0644);
}

Status SaveCheckpoint(const std::string& dir, int64_t step, torch::nn::Module& model,
                      torch::optim::Optimizer& optimizer, const std::string& extra_json) {
  RM_ASSIGN_OR_RETURN(auto writer, CheckpointWriter::Begin(dir, step));
  try {
    RM_RETURN_IF_ERROR(writer->Add("model.pt", SerializeModule(model)));
    RM_RETURN_IF_ERROR(writer->Add("optimizer.pt", SerializeOptimizer(optimizer)));
  } catch (const std::exception& e) {
    return Internal(fmt::format("checkpoint ckpt-{}: {}", step, e.what()));
  }
  return writer->Commit(extra_json);
}

StatusOr<std::string> LatestCheckpointPath(const std::string& dir) {
  auto latest = ReadFile((fs::path(dir) / "latest").string());
  if (!latest.ok()) return NotFound("no checkpoint in " + dir);
  std::string name = *latest;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return (fs::path(dir) / name).string();
}

StatusOr<CheckpointInfo> LoadLatestCheckpointMeta(const std::string& dir) {
  RM_ASSIGN_OR_RETURN(std::string latest, LatestCheckpointPath(dir));
  const fs::path path = latest;
  CheckpointInfo info;
  info.path = path.string();
  try {
    auto meta = nlohmann::json::parse(ReadFile((path / "meta.json").string()).value());
    info.step = meta.at("step");
    info.extra_json = meta.value("extra", nlohmann::json::object()).dump();
    torch::Tensor rng;
    torch::load(rng, (path / "rng.pt").string());
    at::Generator gen = at::detail::getDefaultCPUGenerator();  // a handle to the process's generator
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
  } catch (const std::exception& e) {
    return Internal(fmt::format("loading {}: {}", info.path, e.what()));
  }
  return info;
}

StatusOr<CheckpointInfo> LoadLatestCheckpoint(const std::string& dir, torch::nn::Module& model,
                                              torch::optim::Optimizer& optimizer) {
  RM_ASSIGN_OR_RETURN(CheckpointInfo info, LoadLatestCheckpointMeta(dir));
  RM_RETURN_IF_ERROR(LoadModuleFile(info.path + "/model.pt", model));
  RM_RETURN_IF_ERROR(LoadOptimizerFile(info.path + "/optimizer.pt", optimizer));
  return info;
}

}  // namespace ringmaster::train
