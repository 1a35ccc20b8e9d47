// The Catch2 main for GPU tests under mpirun (one rank per GPU): initialises MPI, exits 77
// (meson: skipped) unless every rank has a GPU of its own and NCCL, else runs the session on
// every rank and exits with the worst result over the ranks.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <exception>

#include "comm/mpi_runtime.hpp"
#include "comm/nccl_communicator.hpp"
#include "kernels/cuda/device.hpp"

int main(int argc, char** argv) {
  try {
    zero::comm::MpiRuntime runtime(argc, argv);
    int rank = 0, ok = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    ok = zero::comm::nccl_available() &&
                 zero::comm::node_local_rank() < zero::kernels::cuda::device_count()
             ? 1
             : 0;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ok) {
      if (rank == 0)
        std::printf("%s: no GPU of its own for every rank: skipped\n", argc > 0 ? argv[0] : "");
      return 77;
    }
    const int result = Catch::Session().run(argc, argv);
    int worst = 0;
    MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return worst;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argc > 0 ? argv[0] : "", e.what());
    return 1;
  }
}
