#include "train/fashion_mnist.h"

#include <zlib.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "common/files.h"

namespace ringmaster::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFiles[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                  "t10k-labels-idx1-ubyte"};
// Per-pixel statistics of the training set, after scaling to [0, 1].
constexpr double kMean = 0.2860, kStd = 0.3530;

StatusOr<std::string> Gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return NotFound(fmt::format("{}: cannot open (install dataset-fashion-mnist)", path));
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = n < 0 ? gzerror(f, &err) : nullptr;
  std::string error = msg ? msg : "";
  gzclose(f);
  if (n < 0) return InvalidArgument(fmt::format("{}: not a valid gzip file: {}", path, error));
  return out;
}

uint32_t BigEndian32(const std::string& s, size_t at) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])); };
  return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}

// An IDX file of unsigned bytes: magic 0x0000080D (D = dimensions), then D sizes.
StatusOr<std::pair<std::vector<int64_t>, std::string>> ReadIdx(const std::string& path, uint32_t dims) {
  RM_ASSIGN_OR_RETURN(std::string data, ReadFile(path));
  if (data.size() < 4 + 4 * dims || BigEndian32(data, 0) != (0x800u | dims)) {
    return InvalidArgument(fmt::format("{}: not an IDX file of {}-dimensional unsigned bytes", path, dims));
  }
  std::vector<int64_t> shape;
  size_t total = 1;
  for (uint32_t d = 0; d < dims; ++d) {
    shape.push_back(BigEndian32(data, 4 + 4 * d));
    total *= static_cast<size_t>(shape.back());
  }
  const size_t header = 4 + 4 * dims;
  if (data.size() != header + total) {
    return InvalidArgument(fmt::format("{}: header says {} bytes of data, file has {}", path, total,
                                       data.size() - header));
  }
  return std::make_pair(shape, data.substr(header));
}

}  // namespace

Status PrepareFashionMnist(const std::string& source, const std::string& data_dir) {
  RM_RETURN_IF_ERROR(MakeDirs(data_dir));
  for (const char* name : kFiles) {
    const std::string out = fmt::format("{}/{}", data_dir, name);
    if (fs::exists(out)) continue;
    RM_ASSIGN_OR_RETURN(std::string raw, Gunzip(fmt::format("{}/{}.gz", source, name)));
    RM_RETURN_IF_ERROR(WriteFileAtomic(out, raw, 0644));
  }
  return Status::Ok();
}

StatusOr<Dataset> LoadFashionMnist(const std::string& data_dir, const std::string& split) {
  if (split != "train" && split != "test") {
    return InvalidArgument(fmt::format("split: '{}' is not one of train, test", split));
  }
  const std::string prefix = fmt::format("{}/{}", data_dir, split == "train" ? "train" : "t10k");
  RM_ASSIGN_OR_RETURN(auto images, ReadIdx(prefix + "-images-idx3-ubyte", 3));
  RM_ASSIGN_OR_RETURN(auto labels, ReadIdx(prefix + "-labels-idx1-ubyte", 1));
  const auto& [ishape, ibytes] = images;
  const auto& [lshape, lbytes] = labels;
  if (ishape[0] != lshape[0]) {
    return InvalidArgument(fmt::format("{}: {} images but {} labels", prefix, ishape[0], lshape[0]));
  }
  auto u8 = torch::from_blob(const_cast<char*>(ibytes.data()), {ishape[0], 1, ishape[1], ishape[2]}, torch::kUInt8);
  Dataset d;
  d.images = (u8.to(torch::kFloat32).div_(255.0).sub_(kMean).div_(kStd)).contiguous();
  d.labels = torch::from_blob(const_cast<char*>(lbytes.data()), {lshape[0]}, torch::kUInt8).to(torch::kInt64);
  if (d.labels.numel() > 0 && d.labels.max().item<int64_t>() > 9) {
    return InvalidArgument(fmt::format("{}-labels-idx1-ubyte: label {} is not a class 0-9", prefix,
                                       d.labels.max().item<int64_t>()));
  }
  return d;
}

}  // namespace ringmaster::train
