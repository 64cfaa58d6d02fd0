#include "comm/shm_pair.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace ringmaster::comm {
namespace {

constexpr uint64_t kMagic = 0x72696e67636f6d6dULL;  // "ringcomm"

struct alignas(64) Header {
  uint64_t magic;
  int32_t pid;
  int32_t size;
  uint64_t ring_bytes;
  std::atomic<uint32_t> bell;
  std::atomic<uint32_t> sleepers;
  std::atomic<uint32_t> broken;
  std::atomic<uint32_t> left;
};

struct alignas(64) RingCtl {
  std::atomic<uint64_t> head;  // bytes ever written (producer)
  char pad1[56];
  std::atomic<uint64_t> tail;  // bytes ever read (consumer)
  char pad2[56];
};

size_t RingStride(size_t ring_bytes) { return sizeof(RingCtl) + ring_bytes; }
size_t SegmentBytes(int size, size_t ring_bytes) { return sizeof(Header) + static_cast<size_t>(size) * RingStride(ring_bytes); }

Header* H(void* base) { return static_cast<Header*>(base); }

long Futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

}  // namespace

struct ShmSegment::RingView {
  RingCtl* ctl;
  char* data;
  size_t bytes;
};

bool ProcessAlive(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  auto rp = line.rfind(')');
  return !(rp != std::string::npos && rp + 2 < line.size() && (line[rp + 2] == 'Z' || line[rp + 2] == 'X'));
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const std::string& name, int size, size_t ring_bytes) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable(fmt::format("shm_open {}: {}", name, std::strerror(errno)));
  size_t bytes = SegmentBytes(size, ring_bytes);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    return ResourceExhausted(fmt::format("shm {}: cannot size to {} bytes: {}", name, bytes, std::strerror(e)));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    return ResourceExhausted(fmt::format("mmap {}: {}", name, std::strerror(errno)));
  }
  std::unique_ptr<ShmSegment> s(new ShmSegment());
  s->name_ = name;
  s->base_ = base;
  s->bytes_ = bytes;
  s->owner_ = true;
  Header* h = new (base) Header();
  h->pid = getpid();
  h->size = size;
  h->ring_bytes = ring_bytes;
  for (int i = 0; i < size; ++i) new (static_cast<char*>(base) + sizeof(Header) + i * RingStride(ring_bytes)) RingCtl();
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  return s;
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable(fmt::format("shm_open {}: {}", name, std::strerror(errno)));
  struct stat st;
  fstat(fd, &st);
  void* base = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Unavailable(fmt::format("mmap {}: {}", name, std::strerror(errno)));
  if (H(base)->magic != kMagic) {
    munmap(base, static_cast<size_t>(st.st_size));
    return Unavailable("shm " + name + " is not a ringcomm segment");
  }
  std::unique_ptr<ShmSegment> s(new ShmSegment());
  s->name_ = name;
  s->base_ = base;
  s->bytes_ = static_cast<size_t>(st.st_size);
  return s;
}

ShmSegment::~ShmSegment() {
  if (base_) munmap(base_, bytes_);
  if (owner_) Unlink();
}

void ShmSegment::Unlink() {
  if (owner_ && !name_.empty()) shm_unlink(name_.c_str());
  owner_ = false;
}

pid_t ShmSegment::owner_pid() const { return H(base_)->pid; }
size_t ShmSegment::ring_bytes() const { return H(base_)->ring_bytes; }

ShmSegment::RingView ShmSegment::ring(int from_rank) {
  char* p = static_cast<char*>(base_) + sizeof(Header) + static_cast<size_t>(from_rank) * RingStride(ring_bytes());
  return {reinterpret_cast<RingCtl*>(p), p + sizeof(RingCtl), ring_bytes()};
}

void ShmSegment::Ring() {
  Header* h = H(base_);
  h->bell.fetch_add(1, std::memory_order_seq_cst);
  if (h->sleepers.load(std::memory_order_seq_cst) > 0) Futex(&h->bell, FUTEX_WAKE, INT_MAX, nullptr);
}

void ShmSegment::SetBroken() { H(base_)->broken.store(1); Ring(); }
void ShmSegment::SetLeft() { H(base_)->left.store(1); Ring(); }
bool ShmSegment::Broken() const { return H(base_)->broken.load() != 0; }
bool ShmSegment::Left() const { return H(base_)->left.load() != 0; }

uint32_t ShmSegment::Bell() const { return H(base_)->bell.load(std::memory_order_seq_cst); }

void ShmSegment::WaitBell(uint32_t seen, std::chrono::milliseconds timeout) {
  Header* h = H(base_);
  h->sleepers.fetch_add(1, std::memory_order_seq_cst);
  timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>((timeout.count() % 1000) * 1000000)};
  Futex(&h->bell, FUTEX_WAIT, seen, &ts);
  h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

ShmPair::ShmPair(ShmSegment* mine, std::shared_ptr<ShmSegment> theirs, int my_rank, int peer_rank)
    : mine_(mine), theirs_(std::move(theirs)), my_rank_(my_rank), peer_rank_(peer_rank) {}

StatusOr<size_t> ShmPair::TryWrite(const iovec* iov, int n) {
  auto r = theirs_->ring(my_rank_);
  uint64_t head = r.ctl->head.load(std::memory_order_relaxed);
  uint64_t tail = r.ctl->tail.load(std::memory_order_acquire);
  size_t space = r.bytes - static_cast<size_t>(head - tail);
  size_t moved = 0;
  for (int i = 0; i < n && space > 0; ++i) {
    const char* src = static_cast<const char*>(iov[i].iov_base);
    size_t len = std::min(iov[i].iov_len, space);
    size_t pos = static_cast<size_t>((head + moved) % r.bytes);
    size_t first = std::min(len, r.bytes - pos);
    std::memcpy(r.data + pos, src, first);
    std::memcpy(r.data, src + first, len - first);
    moved += len;
    space -= len;
    if (len < iov[i].iov_len) break;
  }
  if (moved > 0) {
    r.ctl->head.store(head + moved, std::memory_order_release);
    theirs_->Ring();
  }
  return moved;
}

StatusOr<size_t> ShmPair::TryRead(const iovec* iov, int n) {
  auto r = mine_->ring(peer_rank_);
  uint64_t tail = r.ctl->tail.load(std::memory_order_relaxed);
  uint64_t head = r.ctl->head.load(std::memory_order_acquire);
  size_t avail = static_cast<size_t>(head - tail);
  size_t moved = 0;
  for (int i = 0; i < n && avail > 0; ++i) {
    char* dst = static_cast<char*>(iov[i].iov_base);
    size_t len = std::min(iov[i].iov_len, avail);
    size_t pos = static_cast<size_t>((tail + moved) % r.bytes);
    size_t first = std::min(len, r.bytes - pos);
    std::memcpy(dst, r.data + pos, first);
    std::memcpy(dst + first, r.data, len - first);
    moved += len;
    avail -= len;
    if (len < iov[i].iov_len) break;
  }
  if (moved > 0) {
    r.ctl->tail.store(tail + moved, std::memory_order_release);
    theirs_->Ring();  // the producer may be waiting for space
  }
  return moved;
}

bool ShmPair::PeerAlive() const { return ProcessAlive(theirs_->owner_pid()); }

}  // namespace ringmaster::comm
