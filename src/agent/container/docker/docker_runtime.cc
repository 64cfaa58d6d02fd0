#include "agent/container/docker/docker_runtime.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "agent/container/seccomp_profile.h"
#include "common/log.h"

namespace ringmaster::agent {

using nlohmann::json;

Status DockerRuntime::Check() const {
  auto info = api_.Info();
  if (!info.ok()) return FailedPrecondition(fmt::format("docker executor: {}", info.status().message()));
  RM_RETURN_IF_ERROR(CheckDaemon(*info));
  spdlog::info("agent: docker executor: dockerd {} with the {} cgroup driver on cgroup v{}",
               info->value("ServerVersion", "?"), info->value("CgroupDriver", "cgroupfs"), info->value("CgroupVersion", "1"));
  return Status::Ok();
}

Status DockerRuntime::CheckDaemon(const json& info) {
  const std::string driver = info.value("CgroupDriver", "cgroupfs");
  if (driver == "cgroupfs") return Status::Ok();
  return FailedPrecondition(fmt::format(
      "docker executor: dockerd uses the {} cgroup driver, which cannot put a container below the task's cgroup; "
      "set \"exec-opts\": [\"native.cgroupdriver=cgroupfs\"] in /etc/docker/daemon.json and restart docker",
      driver));
}

std::string DockerRuntime::ImageRef(const TaskLaunch::Image& image) {
  if (!image.reference.empty()) return image.reference;
  return fmt::format("ringmaster/{}:{}", image.name, image.digest);
}

Status DockerRuntime::EnsureImage(const TaskLaunch::Image& image) {
  const std::string ref = ImageRef(image);
  std::lock_guard<std::mutex> l(import_mu_);
  auto have = api_.InspectImage(ref);
  if (have.ok()) return Status::Ok();
  if (have.status().code() != StatusCode::kNotFound) return have.status().Annotate("docker: image " + ref);
  // A registry's image is pulled (with its owner's login) before the task starts.
  if (!image.reference.empty()) return FailedPrecondition("docker: image " + ref + " was not pulled to this node");
  if (image.fetch_tar) RM_RETURN_IF_ERROR(image.fetch_tar().Annotate("docker: image " + ref));
  if (image.tar.empty()) return FailedPrecondition("docker: the task's image has no tar on this node");
  spdlog::info("agent: importing image {} into docker", ref);
  std::vector<std::string> changes;
  for (const auto& [k, v] : image.env) changes.push_back(fmt::format("ENV {}={}", k, v));
  return api_.ImportImage(image.tar, fmt::format("ringmaster/{}", image.name), image.digest, changes)
      .Annotate("docker: importing " + ref);
}

json DockerRuntime::Config(const ContainerTask& t, const std::string& image_ref) {
  const TaskLaunch& l = *t.launch;
  json env = json::array();
  for (const auto& [k, v] : t.env) env.push_back(k + "=" + v);
  json binds = json::array();
  for (const auto& [path, ro] : t.binds) binds.push_back(fmt::format("{}:{}:{}", path, path, ro ? "ro" : "rw"));
  json devices = json::array();
  for (const DeviceNode& d : t.devices) {
    devices.push_back({{"PathOnHost", d.host_path}, {"PathInContainer", d.container_path}, {"CgroupPermissions", "rw"}});
  }
  json groups = json::array();
  for (gid_t g : l.identity.groups) groups.push_back(std::to_string(g));
  std::string host = "task-" + t.key;
  for (char& c : host) c = c == '.' ? '-' : c;
  json host_config = {
      {"NetworkMode", l.network == "none" ? "none" : "host"},
      {"CgroupParent", t.cgroup_parent},
      {"Binds", binds},
      {"Devices", devices},
      {"GroupAdd", groups},
      {"CapDrop", json::array({"ALL"})},
      // Ours rather than the daemon's default, which lets io_uring through before Docker 25.
      {"SecurityOpt", json::array({"no-new-privileges", "seccomp=" + TaskSeccompProfile().dump()})},
      {"Privileged", false},
      {"AutoRemove", false},
      // Docker's init (tini) as pid 1: it forwards stop signals to the task
      // and reaps zombies, which a task as pid 1 would not.
      {"Init", true},
      // The shim keeps the task's log (with its cap); Docker's copy stays small.
      {"LogConfig", {{"Type", "json-file"}, {"Config", {{"max-size", "64m"}, {"max-file", "1"}}}}},
  };
  json config = {{"Image", image_ref},
                 {"Cmd", l.argv},
                 {"Entrypoint", json::array()},
                 {"Env", env},
                 {"WorkingDir", t.cwd},
                 {"User", fmt::format("{}:{}", l.identity.uid, l.identity.gid)},
                 {"Labels", t.labels},
                 {"Tty", false},
                 {"OpenStdin", false},
                 {"AttachStdout", false},
                 {"AttachStderr", false},
                 {"HostConfig", host_config}};
  if (l.network != "none") config["Hostname"] = "";  // host networking keeps the host's name
  else config["Hostname"] = host;
  ApplyCdiToDocker(t.cdi, &config);
  return config;
}

StatusOr<ContainerRuntime::Command> DockerRuntime::Prepare(const ContainerTask& t) {
  RM_RETURN_IF_ERROR(EnsureImage(t.launch->image));
  (void)api_.RemoveContainer(t.id, /*force=*/true);  // an earlier try's, left by a crash
  auto id = api_.CreateContainer(t.id, Config(t, ImageRef(t.launch->image)));
  if (!id.ok()) return id.status().Annotate("docker: creating the container");
  Command c;
  c.argv = {self_, "docker-attach", socket_, t.id};
  c.cleanup = {self_, "docker-attach", socket_, t.id, "--remove"};
  // Its writable layer is dockerd's, and StorageOpt's size holds only on
  // xfs with project quotas: where the storage driver names the layer's
  // directory (overlay2's UpperDir), it is measured with the sandbox.
  if (auto info = api_.InspectContainer(t.id); info.ok()) {
    const json::json_pointer at("/GraphDriver/Data/UpperDir");
    if (info->is_object() && info->contains(at) && info->at(at).is_string()) c.writable.push_back(info->at(at).get<std::string>());
  }
  return c;
}

void DockerRuntime::Release(const std::string&, const std::string& id, const std::string&) {
  if (Status st = api_.RemoveContainer(id, /*force=*/true); !st.ok()) {
    spdlog::warn("agent: removing container {}: {}", id, st.ToString());
  }
}

void DockerRuntime::RemoveOrphans(const std::string& instance, const std::set<std::string>& keys) {
  auto list = api_.ListContainers({{"ringmaster.agent", instance}}, /*all=*/true);
  if (!list.ok()) {
    spdlog::warn("agent: listing this agent's containers: {}", list.status().ToString());
    return;
  }
  for (const json& c : *list) {
    const std::string key = c.value("Labels", json::object()).value("ringmaster.key", "");
    if (keys.count(key)) continue;
    const std::string id = c.value("Id", "");
    spdlog::info("agent: removing container {} of no task of this agent", id.substr(0, 12));
    (void)api_.RemoveContainer(id, /*force=*/true);
  }
}

int RunDockerAttach(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: ringmaster docker-attach SOCKET ID [--remove]\n");
    return 2;
  }
  const std::string socket = argv[2], id = argv[3];
  DockerApi api(socket);
  if (argc >= 5 && std::string(argv[4]) == "--remove") {
    Status st = api.RemoveContainer(id, /*force=*/true);
    if (!st.ok()) fprintf(stderr, "ringmaster: removing container %s: %s\n", id.c_str(), st.ToString().c_str());
    return st.ok() ? 0 : 1;
  }
  // Stop signals (the executor's SIGTERM to the group) go to the container.
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stops, nullptr);
  std::thread([&api, id, stops] {
    while (true) {
      int sig = 0;
      if (sigwait(&stops, &sig) != 0) continue;
      (void)api.KillContainer(id, std::to_string(sig));
    }
  }).detach();
  // However it ends, the container goes with it (the shim's cleanup is for
  // when this process is killed).
  auto done = [&api, &id](int code) {
    if (Status st = api.RemoveContainer(id, /*force=*/true); !st.ok()) {
      fprintf(stderr, "ringmaster: removing container %s: %s\n", id.c_str(), st.ToString().c_str());
    }
    return code;
  };
  if (Status st = api.StartContainer(id); !st.ok()) {
    fprintf(stderr, "ringmaster: starting container: %s\n", st.ToString().c_str());
    return done(127);
  }
  std::string out;
  Status logs = api.FollowLogs(id, {}, [&out](int, std::string_view, std::string_view line) {
    out.assign(line);
    out.push_back('\n');
    return fwrite(out.data(), 1, out.size(), stdout) == out.size() && fflush(stdout) == 0;
  });
  if (!logs.ok()) fprintf(stderr, "ringmaster: following the container's logs: %s\n", logs.ToString().c_str());
  fflush(stdout);
  // The log stream ends when the container does; its exit code is ours.
  for (int i = 0;; ++i) {
    auto code = api.WaitContainer(id, std::chrono::hours(24));
    if (code.ok()) return done(static_cast<int>(std::clamp<int64_t>(*code, 0, 255)));
    if (i >= 5 || code.status().code() == StatusCode::kNotFound) {
      fprintf(stderr, "ringmaster: waiting for the container: %s\n", code.status().ToString().c_str());
      return done(125);
    }
    sleep(1);
  }
}

}  // namespace ringmaster::agent
