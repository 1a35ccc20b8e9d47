// World (zero/world.hpp): MPI's start-up, the node-local rank, the GPU question and the
// communicator over every rank, made in one place for every program.
#include "zero/world.hpp"

#include <mpi.h>

#include <optional>

#include "base/error.hpp"
#include "comm/emulated_device.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/mpi_runtime.hpp"
#include "comm/nccl_communicator.hpp"
#include "kernels/cuda/device.hpp"

namespace zero {

// Members in this order: the communicator is destroyed before MPI is (maybe) finalised.
struct World::Impl {
  comm::MpiRuntime mpi;
  int rank = 0, size = 1;
  std::optional<int> local_rank, local_size;
  std::unique_ptr<comm::Communicator> communicator;

  explicit Impl(const WorldOptions& o)
      : mpi(comm::RuntimeOptions{.startup_timeout_seconds = o.startup_timeout_seconds,
                                 .error_prefix = o.error_prefix}) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }

  void find_node() {
    if (local_rank) return;
    MPI_Comm node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
        MPI_SUCCESS)
      throw Error("MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed");
    int r = 0, n = 1;
    MPI_Comm_rank(node, &r);
    MPI_Comm_size(node, &n);
    MPI_Comm_free(&node);
    local_rank = r;
    local_size = n;
  }
};

World::World(WorldOptions options) : impl_(std::make_unique<Impl>(options)) {}
World::~World() = default;

int World::rank() const {
  return impl_->rank;
}

int World::size() const {
  return impl_->size;
}

int World::local_rank() {
  impl_->find_node();
  return *impl_->local_rank;
}

int World::local_size() {
  impl_->find_node();
  return *impl_->local_size;
}

std::string World::host() const {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  return std::string(name, static_cast<std::size_t>(len));
}

bool World::every_rank_has_gpu() {
  const int local = local_rank();
  return all_min(comm::nccl_available() && local < kernels::cuda::device_count() ? 1 : 0) == 1;
}

comm::Communicator& World::connect(comm::Memory memory, comm::Options options,
                                   bool emulate_device) {
  if (impl_->communicator) throw Error("World::connect: the communicator is already made");
  impl_->communicator =
      memory == comm::Memory::host ? comm::make_mpi_communicator(MPI_COMM_WORLD, options)
      : emulate_device             ? comm::make_emulated_device_communicator(
                             comm::make_mpi_communicator(MPI_COMM_WORLD, options))
          : comm::make_nccl_communicator(MPI_COMM_WORLD, comm::NcclOptions{.common = options});
  return *impl_->communicator;
}

comm::Communicator& World::communicator() const {
  if (!impl_->communicator) throw Error("World::communicator: call World::connect first");
  return *impl_->communicator;
}

int World::all_min(int value) const {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return value;
}

std::int64_t World::all_max(std::int64_t value) const {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return value;
}

std::vector<std::int64_t> World::all_gather(std::span<const std::int64_t> mine) const {
  std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(impl_->size));
  const int count = static_cast<int>(mine.size());
  MPI_Allgather(mine.data(), count, MPI_INT64_T, all.data(), count, MPI_INT64_T, MPI_COMM_WORLD);
  return all;
}

bool World::launched() {
  return comm::in_mpi_job();
}

}  // namespace zero
