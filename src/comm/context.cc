#include "comm/context.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/shm_pair.h"
#include "comm/tcp_pair.h"

namespace ringmaster::comm {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x52434d31;  // "RCM1"
constexpr uint32_t kByeMagic = 0x52434d42;  // "RCMB": sent on a clean close
constexpr size_t kStripeMin = 256 << 10; // messages at least this big are striped across streams
constexpr int kRecvSlots = 4;            // reduce buffers in flight per ring
constexpr int kSpinYields = 200;         // doorbell polls before a shm wait sleeps

struct WireHeader {
  uint32_t magic;
  uint32_t seq;
  uint64_t len;
};

// CUDA device memory cannot go through these transports: reject it clearly.
// The driver is probed with dlopen, so hosts without CUDA pay nothing.
bool IsDevicePointer(const void* p) {
  using GetAttr = int (*)(void*, int, const void*);
  using Init = int (*)(unsigned);
  static GetAttr get_attr = [] () -> GetAttr {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return nullptr;
    auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
    if (!init || init(0) != 0) return nullptr;
    return reinterpret_cast<GetAttr>(dlsym(lib, "cuPointerGetAttribute"));
  }();
  if (!get_attr || !p) return false;
  unsigned int type = 0;
  constexpr int kMemoryTypeAttr = 2, kDeviceMemory = 2;
  return get_attr(&type, kMemoryTypeAttr, p) == 0 && type == kDeviceMemory;
}

std::string Host() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

const char* AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kRecursiveDoubling: return "recursive-doubling";
    case Algorithm::kParameterServer: return "parameter-server";
  }
  return "?";
}

// ---------------------------------------------------------------------------

struct Context::Impl {
  struct Part {
    char* data = nullptr;
    size_t len = 0;
    WireHeader hdr{};  // sends: what goes out; receives: what is expected
    WireHeader got{};  // receives: the header as it arrives (possibly in pieces)
    size_t hdr_done = 0, done = 0;
    bool complete = false;
  };
  struct Msg {
    std::vector<Part> parts;
    bool Complete() const {
      return std::all_of(parts.begin(), parts.end(), [](const Part& p) { return p.complete; });
    }
  };
  struct Lane {
    std::unique_ptr<Pair> pair;
    std::deque<Part*> sends, recvs;
    uint32_t send_seq = 0, recv_seq = 0;
    bool left = false;  // the peer said goodbye: it finished cleanly
  };
  struct PeerInfo {
    std::string host, addr, shm;
    int port = 0;
    int pid = 0;
  };

  int rank = 0, size = 1;
  Options opt;
  std::unique_ptr<PrefixStore> store;  // failure notes are shared through it
  std::string host;
  std::vector<PeerInfo> peers;
  std::vector<std::vector<Lane>> lanes;  // [peer][stream]
  std::unique_ptr<ShmSegment> my_seg;
  std::vector<std::shared_ptr<ShmSegment>> peer_segs;
  int abort_fd = -1;
  std::atomic<bool> aborted{false};
  std::mutex abort_mu;
  std::string abort_reason;  // GUARDED_BY(abort_mu)

  // Posted point-to-point messages, alive until their Work is waited on.
  std::list<Msg> posted;

  // Per operation.
  const char* op = "setup";
  SteadyClock::time_point deadline;
  std::deque<Msg> msgs;
  Status broken;
  std::vector<char> scratch_a, scratch_b;
  SteadyClock::time_point last_liveness_check;

  ~Impl() {
    if (abort_fd >= 0) close(abort_fd);
  }

  std::string Describe(int r) const {
    if (r < 0 || r >= size || peers.empty()) return fmt::format("rank {}", r);
    return fmt::format("rank {} (host {}, pid {})", r, peers[r].host, peers[r].pid);
  }

  Status Fail(StatusCode code, const std::string& what) {
    broken = Status(code, fmt::format("{}: {}", op, what));
    return broken;
  }

  // The group is broken. The first rank to notice records why in the store;
  // every other rank reports that first cause, so all survivors name the
  // same failed rank. Then this rank breaks its own links, so ranks waiting
  // on it learn at once instead of at their deadline.
  Status Break(StatusCode code, const std::string& what) {
    std::string msg = what;
    auto first = store->Add("failures", 1);
    if (first.ok() && *first == 1) {
      (void)store->Set("failure", fmt::format("{}|{}", static_cast<int>(code), what));
    } else if (first.ok()) {
      auto note = store->Get("failure", std::chrono::milliseconds(500));
      if (note.ok()) {
        auto bar = note->find('|');
        code = static_cast<StatusCode>(std::stoi(note->substr(0, bar)));
        msg = note->substr(bar + 1);
      }
    }
    (void)Fail(code, msg);
    BreakLinks();
    return broken;
  }

  void BreakLinks() {
    for (auto& ls : lanes) {
      for (Lane& lane : ls) {
        if (lane.pair && lane.pair->fd() >= 0) shutdown(lane.pair->fd(), SHUT_RDWR);
      }
    }
    if (my_seg) my_seg->SetBroken();
  }

  // On a clean close: tell every TCP peer this is a goodbye, not a crash.
  void SayGoodbye() {
    if (!broken.ok()) return;
    WireHeader bye{kByeMagic, 0, 0};
    for (auto& ls : lanes) {
      for (Lane& lane : ls) {
        if (lane.pair && lane.pair->fd() >= 0) {
          (void)!send(lane.pair->fd(), &bye, sizeof bye, MSG_NOSIGNAL | MSG_DONTWAIT);
          shutdown(lane.pair->fd(), SHUT_WR);
        }
      }
    }
    if (my_seg) my_seg->SetLeft();
  }

  // An idle TCP lane hung up: a goodbye (the peer finished) or a crash.
  bool SaidGoodbye(Lane& lane) {
    WireHeader h{};
    ssize_t n = recv(lane.pair->fd(), &h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof h) && h.magic == kByeMagic) {
      lane.left = true;
      return true;
    }
    return n > 0;  // ordinary data still to read: not a failure yet
  }

  // ---- messaging

  Msg* Post(int peer, bool send, char* data, size_t len, bool persistent = false) {
    Msg& m = persistent ? posted.emplace_back() : msgs.emplace_back();
    auto& ls = lanes[peer];
    size_t stripes = (ls.size() > 1 && len >= kStripeMin) ? ls.size() : 1;
    m.parts.resize(stripes);
    for (size_t s = 0; s < stripes; ++s) {
      Part& p = m.parts[s];
      size_t begin = len * s / stripes, end = len * (s + 1) / stripes;
      p.data = data + begin;
      p.len = end - begin;
      Lane& lane = ls[s];
      p.hdr = {kMagic, send ? lane.send_seq++ : lane.recv_seq++, p.len};
      (send ? lane.sends : lane.recvs).push_back(&p);
    }
    return &m;
  }

  Status ProgressSend(int peer, Lane& lane, bool* moved) {
    while (!lane.sends.empty()) {
      Part* p = lane.sends.front();
      iovec iov[2];
      int n = 0;
      if (p->hdr_done < sizeof(WireHeader)) {
        iov[n++] = {reinterpret_cast<char*>(&p->hdr) + p->hdr_done, sizeof(WireHeader) - p->hdr_done};
      }
      if (p->len > p->done) iov[n++] = {p->data + p->done, p->len - p->done};
      auto w = lane.pair->TryWrite(iov, Cap(iov, n));
      if (!w.ok()) return Break(StatusCode::kUnavailable, fmt::format("{} died: {}", Describe(peer), w.status().message()));
      size_t got = *w;
      if (got == 0) return Status::Ok();
      *moved = true;
      size_t h = std::min(got, sizeof(WireHeader) - p->hdr_done);
      p->hdr_done += h;
      p->done += got - h;
      if (p->hdr_done < sizeof(WireHeader) || p->done < p->len) return Status::Ok();
      p->complete = true;
      lane.sends.pop_front();
    }
    return Status::Ok();
  }

  Status ProgressRecv(int peer, Lane& lane, bool* moved) {
    while (!lane.recvs.empty()) {
      Part* p = lane.recvs.front();
      WireHeader expect = p->hdr;
      iovec iov[2];
      int n = 0;
      // The header may arrive in pieces, so it is kept with its part.
      WireHeader& incoming = p->got;
      if (p->hdr_done < sizeof(WireHeader)) {
        iov[n++] = {reinterpret_cast<char*>(&incoming) + p->hdr_done, sizeof(WireHeader) - p->hdr_done};
      } else if (p->len > p->done) {
        iov[n++] = {p->data + p->done, p->len - p->done};
      }
      if (n == 0) {
        p->complete = true;
        lane.recvs.pop_front();
        continue;
      }
      auto r = lane.pair->TryRead(iov, Cap(iov, n));
      if (!r.ok()) return Break(StatusCode::kUnavailable, fmt::format("{} died: {}", Describe(peer), r.status().message()));
      size_t got = *r;
      if (got == 0) return Status::Ok();
      *moved = true;
      if (p->hdr_done < sizeof(WireHeader)) {
        p->hdr_done += got;
        if (p->hdr_done < sizeof(WireHeader)) return Status::Ok();
        if (incoming.magic == kByeMagic) {
          return Break(StatusCode::kUnavailable, fmt::format("{} left the group while this rank still needed it",
                                                             Describe(peer)));
        }
        if (incoming.magic != kMagic || incoming.seq != expect.seq) {
          return Break(StatusCode::kInternal, fmt::format("the stream from {} is out of step (message {} where {} was due)",
                                                         Describe(peer), incoming.seq, expect.seq));
        }
        if (incoming.len != expect.len) {
          return Break(StatusCode::kInvalidArgument,
                      fmt::format("{} sent {} bytes where this rank expected {} (do all ranks call the same collectives "
                                  "with the same counts?)",
                                  Describe(peer), incoming.len, expect.len));
        }
        continue;  // now the payload
      }
      p->done += got;
      if (p->done < p->len) return Status::Ok();
      p->complete = true;
      lane.recvs.pop_front();
    }
    return Status::Ok();
  }

  // Fault injection for tests: move at most opt.max_io_bytes per call.
  int Cap(iovec* iov, int n) const {
    if (opt.max_io_bytes == 0) return n;
    size_t left = opt.max_io_bytes;
    for (int i = 0; i < n; ++i) {
      if (iov[i].iov_len >= left) {
        iov[i].iov_len = left;
        return i + 1;
      }
      left -= iov[i].iov_len;
    }
    return n;
  }

  Status Progress(bool* moved) {
    for (int peer = 0; peer < size; ++peer) {
      for (Lane& lane : lanes[peer]) {
        if (!lane.pair) continue;
        RM_RETURN_IF_ERROR(ProgressSend(peer, lane, moved));
        RM_RETURN_IF_ERROR(ProgressRecv(peer, lane, moved));
      }
    }
    return Status::Ok();
  }

  int FirstPendingPeer() const {
    for (int peer = 0; peer < size; ++peer) {
      for (const Lane& lane : lanes[peer]) {
        if (!lane.recvs.empty()) return peer;
      }
    }
    for (int peer = 0; peer < size; ++peer) {
      for (const Lane& lane : lanes[peer]) {
        if (!lane.sends.empty()) return peer;
      }
    }
    return -1;
  }

  // Waits until some pending transfer may move, the deadline passes, a peer
  // fails, or the context is aborted. `bell` was read before the last Progress.
  Status Block(uint32_t bell) {
    if (aborted) {
      std::string reason;
      {
        std::lock_guard<std::mutex> l(abort_mu);
        reason = abort_reason;
      }
      (void)Fail(StatusCode::kAborted, "aborted: " + reason);
      BreakLinks();  // the others learn at once that this rank is gone from the collective
      return broken;
    }
    auto now = SteadyClock::now();
    if (now >= deadline) {
      int peer = FirstPendingPeer();
      return Break(StatusCode::kDeadlineExceeded,
                   fmt::format("timed out after {:.1f} s waiting for {}", opt.timeout.count() / 1000.0,
                               peer >= 0 ? Describe(peer) : std::string("the group")));
    }
    if (now - last_liveness_check >= std::chrono::milliseconds(100)) {
      last_liveness_check = now;
      for (int peer = 0; peer < size; ++peer) {
        if (peer == rank || lanes[peer].empty() || !lanes[peer][0].pair) continue;
        auto* shm = dynamic_cast<ShmPair*>(lanes[peer][0].pair.get());
        if (!shm) continue;
        bool pending = !lanes[peer][0].sends.empty() || !lanes[peer][0].recvs.empty();
        if (shm->PeerBroken()) return Break(StatusCode::kUnavailable, fmt::format("{} failed", Describe(peer)));
        if (!pending) continue;
        // Read the peer's state once: it may change between two reads.
        const bool alive = shm->PeerAlive(), left = shm->PeerLeft();
        if (alive && !left) continue;
        // It may have sent what we wait for before it went: drain that first.
        bool moved = false;
        RM_RETURN_IF_ERROR(Progress(&moved));
        if (moved) return Status::Ok();
        if (!alive) {
          return Break(StatusCode::kUnavailable, fmt::format("{} died: its process is gone", Describe(peer)));
        }
        return Break(StatusCode::kUnavailable,
                     fmt::format("{} left the group while this rank still needed it", Describe(peer)));
      }
    }
    auto slice = std::min<std::chrono::milliseconds>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) + std::chrono::milliseconds(1),
        std::chrono::milliseconds(50));

    std::vector<pollfd> fds;
    std::vector<int> fd_peer;
    std::vector<Lane*> fd_lane;
    bool shm_pending = false;
    for (int peer = 0; peer < size; ++peer) {
      for (Lane& lane : lanes[peer]) {
        if (!lane.pair) continue;
        int fd = lane.pair->fd();
        bool pending = !lane.sends.empty() || !lane.recvs.empty();
        if (fd < 0) {
          shm_pending |= pending;
          continue;
        }
        if (lane.left) continue;
        short ev = POLLRDHUP;  // every TCP peer: learn at once when one dies
        if (!lane.recvs.empty()) ev |= POLLIN;
        if (!lane.sends.empty()) ev |= POLLOUT;
        fds.push_back({fd, ev, 0});
        fd_peer.push_back(peer);
        fd_lane.push_back(&lane);
      }
    }
    bool tcp_pending = std::any_of(fds.begin(), fds.end(), [](const pollfd& p) { return p.events & (POLLIN | POLLOUT); });
    if (shm_pending && !tcp_pending) {
      // Poll the doorbell briefly before sleeping: a futex wake-up costs a
      // trip through the scheduler, far more than a small message takes.
      // sched_yield keeps this fair when ranks outnumber cores.
      for (int i = 0; i < kSpinYields; ++i) {
        if (my_seg->Bell() != bell || aborted) return Status::Ok();
        sched_yield();
      }
      my_seg->WaitBell(bell, slice);
      return Status::Ok();
    }
    fds.push_back({abort_fd, POLLIN, 0});
    int timeout_ms = shm_pending ? 1 : static_cast<int>(slice.count());
    int r = poll(fds.data(), fds.size(), timeout_ms);
    if (r < 0 && errno != EINTR) return Fail(StatusCode::kInternal, std::string("poll: ") + std::strerror(errno));
    for (size_t i = 0; i + 1 < fds.size(); ++i) {
      if (fds[i].revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) {
        Lane& lane = *fd_lane[i];
        bool pending = !lane.sends.empty() || !lane.recvs.empty();
        // Bytes still buffered are read first: the peer may have sent them before leaving.
        if (pending && (fds[i].revents & POLLIN) && (fds[i].events & POLLIN)) continue;
        if (!pending && SaidGoodbye(lane)) continue;
        return Break(StatusCode::kUnavailable, fmt::format("{} died: its connection closed", Describe(fd_peer[i])));
      }
    }
    return Status::Ok();
  }

  uint32_t Bell() const { return my_seg ? my_seg->Bell() : 0; }

  // One turn of the progress loop: move bytes, or block until something can move.
  Status Drive() {
    uint32_t bell = Bell();
    bool moved = false;
    RM_RETURN_IF_ERROR(Progress(&moved));
    if (!moved) RM_RETURN_IF_ERROR(Block(bell));
    return Status::Ok();
  }

  Status WaitAll(std::initializer_list<Msg*> ms) {
    while (!std::all_of(ms.begin(), ms.end(), [](Msg* m) { return !m || m->Complete(); })) RM_RETURN_IF_ERROR(Drive());
    return Status::Ok();
  }

  // ---- algorithms

  // A ring over `n` segments of `buf`: at step t a rank sends segment
  // (rank - t + shift) to the next rank and receives segment (rank - t - 1 + shift)
  // from the previous one, reducing it in for t < reduce_steps and storing it
  // for later steps. Segments go in chunks, fully pipelined: chunk k of step
  // t+1 leaves as soon as chunk k of step t has arrived (and been reduced), so
  // reduction overlaps transfer.
  struct RingPlan {
    char* buf;
    std::vector<size_t> off, cnt;  // in elements
    int steps, reduce_steps, shift;
    DataType type;
    ReduceOp op;
  };

  Status Ring(const RingPlan& p) {
    const int n = size, next = (rank + 1) % n, prev = (rank + n - 1) % n;
    const size_t es = ElementSize(p.type);
    const size_t chunk = std::max<size_t>(1, opt.chunk_bytes / es);
    auto mod = [n](int x) { return ((x % n) + n) % n; };
    auto send_seg = [&](int t) { return mod(rank - t + p.shift); };
    auto recv_seg = [&](int t) { return mod(rank - t - 1 + p.shift); };
    auto chunks = [&](int s) { return static_cast<int>((p.cnt[s] + chunk - 1) / chunk); };
    auto range = [&](int s, int k, size_t* begin, size_t* count) {
      *begin = p.off[s] + static_cast<size_t>(k) * chunk;
      *count = std::min(chunk, p.cnt[s] - static_cast<size_t>(k) * chunk);
    };

    std::vector<std::vector<char>> arrived(p.steps);
    for (int t = 0; t < p.steps; ++t) arrived[t].assign(chunks(recv_seg(t)), 0);
    scratch_a.resize(kRecvSlots * chunk * es);
    std::vector<int> free_slots;
    for (int i = kRecvSlots - 1; i >= 0; --i) free_slots.push_back(i);

    struct Posted {
      Msg* m;
      int t, k, slot;
    };
    std::deque<Posted> recvs;
    std::deque<Msg*> sends;
    int st = 0, sk = 0, rt = 0, rk = 0;
    while (true) {
      while (st < p.steps) {
        if (sk >= chunks(send_seg(st))) {
          ++st;
          sk = 0;
          continue;
        }
        if (st > 0 && !arrived[st - 1][sk]) break;
        size_t b, c;
        range(send_seg(st), sk, &b, &c);
        sends.push_back(Post(next, true, p.buf + b * es, c * es));
        ++sk;
      }
      while (rt < p.steps && recvs.size() < 2 * kRecvSlots) {
        if (rk >= chunks(recv_seg(rt))) {
          ++rt;
          rk = 0;
          continue;
        }
        bool reduce = rt < p.reduce_steps;
        if (reduce && free_slots.empty()) break;
        size_t b, c;
        range(recv_seg(rt), rk, &b, &c);
        int slot = -1;
        char* dst = p.buf + b * es;
        if (reduce) {
          slot = free_slots.back();
          free_slots.pop_back();
          dst = scratch_a.data() + static_cast<size_t>(slot) * chunk * es;
        }
        recvs.push_back({Post(prev, false, dst, c * es), rt, rk, slot});
        ++rk;
      }
      if (st >= p.steps && rt >= p.steps && recvs.empty() && sends.empty()) return Status::Ok();
      RM_RETURN_IF_ERROR(Drive());
      while (!recvs.empty() && recvs.front().m->Complete()) {
        Posted r = recvs.front();
        recvs.pop_front();
        if (r.slot >= 0) {
          size_t b, c;
          range(recv_seg(r.t), r.k, &b, &c);
          ReduceInto(p.buf + b * es, scratch_a.data() + static_cast<size_t>(r.slot) * chunk * es, c, p.type, p.op);
          free_slots.push_back(r.slot);
        }
        arrived[r.t][r.k] = 1;
      }
      while (!sends.empty() && sends.front()->Complete()) sends.pop_front();
    }
  }

  static void Split(size_t count, int n, std::vector<size_t>* off, std::vector<size_t>* cnt) {
    off->resize(n);
    cnt->resize(n);
    size_t base = count / n, rem = count % n, o = 0;
    for (int i = 0; i < n; ++i) {
      (*off)[i] = o;
      (*cnt)[i] = base + (static_cast<size_t>(i) < rem ? 1 : 0);
      o += (*cnt)[i];
    }
  }

  Status RingAllReduce(char* buf, size_t count, DataType type, ReduceOp op) {
    RingPlan p{buf, {}, {}, 2 * (size - 1), size - 1, 0, type, op};
    Split(count, size, &p.off, &p.cnt);
    return Ring(p);
  }

  // Latency-optimal for small messages: log2(n) exchanges of the whole
  // buffer. Ranks beyond the largest power of two fold in first and get the
  // result at the end. Every rank ends with bitwise the same result.
  Status RecursiveDoubling(char* buf, size_t count, DataType type, ReduceOp op) {
    const size_t bytes = count * ElementSize(type);
    int p2 = 1;
    while (p2 * 2 <= size) p2 *= 2;
    const int extra = size - p2;
    scratch_b.resize(bytes);
    char* tmp = scratch_b.data();
    if (rank >= p2) {
      Msg* s = Post(rank - p2, true, buf, bytes);
      RM_RETURN_IF_ERROR(WaitAll({s}));
      Msg* r = Post(rank - p2, false, buf, bytes);
      return WaitAll({r});
    }
    if (rank < extra) {
      Msg* r = Post(rank + p2, false, tmp, bytes);
      RM_RETURN_IF_ERROR(WaitAll({r}));
      ReduceInto(buf, tmp, count, type, op);
    }
    for (int mask = 1; mask < p2; mask <<= 1) {
      int peer = rank ^ mask;
      Msg* s = Post(peer, true, buf, bytes);
      Msg* r = Post(peer, false, tmp, bytes);
      RM_RETURN_IF_ERROR(WaitAll({s, r}));
      ReduceInto(buf, tmp, count, type, op);
    }
    if (rank < extra) {
      Msg* s = Post(rank + p2, true, buf, bytes);
      RM_RETURN_IF_ERROR(WaitAll({s}));
    }
    return Status::Ok();
  }

  // The master/worker baseline: every worker sends its buffer to rank 0,
  // which reduces and sends the result back to all. Rank 0's link carries
  // 2(n-1) buffers, so time grows with n.
  Status ParameterServer(char* buf, size_t count, DataType type, ReduceOp op) {
    const size_t es = ElementSize(type), chunk = std::max<size_t>(1, opt.chunk_bytes / es);
    const size_t nchunks = (count + chunk - 1) / chunk;
    if (rank != 0) {
      std::vector<Msg*> sends, recvs;
      for (size_t k = 0; k < nchunks; ++k) {
        size_t c = std::min(chunk, count - k * chunk);
        sends.push_back(Post(0, true, buf + k * chunk * es, c * es));
      }
      for (size_t k = 0; k < nchunks; ++k) {
        size_t c = std::min(chunk, count - k * chunk);
        recvs.push_back(Post(0, false, buf + k * chunk * es, c * es));
      }
      for (Msg* m : sends) RM_RETURN_IF_ERROR(WaitAll({m}));
      for (Msg* m : recvs) RM_RETURN_IF_ERROR(WaitAll({m}));
      return Status::Ok();
    }
    scratch_b.resize(static_cast<size_t>(size) * chunk * es);
    std::vector<Msg*> sends;
    for (size_t k = 0; k < nchunks; ++k) {
      size_t c = std::min(chunk, count - k * chunk);
      char* dst = buf + k * chunk * es;
      std::vector<Msg*> in;
      for (int w = 1; w < size; ++w) in.push_back(Post(w, false, scratch_b.data() + w * chunk * es, c * es));
      for (int w = 1; w < size; ++w) {
        RM_RETURN_IF_ERROR(WaitAll({in[w - 1]}));
        ReduceInto(dst, scratch_b.data() + w * chunk * es, c, type, op);
      }
      for (int w = 1; w < size; ++w) sends.push_back(Post(w, true, dst, c * es));
    }
    for (Msg* m : sends) RM_RETURN_IF_ERROR(WaitAll({m}));
    return Status::Ok();
  }

  Status Broadcast(char* buf, size_t bytes, int root) {
    const int v = (rank - root + size) % size;
    if (bytes < opt.small_bytes) {
      // Binomial tree: log2(n) rounds.
      int mask = 1;
      while (mask < size) {
        if (v & mask) {
          Msg* r = Post((v - mask + root) % size, false, buf, bytes);
          RM_RETURN_IF_ERROR(WaitAll({r}));
          break;
        }
        mask <<= 1;
      }
      std::vector<Msg*> sends;
      for (mask >>= 1; mask > 0; mask >>= 1) {
        if (v + mask < size) sends.push_back(Post((v + mask + root) % size, true, buf, bytes));
      }
      for (Msg* m : sends) RM_RETURN_IF_ERROR(WaitAll({m}));
      return Status::Ok();
    }
    // Pipelined chain root -> root+1 -> ...: each chunk is forwarded as it arrives.
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const bool last = v == size - 1;
    const size_t chunk = opt.chunk_bytes, nchunks = (bytes + chunk - 1) / chunk;
    std::deque<std::pair<Msg*, size_t>> recvs;
    std::deque<Msg*> sends;
    size_t posted = 0;
    if (v == 0) {
      for (size_t k = 0; k < nchunks; ++k) sends.push_back(Post(next, true, buf + k * chunk, std::min(chunk, bytes - k * chunk)));
    }
    while (true) {
      while (v != 0 && posted < nchunks && recvs.size() < 8) {
        recvs.push_back({Post(prev, false, buf + posted * chunk, std::min(chunk, bytes - posted * chunk)), posted});
        ++posted;
      }
      if (recvs.empty() && sends.empty() && (v == 0 || posted == nchunks)) return Status::Ok();
      RM_RETURN_IF_ERROR(Drive());
      while (!recvs.empty() && recvs.front().first->Complete()) {
        size_t k = recvs.front().second;
        recvs.pop_front();
        if (!last) sends.push_back(Post(next, true, buf + k * chunk, std::min(chunk, bytes - k * chunk)));
      }
      while (!sends.empty() && sends.front()->Complete()) sends.pop_front();
    }
  }

  Status Barrier() {
    char dummy = 0;
    for (int k = 1; k < size; k <<= 1) {
      Msg* s = Post((rank + k) % size, true, &dummy, 0);
      Msg* r = Post((rank - k + size) % size, false, &dummy, 0);
      RM_RETURN_IF_ERROR(WaitAll({s, r}));
    }
    return Status::Ok();
  }
};

// ---------------------------------------------------------------------------

Context::Context(std::unique_ptr<Impl> impl) : impl_(std::move(impl)), rank_(impl_->rank), size_(impl_->size) {}

Context::~Context() {
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  impl_->SayGoodbye();
}

std::string Context::Describe(int rank) const { return impl_->Describe(rank); }

StatusOr<std::unique_ptr<Context>> Context::Create(Store* base_store, int rank, int size, const Options& options) {
  if (size < 1) return InvalidArgument(fmt::format("size: must be >= 1, got {}", size));
  if (rank < 0 || rank >= size) return InvalidArgument(fmt::format("rank: must be in [0, {}), got {}", size, rank));
  if (options.streams < 1 || options.streams > 16) return InvalidArgument("streams: must be between 1 and 16");
  if (options.chunk_bytes < 1024) return InvalidArgument("chunk_bytes: must be at least 1024");

  auto impl = std::make_unique<Impl>();
  Impl& I = *impl;
  I.rank = rank;
  I.size = size;
  I.opt = options;
  I.host = options.hostname.empty() ? Host() : options.hostname;
  I.op = "connect";
  I.abort_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  I.lanes.resize(size);
  const auto deadline = SteadyClock::now() + options.timeout;
  auto left = [&] {
    return std::max<std::chrono::milliseconds>(
        std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()));
  };
  I.store = std::make_unique<PrefixStore>(fmt::format("gen/{}/", options.generation), base_store);
  PrefixStore& store = *I.store;

  // This rank's endpoints.
  int listener = -1, port = 0;
  if (options.transport != TransportKind::kShm && size > 1) {
    listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    TuneSocket(listener);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    if (inet_pton(AF_INET, options.address.c_str(), &addr.sin_addr) != 1) {
      close(listener);
      return InvalidArgument("address: \"" + options.address + "\" is not an IPv4 address");
    }
    if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 1024) != 0) {
      int e = errno;
      close(listener);
      return Unavailable(fmt::format("connect: cannot listen on {}: {}", options.address, std::strerror(e)));
    }
    socklen_t len = sizeof addr;
    getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  std::string shm_name;
  if (options.transport != TransportKind::kTcp && size > 1) {
    std::random_device rd;
    shm_name = fmt::format("/ringcomm.{}.{:x}.{}", getpid(), rd(), rank);
    auto seg = ShmSegment::Create(shm_name, size, options.shm_ring_bytes);
    if (!seg.ok()) {
      if (listener >= 0) close(listener);
      return seg.status();
    }
    I.my_seg = std::move(*seg);
  }
  auto close_listener = [&] {
    if (listener >= 0) close(listener);
    listener = -1;
  };

  nlohmann::json me = {{"host", I.host}, {"addr", options.address}, {"port", port}, {"pid", getpid()}, {"shm", shm_name}};
  RM_RETURN_IF_ERROR(store.Set(fmt::format("rank/{}", rank), me.dump()));
  I.peers.resize(size);
  for (int p = 0; p < size; ++p) {
    auto v = store.Get(fmt::format("rank/{}", p), left());
    if (!v.ok()) {
      close_listener();
      return DeadlineExceeded(fmt::format("connect: rank {} did not join generation {} within {:.1f} s", p,
                                          options.generation, options.timeout.count() / 1000.0));
    }
    auto j = nlohmann::json::parse(*v);
    I.peers[p] = {j["host"], j["addr"], j["shm"], j["port"], j["pid"]};
  }

  // Decide every link, then connect: over TCP, the higher rank dials.
  std::vector<bool> use_shm(size, false);
  int expect_accepts = 0;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    bool same_host = I.peers[p].host == I.host;
    if (options.transport == TransportKind::kShm) {
      if (!same_host) {
        close_listener();
        return InvalidArgument(fmt::format("transport: shm needs every rank on one host, but {} is on {}",
                                           I.Describe(p), I.peers[p].host));
      }
      use_shm[p] = true;
    } else if (options.transport == TransportKind::kAuto) {
      use_shm[p] = same_host && !I.peers[p].shm.empty() && I.my_seg;
    }
    if (!use_shm[p] && p > rank) expect_accepts += options.streams;
  }
  for (int p = 0; p < rank; ++p) {
    if (use_shm[p]) continue;
    for (int s = 0; s < options.streams; ++s) {
      int fd = -1;
      while (true) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        TuneSocket(fd);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<uint16_t>(I.peers[p].port));
        inet_pton(AF_INET, I.peers[p].addr.c_str(), &addr.sin_addr);
        if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) break;
        int e = errno;
        close(fd);
        if (SteadyClock::now() >= deadline) {
          close_listener();
          return DeadlineExceeded(fmt::format("connect: cannot reach {} at {}:{}: {}", I.Describe(p), I.peers[p].addr,
                                              I.peers[p].port, std::strerror(e)));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      int32_t hello[3] = {rank, s, options.generation};
      if (send(fd, hello, sizeof hello, MSG_NOSIGNAL) != sizeof hello) {
        close(fd);
        close_listener();
        return Unavailable(fmt::format("connect: {} hung up during the handshake", I.Describe(p)));
      }
      I.lanes[p].resize(options.streams);
      I.lanes[p][s].pair = std::make_unique<TcpPair>(fd);
    }
  }
  while (expect_accepts > 0) {
    pollfd pfd{listener, POLLIN, 0};
    int r = poll(&pfd, 1, static_cast<int>(left().count()));
    if (r <= 0) {
      close_listener();
      return DeadlineExceeded("connect: timed out waiting for higher ranks to connect");
    }
    int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    timeval tv{static_cast<time_t>(std::max<int64_t>(1, left().count() / 1000)), 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int32_t hello[3];
    if (recv(fd, hello, sizeof hello, MSG_WAITALL) != sizeof hello || hello[0] <= rank || hello[0] >= size ||
        hello[1] < 0 || hello[1] >= options.streams || hello[2] != options.generation) {
      close(fd);  // not one of ours (or a stale generation): ignore it
      continue;
    }
    timeval zero{0, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &zero, sizeof zero);
    I.lanes[hello[0]].resize(options.streams);
    if (I.lanes[hello[0]][hello[1]].pair) {
      close(fd);
      continue;
    }
    I.lanes[hello[0]][hello[1]].pair = std::make_unique<TcpPair>(fd);
    --expect_accepts;
  }
  close_listener();
  I.peer_segs.resize(size);
  for (int p = 0; p < size; ++p) {
    if (!use_shm[p]) continue;
    auto seg = ShmSegment::Open(I.peers[p].shm);
    if (!seg.ok()) return seg.status().Annotate("connect to " + I.Describe(p));
    I.peer_segs[p] = std::move(*seg);
    I.lanes[p].resize(1);
    I.lanes[p][0].pair = std::make_unique<ShmPair>(I.my_seg.get(), I.peer_segs[p], rank, p);
  }
  // Everyone has mapped every segment: unlink names so a crash leaves nothing behind.
  RM_RETURN_IF_ERROR(store.Set(fmt::format("ready/{}", rank), "1"));
  for (int p = 0; p < size; ++p) {
    if (!store.Get(fmt::format("ready/{}", p), left()).ok()) {
      return DeadlineExceeded(fmt::format("connect: {} did not finish connecting", I.Describe(p)));
    }
  }
  if (I.my_seg) I.my_seg->Unlink();
  return std::unique_ptr<Context>(new Context(std::move(impl)));
}

void Context::Abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> l(impl_->abort_mu);
    impl_->abort_reason = reason;
  }
  impl_->aborted = true;
  uint64_t one = 1;
  (void)!write(impl_->abort_fd, &one, sizeof one);
  if (impl_->my_seg) impl_->my_seg->Ring();
}

Status Context::Exec(const char* name, const std::function<Status()>& body) {
  Impl& I = *impl_;
  if (!I.broken.ok()) return I.broken;
  I.op = name;
  I.deadline = SteadyClock::now() + I.opt.timeout;
  Status st = body();
  I.msgs.clear();
  if (!st.ok() && I.broken.ok() && st.code() != StatusCode::kInvalidArgument) I.broken = st;
  return st;
}

Status Context::Sync(const char* name, const std::function<Status()>& body) {
  {
    // Calls keep their order: queued async work goes first.
    std::unique_lock<std::mutex> l(queue_mu_);
    queue_cv_.wait(l, [&] { return queue_.empty(); });
  }
  std::lock_guard<std::mutex> l(exec_mu_);
  return Exec(name, body);
}

std::shared_ptr<Work> Context::Enqueue(const char* name, std::function<Status()> body) {
  auto work = std::make_shared<Work>();
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    if (!worker_.joinable()) worker_ = std::thread([this] { WorkerLoop(); });
    queue_.push_back({name, std::move(body), work});
  }
  queue_cv_.notify_all();
  return work;
}

void Context::WorkerLoop() {
  while (true) {
    std::unique_lock<std::mutex> l(queue_mu_);
    queue_cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    // Take exec_mu_ before the item leaves the queue, so no sync call slips in between.
    std::unique_lock<std::mutex> exec(exec_mu_);
    Item item = std::move(queue_.front());
    queue_.pop_front();
    l.unlock();
    Status st = Exec(item.name, item.body);
    exec.unlock();
    queue_cv_.notify_all();
    {
      std::lock_guard<std::mutex> w(item.work->mu_);
      item.work->done_ = true;
      item.work->status_ = st;
    }
    item.work->cv_.notify_all();
  }
}

Status Work::Wait() {
  std::unique_lock<std::mutex> l(mu_);
  if (drive_ && !done_) {
    Status st = drive_();
    drive_ = nullptr;
    done_ = true;
    status_ = st;
  }
  cv_.wait(l, [&] { return done_; });
  return status_;
}

bool Work::Done() {
  std::lock_guard<std::mutex> l(mu_);
  return done_;
}

// ---- argument checks shared by the collectives

namespace {

Status CheckBuffer(const char* op, const char* name, const void* p, size_t count) {
  if (count > 0 && p == nullptr) return InvalidArgument(fmt::format("{}: {} is null", op, name));
  if (count > 0 && IsDevicePointer(p)) {
    return InvalidArgument(fmt::format("{}: {} is in GPU memory; ringcomm's tcp and shm transports need host memory "
                                       "(copy it to the host first; a CUDA transport is not built yet)",
                                       op, name));
  }
  return Status::Ok();
}

Status CheckRank(const char* op, const char* name, int r, int size) {
  if (r < 0 || r >= size) return InvalidArgument(fmt::format("{}: {} must be in [0, {}), got {}", op, name, size, r));
  return Status::Ok();
}

}  // namespace

Status Context::AllReduceBody(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                              Algorithm algorithm) {
  RM_RETURN_IF_ERROR(CheckBuffer("allreduce", "input", in, count));
  RM_RETURN_IF_ERROR(CheckBuffer("allreduce", "output", out, count));
  Impl& I = *impl_;
  const size_t bytes = count * ElementSize(type);
  char* buf = static_cast<char*>(out);
  if (in != out && bytes > 0) std::memcpy(buf, in, bytes);
  if (size_ > 1 && count > 0) {
    Algorithm a = algorithm;
    if (a == Algorithm::kAuto) a = bytes < I.opt.small_bytes ? Algorithm::kRecursiveDoubling : Algorithm::kRing;
    if (a == Algorithm::kRing) RM_RETURN_IF_ERROR(I.RingAllReduce(buf, count, type, op));
    else if (a == Algorithm::kRecursiveDoubling) RM_RETURN_IF_ERROR(I.RecursiveDoubling(buf, count, type, op));
    else RM_RETURN_IF_ERROR(I.ParameterServer(buf, count, type, op));
  }
  if (op == ReduceOp::kAvg) DivideBy(buf, count, type, size_);
  return Status::Ok();
}

Status Context::ReduceScatterBody(const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  RM_RETURN_IF_ERROR(CheckBuffer("reduce_scatter", "input", in, count));
  RM_RETURN_IF_ERROR(CheckBuffer("reduce_scatter", "output", out, count));
  Impl& I = *impl_;
  const size_t es = ElementSize(type), bytes = count * es;
  std::vector<char> work(static_cast<const char*>(in), static_cast<const char*>(in) + bytes * size_);
  if (size_ > 1 && count > 0) {
    Impl::RingPlan p{work.data(), {}, {}, size_ - 1, size_ - 1, -1, type, op};
    for (int s = 0; s < size_; ++s) {
      p.off.push_back(s * count);
      p.cnt.push_back(count);
    }
    RM_RETURN_IF_ERROR(I.Ring(p));
  }
  if (bytes > 0) std::memcpy(out, work.data() + rank_ * bytes, bytes);
  if (op == ReduceOp::kAvg) DivideBy(out, count, type, size_);
  return Status::Ok();
}

Status Context::AllGatherBody(const void* in, void* out, size_t count, DataType type) {
  RM_RETURN_IF_ERROR(CheckBuffer("allgather", "input", in, count));
  RM_RETURN_IF_ERROR(CheckBuffer("allgather", "output", out, count));
  const size_t es = ElementSize(type), bytes = count * es;
  char* o = static_cast<char*>(out);
  if (bytes > 0 && o + rank_ * bytes != in) std::memmove(o + rank_ * bytes, in, bytes);
  if (size_ == 1 || count == 0) return Status::Ok();
  Impl::RingPlan p{o, {}, {}, size_ - 1, 0, 0, type, ReduceOp::kSum};
  for (int s = 0; s < size_; ++s) {
    p.off.push_back(s * count);
    p.cnt.push_back(count);
  }
  return impl_->Ring(p);
}

Status Context::BroadcastBody(void* buf, size_t count, DataType type, int root) {
  RM_RETURN_IF_ERROR(CheckRank("broadcast", "root", root, size_));
  RM_RETURN_IF_ERROR(CheckBuffer("broadcast", "buffer", buf, count));
  if (size_ == 1 || count == 0) return Status::Ok();
  return impl_->Broadcast(static_cast<char*>(buf), count * ElementSize(type), root);
}

Status Context::ReduceBody(const void* in, void* out, size_t count, DataType type, ReduceOp op, int root) {
  RM_RETURN_IF_ERROR(CheckRank("reduce", "root", root, size_));
  RM_RETURN_IF_ERROR(CheckBuffer("reduce", "input", in, count));
  if (rank_ == root) RM_RETURN_IF_ERROR(CheckBuffer("reduce", "output", out, count));
  Impl& I = *impl_;
  const size_t es = ElementSize(type), bytes = count * es;
  std::vector<char> work(static_cast<const char*>(in), static_cast<const char*>(in) + bytes);
  Impl::RingPlan p{work.data(), {}, {}, size_ - 1, size_ - 1, -1, type, op};
  Impl::Split(count, size_, &p.off, &p.cnt);
  if (size_ > 1 && count > 0) RM_RETURN_IF_ERROR(I.Ring(p));
  // Rank r now holds reduced segment r: gather them on the root.
  if (rank_ != root) {
    if (p.cnt[rank_] > 0) {
      RM_RETURN_IF_ERROR(I.WaitAll({I.Post(root, true, work.data() + p.off[rank_] * es, p.cnt[rank_] * es)}));
    }
    return Status::Ok();
  }
  char* o = static_cast<char*>(out);
  std::vector<Impl::Msg*> recvs;
  for (int r = 0; r < size_; ++r) {
    if (p.cnt[r] == 0) continue;
    if (r == rank_) std::memcpy(o + p.off[r] * es, work.data() + p.off[r] * es, p.cnt[r] * es);
    else recvs.push_back(I.Post(r, false, o + p.off[r] * es, p.cnt[r] * es));
  }
  for (auto* m : recvs) RM_RETURN_IF_ERROR(I.WaitAll({m}));
  if (op == ReduceOp::kAvg) DivideBy(out, count, type, size_);
  return Status::Ok();
}

Status Context::SendBody(const void* buf, size_t count, DataType type, int peer) {
  RM_RETURN_IF_ERROR(CheckRank("send", "peer", peer, size_));
  if (peer == rank_) return InvalidArgument("send: peer must not be this rank");
  RM_RETURN_IF_ERROR(CheckBuffer("send", "buffer", buf, count));
  return impl_->WaitAll({impl_->Post(peer, true, static_cast<char*>(const_cast<void*>(buf)), count * ElementSize(type))});
}

Status Context::RecvBody(void* buf, size_t count, DataType type, int peer) {
  RM_RETURN_IF_ERROR(CheckRank("recv", "peer", peer, size_));
  if (peer == rank_) return InvalidArgument("recv: peer must not be this rank");
  RM_RETURN_IF_ERROR(CheckBuffer("recv", "buffer", buf, count));
  return impl_->WaitAll({impl_->Post(peer, false, static_cast<char*>(buf), count * ElementSize(type))});
}

Status Context::AllReduce(const void* in, void* out, size_t count, DataType type, ReduceOp op, Algorithm algorithm) {
  return Sync("allreduce", [&] { return AllReduceBody(in, out, count, type, op, algorithm); });
}
Status Context::ReduceScatter(const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  return Sync("reduce_scatter", [&] { return ReduceScatterBody(in, out, count, type, op); });
}
Status Context::AllGather(const void* in, void* out, size_t count, DataType type) {
  return Sync("allgather", [&] { return AllGatherBody(in, out, count, type); });
}
Status Context::Broadcast(void* buf, size_t count, DataType type, int root) {
  return Sync("broadcast", [&] { return BroadcastBody(buf, count, type, root); });
}
Status Context::Reduce(const void* in, void* out, size_t count, DataType type, ReduceOp op, int root) {
  return Sync("reduce", [&] { return ReduceBody(in, out, count, type, op, root); });
}
Status Context::Barrier() {
  return Sync("barrier", [&] { return impl_->Barrier(); });
}
Status Context::Send(const void* buf, size_t count, DataType type, int peer) {
  return Sync("send", [&] { return SendBody(buf, count, type, peer); });
}
Status Context::Recv(void* buf, size_t count, DataType type, int peer) {
  return Sync("recv", [&] { return RecvBody(buf, count, type, peer); });
}

std::shared_ptr<Work> Context::AllReduceAsync(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                                              Algorithm algorithm) {
  return Enqueue("allreduce", [=, this] { return AllReduceBody(in, out, count, type, op, algorithm); });
}
std::shared_ptr<Work> Context::ReduceScatterAsync(const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  return Enqueue("reduce_scatter", [=, this] { return ReduceScatterBody(in, out, count, type, op); });
}
std::shared_ptr<Work> Context::AllGatherAsync(const void* in, void* out, size_t count, DataType type) {
  return Enqueue("allgather", [=, this] { return AllGatherBody(in, out, count, type); });
}
std::shared_ptr<Work> Context::BroadcastAsync(void* buf, size_t count, DataType type, int root) {
  return Enqueue("broadcast", [=, this] { return BroadcastBody(buf, count, type, root); });
}
std::shared_ptr<Work> Context::ReduceAsync(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                                           int root) {
  return Enqueue("reduce", [=, this] { return ReduceBody(in, out, count, type, op, root); });
}
std::shared_ptr<Work> Context::BarrierAsync() {
  return Enqueue("barrier", [this] { return impl_->Barrier(); });
}

std::shared_ptr<Work> Context::PostPointToPoint(const char* name, bool send, void* buf, size_t count, DataType type,
                                                int peer) {
  auto work = std::make_shared<Work>();
  auto finish = [&](Status st) {
    work->done_ = true;
    work->status_ = std::move(st);
    return work;
  };
  Status st = CheckRank(name, "peer", peer, size_);
  if (st.ok() && peer == rank_) st = InvalidArgument(fmt::format("{}: peer must not be this rank", name));
  if (st.ok()) st = CheckBuffer(name, "buffer", buf, count);
  if (!st.ok()) return finish(st);
  {
    // Messages keep program order: queued async collectives post theirs first.
    std::unique_lock<std::mutex> l(queue_mu_);
    queue_cv_.wait(l, [&] { return queue_.empty(); });
  }
  std::lock_guard<std::mutex> l(exec_mu_);
  if (!impl_->broken.ok()) return finish(impl_->broken);
  Impl::Msg* m = impl_->Post(peer, send, static_cast<char*>(buf), count * ElementSize(type), /*persistent=*/true);
  auto deadline = SteadyClock::now() + impl_->opt.timeout;
  work->drive_ = [this, m, name, deadline]() -> Status {
    std::lock_guard<std::mutex> l(exec_mu_);
    Impl& I = *impl_;
    Status st = I.broken;
    if (st.ok()) {
      I.op = name;
      I.deadline = deadline;
      st = I.WaitAll({m});
    }
    // The message is done, or the context broke: either way it is no longer in flight.
    I.posted.remove_if([m](const Impl::Msg& x) { return &x == m; });
    return st;
  };
  return work;
}

std::shared_ptr<Work> Context::SendAsync(const void* buf, size_t count, DataType type, int peer) {
  return PostPointToPoint("send", true, const_cast<void*>(buf), count, type, peer);
}
std::shared_ptr<Work> Context::RecvAsync(void* buf, size_t count, DataType type, int peer) {
  return PostPointToPoint("recv", false, buf, count, type, peer);
}

}  // namespace ringmaster::comm
