// The agent protocol's version: what a server and its agents must agree on.
// A server speaks kAgentProtocol and the one before it, so agents may run one
// release behind their server during an upgrade, never ahead of it
// (docs/install.md, "Versions").
#pragma once

namespace ringmaster {

// 1: agents send no version and fence at 70% of the register reply's lease_ms.
// 2: agents fence at its fence_after_ms, and list the tasks they hold when they register.
inline constexpr int kAgentProtocol = 2;
inline constexpr int kMinAgentProtocol = 1;

}  // namespace ringmaster
