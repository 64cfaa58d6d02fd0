#include "net/nft.h"

#include <nftables/libnftables.h>

#include <cctype>
#include <mutex>


namespace ringmaster::net {
namespace {

// libnftables (1.0.6) keeps process-wide state that its contexts share: an
// interface cache filled by the first lookup (`iif "lo"`) and released by
// every nft_ctx_free, and libgmp's allocator. Every call holds this.
std::mutex& LibraryMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

StatusOr<std::unique_ptr<Nft>> Nft::Create() {
  std::lock_guard<std::mutex> l(LibraryMutex());
  nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (ctx == nullptr) return Internal("nftables: no context (libnftables)");
  if (nft_ctx_buffer_output(ctx) != 0 || nft_ctx_buffer_error(ctx) != 0) {
    nft_ctx_free(ctx);
    return Internal("nftables: cannot buffer a context's output");
  }
  return std::unique_ptr<Nft>(new Nft(ctx));
}

Nft::~Nft() {
  std::lock_guard<std::mutex> l(LibraryMutex());
  nft_ctx_free(ctx_);
}

StatusOr<std::string> Nft::Run(const std::string& commands, const std::string& what) {
  std::lock_guard<std::mutex> l(LibraryMutex());
  const int rc = nft_run_cmd_from_buffer(ctx_, commands.c_str());
  std::string out = nft_ctx_get_output_buffer(ctx_);
  std::string err = nft_ctx_get_error_buffer(ctx_);
  while (!err.empty() && std::isspace(static_cast<unsigned char>(err.back()))) err.pop_back();
  if (rc != 0) return Internal(what + ": " + (err.empty() ? "nft failed" : err));
  return out;
}

}  // namespace ringmaster::net
