// Runs a multi-rank subcommand: inside an MPI job (mpirun, srun) it uses the job's ranks;
// outside one it relaunches this very executable under mpirun with the ranks asked for, and
// watches the job (cli/job_watch.hpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zero::cli {

// True when this process was started by an MPI launcher (mpirun, srun, PMIx).
bool in_mpi_job();

// Decides how to run with `ranks` processes. Returns normally when this process should go on
// (already inside a job of the right size, or ranks == 1 outside a job: a singleton run).
// Outside a job with ranks > 1 it runs `mpirun -n ranks <argv...>` as its child, passes on
// its output (one line when a rank dies or the job is interrupted: run_watched), and ends this
// process with the job's exit status: it does not return. Before, it prints a note on stdout when
// the ranks outnumber the cores. It throws zero::Error when mpirun cannot be found or started, or
// when a job of another size was asked for. Inside a job a rank announces itself to the launcher
// (announce_rank).
// Also refuses torchrun's environment (see check_job_size) before relaunching anything.
void ensure_ranks(int ranks, const std::vector<std::string>& argv);

// Call once MPI is initialised, with MPI_COMM_WORLD's size, in every multi-rank command: throws
// zero::Error when the launcher started another number of tasks than MPI sees. That is how srun
// without PMI support for this MPI fails: it starts N processes that each see a job of one rank,
// and each would train alone and exit 0. The launcher's count is read from OMPI_COMM_WORLD_SIZE,
// PMIX_SIZE, PMI_SIZE, SLURM_STEP_NUM_TASKS, or SLURM_NTASKS inside an srun step (SLURM_STEP_ID
// set: sbatch sets SLURM_NTASKS in the batch script too, where no task was launched). Under
// torchrun's variables alone (WORLD_SIZE > 1, no MPI launcher) it says that zero launches with
// mpirun or srun (`command` names the subcommand in the advice).
void check_job_size(int world_size, std::string_view command = "<command>");

}  // namespace zero::cli
