#include "monitor/series_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace ringmaster::monitor {
namespace {

constexpr char kMagic[8] = {'R', 'M', 'T', 'S', 'D', 'B', '1', '\n'};
constexpr uint32_t kMaxKeyBytes = 1024;

int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t Mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }

// FNV-1a over the file's bytes: a torn or damaged file is told from a good one.
uint64_t Fnv(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  template <typename T>
  bool Get(T* v) {
    if (s_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool Bytes(size_t n, std::string* out) {
    if (s_.size() - pos_ < n) return false;
    out->assign(s_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool Floats(size_t n, std::vector<float>* out) {
    if ((s_.size() - pos_) / sizeof(float) < n) return false;
    out->resize(n);
    std::memcpy(out->data(), s_.data() + pos_, n * sizeof(float));
    pos_ += n * sizeof(float);
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

SeriesStore::SeriesStore(SeriesStoreOptions options) : options_(std::move(options)) {}

void SeriesStore::AddToRing(size_t tier, Ring& r, int64_t t_ms, double value, int64_t weight) const {
  const TierSpec& spec = options_.tiers[tier];
  const size_t points = static_cast<size_t>(spec.points);
  const int64_t slot = FloorDiv(t_ms, spec.resolution_ms);
  if (r.head_slot >= 0 && slot < r.head_slot) return;  // older than what it holds: the caller refused it
  if (slot != r.head_slot) {
    if (r.head_slot >= 0 && slot - r.head_slot > static_cast<int64_t>(points)) {
      // Silent for longer than the ring holds: nothing it holds is still in reach.
      r.avg.clear();
      r.max.clear();
      r.full = false;
      r.head_slot = -1;
    }
    if (r.head_slot < 0) r.first_slot = slot;
    // Slots skipped since the head hold nothing (NaN); then the new slot.
    const int64_t from = r.head_slot < 0 ? slot : r.head_slot + 1;
    for (int64_t s = from; s <= slot; ++s) {
      const float v = s == slot ? 0.f : std::numeric_limits<float>::quiet_NaN();
      if (!r.full) {
        r.avg.push_back(v);
        r.max.push_back(v);
        if (r.avg.size() == points) {
          // Full: from now on slot s lives at s % points. Element 0 holds
          // first_slot, so everything moves right by first_slot % points.
          const size_t right = static_cast<size_t>(Mod(r.first_slot, static_cast<int64_t>(points)));
          std::rotate(r.avg.begin(), r.avg.begin() + static_cast<ptrdiff_t>((points - right) % points), r.avg.end());
          std::rotate(r.max.begin(), r.max.begin() + static_cast<ptrdiff_t>((points - right) % points), r.max.end());
          // Grown by doubling, the vectors may hold up to twice the ring: from
          // now on they never grow, so they keep exactly its size.
          r.avg.shrink_to_fit();
          r.max.shrink_to_fit();
          r.full = true;
        }
      } else {
        const size_t i = static_cast<size_t>(Mod(s, static_cast<int64_t>(points)));
        r.avg[i] = v;
        r.max[i] = v;
      }
    }
    r.head_slot = slot;
    r.sum = 0;
    r.peak = -std::numeric_limits<double>::infinity();
    r.count = 0;
  }
  r.sum += value * static_cast<double>(weight);
  r.count += weight;
  r.peak = std::max(r.peak, value);
  const size_t i = r.full ? static_cast<size_t>(Mod(slot, static_cast<int64_t>(points)))
                          : static_cast<size_t>(slot - r.first_slot);
  r.avg[i] = static_cast<float>(r.sum / static_cast<double>(r.count));
  r.max[i] = static_cast<float>(r.peak);
}

bool SeriesStore::Get(size_t tier, const Ring& r, int64_t slot, float* avg, float* max) const {
  if (r.head_slot < 0 || slot > r.head_slot) return false;
  const int64_t points = options_.tiers[tier].points;
  size_t i;
  if (r.full) {
    if (slot <= r.head_slot - points) return false;
    i = static_cast<size_t>(Mod(slot, points));
  } else {
    if (slot < r.first_slot) return false;
    i = static_cast<size_t>(slot - r.first_slot);
    if (i >= r.avg.size()) return false;
  }
  if (std::isnan(r.avg[i])) return false;
  *avg = r.avg[i];
  *max = r.max[i];
  return true;
}

bool SeriesStore::Add(const std::string& key, int64_t t_ms, double value) {
  // Times are milliseconds since 1970, well within 2^50 (year 37,000): no
  // arithmetic on them can overflow.
  if (!std::isfinite(value) || key.size() > kMaxKeyBytes || t_ms < 0 || t_ms > (int64_t{1} << 50)) return false;
  std::lock_guard<std::mutex> l(mu_);
  auto it = series_.find(key);
  if (it == series_.end()) {
    const bool capped = IsCapped(key);
    if (series_.size() >= options_.max_series || (capped && capped_ >= options_.max_capped_series)) {
      ++dropped_;
      return false;
    }
    it = series_.emplace(key, Series{}).first;
    it->second.rings.resize(options_.tiers.size());
    if (capped) ++capped_;
  }
  Series& s = it->second;
  if (t_ms < s.last_ms - options_.clock_reset_ms) {
    // The clock was set back: what it holds lies "in the future" and would
    // refuse every sample until the clock caught up. Start afresh.
    s.rings.assign(options_.tiers.size(), Ring{});
    s.last_ms = 0;
  }
  const int64_t slot0 = FloorDiv(t_ms, options_.tiers[0].resolution_ms);
  if (s.rings[0].head_slot >= 0 && slot0 < s.rings[0].head_slot) {
    ++dropped_;
    return false;
  }
  for (size_t k = 0; k < s.rings.size(); ++k) {
    const int64_t slot = FloorDiv(t_ms, options_.tiers[k].resolution_ms);
    if (s.rings[k].head_slot >= 0 && slot < s.rings[k].head_slot) continue;  // loaded history newer than this
    AddToRing(k, s.rings[k], t_ms, value, 1);
  }
  s.last_ms = std::max(s.last_ms, t_ms);
  return true;
}

bool SeriesStore::IsCapped(const std::string& key) const {
  return !options_.capped_prefix.empty() && key.compare(0, options_.capped_prefix.size(), options_.capped_prefix) == 0;
}

// The finest tier that loses nothing a coarser one holds from since_ms on:
// it reaches back to since_ms, or no coarser tier holds a sample before its
// oldest point (to within the coarser tier's resolution: a bucket's start is
// not its first sample's time). After a restart the raw ring is empty and a
// coarse one is chosen; in a long run, the raw ring for the last minutes.
static size_t PickTier(const SeriesStoreOptions& o, const std::vector<int64_t>& oldest_ms, int64_t since_ms) {
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  for (size_t k = 0; k < o.tiers.size(); ++k) {
    if (oldest_ms[k] == kNone) continue;
    if (oldest_ms[k] <= since_ms) return k;
    bool complete = true;
    for (size_t j = k + 1; j < o.tiers.size() && complete; ++j) {
      if (oldest_ms[j] == kNone) continue;
      complete = oldest_ms[k] < std::max(since_ms, oldest_ms[j]) + o.tiers[j].resolution_ms;
    }
    if (complete) return k;
  }
  return o.tiers.size() - 1;
}

std::vector<Point> SeriesStore::Query(const std::string& key, int64_t since_ms, int64_t step_ms,
                                      int64_t* step_used) const {
  std::vector<Point> out;
  if (step_used) *step_used = options_.tiers[0].resolution_ms;
  std::lock_guard<std::mutex> l(mu_);
  auto it = series_.find(key);
  if (it == series_.end()) return out;
  const Series& s = it->second;
  std::vector<int64_t> oldest(s.rings.size(), std::numeric_limits<int64_t>::max());
  for (size_t k = 0; k < s.rings.size(); ++k) {
    const Ring& r = s.rings[k];
    if (r.head_slot < 0) continue;
    const int64_t res = options_.tiers[k].resolution_ms;
    const int64_t first = r.full ? r.head_slot - options_.tiers[k].points + 1 : r.first_slot;
    for (int64_t slot = first; slot <= r.head_slot; ++slot) {
      float a, m;
      if (Get(k, r, slot, &a, &m)) {
        oldest[k] = slot * res;
        break;
      }
    }
  }
  const size_t k = PickTier(options_, oldest, since_ms);
  const Ring& r = s.rings[k];
  if (r.head_slot < 0) return out;
  const int64_t res = options_.tiers[k].resolution_ms;
  const int64_t step = std::max<int64_t>(res, (std::max<int64_t>(step_ms, 1) + res - 1) / res * res);
  if (step_used) *step_used = step;
  const int64_t per = step / res;
  // Only the slots the ring holds are visited, whatever the step asked for.
  const int64_t held_from = r.full ? r.head_slot - options_.tiers[k].points + 1 : r.first_slot;
  int64_t slot = std::max(FloorDiv(since_ms, step) * per, held_from);
  slot = FloorDiv(slot, per) * per;
  for (; slot <= r.head_slot; slot += per) {
    double sum = 0, mx = -std::numeric_limits<double>::infinity();
    int n = 0;
    for (int64_t j = std::max(slot, held_from); j < slot + per && j <= r.head_slot; ++j) {
      float a, m;
      if (!Get(k, r, j, &a, &m)) continue;
      sum += a;
      mx = std::max(mx, static_cast<double>(m));
      ++n;
    }
    if (n > 0 && slot * res + step > since_ms) out.push_back(Point{slot * res, sum / n, mx});
  }
  return out;
}

std::optional<double> SeriesStore::Mean(const std::string& key, int64_t since_ms) const {
  auto points = Query(key, since_ms, 0);
  double sum = 0;
  int n = 0;
  for (const Point& p : points) {
    if (p.t_ms < since_ms) continue;
    sum += p.avg;
    ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

std::optional<Point> SeriesStore::Last(const std::string& key, int64_t since_ms) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = series_.find(key);
  if (it == series_.end()) return std::nullopt;
  const Ring& r = it->second.rings[0];
  float a, m;
  if (r.head_slot < 0 || !Get(0, r, r.head_slot, &a, &m)) return std::nullopt;
  const int64_t t = r.head_slot * options_.tiers[0].resolution_ms;
  if (it->second.last_ms < since_ms) return std::nullopt;
  return Point{t, a, m};
}

std::vector<std::string> SeriesStore::Keys(const std::string& prefix) const {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = series_.lower_bound(prefix); it != series_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    out.push_back(it->first);
  }
  return out;
}

void SeriesStore::Erase(const std::string& prefix) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = series_.lower_bound(prefix);
  while (it != series_.end() && it->first.compare(0, prefix.size(), prefix) == 0) {
    if (IsCapped(it->first)) --capped_;
    it = series_.erase(it);
  }
}

size_t SeriesStore::EraseIdle(int64_t before_ms, const std::string& prefix) {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  for (auto it = series_.lower_bound(prefix); it != series_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    if (it->second.last_ms < before_ms) {
      if (IsCapped(it->first)) --capped_;
      it = series_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

size_t SeriesStore::series() const {
  std::lock_guard<std::mutex> l(mu_);
  return series_.size();
}

uint64_t SeriesStore::dropped() const {
  std::lock_guard<std::mutex> l(mu_);
  return dropped_;
}

size_t SeriesStore::MemoryBytes() const {
  std::lock_guard<std::mutex> l(mu_);
  size_t b = 0;
  for (const auto& [key, s] : series_) {
    b += key.capacity() + sizeof(Series) + 48;  // the map's node
    for (const Ring& r : s.rings) b += sizeof(Ring) + (r.avg.capacity() + r.max.capacity()) * sizeof(float);
  }
  return b;
}

size_t SeriesStore::BytesPerSeries() const {
  size_t b = 0;
  for (const TierSpec& t : options_.tiers) b += static_cast<size_t>(t.points) * 2 * sizeof(float);
  return b;
}

namespace {

// Appends to a file through a buffer, keeping the FNV-1a of what it wrote.
class HashedWriter {
 public:
  explicit HashedWriter(int fd) : fd_(fd) {}
  void Append(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      hash_ ^= b[i];
      hash_ *= 1099511628211ULL;
    }
    buf_.append(reinterpret_cast<const char*>(p), n);
    if (buf_.size() >= (1 << 20)) Flush();
  }
  template <typename T>
  void Put(T v) {
    Append(&v, sizeof v);
  }
  // The first write error (errno), or 0.
  int Flush() {
    size_t done = 0;
    while (err_ == 0 && done < buf_.size()) {
      const ssize_t w = ::write(fd_, buf_.data() + done, buf_.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) err_ = w < 0 ? errno : EIO;
      else done += static_cast<size_t>(w);
    }
    buf_.clear();
    return err_;
  }
  uint64_t hash() const { return hash_; }

 private:
  int fd_;
  std::string buf_;
  uint64_t hash_ = 1469598103934665603ULL;
  int err_ = 0;
};

}  // namespace

Status SeriesStore::Save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Internal(fmt::format("{}: {}", tmp, std::strerror(errno)));
  HashedWriter out(fd);
  out.Append(kMagic, sizeof kMagic);
  out.Put<uint32_t>(static_cast<uint32_t>(options_.tiers.size()));
  for (const TierSpec& t : options_.tiers) {
    out.Put<int64_t>(t.resolution_ms);
    out.Put<int32_t>(t.points);
  }
  std::vector<std::string> keys;
  {
    std::lock_guard<std::mutex> l(mu_);
    keys.reserve(series_.size());
    for (const auto& [key, s] : series_) keys.push_back(key);
  }
  uint64_t count = 0;
  for (const std::string& key : keys) {
    Series copy;
    {
      // One series at a time: Add waits for this copy, never for the file.
      std::lock_guard<std::mutex> l(mu_);
      auto it = series_.find(key);
      if (it == series_.end()) continue;
      copy.last_ms = it->second.last_ms;
      copy.rings.assign(it->second.rings.begin() + 1, it->second.rings.end());  // the finest tier is not kept
    }
    out.Put<uint8_t>(1);
    out.Put<uint32_t>(static_cast<uint32_t>(key.size()));
    out.Append(key.data(), key.size());
    out.Put<int64_t>(copy.last_ms);
    for (const Ring& r : copy.rings) {
      out.Put<int64_t>(r.head_slot);
      out.Put<int64_t>(r.first_slot);
      out.Put<uint8_t>(r.full ? 1 : 0);
      out.Put<uint32_t>(static_cast<uint32_t>(r.avg.size()));
      out.Append(r.avg.data(), r.avg.size() * sizeof(float));
      out.Append(r.max.data(), r.max.size() * sizeof(float));
      out.Put<double>(r.sum);
      out.Put<double>(r.peak);
      out.Put<int64_t>(r.count);
    }
    ++count;
  }
  out.Put<uint8_t>(0);
  out.Put<uint64_t>(count);
  const uint64_t sum = out.hash();
  out.Append(&sum, sizeof sum);
  int err = out.Flush();
  if (err == 0 && ::fdatasync(fd) != 0) err = errno;
  ::close(fd);
  if (err != 0) {
    ::unlink(tmp.c_str());
    if (err == ENOSPC) return ResourceExhausted(fmt::format("{}: the disk is full", tmp));
    return Internal(fmt::format("{}: {}", tmp, std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Internal(fmt::format("{}: rename: {}", path, std::strerror(errno)));
  // The rename itself survives a crash only once the directory is on disk.
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
  if (int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    (void)::fsync(d);
    ::close(d);
  }
  return Status::Ok();
}

Status SeriesStore::Load(const std::string& path) {
  std::string data;
  {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return errno == ENOENT ? Status::Ok() : Internal(fmt::format("{}: {}", path, std::strerror(errno)));
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, n);
    std::fclose(f);
  }
  auto damaged = [&](const std::string& why) { return DataLoss(fmt::format("{}: {}; the history it held is dropped", path, why)); };
  if (data.size() < sizeof kMagic + 8 || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0) return damaged("not a series file");
  uint64_t sum;
  std::memcpy(&sum, data.data() + data.size() - 8, 8);
  data.resize(data.size() - 8);
  if (Fnv(data) != sum) return damaged("its checksum does not match (torn or damaged)");
  Reader in(data);
  std::string skip;
  in.Bytes(sizeof kMagic, &skip);
  uint32_t tiers;
  if (!in.Get(&tiers) || tiers != options_.tiers.size()) return damaged("it was written with other tiers");
  for (const TierSpec& t : options_.tiers) {
    int64_t res;
    int32_t points;
    if (!in.Get(&res) || !in.Get(&points) || res != t.resolution_ms || points != t.points) {
      return damaged("it was written with other tiers");
    }
  }
  std::map<std::string, Series> loaded;
  size_t capped = 0;
  for (;;) {
    uint8_t tag;
    if (!in.Get(&tag)) return damaged("truncated");
    if (tag == 0) break;
    if (tag != 1 || loaded.size() >= options_.max_series) return damaged("bad record");
    uint32_t klen;
    std::string key;
    Series s;
    if (!in.Get(&klen) || klen > kMaxKeyBytes || !in.Bytes(klen, &key) || !in.Get(&s.last_ms)) return damaged("truncated");
    s.rings.resize(options_.tiers.size());
    for (size_t k = 1; k < options_.tiers.size(); ++k) {
      Ring& r = s.rings[k];
      uint8_t full;
      uint32_t n;
      if (!in.Get(&r.head_slot) || !in.Get(&r.first_slot) || !in.Get(&full) || !in.Get(&n) ||
          n > static_cast<uint32_t>(options_.tiers[k].points) || !in.Floats(n, &r.avg) || !in.Floats(n, &r.max) ||
          !in.Get(&r.sum) || !in.Get(&r.peak) || !in.Get(&r.count)) {
        return damaged("truncated");
      }
      r.full = full != 0;
      if (r.full != (n == static_cast<uint32_t>(options_.tiers[k].points)) || (r.head_slot >= 0 && n == 0) ||
          (!r.full && r.head_slot >= 0 && r.head_slot - r.first_slot + 1 != static_cast<int64_t>(n))) {
        return damaged("inconsistent ring");
      }
    }
    if (IsCapped(key)) ++capped;
    loaded.emplace(std::move(key), std::move(s));
  }
  uint64_t count;
  if (!in.Get(&count) || count != loaded.size()) return damaged("bad series count");
  if (in.pos() != data.size()) return damaged("trailing bytes");
  std::lock_guard<std::mutex> l(mu_);
  series_ = std::move(loaded);
  capped_ = capped;
  return Status::Ok();
}

}  // namespace ringmaster::monitor
