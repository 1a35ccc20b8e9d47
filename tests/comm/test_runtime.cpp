// MpiRuntime and the launcher helpers.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

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

// The value of one of MPI's control variables as this process's MPI runs with it (MPI_T), or
// nullopt when MPI has no variable of that name.
std::optional<std::int64_t> control_variable(const char* name) {
  int provided = 0;
  REQUIRE(MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS);
  std::optional<std::int64_t> value;
  int index = 0;
  if (MPI_T_cvar_get_index(name, &index) == MPI_SUCCESS) {
    char cname[256], desc[1024];
    int cname_len = sizeof cname, desc_len = sizeof desc, verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumtype = MPI_T_ENUM_NULL;
    REQUIRE(MPI_T_cvar_get_info(index, cname, &cname_len, &verbosity, &type, &enumtype, desc,
                                &desc_len, &bind, &scope) == MPI_SUCCESS);
    MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
    int count = 0;
    REQUIRE(MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS);
    REQUIRE(count == 1);
    alignas(8) unsigned char raw[16] = {};
    REQUIRE(MPI_T_cvar_read(handle, raw) == MPI_SUCCESS);
    MPI_T_cvar_handle_free(&handle);
    int size = 0;
    MPI_Type_size(type, &size);
    if (size == 4) {
      std::int32_t v = 0;
      std::memcpy(&v, raw, 4);
      value = v;
    } else if (size == 8) {
      std::int64_t v = 0;
      std::memcpy(&v, raw, 8);
      value = v;
    }
  }
  MPI_T_finalize();
  return value;
}

TEST_CASE("Open MPI runs with zero's send pipeline unless the environment set its own") {
  const auto defaults = mpi_transport_defaults();
#ifdef OMPI_MAJOR_VERSION
  REQUIRE(defaults.size() == 2);
#endif
  for (const MpiDefault& d : defaults) {
    const std::string var = d.var();
    INFO(var);
    // mpi_main's MpiRuntime initialised MPI: what MPI uses is ours, or what the launcher set.
    const char* set = std::getenv(var.c_str());
    REQUIRE(set != nullptr);
    const auto used = control_variable(d.param);
    if (used.has_value()) {
      CHECK(*used == std::stoll(set));
    } else {  // a job of one rank opens no shared-memory transport, whose variables are then absent
      int ranks = 0;
      MPI_Comm_size(MPI_COMM_WORLD, &ranks);
      CHECK(ranks == 1);
    }
    CHECK(std::string(set) == d.value);  // no test run sets its own

    // A value of the user's survives; an unset one gets ours.
    ::setenv(var.c_str(), "7", 1);
    apply_mpi_transport_defaults();
    CHECK(std::string(std::getenv(var.c_str())) == "7");
    ::unsetenv(var.c_str());
    apply_mpi_transport_defaults();
    REQUIRE(std::getenv(var.c_str()) != nullptr);
    CHECK(std::string(std::getenv(var.c_str())) == d.value);
  }
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
