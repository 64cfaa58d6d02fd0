#include "agent/executor/staged_runtime.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

namespace ringmaster::agent {
namespace fs = std::filesystem;
namespace {

Status MakeDir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Internal(fmt::format("mkdir {}: {}", dir.string(), ec.message()));
  if (chmod(dir.c_str(), 0755) != 0) return Internal(fmt::format("chmod {}: {}", dir.string(), std::strerror(errno)));
  return Status::Ok();
}

// Copies regular file `from` to `to` (root-owned, 0755 or 0644) unless `to`
// already has its size and mtime; the new copy is renamed into place.
Status StageFile(const fs::path& from, const fs::path& to) {
  struct stat src {}, dst {};
  if (stat(from.c_str(), &src) != 0) return Internal(fmt::format("stat {}: {}", from.string(), std::strerror(errno)));
  if (lstat(to.c_str(), &dst) == 0 && S_ISREG(dst.st_mode) && dst.st_size == src.st_size &&
      dst.st_mtim.tv_sec == src.st_mtim.tv_sec && dst.st_mtim.tv_nsec == src.st_mtim.tv_nsec) {
    return Status::Ok();
  }
  const fs::path tmp = to.string() + ".staging." + std::to_string(getpid());
  std::error_code ec;
  fs::copy_file(from, tmp, fs::copy_options::overwrite_existing, ec);
  if (ec) return Internal(fmt::format("copy {} to {}: {}", from.string(), tmp.string(), ec.message()));
  const mode_t mode = (src.st_mode & 0111) ? 0755 : 0644;
  const timespec times[2] = {src.st_atim, src.st_mtim};
  if (chmod(tmp.c_str(), mode) != 0 || utimensat(AT_FDCWD, tmp.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0 ||
      rename(tmp.c_str(), to.c_str()) != 0) {
    const int e = errno;
    fs::remove(tmp, ec);
    return Internal(fmt::format("stage {}: {}", to.string(), std::strerror(e)));
  }
  return Status::Ok();
}

// A package directory: its regular files and subdirectories, not caches.
Status StageTree(const fs::path& from, const fs::path& to) {
  RM_RETURN_IF_ERROR(MakeDir(to));
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(from, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "__pycache__" || entry.is_symlink()) continue;
    if (entry.is_directory()) {
      RM_RETURN_IF_ERROR(StageTree(entry.path(), to / name));
    } else if (entry.is_regular_file()) {
      RM_RETURN_IF_ERROR(StageFile(entry.path(), to / name));
    }
  }
  if (ec) return Internal(fmt::format("list {}: {}", from.string(), ec.message()));
  return Status::Ok();
}

std::optional<fs::path> FirstExisting(const std::vector<fs::path>& candidates, bool directory) {
  for (const auto& c : candidates) {
    std::error_code ec;
    if (directory ? fs::is_directory(c, ec) : fs::is_regular_file(c, ec)) return fs::weakly_canonical(c, ec);
  }
  return std::nullopt;
}

}  // namespace

StatusOr<StagedRuntime> StageRuntime(const std::string& self_exe, const std::string& dest) {
  StagedRuntime out;
  const fs::path exe_dir = fs::path(self_exe).parent_path();
  auto train = FirstExisting({exe_dir / "ringmaster-train", exe_dir / ".." / "train" / "ringmaster-train"}, false);
  auto python = FirstExisting({exe_dir / ".." / ".." / "python" / "ringmaster_torch",
                               exe_dir / ".." / "lib" / "ringmaster" / "python" / "ringmaster_torch",
                               exe_dir / "python" / "ringmaster_torch"},
                              true);
  if (!train && !python) return out;
  RM_RETURN_IF_ERROR(MakeDir(dest));
  if (train) {
    const fs::path bin = fs::path(dest) / "bin";
    RM_RETURN_IF_ERROR(MakeDir(bin));
    RM_RETURN_IF_ERROR(StageFile(*train, bin / "ringmaster-train"));
    out.bin_dir = bin.string();
    out.staged.push_back(train->string());
  }
  if (python) {
    const fs::path py = fs::path(dest) / "python";
    RM_RETURN_IF_ERROR(MakeDir(py));
    RM_RETURN_IF_ERROR(StageTree(*python, py / "ringmaster_torch"));
    out.python_dir = py.string();
    out.staged.push_back(python->string());
  }
  return out;
}

}  // namespace ringmaster::agent
