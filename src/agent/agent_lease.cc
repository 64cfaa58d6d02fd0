// The agent's side of its node's lease and network (split from agent.cc):
// registration and heartbeats, which also bring the server's fencing window
// and the overlay's peers; fencing, which stops every task once the server
// has not answered for that window; the node's side of the container overlay
// (net::Overlay); and the monitor's sampling of the node and its tasks,
// whose samples ride on the heartbeats.
#include <algorithm>

#include <fmt/format.h>

#include "agent/agent.h"
#include "agent/executor/shim.h"
#include "common/build_info.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/log.h"

namespace ringmaster::agent {

// Samples per heartbeat, in JSON bytes: half the server's limit on a heartbeat.
constexpr size_t kHeartbeatSampleBytes = 2 << 20;

int64_t Agent::FenceWindowMs() const { return std::max<int64_t>(0, fence_after_ms_); }

// The last contact is kept as "<boot id> <steady ms>": the steady clock
// (CLOCK_MONOTONIC) runs on across the agent's restarts within one boot.
constexpr const char* kContactFile = "last_contact";

void Agent::NoteContact(int64_t sent_ms) {
  // Registration and heartbeats answer on two threads: the clock only moves on.
  std::lock_guard<std::mutex> l(fence_mu_);
  if (sent_ms <= last_contact_ms_) return;
  last_contact_ms_ = sent_ms;
  // On disk every 10 s at most: a restarted agent may count its silence from
  // up to 10 s too early, and so fence early, never late.
  if (sent_ms - contact_saved_ms_ < 10'000) return;
  contact_saved_ms_ = sent_ms;
  (void)WriteFileAtomic(options_.data_dir + "/" + kContactFile, fmt::format("{} {}", BootId(), sent_ms), 0600);
}

void Agent::AdoptFenceWindow(int64_t ms) {
  std::lock_guard<std::mutex> l(fence_mu_);  // one writer of the file at a time
  if (ms <= 0 || ms == fence_after_ms_) return;
  if (fence_after_ms_ > 0) {
    spdlog::info("agent: the server's fencing window is now {} (was {})", FormatDuration(ms), FormatDuration(fence_after_ms_));
  }
  fence_after_ms_ = ms;
  // Kept for the next agent on this node: tasks it re-adopts while it cannot
  // reach the server are fenced on the same window.
  (void)WriteFileAtomic(options_.data_dir + "/fence_after_ms", std::to_string(ms), 0600);
}

void Agent::LoadFencing() {
  if (auto text = ReadFile(options_.data_dir + "/fence_after_ms"); text.ok()) {
    fence_after_ms_ = std::atoll(text->c_str());
  } else if (auto lease = ReadFile(options_.data_dir + "/lease_ms"); lease.ok()) {
    fence_after_ms_ = std::atoll(lease->c_str()) * 7 / 10;  // what an agent of release 0.1 kept: its window was 70% of it
  }
  int64_t last = SteadyMs();
  if (auto text = ReadFile(options_.data_dir + "/" + kContactFile); text.ok()) {
    char boot[64] = {0};
    long long ms = 0;
    // Another boot's clock means nothing here (and its tasks are gone anyway).
    if (sscanf(text->c_str(), "%63s %lld", boot, &ms) == 2 && boot == BootId() && ms > 0 && ms <= last) last = ms;
  }
  last_contact_ms_ = last;
  contact_saved_ms_ = last;
}

Status Agent::Register() {
  protocol::RegisterRequest req;
  // What it holds: a task the server thinks runs here and that is not among
  // them is gone (this node's agent data was lost), and is restarted now.
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [ref, t] : tasks_) req.tasks.push_back({ref.task_id, ref.attempt});
  }
  for (const auto& g : inventory_.gpus) req.gpus.push_back({g.index, g.model, g.memory_bytes, g.uuid});
  req.name = inventory_.name;
  req.cpu_milli = inventory_.cpu_milli;
  req.memory_bytes = inventory_.memory_bytes;
  req.agent_version = ThisBuild().version;
  req.protocol_version = options_.protocol_version;
  req.fence_after_ms = FenceWindowMs();
  req.address = address_;
  req.port_lo = options_.port_lo;
  req.port_hi = options_.port_hi;
  req.labels = options_.labels;
  req.executors = executor_->Runtimes();
  req.network = options_.network;
  req.tunnel_port = lab_tunnel_ ? lab_tunnel_->port() : 0;
  const int64_t sent = SteadyMs();
  auto res = control_->Register(req, std::chrono::seconds(30));
  if (!res.ok()) {
    if (res.status().code() == StatusCode::kFailedPrecondition) {
      // Refused (a protocol this server does not speak): said loudly.
      spdlog::error("agent: the server at {} refuses this agent: {}", control_->Describe(), res.status().message());
    } else {
      spdlog::warn("agent: registering with {} failed: {}", control_->Describe(), res.status().ToString());
    }
    return res.status();
  }
  node_id_ = res->node_id;
  // The window a server of protocol 1 implies: 70% of its lease.
  int64_t fence = res->fence_after_ms;
  if (fence <= 0) fence = res->lease_ms * 7 / 10;
  AdoptFenceWindow(fence);
  NoteContact(sent);
  if (options_.network != "host" && res->overlay) ApplyOverlay(*res->overlay);
  if (lab_tunnel_ && !res->tunnel_key.empty()) lab_tunnel_->SetKey(res->tunnel_key);
  spdlog::info("agent: registered node {} as {} ({} cpus, {} memory, {} gpus)", inventory_.name,
               node_id_.load(), inventory_.cpu_milli / 1000.0, inventory_.memory_bytes, inventory_.gpus.size());
  return Status::Ok();
}

void Agent::HeartbeatLoop() {
  while (running_) {
    HeartbeatOnce();
    SleepFor(options_.heartbeat_interval);
  }
}

void Agent::SampleLoop() {
  if (options_.sample_interval.count() <= 0) return;
  NodeSampler sampler(options_.data_dir, options_.nvml_library);
  (void)sampler.Sample(clock_->NowMs());  // the first one has no interval
  while (running_) {
    SleepFor(options_.sample_interval);
    if (!running_) break;
    protocol::NodeSample s = SampleOnce(sampler);
    std::lock_guard<std::mutex> l(samples_mu_);
    samples_.push_back(std::move(s));
    // A server out of reach for long: the oldest go first, memory stays bounded.
    while (samples_.size() > protocol::kMaxSamplesPerBody) samples_.pop_front();
  }
}

protocol::NodeSample Agent::SampleOnce(NodeSampler& sampler) {
  protocol::NodeSample s = sampler.Sample(clock_->NowMs());
  struct Running {
    TaskRef ref;
    std::vector<int> gpus;
  };
  std::vector<Running> running;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [ref, t] : tasks_) {
      if (t.launched && !t.exit) running.push_back({ref, t.gpus});
    }
  }
  const int64_t now = SteadyMs();
  std::map<std::string, std::pair<int64_t, int64_t>> seen;
  for (const Running& r : running) {
    const std::string key = r.ref.Key();
    auto u = executor_->Usage(key);
    // Without its cgroup (limits off) a task is still measured on its GPUs.
    if (!u && r.gpus.empty()) continue;
    protocol::TaskSample t;
    t.task_id = r.ref.task_id;
    t.attempt = r.ref.attempt;
    if (u) {
      t.memory_bytes = u->memory_bytes;
      t.pids = u->pids;
      t.oom_kills = u->oom_kills;
      if (u->cpu_ns >= 0) {
        // Its first sample has no interval yet: its CPU is not known (not 0).
        auto last = last_cpu_.find(key);
        if (last != last_cpu_.end() && now > last->second.second && u->cpu_ns >= last->second.first) {
          t.cpu_cores =
              static_cast<double>(u->cpu_ns - last->second.first) / 1e6 / static_cast<double>(now - last->second.second);
        }
        seen[key] = {u->cpu_ns, now};
      }
    }
    if (!r.gpus.empty()) {
      double sum = 0;
      int n = 0;
      for (const protocol::GpuSample& g : s.gpus) {
        if (std::find(r.gpus.begin(), r.gpus.end(), g.index) == r.gpus.end()) continue;
        sum += g.util;
        ++n;
      }
      if (n > 0) t.gpu_util = sum / n;
    }
    s.tasks.push_back(t);
  }
  last_cpu_ = std::move(seen);  // ended tasks are forgotten
  return s;
}

void Agent::HeartbeatOnce() {
  if (node_id_ == 0) return;
  std::deque<protocol::NodeSample> taken;
  {
    std::lock_guard<std::mutex> l(samples_mu_);
    taken.swap(samples_);
  }
  // The newest samples that fit well within the server's limit on a
  // heartbeat (4 MiB): a node with many tasks sends fewer at a time.
  size_t bytes = 0, first = taken.size();
  for (size_t i = taken.size(); i-- > 0;) {
    bytes += protocol::ToJson(taken[i]).dump().size() + 1;
    if (bytes > kHeartbeatSampleBytes) break;
    first = i;
  }
  taken.erase(taken.begin(), taken.begin() + static_cast<ptrdiff_t>(first));  // older ones are dropped
  protocol::Heartbeat beat;
  beat.samples.assign(taken.begin(), taken.end());
  beat.fence_after_ms = FenceWindowMs();
  beat.tunnel_port = lab_tunnel_ ? lab_tunnel_->port() : 0;
  // A heartbeat that waits long is as good as lost: within the fencing
  // window there is time for a few more.
  auto deadline = std::max(options_.heartbeat_interval * 3, std::chrono::milliseconds(3000));
  if (const int64_t window = FenceWindowMs(); window > 0) {
    deadline = std::max(std::min(deadline, std::chrono::milliseconds(window / 3)), std::chrono::milliseconds(500));
  }
  // The server's lease runs from when it received the heartbeat: at the
  // latest, when it was sent.
  const int64_t sent = SteadyMs();
  auto res = control_->Heartbeat(node_id_, beat, deadline);
  if (!res.ok() && res.status().code() == StatusCode::kNotFound) node_id_ = 0;
  if (!res.ok()) {
    // Not delivered: sent again with the next heartbeat (the newest, if too
    // many by then). Refused (4xx): they would be refused again, so they go.
    const StatusCode code = res.status().code();
    if (code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded || code == StatusCode::kInternal) {
      std::lock_guard<std::mutex> l(samples_mu_);
      samples_.insert(samples_.begin(), taken.begin(), taken.end());
      while (samples_.size() > protocol::kMaxSamplesPerBody) samples_.pop_front();
    }
    return;
  }
  if (!res->samples_refused.empty()) spdlog::warn("agent: the server refused samples: {}", res->samples_refused);
  NoteContact(sent);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (fenced_) spdlog::info("agent: the server answers again; tasks it no longer assigns here stay stopped");
    fenced_ = false;
  }
  AdoptFenceWindow(res->fence_after_ms);  // the server's, if it changed
  if (options_.network != "host" && res->overlay) ApplyOverlay(*res->overlay);
}

void Agent::FenceOnce() {
  const int64_t window = FenceWindowMs(), last = last_contact_ms_;
  if (window <= 0 || last == 0) return;
  const int64_t silent = SteadyMs() - last;
  if (silent < window) return;
  std::lock_guard<std::mutex> l(mu_);
  int stopped = 0;
  for (auto& [ref, t] : tasks_) {
    if (t.exit || t.stop_sent) continue;
    t.stop_sent = true;
    t.stop_grace = std::chrono::seconds(1);
    if (t.launched) (void)executor_->Stop(ref.Key(), t.stop_grace);  // else its thread does not start it
    ++stopped;
  }
  if (stopped > 0 || !fenced_) {
    spdlog::warn("agent: no answer from the server for {} (its fencing window is {}): stopped {} tasks, which it "
                 "restarts elsewhere once the node's lease is out too",
                 FormatDuration(silent), FormatDuration(window), stopped);
  }
  fenced_ = true;
}

void Agent::ApplyOverlay(const protocol::Overlay& o) {
  std::lock_guard<std::mutex> l(net_mu_);
  auto subnet = net::ParseCidr(o.subnet);
  auto block = net::ParseCidr(o.block);
  if (!subnet.ok() || !block.ok()) {
    overlay_error_ = "the server's overlay: " + (subnet.ok() ? block.status() : subnet.status()).message();
    return;
  }
  if (!overlay_ || overlay_->options().block != *block || overlay_->options().subnet != *subnet) {
    net::OverlayOptions oo{options_.network, address_, *subnet, *block, options_.ovs_dir};
    auto overlay = std::make_unique<net::Overlay>(oo);
    if (Status st = overlay->Setup(); !st.ok()) {
      overlay_error_ = "setting up the " + options_.network + " overlay: " + st.message();
      spdlog::error("agent: {}", overlay_error_);
      overlay_.reset();
      return;
    }
    spdlog::info("agent: {} overlay up: block {} of {}, MTU {}", options_.network, net::FormatCidr(*block),
                 net::FormatCidr(*subnet), overlay->mtu());
    overlay_ = std::move(overlay);
    overlay_error_.clear();
    peers_applied_.reset();
  }
  if (peers_applied_ == o.peers) return;
  std::vector<net::OverlayPeer> list;
  for (const auto& p : o.peers) {
    auto b = net::ParseCidr(p.block);
    if (b.ok()) list.push_back({p.node, p.address, *b});
  }
  if (Status st = overlay_->SetPeers(list); !st.ok()) {
    spdlog::warn("agent: the overlay's tunnels: {}", st.message());
    return;  // again with the next heartbeat
  }
  peers_applied_ = o.peers;
}

}  // namespace ringmaster::agent
