#include "comm/environment.h"

#include <cstdlib>

#include <fmt/format.h>

#include "comm/auth.h"

namespace ringmaster::comm {
namespace {

StatusOr<std::string> Var(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return InvalidArgument(fmt::format("{}: not set (is this running as a Ringmaster task?)", name));
  return std::string(v);
}

StatusOr<int> IntVar(const char* name) {
  RM_ASSIGN_OR_RETURN(std::string v, Var(name));
  try {
    size_t pos;
    int n = std::stoi(v, &pos);
    if (pos == v.size()) return n;
  } catch (...) {
  }
  return InvalidArgument(fmt::format("{}: \"{}\" is not an integer", name, v));
}

}  // namespace

StatusOr<Group> JoinFromEnvironment(Options options) {
  RM_ASSIGN_OR_RETURN(std::string store_addr, Var("RINGMASTER_STORE"));
  RM_ASSIGN_OR_RETURN(int rank, IntVar("RANK"));
  RM_ASSIGN_OR_RETURN(int size, IntVar("WORLD_SIZE"));
  auto colon = store_addr.rfind(':');
  int port = 0;
  if (colon != std::string::npos) {
    try {
      port = std::stoi(store_addr.substr(colon + 1));
    } catch (...) {
    }
  }
  if (colon == std::string::npos || port <= 0 || port > 65535) {
    return InvalidArgument(fmt::format("RINGMASTER_STORE: \"{}\" is not host:port", store_addr));
  }
  const std::string host = store_addr.substr(0, colon);
  if (std::getenv("RINGMASTER_GENERATION")) {
    RM_ASSIGN_OR_RETURN(options.generation, IntVar("RINGMASTER_GENERATION"));
  }
  if (const char* addr = std::getenv("RINGMASTER_ADDR"); addr && *addr) options.address = addr;
  // The deadline of setup and of every collective, in seconds: a rank that
  // hangs (stopped, deadlocked, a dead link) fails its peers' next operation
  // with DeadlineExceeded naming it, and the job restarts instead of hanging.
  if (const char* t = std::getenv("RINGMASTER_COMM_TIMEOUT"); t && *t) {
    char* end = nullptr;
    const double secs = std::strtod(t, &end);
    if (end == t || *end != '\0' || !(secs > 0) || secs > 86400) {
      return InvalidArgument(fmt::format("RINGMASTER_COMM_TIMEOUT: \"{}\" is not a number of seconds in (0, 86400]", t));
    }
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(secs * 1000));
  }

  // The job's secret: only its ranks may use the store or pose as a rank.
  options.secret = JobSecretFromEnvironment();

  Group g;
  if (rank == 0) {
    TcpStoreServerOptions so;
    so.secret = options.secret;
    RM_ASSIGN_OR_RETURN(g.server, TcpStoreServer::Start(host, port, so));
  }
  RM_ASSIGN_OR_RETURN(g.store, TcpStore::Connect(host, port, options.timeout, options.secret));
  RM_ASSIGN_OR_RETURN(g.context, Context::Create(g.store.get(), rank, size, options));
  g.options = options;
  return g;
}

StatusOr<Subgroup> JoinSubgroup(Store* store, const std::string& name, int rank, int size, const Options& options) {
  Subgroup g;
  g.store = std::make_unique<PrefixStore>(fmt::format("sub/{}/", name), store);
  auto ctx = Context::Create(g.store.get(), rank, size, options);
  if (!ctx.ok()) return ctx.status().Annotate(fmt::format("group {}", name));
  g.context = std::move(*ctx);
  return g;
}

}  // namespace ringmaster::comm
