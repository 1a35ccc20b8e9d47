// The flags `zero train` and `zero plan` both read (cli/run_flags.hpp).
#include "cli/run_flags.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "zero/build_info.hpp"
#include "zero_build_config.hpp"

namespace zero::cli {
namespace {

namespace po = boost::program_options;

void require_at_least(std::string_view flag, std::int64_t value, std::int64_t least) {
  if (value < least) throw Error(cat(flag, " must be >= ", least, ", got ", value));
}

constexpr std::int64_t kMlpGlobalBatch = 64, kGptGlobalBatch = 16;

}  // namespace

void add_device_option(po::options_description& opts, std::string& device) {
  opts.add_options()(
      "device", po::value(&device)->default_value("auto"),
      "cpu (MPI, host memory), cuda (one GPU per rank, NCCL, cuBLASLt), auto (cuda when every "
      "rank on a node has a GPU of its own, else cpu) or emulated: a test and CI device, host "
      "memory standing for a GPU's so that the device code path runs without one (MPI posing as "
      "its communicator; the CPU's math, never faster than cpu)");
}

void check_device_flag(const std::string& device) {
  if (device != "auto" && device != "cpu" && device != "cuda" && device != "emulated")
    throw Error(cat("--device: expected cpu, cuda, auto or emulated, got '", device, "'"));
}

bool plan_device_is_gpu(const std::string& device, int ranks_per_node, std::string& why) {
  why.clear();
  if (device == "cpu") return false;
  if (device == "cuda") return true;
  if (device == "emulated") {
    why = "host memory standing for a device, with MPI's staging";
    return true;
  }
  const std::size_t gpus = find_gpus().size();
  if (!ZERO_HAVE_CUDA) {
    why = "auto: this build has no CUDA; --device cuda plans GPUs";
    return false;
  }
  if (gpus < static_cast<std::size_t>(ranks_per_node)) {
    why = cat("auto: this machine has ", gpus, " GPU", gpus == 1 ? "" : "s", " for ",
              ranks_per_node, " ranks per node; --device cuda plans GPUs");
    return false;
  }
  why = cat("auto: a GPU for each of the ", ranks_per_node, " ranks per node");
  return true;
}

void add_batch_options(po::options_description& opts, BatchTargets t) {
  opts.add_options()(
      "global-batch", po::value(t.global_batch)->value_name("B"),
      "samples per step over all ranks (train_batch_size; default 64 for the MLP, 16 sequences "
      "for the GPT, rounded up to a multiple of the ranks x --accum, unless the config gives a "
      "batch size)")(
      "micro-batch", po::value(t.micro_batch)->value_name("B"),
      "samples (a GPT's sequences) per rank per micro-batch (train_micro_batch_size_per_gpu; "
      "default: the global batch over the ranks x --accum)")(
      "accum", po::value(t.accum)->value_name("K"),
      "micro-batches per optimizer step (gradient_accumulation_steps; default 1)");
}

void check_batch_flags(const po::variables_map& vm, std::int64_t global_batch,
                       std::int64_t micro_batch, std::int64_t accum) {
  if (vm.count("global-batch")) require_at_least("--global-batch", global_batch, 1);
  if (vm.count("micro-batch")) require_at_least("--micro-batch", micro_batch, 1);
  if (vm.count("accum")) require_at_least("--accum", accum, 1);
}

void apply_batch_flags(const po::variables_map& vm, std::int64_t global_batch,
                       std::int64_t micro_batch, std::int64_t accum, Config& config) {
  check_batch_flags(vm, global_batch, micro_batch, accum);
  if (vm.count("global-batch")) config.train_batch_size = global_batch;
  if (vm.count("micro-batch")) {
    config.train_micro_batch_size_per_gpu = micro_batch;
    config.micro_batch_given = true;
  }
  if (vm.count("accum")) {
    config.gradient_accumulation_steps = accum;
    config.accumulation_given = true;
  }
}

std::int64_t default_global_batch(bool gpt, int world, std::int64_t accumulation) {
  const std::int64_t batch = gpt ? kGptGlobalBatch : kMlpGlobalBatch;
  if (world < 1) return batch;
  const std::int64_t per_step = std::int64_t{world} * std::max<std::int64_t>(accumulation, 1);
  return (batch + per_step - 1) / per_step * per_step;
}

void apply_default_batch(Config& config, bool gpt, int world) {
  if (config.train_batch_size || config.micro_batch_given) return;
  config.train_batch_size = default_global_batch(
      gpt, world, config.accumulation_given ? config.gradient_accumulation_steps : 1);
}

void add_compute_option(po::options_description& opts, std::string& compute) {
  opts.add_options()(
      "compute", po::value(&compute)->value_name("C"),
      "the GPT's math: bf16 (GEMM inputs and kept activations in bf16, fp32 accumulation; the "
      "default with bf16 params) or fp32");
}

void check_compute_flag(const po::variables_map& vm, const std::string& compute) {
  if (vm.count("compute") && compute != "bf16" && compute != "fp32")
    throw Error(cat("--compute: expected bf16 or fp32, got '", compute, "'"));
}

models::GptCompute resolve_compute(const po::variables_map& vm, const std::string& compute,
                                   Precision precision) {
  check_compute_flag(vm, compute);
  const models::GptCompute c =
      vm.count("compute") ? (compute == "bf16" ? models::GptCompute::bf16 : models::GptCompute::fp32)
      : precision == Precision::bf16 ? models::GptCompute::bf16
                                     : models::GptCompute::fp32;
  if (c == models::GptCompute::bf16 && precision != Precision::bf16)
    throw Error(cat("--compute bf16 needs bf16 parameters, but the run trains in ",
                    name_of(precision), "; use --compute fp32 or --precision bf16"));
  return c;
}

void add_recompute_option(po::options_description& opts) {
  opts.add_options()(
      "recompute",
      "the GPT's full activation recomputation: each block keeps only its input and runs its "
      "forward again in backward (weights bitwise as without it; less memory, more compute)");
}

}  // namespace zero::cli
