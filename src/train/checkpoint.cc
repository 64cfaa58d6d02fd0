#include "train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/files.h"

namespace ringmaster::train {
namespace fs = std::filesystem;

Status SaveCheckpoint(const std::string& dir, int64_t step, torch::nn::Module& model,
                      torch::optim::Optimizer& optimizer, const std::string& extra_json) {
  RM_RETURN_IF_ERROR(MakeDirs(dir, 0755));
  const std::string name = fmt::format("ckpt-{}", step);
  const fs::path tmp = fs::path(dir) / fmt::format(".tmp-{}-{}", name, getpid());
  const fs::path final_path = fs::path(dir) / name;
  std::error_code ec;
  fs::remove_all(tmp, ec);
  RM_RETURN_IF_ERROR(MakeDirs(tmp.string(), 0755));
  try {
    torch::serialize::OutputArchive m;
    model.save(m);
    m.save_to((tmp / "model.pt").string());
    torch::serialize::OutputArchive o;
    optimizer.save(o);
    o.save_to((tmp / "optimizer.pt").string());
    torch::Tensor rng;
    {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng = gen.get_state();
    }
    torch::save(rng, (tmp / "rng.pt").string());
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    return Internal(fmt::format("checkpoint {}: {}", name, e.what()));
  }
  nlohmann::json meta = {{"step", step}, {"extra", nlohmann::json::parse(extra_json, nullptr, false)}};
  RM_RETURN_IF_ERROR(WriteFileAtomic((tmp / "meta.json").string(), meta.dump(), 0644));
  fs::remove_all(final_path, ec);
  fs::rename(tmp, final_path, ec);
  if (ec) return Internal(fmt::format("checkpoint {}: rename: {}", name, ec.message()));
  return WriteFileAtomic((fs::path(dir) / "latest").string(), name + "\n", 0644);
}

StatusOr<std::string> LatestCheckpointPath(const std::string& dir) {
  auto latest = ReadFile((fs::path(dir) / "latest").string());
  if (!latest.ok()) return NotFound("no checkpoint in " + dir);
  std::string name = *latest;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return (fs::path(dir) / name).string();
}

StatusOr<CheckpointInfo> LoadLatestCheckpoint(const std::string& dir, torch::nn::Module& model,
                                              torch::optim::Optimizer& optimizer) {
  RM_ASSIGN_OR_RETURN(std::string latest, LatestCheckpointPath(dir));
  const fs::path path = latest;
  CheckpointInfo info;
  info.path = path.string();
  try {
    auto meta = nlohmann::json::parse(ReadFile((path / "meta.json").string()).value());
    info.step = meta.at("step");
    info.extra_json = meta.value("extra", nlohmann::json::object()).dump();
    torch::serialize::InputArchive m;
    m.load_from((path / "model.pt").string());
    model.load(m);
    torch::serialize::InputArchive o;
    o.load_from((path / "optimizer.pt").string());
    optimizer.load(o);
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

}  // namespace ringmaster::train
