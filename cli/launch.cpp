// Relaunch under mpirun: what OpenMPI needs as root and on few cores is set here, once,
// so that `zero train -n 4` works the same on a laptop, in CI and on this 2-core machine.
#include "cli/launch.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "base/error.hpp"
#include "cli/job_watch.hpp"
#include "zero/world.hpp"

namespace zero::cli {
namespace {

const char* env(const char* name) {
  return std::getenv(name);
}

int env_int(const char* name) {
  const char* v = env(name);
  return v ? std::atoi(v) : 0;
}

// The job size the launcher announced and the variable that said it, or {0, ""} if none did.
std::pair<int, std::string> launcher_size() {
  for (const char* name :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    if (int n = env_int(name); n > 0) return {n, name};
  }
  if (env("SLURM_STEP_ID") != nullptr)
    if (int n = env_int("SLURM_NTASKS"); n > 0) return {n, "SLURM_NTASKS"};
  return {0, ""};
}

int job_size() {
  return launcher_size().first;
}

// torchrun (and torch.distributed.launch) announce a job in WORLD_SIZE/RANK/LOCAL_RANK, which
// MPI does not read: every process would then be a job of one rank.
void refuse_torchrun(std::string_view command) {
  const int world = env_int("WORLD_SIZE");
  if (world <= 1 || launcher_size().first > 0) return;
  throw Error(cat("WORLD_SIZE=", world,
                  " is set (torchrun's variables) but zero does not read it: "
                  "zero launches its ranks with mpirun or srun; run `zero ",
                  command, " -n ", world, "` (it starts mpirun itself), `mpirun -n ", world,
                  " zero ", command, "` or `srun --mpi=pmix -n ", world, " zero ", command, "`"));
}

std::string find_in_path(const std::string& program) {
  const char* path = env("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= p.size()) {
    std::size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::filesystem::path candidate = std::filesystem::path(p.substr(start, end - start)) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return {};
}

}  // namespace

bool in_mpi_job() {
  return World::launched();
}

void check_job_size(int world_size, std::string_view command) {
  refuse_torchrun(command);
  const auto [n, name] = launcher_size();
  if (n == 0 || n == world_size) return;
  const bool slurm = name.rfind("SLURM_", 0) == 0;
  if (slurm)
    throw Error(cat("srun started ", n, " tasks (", name, "=", n, ") but MPI sees a job of ",
                    world_size, world_size == 1 ? " rank" : " ranks",
                    ": srun launched them without PMI support for this MPI, so each task runs "
                    "alone; launch with `srun --mpi=pmix` (`srun --mpi=list` shows what this "
                    "Slurm offers) or with mpirun inside the allocation"));
  throw Error(cat("the launcher started ", n, " ranks (", name, "=", n, ") but MPI sees a job of ",
                  world_size, world_size == 1 ? " rank" : " ranks",
                  ": zero is linked against another MPI than the launcher's; start it with that "
                  "MPI's own mpirun"));
}

void ensure_ranks(int ranks, const std::vector<std::string>& argv) {
  if (ranks < 1) throw Error(cat("-n/--ranks must be at least 1, got ", ranks));
  refuse_torchrun(argv.size() > 1 ? std::string_view(argv[1]) : std::string_view("<command>"));
  if (in_mpi_job()) {
    announce_rank();
    int n = job_size();
    if (n > 0 && n != ranks)
      throw Error(cat("this MPI job has ", n, " ranks but -n ", ranks,
                      " was given; drop -n or launch ", ranks, " ranks"));
    return;
  }
  if (ranks == 1) return;  // a singleton MPI run needs no launcher
  if (env("ZERO_RELAUNCHED"))
    throw Error(
        "relaunched under mpirun but the launcher's environment is missing; "
        "is `mpirun` OpenMPI's? (PMIx/OMPI variables not found)");

  std::string mpirun = find_in_path("mpirun");
  if (mpirun.empty())
    throw Error(cat("-n ", ranks,
                    " needs mpirun, which is not on PATH; install OpenMPI "
                    "(apt-get install openmpi-bin) or start zero under your MPI launcher"));
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();

  // OpenMPI refuses to run as root, and more ranks than cores, unless told.
  if (::geteuid() == 0) {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  // Plain copies between the ranks of a node, unless the user sets it: the single copy (CMA) is
  // faster (4 ranks on 2 cores with two busy loops: 15-16 ms/step instead of 18-20; a 16 MiB
  // all-gather at 1.3x the bandwidth) but containers often forbid it, and where it works a job
  // ended while a peer read a message prints "Read -1, expected N, errno = 14" from that peer
  // under the one error line (tests/cli/test_faults.py saw it). `zero info` says whether
  // OMPI_MCA_btl_vader_single_copy_mechanism=cma works here.
  ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  // Open MPI's help-message aggregation races with the abort that ends a failed job
  // ("ORTE_ERROR_LOG: Data unpack would read past end of buffer ... show_help.c") and then holds
  // the abort 6-7 s (3 in 10 failure-path test runs here); each rank prints its own instead.
  ::setenv("OMPI_MCA_orte_base_help_aggregate", "0", 0);
  ::setenv("ZERO_RELAUNCHED", "1", 1);
  // Under mpirun a rank's stdout is a pseudo-terminal even when ours is a pipe: say which.
  ::setenv("ZERO_STDOUT_TTY", ::isatty(STDOUT_FILENO) ? "1" : "0", 1);

  // No -q: mpirun's reports of how the job ended (which rank died of which signal) are what
  // the launcher reads (cli/job_report.cpp); it drops their banners ("MPI_ABORT was invoked on
  // rank 0...", "Primary job terminated normally, but...") and says the rest in one line.
  std::vector<std::string> args = {mpirun, "-n", std::to_string(ranks), "--bind-to", "none"};
  if (static_cast<unsigned>(ranks) > std::thread::hardware_concurrency())
    args.push_back("--oversubscribe");
  ::setenv(kWatchVariable, "1", 1);
  // What the ranks read, passed on so that ranks on other nodes get it too (OpenBLAS reads
  // OPENBLAS_CORETYPE once, at load, on every node).
  for (const char* var : {"OPENBLAS_CORETYPE", "ZERO_STDOUT_TTY", "ZERO_FMA_PEAK",
                          static_cast<const char*>(kWatchVariable)})
    if (env(var)) {
      args.push_back("-x");
      args.push_back(var);
    }
  args.push_back(self);
  args.insert(args.end(), argv.begin() + 1, argv.end());

  const std::string command = argv.size() > 1 ? argv[1] : "<command>";
  std::fputs(oversubscription_note(command, ranks).c_str(), stdout);
  std::fflush(stdout);  // before the ranks' lines, which reach the same stdout through mpirun
  const int code = run_watched(args, command, ranks);
  std::fflush(nullptr);
  std::_Exit(code);  // as the exec that this replaces: the job is over, nothing more to run
}

}  // namespace zero::cli
