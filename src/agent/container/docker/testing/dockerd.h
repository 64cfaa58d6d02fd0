// Test helpers for what needs a real Docker daemon: Dockerd, a dockerd of
// the test process's own (a fresh /tmp dir, its own containerd namespace, no
// bridge and no iptables, so it coexists with a system docker), started once
// and stopped by pid; and BuildImageTar, a registry-free image made of this
// host's binaries. Not thread-safe.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/container/docker/docker_api.h"
#include "common/status.h"

namespace ringmaster::agent::testing {

class Dockerd {
 public:
  static constexpr const char* kBinary = "/usr/sbin/dockerd";

  // "" when it answers /_ping, else why not.
  std::string Start() {
    if (geteuid() != 0) return "dockerd needs root";
    if (access(kBinary, X_OK) != 0) return std::string("no ") + kBinary;
    // Short: containerd's sockets under exec-root must fit sun_path.
    char tmpl[] = "/tmp/rmdkXXXXXX";
    if (!mkdtemp(tmpl)) return "mkdtemp failed";
    dir_ = tmpl;
    std::ofstream(dir_ / "daemon.json") << "{}\n";  // not /etc/docker/daemon.json
    const std::string ns = "rmtest-" + std::to_string(getpid());
    std::vector<std::string> args = {
        kBinary, "--config-file", (dir_ / "daemon.json").string(), "--data-root", (dir_ / "data").string(),
        "--exec-root", (dir_ / "exec").string(), "--pidfile", (dir_ / "dockerd.pid").string(),
        "-H", "unix://" + socket(),
        "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false",
        "--userland-proxy=false", "--shutdown-timeout", "5",
        "--exec-opt", "native.cgroupdriver=cgroupfs", "--storage-driver", "overlay2",
        // Without a system containerd dockerd starts its own under exec-root;
        // with one it would share it, so keep to namespaces of our own.
        "--containerd-namespace", ns, "--containerd-plugins-namespace", ns + "-plugins"};
    const std::string log = (dir_ / "dockerd.log").string();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // a crashed test takes its daemon along
      int out = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
      dup2(in, 0);
      dup2(out, 1);
      dup2(out, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(kBinary, argv.data());
      _exit(127);
    }
    if (pid_ < 0) return "fork failed";
    DockerApi api(socket(), std::chrono::seconds(1));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      if (api.Ping().ok()) return "";
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return "dockerd exited at start: " + LogTail();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "dockerd did not answer /_ping in 60 s: " + LogTail();
  }

  // TERM, then KILL after 20 s; then the directory.
  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      int status;
      while (waitpid(pid_, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          kill(pid_, SIGKILL);
          waitpid(pid_, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      pid_ = -1;
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      if (ec) std::fprintf(stderr, "leaving %s: %s\n", dir_.c_str(), ec.message().c_str());
      dir_.clear();
    }
  }

  std::string socket() const { return (dir_ / "docker.sock").string(); }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::string LogTail() const {
    std::ifstream in(dir_ / "dockerd.log");
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return all.size() > 2000 ? all.substr(all.size() - 2000) : all;
  }

  std::filesystem::path dir_;
  pid_t pid_ = -1;
};

// A registry-free image: the binaries the tests run and what ldd says they
// load, as a root filesystem in <dir>/rootfs, tarred as `tar`.
inline Status BuildImageTar(const std::filesystem::path& dir, const std::filesystem::path& tar) {
  const std::vector<std::string> binaries = {"/bin/sh", "/bin/sleep", "/bin/cat", "/bin/echo", "/usr/bin/head"};
  std::set<std::string> files(binaries.begin(), binaries.end());
  std::string cmd = "ldd";
  for (const auto& b : binaries) cmd += " " + b;
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) return Internal("popen ldd");
  char buf[4096];
  std::string out;
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  pclose(p);
  std::istringstream words(out);
  for (std::string w; words >> w;) {
    if (w.starts_with("/") && !w.ends_with(":")) files.insert(w);  // "/bin/sh:" heads each binary's list
  }
  const std::filesystem::path root = dir / "rootfs";
  for (const std::string& f : files) {
    std::filesystem::path to = root / f.substr(1);
    std::error_code ec;
    std::filesystem::create_directories(to.parent_path(), ec);
    std::filesystem::copy_file(f, to, std::filesystem::copy_options::overwrite_existing, ec);  // follows symlinks: the real file
    if (ec) return Internal("copy " + f + ": " + ec.message());
  }
  for (const char* d : {"proc", "sys", "dev", "etc", "tmp"}) std::filesystem::create_directories(root / d);
  std::filesystem::permissions(root / "tmp", std::filesystem::perms::all | std::filesystem::perms::sticky_bit);  // as images have it
  std::string tar_cmd = "tar -C '" + root.string() + "' -cf '" + tar.string() + "' .";
  if (std::system(tar_cmd.c_str()) != 0) return Internal("tar failed: " + tar_cmd);
  return Status::Ok();
}

// The process's one dockerd, started on the first call and stopped at exit,
// for suites whose every case needs it: CTest runs such a suite as one entry.
// `why_not` gets "" when it runs, else why not.
inline Dockerd* ProcessDockerd(std::string* why_not) {
  struct Holder {
    Holder() : skip(daemon.Start()) {}
    ~Holder() { daemon.Stop(); }
    Dockerd daemon;
    std::string skip;
  };
  static Holder holder;
  *why_not = holder.skip;
  return &holder.daemon;
}

}  // namespace ringmaster::agent::testing
