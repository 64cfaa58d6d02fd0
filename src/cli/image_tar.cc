#include "cli/image_tar.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/crypto.h"

namespace ringmaster::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMaxJsonBytes = 4 << 20;

// Runs argv; its stdout in *out (when given). Ok when it exits 0.
Status Run(const std::vector<std::string>& argv, std::string* out) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Internal(fmt::format("pipe: {}", std::strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) return Internal(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    dup2(fds[1], 1);
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[64 << 10];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0 && out) out->append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return InvalidArgument(fmt::format("{} failed", argv[0]));
  return Status::Ok();
}

StatusOr<std::string> ReadSmall(const fs::path& p) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (ec) return InvalidArgument(fmt::format("{}: {}", p.filename().string(), ec.message()));
  if (size > kMaxJsonBytes) return InvalidArgument(fmt::format("{}: larger than {} bytes", p.filename().string(), kMaxJsonBytes));
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

StatusOr<json> ReadJson(const fs::path& p) {
  RM_ASSIGN_OR_RETURN(std::string text, ReadSmall(p));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return InvalidArgument(fmt::format("{}: not JSON", p.filename().string()));
  return j;
}

StatusOr<std::string> HashOf(const fs::path& p) {
  const int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return InvalidArgument(fmt::format("{}: {}", p.string(), std::strerror(errno)));
  Sha256 h;
  std::string buf(1 << 20, '\0');
  ssize_t n;
  while ((n = read(fd, buf.data(), buf.size())) > 0) h.Update(std::string_view(buf.data(), static_cast<size_t>(n)));
  close(fd);
  if (n < 0) return InvalidArgument(fmt::format("{}: {}", p.string(), std::strerror(errno)));
  return h.FinishHex();
}

// `rel` inside `dir`, a regular file that stays inside once links are followed.
StatusOr<fs::path> Inside(const fs::path& dir, const std::string& rel) {
  if (rel.empty() || rel[0] == '/' || fs::path(rel).lexically_normal().string().rfind("..", 0) == 0) {
    return InvalidArgument(fmt::format("\"{}\": a path outside the image", rel));
  }
  std::error_code ec;
  const fs::path p = fs::canonical(dir / rel, ec);
  if (ec) return InvalidArgument(fmt::format("\"{}\": not in the tar", rel));
  const std::string root = fs::canonical(dir).string() + "/";
  if (p.string().rfind(root, 0) != 0) return InvalidArgument(fmt::format("\"{}\": a link outside the image", rel));
  if (!fs::is_regular_file(p)) return InvalidArgument(fmt::format("\"{}\": not a file", rel));
  return p;
}

// A blob at `rel` whose sha256 must be `hex` (when given).
StatusOr<ImageTar::Blob> BlobAt(const fs::path& dir, const std::string& rel, const std::string& hex) {
  RM_ASSIGN_OR_RETURN(fs::path p, Inside(dir, rel));
  RM_ASSIGN_OR_RETURN(std::string got, HashOf(p));
  if (!hex.empty() && got != hex) {
    return InvalidArgument(fmt::format("{}: its sha256 is {}, not the {} it is named by", rel, got, hex));
  }
  return ImageTar::Blob{p.string(), got, static_cast<uint64_t>(fs::file_size(p))};
}

std::string LayerMediaType(const std::string& path) {
  unsigned char magic[4] = {0};
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(magic), 4);
  if (in.gcount() >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) return "application/vnd.oci.image.layer.v1.tar+gzip";
  if (in.gcount() == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd) {
    return "application/vnd.oci.image.layer.v1.tar+zstd";
  }
  return "application/vnd.oci.image.layer.v1.tar";
}

StatusOr<std::string> DigestHex(const json& descriptor, const std::string& what) {
  const std::string d = descriptor.is_object() && descriptor.contains("digest") && descriptor["digest"].is_string()
                            ? descriptor["digest"].get<std::string>()
                            : "";
  if (d.rfind("sha256:", 0) != 0 || !IsSha256Hex(d.substr(7))) {
    return InvalidArgument(fmt::format("{}: no sha256 digest", what));
  }
  return d.substr(7);
}

StatusOr<ImageTar> ReadOciLayout(const fs::path& dir) {
  ImageTar out;
  RM_ASSIGN_OR_RETURN(json index, ReadJson(dir / "index.json"));
  if (!index.is_object() || !index.contains("manifests") || !index["manifests"].is_array() || index["manifests"].empty()) {
    return InvalidArgument("index.json: no manifests");
  }
  if (index["manifests"].size() > 1) return InvalidArgument("index.json: more than one image; save one");
  const json& entry = index["manifests"][0];
  RM_ASSIGN_OR_RETURN(std::string hex, DigestHex(entry, "index.json's manifest"));
  RM_ASSIGN_OR_RETURN(ImageTar::Blob m, BlobAt(dir, "blobs/sha256/" + hex, hex));
  RM_ASSIGN_OR_RETURN(out.manifest, ReadSmall(m.path));
  out.manifest_hex = hex;
  const json manifest = json::parse(out.manifest, nullptr, false);
  if (!manifest.is_object()) return InvalidArgument("the manifest is not a JSON object");
  if (manifest.contains("manifests")) return InvalidArgument("the manifest is an image index: save one platform's image");
  if (!manifest.contains("layers") || !manifest["layers"].is_array()) return InvalidArgument("the manifest has no layers");
  RM_ASSIGN_OR_RETURN(std::string config_hex, DigestHex(manifest.value("config", json()), "the manifest's config"));
  RM_ASSIGN_OR_RETURN(ImageTar::Blob config, BlobAt(dir, "blobs/sha256/" + config_hex, config_hex));
  out.blobs.push_back(config);
  for (const json& layer : manifest["layers"]) {
    RM_ASSIGN_OR_RETURN(std::string lhex, DigestHex(layer, "a layer"));
    RM_ASSIGN_OR_RETURN(ImageTar::Blob b, BlobAt(dir, "blobs/sha256/" + lhex, lhex));
    out.blobs.push_back(b);
  }
  const json annotations = entry.value("annotations", json::object());
  const std::string ref = annotations.is_object() ? annotations.value("org.opencontainers.image.ref.name", "") : "";
  if (ref.find(':') != std::string::npos || ref.find('/') != std::string::npos) {
    std::tie(out.name, out.tag) = NameAndTag(ref);
  } else {
    out.tag = ref;  // skopeo's oci-archive:FILE:TAG names only the tag
  }
  return out;
}

StatusOr<ImageTar> ReadDockerSave(const fs::path& dir) {
  ImageTar out;
  RM_ASSIGN_OR_RETURN(json list, ReadJson(dir / "manifest.json"));
  if (!list.is_array() || list.empty() || !list[0].is_object()) return InvalidArgument("manifest.json: no image");
  if (list.size() > 1) return InvalidArgument("manifest.json: more than one image; save one");
  const json& m = list[0];
  if (!m.contains("Config") || !m["Config"].is_string()) return InvalidArgument("manifest.json: no Config");
  if (!m.contains("Layers") || !m["Layers"].is_array()) return InvalidArgument("manifest.json: no Layers");
  // The config's name is its digest in both docker's and skopeo's tars ("<hex>.json").
  const std::string config_name = m["Config"].get<std::string>();
  std::string config_hex = fs::path(config_name).stem().string();
  if (config_hex.rfind("sha256:", 0) == 0) config_hex = config_hex.substr(7);
  if (!IsSha256Hex(config_hex)) config_hex.clear();
  RM_ASSIGN_OR_RETURN(ImageTar::Blob config, BlobAt(dir, config_name, config_hex));
  std::vector<ImageTar::Blob> layers;
  std::vector<std::string> types;
  for (const json& l : m["Layers"]) {
    if (!l.is_string()) return InvalidArgument("manifest.json: a layer that is not a path");
    const std::string rel = l.get<std::string>();
    // "<hex>.tar" names the layer's digest; docker's older "<id>/layer.tar" does not.
    std::string hex = fs::path(rel).stem().string();
    if (!IsSha256Hex(hex)) hex.clear();
    RM_ASSIGN_OR_RETURN(ImageTar::Blob b, BlobAt(dir, rel, hex));
    types.push_back(LayerMediaType(b.path));
    layers.push_back(b);
  }
  out.manifest = DockerSaveManifest(config, layers, types);
  out.manifest_hex = Sha256Hex(out.manifest);
  out.blobs.push_back(config);
  for (auto& l : layers) out.blobs.push_back(std::move(l));
  if (m.contains("RepoTags") && m["RepoTags"].is_array() && !m["RepoTags"].empty() && m["RepoTags"][0].is_string()) {
    std::tie(out.name, out.tag) = NameAndTag(m["RepoTags"][0].get<std::string>());
  }
  return out;
}

}  // namespace

std::pair<std::string, std::string> NameAndTag(const std::string& repo_tag) {
  std::string ref = repo_tag.substr(0, repo_tag.find('@'));
  std::string tag = "latest";
  const size_t colon = ref.rfind(':');
  if (colon != std::string::npos && ref.find('/', colon) == std::string::npos) {
    tag = ref.substr(colon + 1);
    ref = ref.substr(0, colon);
  }
  const size_t slash = ref.rfind('/');
  return {slash == std::string::npos ? ref : ref.substr(slash + 1), tag};
}

std::string DockerSaveManifest(const ImageTar::Blob& config, const std::vector<ImageTar::Blob>& layers,
                               const std::vector<std::string>& layer_media_types) {
  json m = {{"schemaVersion", 2},
            {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
            {"config",
             {{"mediaType", "application/vnd.oci.image.config.v1+json"},
              {"digest", "sha256:" + config.hex},
              {"size", config.size}}},
            {"layers", json::array()}};
  for (size_t i = 0; i < layers.size(); ++i) {
    m["layers"].push_back({{"mediaType", layer_media_types.at(i)}, {"digest", "sha256:" + layers[i].hex}, {"size", layers[i].size}});
  }
  return m.dump();
}

StatusOr<ImageTar> ReadImageTar(const std::string& tar_path, const std::string& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(tar_path, ec)) return InvalidArgument(fmt::format("{}: not a file", tar_path));
  std::string listing;
  if (!Run({"tar", "-tf", tar_path}, &listing).ok()) return InvalidArgument(fmt::format("{}: not a tar", tar_path));
  std::istringstream lines(listing);
  for (std::string line; std::getline(lines, line);) {
    const fs::path p(line);
    for (const auto& part : p) {
      if (part == "..") return InvalidArgument(fmt::format("{}: the entry \"{}\" has \"..\"", tar_path, line));
    }
    if (!line.empty() && line[0] == '/') return InvalidArgument(fmt::format("{}: the entry \"{}\" is absolute", tar_path, line));
  }
  if (!Run({"tar", "-xf", tar_path, "-C", dir, "--no-same-owner", "--no-same-permissions"}, nullptr).ok()) {
    return InvalidArgument(fmt::format("{}: tar could not unpack it", tar_path));
  }
  StatusOr<ImageTar> out = InvalidArgument("");
  if (fs::exists(fs::path(dir) / "index.json") && fs::exists(fs::path(dir) / "oci-layout")) {
    out = ReadOciLayout(dir);
  } else if (fs::exists(fs::path(dir) / "manifest.json")) {
    out = ReadDockerSave(dir);
  } else {
    return InvalidArgument(fmt::format("{}: no manifest.json (docker save) or index.json and oci-layout (OCI layout)", tar_path));
  }
  if (!out.ok()) return InvalidArgument(fmt::format("{}: {}", tar_path, out.status().message()));
  return out;
}

}  // namespace ringmaster::cli
