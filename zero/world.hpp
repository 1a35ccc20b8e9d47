// World: the door a trainer (and the `zero` command) walks through to run on several ranks: MPI
// started once, this rank's place on its node, the GPU question, the communicator over every
// rank (MPI on host memory, NCCL on this rank's GPU), and the few host-side agreements a program
// needs beside it. Ending a job after a failure is comm::abort_job (comm/abort.hpp, included).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/abort.hpp"
#include "comm/communicator.hpp"

namespace zero {

struct WorldOptions {
  // A rank that never joins ends MPI's start-up after this many seconds, with one line naming
  // this rank (comm/mpi_runtime.hpp's watchdog); 0: wait for MPI_Init as long as it takes.
  double startup_timeout_seconds = 0;
  std::string error_prefix;  // put before the watchdog's line ("zero train: error: ")
};

// Owns MPI for this process (RAII): starts it with MPI_THREAD_MULTIPLE, or joins the host
// program's MPI (then finalises nothing). It never finalises after a communicator broke, nor when
// destroyed by an exception in a job of several ranks, so that the handler can end the job with
// comm::abort_job (docs/design.md, "Note: the failure path"). Objects that use its communicator
// (an Engine) must be destroyed before it. Throws zero::Error when MPI cannot start.
class World {
 public:
  explicit World(WorldOptions options = {});
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const;  // in MPI_COMM_WORLD
  int size() const;
  // This rank's index among the ranks on its node, and their number (MPI_COMM_TYPE_SHARED).
  // Collective on the first call of either, which every rank must make; cached after it.
  int local_rank();
  int local_size();
  std::string host() const;  // MPI_Get_processor_name

  // Whether this build has NCCL and every rank of every node has a GPU of its own (its local
  // rank below the node's device count: NCCL refuses two ranks on one device). Collective.
  bool every_rank_has_gpu();

  // Makes the communicator over every rank, once: NCCL on this rank's GPU (local rank modulo the
  // devices) for Memory::device, MPI for Memory::host. Collective. The World owns it.
  // `emulate_device` with Memory::device: MPI posing as a device's communicator
  // (comm/emulated_device.hpp), for an engine with EngineOptions::emulate_device.
  comm::Communicator& connect(comm::Memory memory, comm::Options options = {},
                              bool emulate_device = false);
  // The communicator connect() made; throws zero::Error before it.
  comm::Communicator& communicator() const;

  // Host-side agreements over every rank, with no communicator needed. Collective.
  int all_min(int value) const;
  std::int64_t all_max(std::int64_t value) const;
  // Every rank's `mine` (the same length on each), rank r's at [r * mine.size(), ...).
  std::vector<std::int64_t> all_gather(std::span<const std::int64_t> mine) const;

  // True when an MPI launcher (mpirun, srun, PMIx) started this process, read from the
  // environment without touching MPI: a program relaunches itself under mpirun when not.
  static bool launched();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zero
