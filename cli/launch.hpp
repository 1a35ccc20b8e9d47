// Runs a multi-rank subcommand: inside an MPI job (mpirun, srun) it uses the job's ranks;
// outside one it relaunches this very executable under mpirun with the ranks asked for.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace zero::cli {

// True when this process was started by an MPI launcher (mpirun, srun, PMIx).
bool in_mpi_job();

// Decides how to run with `ranks` processes. Returns normally when this process should go on
// (already inside a job of the right size, or ranks == 1 outside a job: a singleton run).
// Outside a job with ranks > 1 it replaces this process with `mpirun -n ranks <argv...>` and
// does not return; it throws zero::Error when mpirun cannot be found or started, or when a job
// of another size was asked for.
void ensure_ranks(int ranks, const std::vector<std::string>& argv);

}  // namespace zero::cli
