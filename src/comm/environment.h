// Joining a ringcomm group from inside a Ringmaster task. The platform sets
// RINGMASTER_STORE (host:port of rank 0's rendezvous store), RANK,
// WORLD_SIZE, RINGMASTER_GENERATION (the gang's start count),
// RINGMASTER_ADDR (this task's node address) and RINGMASTER_JOB_SECRET
// (which the store and the ranks' hellos check); rank 0 serves the store on
// its own port, every rank connects, and the Context forms under that
// generation, so a restarted gang never meets a stale one. JoinSubgroup
// forms a group of some of those ranks (e.g. the replicas of one pipeline
// stage) through the same store.
#pragma once

#include <memory>

#include "comm/context.h"
#include "comm/store.h"

namespace ringmaster::comm {

struct Group {
  // Declared in this order so the Context goes first, then the store, then the server.
  std::unique_ptr<TcpStoreServer> server;  // rank 0 only
  std::unique_ptr<TcpStore> store;
  std::unique_ptr<Context> context;
  Options options;  // what the Context was formed with
};

// A group of `size` ranks formed under the name `name` (its keys live under
// "sub/<name>/" in the store), this rank being `rank` of it. Every member
// passes the same name and size; groups of different names are disjoint.
struct Subgroup {
  std::unique_ptr<PrefixStore> store;  // declared first: it outlives the Context
  std::unique_ptr<Context> context;
};
StatusOr<Subgroup> JoinSubgroup(Store* store, const std::string& name, int rank, int size, const Options& options);

// `options` supplies everything but rank, size, generation and address.
// InvalidArgument names the variable that is missing or malformed.
StatusOr<Group> JoinFromEnvironment(Options options = {});

}  // namespace ringmaster::comm
