// `ringmaster images build|push|ls`: the site's images without a registry
// (docs/containers.md), and users' own: `push --from FILE.tar` stores a saved
// image's blobs, manifest and tag under users/<u>/images/, which the server
// serves as its registry (server/api_registry_v2.cc). `build` runs scripts/images/build.sh, which makes a
// rootfs from Debian packages with mmdebstrap and writes NAME.tar and its
// manifest NAME.json; `push` stores both in the files service as
// images/NAME/<sha256>.{tar,json} and then points images/NAME/latest at the
// digest, so a job's `image: NAME` resolves to it from then on (and a job
// already submitted keeps the digest it was pinned to).
#include "cli/images.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "cli/files.h"
#include "cli/image_tar.h"
#include "common/files.h"
#include "common/strings.h"
#include "protocol/image_ref.h"

namespace ringmaster::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// scripts/images/build.sh beside this binary: in a build tree
// <repo>/build/src/cli/ringmaster -> <repo>/scripts; installed, <prefix>/lib/ringmaster/scripts.
std::string BuildScript() {
  if (const char* env = getenv("RINGMASTER_SCRIPTS")) return std::string(env) + "/images/build.sh";
  const fs::path exe = fs::read_symlink("/proc/self/exe");
  for (const fs::path& p : {exe.parent_path() / "../../../scripts/images/build.sh",
                            exe.parent_path() / "../lib/ringmaster/scripts/images/build.sh"}) {
    std::error_code ec;
    if (fs::exists(p, ec)) return fs::weakly_canonical(p).string();
  }
  Die("images build: scripts/images/build.sh not found beside this ringmaster (set RINGMASTER_SCRIPTS)");
}

}  // namespace

int ImagesBuild(const std::string& name, const std::string& out_dir) {
  if (name != "base" && name != "torch" && name != "tfjs" && name != "tensorflow" && name != "mxnet") {
    Die("images build: \"" + name + "\" is not one of base, torch, tfjs, tensorflow, mxnet");
  }
  const std::string script = BuildScript();
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  std::cerr << fmt::format("images: building {} into {} (mmdebstrap from this host's apt sources)\n", name, out_dir);
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/bash", "bash", script.c_str(), name.c_str(), out_dir.c_str(), nullptr);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << fmt::format("images build: {} failed (exit {})\n", name, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 1;
  }
  std::cout << fmt::format("{}  {}/{}.tar\n", name, out_dir, name);
  return 0;
}

int ImagesPush(const Connection& c, const std::string& name, const std::string& from_dir) {
  if (auto ref = protocol::ParseJobImageRef(name); !ref.ok() || !ref->digest.empty()) {
    Die(fmt::format("images push: \"{}\" is not an image name ({})", name,
                    ref.ok() ? "it is pinned; push a name" : ref.status().message()));
  }
  const std::string tar = from_dir + "/" + name + ".tar", manifest = from_dir + "/" + name + ".json";
  struct stat st {};
  if (stat(tar.c_str(), &st) != 0) Die(fmt::format("images push: {}: {} (build it: ringmaster images build {})", tar, std::strerror(errno), name));
  if (stat(manifest.c_str(), &st) != 0) Die(fmt::format("images push: {}: {}", manifest, std::strerror(errno)));
  std::cerr << fmt::format("images: hashing {}\n", tar);
  const std::string hex = HashFile(tar);
  const std::string prefix = fmt::format("images/{}/{}", name, hex);
  if (int rc = FilesPut(c, tar, prefix + ".tar"); rc != 0) return rc;
  if (int rc = FilesPut(c, manifest, prefix + ".json"); rc != 0) return rc;
  // `latest` last: a job never resolves to an image whose files are not all there.
  const std::string latest = fmt::format("{}/.{}.latest", from_dir, name);
  if (Status s = WriteFileAtomic(latest, hex + "\n", 0644); !s.ok()) Die(s.message());
  int rc = FilesPut(c, latest, fmt::format("images/{}/latest", name));
  unlink(latest.c_str());
  if (rc == 0) std::cout << fmt::format("{}@sha256:{}\n", name, hex);
  return rc;
}

namespace {

std::vector<json> ListFiles(client::ApiClient& api, const std::string& prefix) {
  std::vector<json> files;
  for (std::string after;;) {
    json page = Must(api.Get("/api/v1/files?prefix=" + PercentEncode(prefix, true) + "&limit=1000" +
                             (after.empty() ? "" : "&after=" + PercentEncode(after, true))));
    for (auto& f : page.value("files", json::array())) files.push_back(f);
    if (!page.contains("next_after")) break;
    after = page["next_after"].get<std::string>();
  }
  return files;
}

// A small file of the files service (a tag, a manifest).
std::string ReadRemote(client::ApiClient& api, const std::string& key) {
  std::string out;
  (void)api.Stream("/api/v1/files/" + PercentEncode(key, true), [&out](const char* p, size_t n) {
    out.append(p, n);
    return out.size() < (4 << 20);
  });
  return out;
}

// The temporary directories alive now. Die() ends the process with
// std::exit, which skips the destructors of locals: what a refused push had
// unpacked (a whole image) would stay in /tmp. This static's destructor runs
// at exit and removes whatever is still listed.
struct LiveTempDirs {
  std::set<std::string> paths;
  ~LiveTempDirs() {
    for (const std::string& p : paths) {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  }
};
LiveTempDirs& Live() {
  static LiveTempDirs live;
  return live;
}

// A temporary directory, removed with what it holds (at exit too).
struct TempDir {
  std::string path;
  TempDir() {
    Live();  // constructed first, so destroyed after any exit's other statics
    std::string tmpl = (fs::temp_directory_path() / "ringmaster-image-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) Die(fmt::format("images push: a temporary directory: {}", std::strerror(errno)));
    path = tmpl;
    Live().paths.insert(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
    Live().paths.erase(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

void PutText(const Connection& c, const std::string& dir, const std::string& text, const std::string& key) {
  const std::string local = dir + "/.put";
  if (Status s = WriteFileAtomic(local, text, 0600); !s.ok()) Die(s.message());
  if (FilesPut(c, local, key) != 0) Die("images push: storing " + key + " failed");
}

}  // namespace

int ImagesPushTar(const Connection& c, const std::string& name_tag, const std::string& tar, const std::string& user_in) {
  client::ApiClient api = Connect(c);
  const std::string me = Must(api.Get("/api/v1/whoami")).at("name").get<std::string>();
  const std::string user = user_in.empty() ? me : user_in;
  if (user != me) {
    Die(fmt::format("images push: --user {}: the files service takes users/{}/ from {} only; push as {}", user, user, user, user));
  }
  TempDir dir;
  const std::string unpacked = dir.path + "/image";
  fs::create_directory(unpacked);
  std::cerr << fmt::format("images: reading {}\n", tar);
  auto image = ReadImageTar(tar, unpacked);
  if (!image.ok()) Die("images push: " + image.status().message());
  std::string name = image->name, tag = image->tag;
  if (!name_tag.empty()) {
    const size_t colon = name_tag.find(':');
    name = name_tag.substr(0, colon);
    if (colon != std::string::npos) tag = name_tag.substr(colon + 1);
  }
  if (name.empty()) Die("images push: " + tar + " names no image: give NAME[:TAG]");
  if (tag.empty()) tag = "latest";
  if (name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789._-") != std::string::npos || name[0] == '.' || name == "blobs") {
    Die(fmt::format("images push: \"{}\" is not an image name (one component of [a-z0-9._-])", name));
  }
  if (tag.size() > 128 || tag.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") != std::string::npos) {
    Die(fmt::format("images push: \"{}\" is not a tag ([A-Za-z0-9_.-], up to 128)", tag));
  }
  const std::string base = "users/" + user + "/images/";
  std::set<std::string> have;
  for (const json& f : ListFiles(api, base + "blobs/sha256/")) have.insert(f.value("path", ""));
  uint64_t bytes = 0;
  for (const ImageTar::Blob& b : image->blobs) {
    const std::string key = base + "blobs/sha256/" + b.hex;
    bytes += b.size;
    if (have.count(key)) {
      std::cerr << fmt::format("images: sha256:{} already there\n", b.hex.substr(0, 12));
      continue;
    }
    if (FilesPut(c, b.path, key) != 0) Die("images push: storing " + key + " failed");
    have.insert(key);
  }
  // The manifest after its blobs, the tag last: a tag never names an image
  // whose bytes are not all there.
  PutText(c, dir.path, image->manifest, base + "blobs/sha256/" + image->manifest_hex);
  PutText(c, dir.path, "sha256:" + image->manifest_hex + "\n", base + name + "/tags/" + tag);
  const json v2 = Must(api.Get("/v2/"));
  std::cout << fmt::format("{}/{}/{}:{}  sha256:{}  {}\n", v2.value("registry", ""), user, name, tag,
                           image->manifest_hex.substr(0, 12), fmt::format("{:.1f}MiB", static_cast<double>(bytes) / (1 << 20)));
  return 0;
}

int ImagesLs(const Connection& c) {
  // images/<name>/latest of each image, and its size.
  client::ApiClient api = Connect(c);
  std::vector<json> files = ListFiles(api, "images/");
  std::set<std::string> images;
  std::map<std::string, int64_t> sizes;
  for (const auto& f : files) {
    const std::string path = f.value("path", "");
    const auto parts = fs::path(path);
    std::vector<std::string> seg;
    for (const auto& p : parts) seg.push_back(p.string());
    if (seg.size() != 3) continue;
    if (seg[2].size() == 68 && seg[2].ends_with(".tar")) sizes[seg[1] + "/" + seg[2].substr(0, 64)] = f.value("size", int64_t{0});
    if (seg[2] == "latest") images.insert(seg[1]);
  }
  std::cout << fmt::format("{:<16} {:<20} {:>10}\n", "NAME", "DIGEST", "SIZE");
  for (const std::string& name : images) {
    std::string digest;
    // The files API answers the bytes, not JSON: read them with a stream.
    (void)api.Stream("/api/v1/files/images/" + name + "/latest", [&digest](const char* p, size_t n) {
      digest.append(p, std::min<size_t>(n, 128));
      return digest.size() < 128;
    });
    while (!digest.empty() && (digest.back() == '\n' || digest.back() == ' ')) digest.pop_back();
    const int64_t size = sizes.count(name + "/" + digest) ? sizes[name + "/" + digest] : 0;
    std::cout << fmt::format("{:<16} sha256:{:<13} {:>10}\n", name, digest.substr(0, 12),
                             fmt::format("{:.0f}MiB", static_cast<double>(size) / (1 << 20)));
  }
  // The caller's own: users/<me>/images/<name>/tags/<tag>, each naming a manifest.
  const std::string me = Must(api.Get("/api/v1/whoami")).at("name").get<std::string>();
  const std::string base = "users/" + me + "/images/";
  std::vector<std::pair<std::string, std::string>> tags;  // name, tag
  for (const json& f : ListFiles(api, base)) {
    const std::string rest = f.value("path", "").substr(base.size());
    const size_t slash = rest.find("/tags/");
    if (rest.rfind("blobs/", 0) == 0 || slash == std::string::npos) continue;
    tags.emplace_back(rest.substr(0, slash), rest.substr(slash + 6));
  }
  if (tags.empty()) return 0;
  const std::string registry = Must(api.Get("/v2/")).value("registry", "");
  std::cout << fmt::format("\n{:<24} {:<20} {:>10}  {}\n", "YOURS (NAME:TAG)", "DIGEST", "SIZE", "IMAGE");
  for (const auto& [name, tag] : tags) {
    std::string digest = Trim(ReadRemote(api, base + name + "/tags/" + tag));
    const json m = json::parse(ReadRemote(api, base + "blobs/sha256/" + digest.substr(std::min<size_t>(7, digest.size()))),
                               nullptr, false);
    int64_t size = 0;
    if (m.is_object()) {
      size += m.value("config", json::object()).value("size", int64_t{0});
      for (const json& l : m.value("layers", json::array())) size += l.value("size", int64_t{0});
    }
    std::cout << fmt::format("{:<24} {:<20} {:>10}  {}/{}/{}:{}\n", name + ":" + tag, digest.substr(0, 19),
                             fmt::format("{:.1f}MiB", static_cast<double>(size) / (1 << 20)), registry, me, name, tag);
  }
  return 0;
}

}  // namespace ringmaster::cli
