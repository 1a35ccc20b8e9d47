// The GPT's device path in a build without CUDA: refused with a sentence (models/gpt_cuda.cpp).
#include "models/gpt_model.hpp"

namespace zero::models {

std::unique_ptr<GptTrainer::Impl> make_gpt_device(const GptShape&, GptCompute) {
  throw Error("the GPT's device path needs a build with CUDA (configure with -Dcuda=enabled)");
}

}  // namespace zero::models
