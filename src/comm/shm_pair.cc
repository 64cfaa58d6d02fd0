#include "comm/shm_pair.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace ringmaster::comm {
namespace {

constexpr uint64_t kMagic = 0x72696e67636f6d33ULL;  // "ringcom3": two channels, a failure note
constexpr int kChannels = ShmSegment::kChannels;

struct alignas(64) BellWord {
  std::atomic<uint32_t> value;
  std::atomic<uint32_t> sleepers;
};

struct alignas(64) Header {
  uint64_t magic;
  int32_t pid;
  int32_t size;
  uint64_t ring_bytes[kChannels];
  std::atomic<uint32_t> broken;
  std::atomic<uint32_t> left;
  BellWord bells[kChannels];
  // Written before `broken` is set (release), read after it is seen (acquire).
  uint32_t note_code;
  uint32_t note_len;
  char note[ShmSegment::kMaxNote];
};

struct alignas(64) RingCtl {
  std::atomic<uint64_t> head;  // bytes ever written (producer)
  char pad1[56];
  std::atomic<uint64_t> tail;  // bytes ever read (consumer)
  char pad2[56];
};

size_t RingStride(size_t ring_bytes) { return sizeof(RingCtl) + ring_bytes; }

// Channel c's rings follow all of channel c-1's.
size_t RingOffset(int size, const uint64_t* ring_bytes, int channel, int from_rank) {
  size_t off = sizeof(Header);
  for (int c = 0; c < channel; ++c) off += static_cast<size_t>(size) * RingStride(ring_bytes[c]);
  return off + static_cast<size_t>(from_rank) * RingStride(ring_bytes[channel]);
}

size_t SegmentBytes(int size, const uint64_t* ring_bytes) {
  size_t bytes = sizeof(Header);
  for (int c = 0; c < kChannels; ++c) bytes += static_cast<size_t>(size) * RingStride(ring_bytes[c]);
  return bytes;
}

Header* H(void* base) { return static_cast<Header*>(base); }

long Futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

class ShmBell final : public Doorbell {
 public:
  explicit ShmBell(BellWord* w) : w_(w) {}
  uint32_t Read() const override { return w_->value.load(std::memory_order_seq_cst); }
  void Ring() override {
    w_->value.fetch_add(1, std::memory_order_seq_cst);
    if (w_->sleepers.load(std::memory_order_seq_cst) > 0) Futex(&w_->value, FUTEX_WAKE, INT_MAX, nullptr);
  }
  void Wait(uint32_t seen, std::chrono::milliseconds timeout) override {
    w_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>((timeout.count() % 1000) * 1000000)};
    Futex(&w_->value, FUTEX_WAIT, seen, &ts);
    w_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }

 private:
  BellWord* w_;
};

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

void ShmSegment::Map(void* base, size_t bytes) {
  base_ = base;
  bytes_ = bytes;
  for (int c = 0; c < kChannels; ++c) bells_[c] = std::make_unique<ShmBell>(&H(base)->bells[c]);
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const std::string& name, int size, RingSizes ring_bytes) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable(fmt::format("shm_open {}: {}", name, std::strerror(errno)));
  uint64_t rb[kChannels];
  for (int c = 0; c < kChannels; ++c) rb[c] = ring_bytes[c];
  size_t bytes = SegmentBytes(size, rb);
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
  s->owner_ = true;
  Header* h = new (base) Header();
  h->pid = getpid();
  h->size = size;
  for (int c = 0; c < kChannels; ++c) {
    h->ring_bytes[c] = rb[c];
    for (int r = 0; r < size; ++r) new (static_cast<char*>(base) + RingOffset(size, rb, c, r)) RingCtl();
  }
  s->Map(base, bytes);
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  return s;
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& name, int size) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable(fmt::format("shm_open {}: {}", name, std::strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Header))) {
    close(fd);
    return Unavailable("shm " + name + " is not a ringcomm segment");
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Unavailable(fmt::format("mmap {}: {}", name, std::strerror(errno)));
  const Header* h = H(base);
  bool sane = h->magic == kMagic && h->size == size;
  for (int c = 0; c < kChannels && sane; ++c) sane = h->ring_bytes[c] > 0 && h->ring_bytes[c] <= (size_t{1} << 32);
  if (!sane || SegmentBytes(size, h->ring_bytes) > bytes) {
    munmap(base, bytes);
    return Unavailable(fmt::format("shm {} is not a ringcomm segment for {} ranks", name, size));
  }
  std::unique_ptr<ShmSegment> s(new ShmSegment());
  s->name_ = name;
  s->Map(base, bytes);
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

ShmSegment::RingView ShmSegment::ring(int channel, int from_rank) {
  const Header* h = H(base_);
  char* p = static_cast<char*>(base_) + RingOffset(h->size, h->ring_bytes, channel, from_rank);
  return {reinterpret_cast<RingCtl*>(p), p + sizeof(RingCtl), h->ring_bytes[channel]};
}

// Both bells ring, so whichever engine sleeps wakes and sees the flag.
void ShmSegment::SetBroken(uint32_t code, const std::string& note) {
  Header* h = H(base_);
  if (h->broken.load(std::memory_order_acquire) == 0 && code != 0) {
    const size_t n = std::min(note.size(), kMaxNote);
    std::memcpy(h->note, note.data(), n);
    h->note_len = static_cast<uint32_t>(n);
    h->note_code = code;
  }
  h->broken.store(1, std::memory_order_release);
  for (auto& b : bells_) b->Ring();
}

bool ShmSegment::BrokenNote(uint32_t* code, std::string* note) const {
  const Header* h = H(base_);
  if (h->broken.load(std::memory_order_acquire) == 0 || h->note_code == 0) return false;
  *code = h->note_code;
  note->assign(h->note, std::min<size_t>(h->note_len, kMaxNote));
  return true;
}
void ShmSegment::SetLeft() {
  H(base_)->left.store(1);
  for (auto& b : bells_) b->Ring();
}
bool ShmSegment::Broken() const { return H(base_)->broken.load() != 0; }
bool ShmSegment::Left() const { return H(base_)->left.load() != 0; }

ShmPair::ShmPair(ShmSegment* mine, std::shared_ptr<ShmSegment> theirs, int my_rank, int peer_rank, int channel)
    : mine_(mine), theirs_(std::move(theirs)), my_rank_(my_rank), peer_rank_(peer_rank), channel_(channel) {}

StatusOr<size_t> ShmPair::TryWrite(const iovec* iov, int n) {
  auto r = theirs_->ring(channel_, my_rank_);
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
    theirs_->bell(channel_)->Ring();
  }
  return moved;
}

StatusOr<size_t> ShmPair::TryRead(const iovec* iov, int n) {
  auto r = mine_->ring(channel_, peer_rank_);
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
    theirs_->bell(channel_)->Ring();  // the producer may be waiting for space
  }
  return moved;
}

size_t ShmPair::Peek(void* buf, size_t n) {
  auto r = mine_->ring(channel_, peer_rank_);
  uint64_t tail = r.ctl->tail.load(std::memory_order_relaxed);
  uint64_t head = r.ctl->head.load(std::memory_order_acquire);
  size_t len = std::min(n, static_cast<size_t>(head - tail));
  size_t pos = static_cast<size_t>(tail % r.bytes);
  size_t first = std::min(len, r.bytes - pos);
  std::memcpy(buf, r.data + pos, first);
  std::memcpy(static_cast<char*>(buf) + first, r.data, len - first);
  return len;
}

PeerState ShmPair::State() const {
  if (theirs_->Broken()) return PeerState::kBroken;
  if (theirs_->Left()) return PeerState::kLeft;
  if (!ProcessAlive(theirs_->owner_pid())) return PeerState::kGone;
  return PeerState::kAlive;
}

// The flags live in this rank's segment: one for all its pairs.
void ShmPair::Shutdown(bool clean) {
  if (clean) mine_->SetLeft();
  else mine_->SetBroken();
}

void ShmPair::Fail(StatusCode code, const std::string& cause) { mine_->SetBroken(static_cast<uint32_t>(code), cause); }

bool ShmPair::PeerFailure(StatusCode* code, std::string* cause) const {
  uint32_t c = 0;
  if (!theirs_->BrokenNote(&c, cause)) return false;
  if (c <= static_cast<uint32_t>(StatusCode::kOk) || c > static_cast<uint32_t>(StatusCode::kInternal)) return false;
  *code = static_cast<StatusCode>(c);
  for (char& ch : *cause) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  }
  return !cause->empty();
}

}  // namespace ringmaster::comm
