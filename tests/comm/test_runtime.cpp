// MpiRuntime and the launcher helpers.
#include <cstdlib>
#include <optional>

#include "comm/mpi_runtime.hpp"
#include "comm_test.hpp"

namespace zero::comm::test {
namespace {

TEST_CASE("MpiRuntime leaves an MPI that the program already initialised alone") {
  {
    MpiRuntime second;  // mpi_main's runtime initialised MPI
    CHECK_FALSE(second.owns());
    CHECK(second.thread_level() == MPI_THREAD_MULTIPLE);
  }
  int finalised = 1;
  MPI_Finalized(&finalised);
  CHECK(finalised == 0);
}

TEST_CASE("in_mpi_job recognises a launcher's environment variables and nothing else") {
  const char* vars[] = {
      "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_SIZE",
      "SLURM_STEP_NUM_TASKS"};
  CHECK(in_mpi_job());  // these tests run under mpirun
  std::vector<std::optional<std::string>> saved;
  for (const char* v : vars) {
    const char* s = std::getenv(v);
    saved.push_back(s ? std::optional<std::string>(s) : std::nullopt);
    unsetenv(v);
  }
  CHECK_FALSE(in_mpi_job());
  setenv("PMIX_RANK", "0", 1);
  CHECK(in_mpi_job());
  unsetenv("PMIX_RANK");
  for (std::size_t i = 0; i < saved.size(); ++i)
    if (saved[i]) setenv(vars[i], saved[i]->c_str(), 1);
  CHECK(in_mpi_job());
}

TEST_CASE("node_local_rank numbers this node's ranks from 0 (one node here: the world rank)") {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CHECK(node_local_rank() == rank);
}

}  // namespace
}  // namespace zero::comm::test
