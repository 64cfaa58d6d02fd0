#include "net/ipv4.h"

#include <fmt/format.h>

namespace ringmaster::net {
namespace {

uint32_t Mask(int prefix) { return prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix); }

}  // namespace

std::optional<uint32_t> ParseIpv4(std::string_view text) {
  uint32_t addr = 0;
  int parts = 0;
  size_t i = 0;
  while (parts < 4) {
    size_t start = i;
    uint32_t v = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i - start < 3) v = v * 10 + (text[i++] - '0');
    const size_t len = i - start;
    if (len == 0 || v > 255 || (len > 1 && text[start] == '0')) return std::nullopt;
    addr = addr << 8 | v;
    if (++parts < 4) {
      if (i >= text.size() || text[i] != '.') return std::nullopt;
      ++i;
    }
  }
  if (i != text.size()) return std::nullopt;
  return addr;
}

std::string FormatIpv4(uint32_t a) {
  return fmt::format("{}.{}.{}.{}", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
}

StatusOr<Ipv4Net> ParseCidr(std::string_view text) {
  const size_t slash = text.find('/');
  auto addr = ParseIpv4(text.substr(0, slash));
  if (slash == std::string_view::npos || !addr) {
    return InvalidArgument(fmt::format("\"{}\" is not an IPv4 prefix like 10.244.0.0/16", text.substr(0, 64)));
  }
  std::string_view p = text.substr(slash + 1);
  int prefix = 0;
  if (p.empty() || p.size() > 2) return InvalidArgument(fmt::format("\"{}\": the prefix length must be 0-32", text.substr(0, 64)));
  for (char c : p) {
    if (c < '0' || c > '9') return InvalidArgument(fmt::format("\"{}\": the prefix length must be 0-32", text.substr(0, 64)));
    prefix = prefix * 10 + (c - '0');
  }
  if (prefix > 32) return InvalidArgument(fmt::format("\"{}\": the prefix length must be 0-32", text.substr(0, 64)));
  if ((*addr & ~Mask(prefix)) != 0) {
    return InvalidArgument(fmt::format("\"{}\" has host bits set (did you mean {}/{}?)", text.substr(0, 64),
                                       FormatIpv4(*addr & Mask(prefix)), prefix));
  }
  return Ipv4Net{*addr, prefix};
}

std::string FormatCidr(const Ipv4Net& n) { return fmt::format("{}/{}", FormatIpv4(n.addr), n.prefix); }

bool Contains(const Ipv4Net& n, uint32_t a) { return (a & Mask(n.prefix)) == n.addr; }

int BlockCount(const Ipv4Net& subnet, int block_prefix) {
  if (block_prefix < subnet.prefix || block_prefix > 30) return 0;
  const int bits = block_prefix - subnet.prefix;
  return bits >= 24 ? 1 << 24 : 1 << bits;  // a bound anyone would meet first elsewhere
}

std::optional<Ipv4Net> Block(const Ipv4Net& subnet, int block_prefix, int k) {
  if (k < 0 || k >= BlockCount(subnet, block_prefix)) return std::nullopt;
  return Ipv4Net{subnet.addr | (static_cast<uint32_t>(k) << (32 - block_prefix)), block_prefix};
}

std::optional<uint32_t> TaskAddress(const Ipv4Net& block, int i) {
  if (block.prefix > 30 || i < 2) return std::nullopt;
  const uint64_t size = uint64_t{1} << (32 - block.prefix);
  if (static_cast<uint64_t>(i) >= size - 1) return std::nullopt;
  return block.addr + static_cast<uint32_t>(i);
}

}  // namespace ringmaster::net
