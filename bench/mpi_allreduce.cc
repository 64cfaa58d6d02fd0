// The MPI anchor of ringcomm-bench: MPI_Allreduce (float sum) per size,
// median of timed iterations after warm-up; rank 0 prints RESULT lines.
// Run under mpirun by ringcomm-bench: mpi_allreduce LABEL SIZES ITERS WARMUP CHECK
#include <mpi.h>

#include <chrono>
#include <vector>

#include "bench_util.h"

using namespace ringmaster::bench;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, ranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (argc < 6) {
    if (rank == 0) std::fprintf(stderr, "usage: mpi_allreduce LABEL SIZES ITERS WARMUP CHECK\n");
    MPI_Finalize();
    return 2;
  }
  const char* label = argv[1];
  std::vector<size_t> sizes;
  ParseSizes(argv[2], &sizes);
  int iters = std::atoi(argv[3]), warmup = std::atoi(argv[4]);
  bool check = std::atoi(argv[5]) != 0;
  int bad = 0;
  for (size_t bytes : sizes) {
    size_t count = bytes / sizeof(float);
    std::vector<float> in(count), out(count);
    for (size_t i = 0; i < count; ++i) in[i] = Input(rank, i);
    std::vector<double> times;
    for (int it = 0; it < warmup + iters; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto t0 = std::chrono::steady_clock::now();
      MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      auto t1 = std::chrono::steady_clock::now();
      if (it >= warmup) times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    if (check) {
      for (size_t i = 0; i < count; ++i) {
        if (out[i] != Expected(ranks, i)) {
          std::fprintf(stderr, "mpi: rank %d: %zu bytes: element %zu is %f, expected %f\n", rank, bytes, i, out[i],
                       Expected(ranks, i));
          bad = 1;
          break;
        }
      }
    }
    if (rank == 0) PrintResult("mpi", label, ranks, bytes, Median(times));
  }
  int any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_bad ? 1 : 0;
}
