// IPv4 addresses and prefixes for the container overlay (docs/cluster.md):
// the cluster's subnet (10.244.0.0/16 by default), each node's block of it
// (a /24: 10.244.3.0/24) and task addresses within a block (.2 upwards; .1
// is kept for a gateway). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ringmaster::net {

struct Ipv4Net {
  uint32_t addr = 0;  // host byte order; no bits past the prefix
  int prefix = 32;
  bool operator==(const Ipv4Net&) const = default;
};

// "10.244.3.7" -> the address; nullopt for anything else (no leading zeros,
// no missing or extra parts).
std::optional<uint32_t> ParseIpv4(std::string_view text);
std::string FormatIpv4(uint32_t addr);
// "10.244.0.0/16"; an address with bits set past the prefix is refused.
StatusOr<Ipv4Net> ParseCidr(std::string_view text);
std::string FormatCidr(const Ipv4Net& net);
bool Contains(const Ipv4Net& net, uint32_t addr);

// How many blocks of `block_prefix` bits `subnet` holds (0 when the block is
// not inside it), and block k of them (nullopt past the last).
int BlockCount(const Ipv4Net& subnet, int block_prefix);
std::optional<Ipv4Net> Block(const Ipv4Net& subnet, int block_prefix, int k);
// Task address i of a block, i >= 2 (.1 is the gateway's); nullopt past the
// last address before the broadcast one.
std::optional<uint32_t> TaskAddress(const Ipv4Net& block, int i);

}  // namespace ringmaster::net
