// nftables in-process (libnftables, no `nft`): a context runs nft's own
// command language against the ruleset of the network namespace of the
// thread that made it. Not thread-safe: one per thread, or one guarded;
// libnftables' shared state makes every run take one process-wide lock.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

struct nft_ctx;

namespace ringmaster::net {

class Nft {
 public:
  static StatusOr<std::unique_ptr<Nft>> Create();
  ~Nft();
  // Runs `commands` (what `nft -f` reads) as one transaction and returns
  // what it printed (a `list`); an error names `what` and nft's message.
  StatusOr<std::string> Run(const std::string& commands, const std::string& what);

 private:
  Nft(nft_ctx* ctx, int socket) : ctx_(ctx), socket_(socket) {}
  nft_ctx* ctx_;
  int socket_;  // its netlink socket (-1: not found)
};

}  // namespace ringmaster::net
