#include "net/nft.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <sys/socket.h>

#include <cstdlib>

#include <gtest/gtest.h>

namespace ringmaster::net {
namespace {

// The process's NETLINK_NETFILTER sockets that a child would inherit.
int InheritedNetfilterSockets() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    int protocol = 0;
    socklen_t len = sizeof protocol;
    if (e->d_name[0] == '.' || getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0) continue;
    int domain = 0;
    len = sizeof domain;
    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len);
    if (domain == AF_NETLINK && protocol == NETLINK_NETFILTER && !(fcntl(fd, F_GETFD) & FD_CLOEXEC)) ++n;
  }
  closedir(d);
  return n;
}

TEST(Nft, AContextsSocketIsNotInheritedByChildren) {
  auto nft = Nft::Create();
  ASSERT_TRUE(nft.ok()) << nft.status().ToString();
  EXPECT_EQ(InheritedNetfilterSockets(), 0);
}

TEST(Nft, AnErrorNamesTheOperationAndNftsMessage) {
  auto nft = Nft::Create();
  ASSERT_TRUE(nft.ok());
  auto out = (*nft)->Run("add table ip t { nonsense }", "adding a test table");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message().rfind("adding a test table: ", 0), 0u) << out.status().ToString();
  EXPECT_NE(out.status().message().find("syntax error"), std::string::npos) << out.status().ToString();
}

}  // namespace
}  // namespace ringmaster::net
