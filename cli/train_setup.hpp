// The flags `zero train` and `zero compare` share, and what they resolve to: one run's settings
// (flags over the config over zero train's defaults), checked before any rank starts.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/settings_flags.hpp"
#include "cli/train_checkpoint.hpp"
#include "models/gpt.hpp"
#include "models/mlp.hpp"
#include "zero/zero.hpp"

namespace zero::cli {

// The settings of one run: flags over the config over zero train's defaults, resolved and checked
// before anything starts (and before a relaunch under mpirun, so that a bad flag is reported once,
// by this process, not by every rank).
struct Flags {
  std::string model = "mlp", json_file, device = "auto", seed;
  std::string preset = "gpt-nano", data, compute;  // the GPT's
  std::string plot_file;
  std::string stage;  // --stage: 0..3 (cli/settings_flags.hpp)
  int ranks = 1;
  std::int64_t steps = 20, accum = 1, global_batch = 64, micro_batch = 1, log_every = 1;
  SettingsFlags settings;  // as every command's (cli/settings_flags.hpp)
  int threads = 0;  // --threads; 0: not given
  int layers = 4, width = 512;
  double lr = 0, clip = 0, timeout = 600;
  std::string optimizer;  // --optimizer: adamw, lion, lamb or muon; empty: the config's
  double muon_lr = 0;     // --muon-lr
  CheckpointFlags ckpt;  // --save, --save-every, --keep, --save-sync, --resume
  std::string init;      // --init FILE.safetensors: the initial weights
};

// What the flags resolve to.
struct Run {
  Config config;
  bool gpt = false;
  models::MlpShape shape;  // the MLP's (its seed and global batch serve the GPT too)
  models::GptShape gpt_shape;      // micro_batch set once the batch is resolved
  models::GptCompute compute = models::GptCompute::bf16;
  std::int64_t steps = 20, log_every = 1, micro = 1, accum = 1;
  double timeout = 600;
  std::string threads_by = "config key threads";  // who set config.threads, when it is > 0
  int threads = 1;  // each rank's threads, once the rank has resolved them (zero::threads_for)
};

// The options of one run (everything but --help), bound to `f`.
void add_train_options(boost::program_options::options_description& opts, Flags& f);

// The flags alone, before any file is read: ranges, and flags of the other model.
void check_flags(const Flags& f, const boost::program_options::variables_map& vm);

// Flags over the config over zero train's defaults; `world` is the rank count when known (0
// before a relaunch without -n inside a job: then the batch is resolved later, once MPI runs).
// config_file: read this config instead of --config's (zero compare's --configs).
Run resolve_run(const Flags& f, const boost::program_options::variables_map& vm, int world,
                const std::string& config_file = "");

// The model's units as the engine will register them, before any model or data is loaded.
std::vector<UnitSpec> units_of(const Run& run);

// Refuses, with the figures, a run whose ranks on this node need more host memory than is
// available, before anything is allocated.
void check_host_memory(const Run& run, int world, int ranks_here, bool on_gpu);

// --device auto: the GPU path when this build has it and every rank on every node has a GPU of
// its own (NCCL refuses two ranks on one device); all ranks decide together (a collective).
bool use_gpu(World& world, const std::string& device);

// Everything that can be checked without MPI, before a relaunch starts any rank (a bad flag,
// token file, checkpoint or memory need is then said once, by this process); and the FMA peak
// the GPT's MFU is measured against, measured here while no rank runs (ranks sharing cores would
// measure each other) and handed to the ranks (ZERO_FMA_PEAK). asked: the -n given (0: none,
// inside a job). steps_from_start: --steps counts from the run's start (zero train), else from
// the checkpoint --resume names (zero compare). Returns the collective timeout, for MPI's startup
// watchdog.
double before_launch(const Flags& f, const boost::program_options::variables_map& vm, int asked,
                     bool steps_from_start = true);

// What MFU is measured against (rank 0 calls it): on GPUs each rank's device's dense bf16
// tensor-core peak (zero/build_info.hpp), as llm.c counts it, whatever the compute dtype, read for
// the device of `local_rank`; on the CPU the peak of the instructions the GEMMs run (cpu_peak:
// bf16 dot products for `bf16_math` on oneDNN where the CPU has them, else fp32 FMA) times the
// cores the ranks run on (`threads` cores a rank, at most the node's), from ZERO_FMA_PEAK when the
// launcher measured it before the ranks started.
struct Peak {
  double flops = 0;    // 0: unknown
  std::string source;  // how it was found, for the report
};
Peak ranks_peak(bool on_gpu, int ranks, int local_rank, bool bf16_math, int threads = 1);

}  // namespace zero::cli
