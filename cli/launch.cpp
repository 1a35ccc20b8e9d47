// Relaunch under mpirun: what OpenMPI needs as root and on few cores is set here, once,
// so that `zero train -n 4` works the same on a laptop, in CI and on this 2-core machine.
#include "cli/launch.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "comm/mpi_runtime.hpp"
#include "zero/error.hpp"

namespace zero::cli {
namespace {

const char* env(const char* name) { return std::getenv(name); }

int env_int(const char* name) {
  const char* v = env(name);
  return v ? std::atoi(v) : 0;
}

// The job size the launcher announced, or 0 if none did.
int job_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    if (int n = env_int(name); n > 0) return n;
  }
  return 0;
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

bool in_mpi_job() { return comm::in_mpi_job(); }

void ensure_ranks(int ranks, const std::vector<std::string>& argv) {
  if (ranks < 1) throw Error(cat("-n/--ranks must be at least 1, got ", ranks));
  if (in_mpi_job()) {
    int n = job_size();
    if (n > 0 && n != ranks)
      throw Error(cat("this MPI job has ", n, " ranks but -n ", ranks,
                      " was given; drop -n or launch ", ranks, " ranks"));
    return;
  }
  if (ranks == 1) return;  // a singleton MPI run needs no launcher
  if (env("ZERO_RELAUNCHED"))
    throw Error("relaunched under mpirun but the launcher's environment is missing; "
                "is `mpirun` OpenMPI's? (PMIx/OMPI variables not found)");

  std::string mpirun = find_in_path("mpirun");
  if (mpirun.empty())
    throw Error(cat("-n ", ranks, " needs mpirun, which is not on PATH; install OpenMPI "
                    "(apt-get install openmpi-bin) or start zero under your MPI launcher"));
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();

  // OpenMPI refuses to run as root, and more ranks than cores, unless told.
  if (::geteuid() == 0) {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  // Containers often forbid the cross-memory-attach that the shared-memory transport tries
  // first; plain copies work everywhere and cost little at these sizes.
  ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  ::setenv("ZERO_RELAUNCHED", "1", 1);

  std::vector<std::string> args = {mpirun, "-n", std::to_string(ranks), "--bind-to", "none"};
  if (static_cast<unsigned>(ranks) > std::thread::hardware_concurrency())
    args.push_back("--oversubscribe");
  args.push_back(self);
  args.insert(args.end(), argv.begin() + 1, argv.end());

  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  ::execv(mpirun.c_str(), cargs.data());
  throw Error(cat("could not start ", mpirun, ": ", std::strerror(errno)));
}

}  // namespace zero::cli
