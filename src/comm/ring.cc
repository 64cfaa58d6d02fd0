#include <algorithm>
#include <cstring>
#include <deque>

#include "comm/algorithms.h"

namespace ringmaster::comm {
namespace {

constexpr int kRecvSlots = 4;  // reduce buffers in flight per ring

}  // namespace

void SplitEven(size_t count, int n, std::vector<size_t>* off, std::vector<size_t>* cnt) {
  off->resize(n);
  cnt->resize(n);
  size_t base = count / n, rem = count % n, o = 0;
  for (int i = 0; i < n; ++i) {
    (*off)[i] = o;
    (*cnt)[i] = base + (static_cast<size_t>(i) < rem ? 1 : 0);
    o += (*cnt)[i];
  }
}

Status RunRing(Engine& e, const RingPlan& p) {
  const int n = e.size(), rank = e.rank(), next = (rank + 1) % n, prev = (rank + n - 1) % n;
  const size_t es = ElementSize(p.type);
  const size_t chunk = std::max<size_t>(1, e.options().chunk_bytes / es);
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
  std::vector<char>& slots = e.scratch_a();
  slots.resize(kRecvSlots * chunk * es);
  std::vector<int> free_slots;
  for (int i = kRecvSlots - 1; i >= 0; --i) free_slots.push_back(i);

  struct Posted {
    Engine::Msg* m;
    int t, k, slot;
  };
  std::deque<Posted> recvs;
  std::deque<Engine::Msg*> sends;
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
      // Out of place, step 0's segment is still only in `in` (see RingPlan).
      const char* src = (st == 0 && p.in) ? p.in : p.buf;
      sends.push_back(e.Post(next, true, const_cast<char*>(src) + b * es, c * es));
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
        dst = slots.data() + static_cast<size_t>(slot) * chunk * es;
      }
      recvs.push_back({e.Post(prev, false, dst, c * es), rt, rk, slot});
      ++rk;
    }
    if (st >= p.steps && rt >= p.steps && recvs.empty() && sends.empty()) return Status::Ok();
    RM_RETURN_IF_ERROR(e.Drive());
    while (!recvs.empty() && recvs.front().m->Complete()) {
      Posted r = recvs.front();
      recvs.pop_front();
      if (r.slot >= 0) {
        size_t b, c;
        range(recv_seg(r.t), r.k, &b, &c);
        // The chunk's only reduction: its copy from `in` is made here, cache-hot, while the link carries the next one.
        if (p.in) std::memcpy(p.buf + b * es, p.in + b * es, c * es);
        ReduceInto(p.buf + b * es, slots.data() + static_cast<size_t>(r.slot) * chunk * es, c, p.type, p.op);
        free_slots.push_back(r.slot);
      }
      arrived[r.t][r.k] = 1;
    }
    while (!sends.empty() && sends.front()->Complete()) sends.pop_front();
  }
}

}  // namespace ringmaster::comm
