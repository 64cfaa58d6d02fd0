#include "cli/credentials.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/files.h"

namespace ringmaster::cli {

using nlohmann::json;

namespace {

constexpr size_t kMaxFileBytes = 1 << 20;

std::string ConfigHome() {
  if (const char* x = getenv("XDG_CONFIG_HOME"); x && x[0] == '/') return x;
  if (const char* h = getenv("HOME"); h && *h) return std::string(h) + "/.config";
  if (const passwd* pw = getpwuid(geteuid()); pw && pw->pw_dir) return std::string(pw->pw_dir) + "/.config";
  return "/tmp";
}

std::string Dir(const std::string& path) { return path.substr(0, path.rfind('/')); }

// An fd closed when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The file's entries by server; none when it does not exist.
StatusOr<std::map<std::string, StoredLogin>> Load(const std::string& path) {
  std::map<std::string, StoredLogin> out;
  Fd f{::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC)};
  if (f.fd < 0) {
    if (errno == ENOENT) return out;
    if (errno == ELOOP) {
      return FailedPrecondition(fmt::format("credentials file {} is a symbolic link: remove it and log in again", path));
    }
    return FailedPrecondition(fmt::format("credentials file {}: {}", path, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return FailedPrecondition(fmt::format("credentials file {} is not a regular file", path));
  }
  // Like ssh with a private key: a file others could have read, or written, is not trusted.
  if (st.st_uid != ::geteuid()) {
    return FailedPrecondition(fmt::format("credentials file {} belongs to uid {}, not to you (uid {}): remove it, "
                                          "or set XDG_CONFIG_HOME to a directory of yours",
                                          path, st.st_uid, ::geteuid()));
  }
  if ((st.st_mode & 077) != 0) {
    return FailedPrecondition(fmt::format("credentials file {} is open to other users (mode {:04o}): chmod 600 {}",
                                          path, st.st_mode & 07777, path));
  }
  if (static_cast<size_t>(st.st_size) > kMaxFileBytes) {
    return InvalidArgument(fmt::format("credentials file {} is larger than 1 MiB: not a credentials file", path));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(f.fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string fix = fmt::format("; remove it and log in again (rm {})", path);
  if (!j.is_object() || !j.contains("servers") || !j["servers"].is_object()) {
    return InvalidArgument(fmt::format("credentials file {}: expected {{\"servers\": {{URL: {{...}}}}}}{}", path, fix));
  }
  for (const auto& [url, e] : j["servers"].items()) {
    if (!e.is_object() || !e.contains("token") || !e["token"].is_string()) {
      return InvalidArgument(fmt::format("credentials file {}: servers[\"{}\"].token: required, a string{}", path, url, fix));
    }
    StoredLogin l;
    l.server = NormalizeServerUrl(url);
    l.token = e["token"];
    if (e.contains("user") && e["user"].is_string()) l.user = e["user"];
    if (e.contains("token_id") && e["token_id"].is_number_integer()) l.token_id = e["token_id"];
    if (e.contains("ca") && e["ca"].is_string()) l.ca = e["ca"];
    out[l.server] = l;
  }
  return out;
}

// The file's directory, made 0700 when missing. One that is a symbolic link,
// is not the user's, or that others may write to is refused, not changed
// (as ssh refuses such a ~/.ssh): another user could plant names in it.
StatusOr<int> OpenOwnDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(Dir(dir), ec);  // $XDG_CONFIG_HOME itself: the user's to set up
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return FileError("mkdir " + dir, errno);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP || err == ENOTDIR) {
      return FailedPrecondition(fmt::format("{} is a symbolic link or not a directory: remove it (the CLI makes its "
                                            "own), or set XDG_CONFIG_HOME to a directory of yours", dir));
    }
    return FileError("open " + dir, err);
  }
  struct stat st {};
  ::fstat(fd, &st);
  if (st.st_uid != ::geteuid() || (st.st_mode & 022) != 0) {
    ::close(fd);
    return FailedPrecondition(fmt::format("{} belongs to uid {} with mode {:04o}: it must be yours and writable by you "
                                          "alone (chmod 700 {}), or set XDG_CONFIG_HOME to a directory of yours",
                                          dir, st.st_uid, st.st_mode & 07777, dir));
  }
  return fd;
}

// Written to a new file of a name no one else could have made (O_EXCL,
// O_NOFOLLOW), then renamed over the old one in the same directory.
Status Store(int dir_fd, const std::string& path, const std::map<std::string, StoredLogin>& logins) {
  const std::string name = path.substr(path.rfind('/') + 1);
  if (logins.empty()) {
    if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) return FileError("unlink " + path, errno);
    return Status::Ok();
  }
  json servers = json::object();
  for (const auto& [url, l] : logins) {
    json e = {{"user", l.user}, {"token", l.token}, {"token_id", l.token_id}};
    if (!l.ca.empty()) e["ca"] = l.ca;
    servers[url] = e;
  }
  const std::string text = json{{"servers", servers}}.dump(2) + "\n";
  std::string tmp;
  Fd f;
  for (int i = 0; i < 16 && f.fd < 0; ++i) {
    tmp = fmt::format("{}.{}.{:016x}", name, ::getpid(), std::random_device{}() * uint64_t{0x100000001});
    f.fd = ::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (f.fd < 0 && errno != EEXIST) return FileError("create " + Dir(path) + "/" + tmp, errno);
  }
  if (f.fd < 0) return FileError("create " + Dir(path) + "/" + tmp, EEXIST);
  Status st = WriteAll(f.fd, text.data(), text.size(), path);
  if (st.ok() && ::fsync(f.fd) != 0) st = FileError("fsync " + path, errno);
  if (st.ok() && ::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) st = FileError("rename to " + path, errno);
  if (!st.ok()) {
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return st;
  }
  ::fsync(dir_fd);  // the rename is durable once the directory is
  return Status::Ok();
}

// Runs `change` on the entries with the file locked against other CLIs, then
// writes them back.
StatusOr<std::optional<StoredLogin>> Update(
    const std::function<std::optional<StoredLogin>(std::map<std::string, StoredLogin>&)>& change) {
  const std::string path = CredentialsPath();
  const std::string dir = Dir(path);
  // The lock is the directory's own: no lock file is left behind.
  RM_ASSIGN_OR_RETURN(const int dir_fd, OpenOwnDir(dir));
  Fd lock{dir_fd};
  while (::flock(lock.fd, LOCK_EX) != 0) {
    if (errno != EINTR) return FileError("flock " + dir, errno);
  }
  RM_ASSIGN_OR_RETURN(auto logins, Load(path));
  std::optional<StoredLogin> old = change(logins);
  RM_RETURN_IF_ERROR(Store(lock.fd, path, logins));
  return old;
}

}  // namespace

std::string NormalizeServerUrl(const std::string& url) {
  // A list (a leader and its standbys): each of its URLs, in order.
  if (const size_t comma = url.find(','); comma != std::string::npos) {
    const std::string first = NormalizeServerUrl(url.substr(0, comma));
    const std::string rest = NormalizeServerUrl(url.substr(comma + 1));
    return first.empty() ? rest : rest.empty() ? first : first + "," + rest;
  }
  std::string u = url;
  while (!u.empty() && u.front() == ' ') u.erase(0, 1);
  while (!u.empty() && u.back() == ' ') u.pop_back();
  while (!u.empty() && u.back() == '/') u.pop_back();
  // Scheme and host are case-insensitive; a path (if any) is not.
  const size_t scheme_end = u.find("://");
  const size_t host_end = scheme_end == std::string::npos ? u.size() : u.find('/', scheme_end + 3);
  std::transform(u.begin(), u.begin() + static_cast<std::ptrdiff_t>(std::min(host_end, u.size())), u.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return u;
}

std::string CredentialsPath() { return ConfigHome() + "/ringmaster/credentials.json"; }

StatusOr<std::vector<StoredLogin>> ListLogins() {
  RM_ASSIGN_OR_RETURN(auto logins, Load(CredentialsPath()));
  std::vector<StoredLogin> out;
  for (auto& [url, l] : logins) out.push_back(std::move(l));
  return out;
}

StatusOr<std::optional<StoredLogin>> FindLogin(const std::string& server) {
  RM_ASSIGN_OR_RETURN(auto logins, Load(CredentialsPath()));
  auto it = logins.find(NormalizeServerUrl(server));
  if (it == logins.end()) return std::optional<StoredLogin>();
  return std::optional<StoredLogin>(it->second);
}

StatusOr<std::optional<StoredLogin>> SaveLogin(StoredLogin login) {
  login.server = NormalizeServerUrl(login.server);
  return Update([&login](std::map<std::string, StoredLogin>& logins) {
    std::optional<StoredLogin> old;
    if (auto it = logins.find(login.server); it != logins.end()) old = it->second;
    logins[login.server] = login;
    return old;
  });
}

StatusOr<std::optional<StoredLogin>> RemoveLogin(const std::string& server) {
  const std::string key = NormalizeServerUrl(server);
  return Update([&key](std::map<std::string, StoredLogin>& logins) {
    std::optional<StoredLogin> old;
    if (auto it = logins.find(key); it != logins.end()) {
      old = it->second;
      logins.erase(it);
    }
    return old;
  });
}

}  // namespace ringmaster::cli
