// Ending a job after a failure: the process-wide "a communicator broke" state that MpiRuntime
// reads, and the one helper a command or an embedding trainer calls to end every rank, loudly.
// The library itself never calls it: aborting is the program's choice (docs/design.md, "Note:
// the failure path").
#pragma once

#include <string_view>

namespace zero::comm {

// True once any communicator of this process broke: a collective timed out, a peer died or a
// transfer failed midway, so that messages of an abandoned collective may still arrive. (A
// mismatch breaks nothing: the ranks agree that nothing was exchanged.) It never turns false
// again. After it, MPI must not be finalised (MPI_Finalize waits for every rank, which a stalled
// rank never joins, and the abandoned collectives would run on freed state): end the job with
// abort_job.
bool any_communicator_broken();

// Ends the whole job: writes `message` and a newline to stderr in one write (so that the lines
// of several ranks never interleave), then MPI_Abort(MPI_COMM_WORLD, code) when MPI is
// initialised and not finalised, else _exit(code) (the launcher ends the other ranks when one
// exits non-zero). In a job of several ranks, a rank other than 0 first waits a moment that
// grows with its rank (0.5 s to 2.5 s; 1.5 s more without MPI, whose _exit the launcher is slower
// to act on), and on one node only the first rank to get here prints (it leaves a file in the
// job's session directory, PMIX_SERVER_TMPDIR, which the launcher removes; else it holds a
// socket named after the job): an error that every rank hits is then printed once, by the lowest
// rank that hits it, whose abort ends the others before they print; an error that only one rank
// hits is still printed, by that rank, a moment later. Ranks of other nodes may print it too;
// `zero -n N` shows one (cli/job_report.hpp).
[[noreturn]] void abort_job(std::string_view message, int code);

// This process's rank in its job: MPI_COMM_WORLD's when MPI is initialised, else the launcher's
// (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID), else 0.
int job_rank();
// The number of ranks of this job: MPI_COMM_WORLD's when MPI is initialised, else the launcher's
// (OMPI_COMM_WORLD_SIZE, PMIX_SIZE, PMI_SIZE, SLURM_STEP_NUM_TASKS), else 1.
int job_size();

namespace detail {
// Called by a backend when one of its communicators breaks (see any_communicator_broken).
void note_broken();
}  // namespace detail

}  // namespace zero::comm
