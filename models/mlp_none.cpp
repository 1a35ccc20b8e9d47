// The MLP's device path in a build without CUDA: it says so.
#include "models/mlp.hpp"

namespace zero::models {

struct MlpTrainer::Device {};

void MlpTrainer::DeviceDeleter::operator()(Device* d) const noexcept { delete d; }

MlpTrainer::DevicePtr make_device(const MlpShape&, std::int64_t) {
  throw Error("this build has no CUDA: the MLP cannot run on a device (configure with -Dcuda=enabled)");
}

double device_micro_batch(MlpTrainer::Device&, Engine&, const std::vector<float>&,
                          const std::vector<float>&) {
  throw Error("this build has no CUDA");
}

}  // namespace zero::models
