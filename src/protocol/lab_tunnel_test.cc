#include "protocol/lab_tunnel.h"

#include <gtest/gtest.h>

namespace ringmaster::protocol {
namespace {

TEST(TunnelTicket, SignedTicketsVerifyUntilTheyExpire) {
  const std::string key = NodeTunnelKey("server secret", "gpu-1");
  const TunnelTicket t{42, 3, 1'000'000};
  const std::string text = SignTunnelTicket(t, key);
  EXPECT_EQ(text.rfind("v1.42.3.1000000.", 0), 0u) << text;
  EXPECT_EQ(VerifyTunnelTicket(text, key, 999'999).value(), t);
  EXPECT_EQ(VerifyTunnelTicket(text, key, 1'000'000).status().code(), StatusCode::kDeadlineExceeded);
}

TEST(TunnelTicket, AnotherNodesKeyOrAnAlteredTicketIsRefused) {
  const std::string key = NodeTunnelKey("server secret", "gpu-1");
  EXPECT_NE(key, NodeTunnelKey("server secret", "gpu-2"));
  EXPECT_NE(key, NodeTunnelKey("other secret", "gpu-1"));
  const std::string text = SignTunnelTicket({42, 3, 1'000'000}, key);
  EXPECT_EQ(VerifyTunnelTicket(text, NodeTunnelKey("server secret", "gpu-2"), 0).status().code(),
            StatusCode::kPermissionDenied);
  // Another task (or attempt) with the same signature: the MAC covers them.
  std::string other = text;
  other.replace(0, 5, "v1.43");
  EXPECT_EQ(VerifyTunnelTicket(other, key, 0).status().code(), StatusCode::kPermissionDenied);
  for (std::string bad : {std::string(""), std::string("v1.42.3.1000000"), std::string("v2") + text.substr(2),
                          text + ".x", std::string("v1.-1.3.5.") + std::string(64, 'a')}) {
    EXPECT_EQ(VerifyTunnelTicket(bad, key, 0).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace ringmaster::protocol
