// ringcomm's collective algorithms, one file each (after Gloo's layout).
// Each runs one collective on this rank over the progress engine: it posts
// sends and receives and waits; it never touches a Pair, so the same code
// runs over TCP, shared memory and the in-memory fake (fake_pair.h).
//
// REQUIRES (all): e.size() > 1, count > 0, host buffers already checked by
// the Context, which also copies `in` to `out` where an operation is out
// of place (except the ring all-reduce, which reads `in` as it goes) and
// divides for ReduceOp::kAvg (these reduce kAvg as a sum).
// Called with the Context's operation lock held, inside Engine::Begin/End.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/progress_engine.h"
#include "comm/types.h"

namespace ringmaster::comm {

// ---- the ring pipeline (ring.cc), shared by the ring algorithms.
// A ring over segments of `buf`: at step t a rank sends segment
// (rank - t + shift) to the next rank and receives segment (rank - t - 1 +
// shift) from the previous one, reducing it in for t < reduce_steps and
// storing it for later steps. Segments go in chunks of chunk_bytes, fully
// pipelined: chunk k of step t+1 leaves as soon as chunk k of step t has
// arrived (and been reduced), so reduction overlaps transfer.
struct RingPlan {
  char* buf;
  std::vector<size_t> off, cnt;  // per segment, in elements
  int steps, reduce_steps, shift;
  DataType type;
  ReduceOp op;
  // Out of place: `buf` is taken to hold a copy of `in` that is never made
  // up front. Step 0 sends from `in`, and a chunk is copied into `buf` just
  // before its first reduction, so the link does not idle while a whole
  // buffer is copied. REQUIRES: steps == 2 * reduce_steps == 2 * (n - 1)
  // (the all-reduce: every segment of `buf` is reduced into, or received
  // whole, before it is read).
  const char* in = nullptr;
};
Status RunRing(Engine& e, const RingPlan& p);
// `count` elements in `n` near-equal segments (the first count % n one longer).
void SplitEven(size_t count, int n, std::vector<size_t>* off, std::vector<size_t>* cnt);

// allreduce_ring.cc: reduce-scatter then all-gather, 2(n-1) steps;
// bandwidth-optimal (each rank sends 2(n-1)/n of the buffer). `in` is the
// input where it is not `buf` (out of place), else nullptr; the Context
// does not copy it first.
Status AllReduceRing(Engine& e, const char* in, char* buf, size_t count, DataType type, ReduceOp op);
// allreduce_recursive_doubling.cc: log2(n) exchanges of the whole buffer;
// latency-optimal. Every rank ends bitwise equal.
Status AllReduceRecursiveDoubling(Engine& e, char* buf, size_t count, DataType type, ReduceOp op);
// allreduce_parameter_server.cc: the baseline; rank 0 reduces everything.
Status AllReduceParameterServer(Engine& e, char* buf, size_t count, DataType type, ReduceOp op);

// reduce_scatter.cc. in: size * count elements; out: block rank() reduced.
Status ReduceScatterRing(Engine& e, const char* in, char* out, size_t count, DataType type, ReduceOp op);
// reduce_scatter.cc: the reduce-scatter half of the ring, then the blocks
// gathered on `root`. `out` is written on the root only.
Status ReduceToRoot(Engine& e, const char* in, char* out, size_t count, DataType type, ReduceOp op, int root);
// allgather.cc. out holds size * count elements, this rank's block in place.
Status AllGatherRing(Engine& e, char* out, size_t count, DataType type);
// broadcast.cc: a binomial tree below small_bytes, a pipelined chain above.
Status BroadcastFromRoot(Engine& e, char* buf, size_t bytes, int root);
// barrier.cc: dissemination, log2(n) rounds. Any size (also 1).
Status DisseminationBarrier(Engine& e);

}  // namespace ringmaster::comm
