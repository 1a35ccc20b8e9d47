// `zero train`: trains the reference model on N ranks at any ZeRO stage, shows the loss as it
// goes, then a summary: loss, checksum of the weights, memory per rank by category, traffic, and
// what a comparison with PyTorch or DeepSpeed needs (docs/benchmarks.md, "The train report").
#include <unistd.h>

#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/fill_auto.hpp"
#include "cli/launch.hpp"
#include "cli/options.hpp"
#include "cli/train_checkpoint.hpp"
#include "cli/train_model.hpp"
#include "cli/train_report.hpp"
#include "comm/nccl_communicator.hpp"
#include "kernels/cpu/blas_core.hpp"
#include "kernels/cpu/peak.hpp"
#include "kernels/cuda/device.hpp"
#include "models/mlp.hpp"
#include "zero/zero.hpp"
#include "zero_build_config.hpp"

namespace zero::cli {
namespace {

std::string hex16(std::uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

// "  MFU 36.0%": a fraction as a percentage with one decimal.
std::string percent(const char* label, double fraction) {
  char b[48];
  std::snprintf(b, sizeof b, "%s%.1f%%", label, 100.0 * fraction);
  return b;
}

std::string human_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, ++i;
  char s[32];
  std::snprintf(s, sizeof s, i == 0 ? "%.0f %s" : "%.2f %s", b, unit[i]);
  return s;
}

Precision parse_precision(const std::string& s) {
  if (s == "bf16") return Precision::bf16;
  if (s == "fp16") return Precision::fp16;
  if (s == "fp32") return Precision::fp32;
  throw Error(cat("--precision: expected bf16, fp16 or fp32, got '", s, "'"));
}

DType parse_reduce(const std::string& s) {
  if (s == "fp32") return DType::f32;
  if (s == "bf16") return DType::bf16;
  if (s == "fp16") return DType::f16;
  throw Error(cat("--reduce-dtype: expected fp32, bf16 or fp16, got '", s, "'"));
}

// --device auto: the GPU path when this build has it and every rank on every node has a GPU of
// its own (NCCL refuses two ranks on one device); all ranks decide together.
bool use_gpu(const std::string& device) {
  if (device == "cpu") return false;
  const int local = comm::node_local_rank();
  int ok = comm::nccl_available() && local < kernels::cuda::device_count() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (device == "cuda" && !ok)
    throw Error(ZERO_HAVE_CUDA ? "--device cuda: some rank has no GPU of its own (one GPU per rank; "
                                 "run fewer ranks per node or use --device cpu)"
                               : "--device cuda: this build has no CUDA (configure with -Dcuda=enabled)");
  return ok == 1;
}

// The settings of one run: flags over the config over zero train's defaults, resolved and checked
// before anything starts (and before a relaunch under mpirun, so that a bad flag is reported once,
// by this process, not by every rank).
struct Flags {
  std::string model = "mlp", precision, reduce, config_file, json_file, device = "auto", seed;
  std::string preset = "gpt-nano", data, compute;  // the GPT's
  std::string plot_file;
  int ranks = 1, stage = 0;
  std::int64_t steps = 20, accum = 1, global_batch = 64, micro_batch = 1, log_every = 1;
  std::int64_t reduce_bucket = 0, allgather_bucket = 0;
  int shard_size = 0, hpz = 0;
  int layers = 4, width = 512;
  double lr = 0, clip = 0, timeout = 600;
  CheckpointFlags ckpt;  // --save, --save-every, --keep, --save-sync, --resume
};

struct Run {
  Config config;
  bool gpt = false;
  models::MlpShape shape;  // the MLP's (its seed and global batch serve the GPT too)
  GptShape gpt_shape;      // micro_batch set once the batch is resolved
  models::GptCompute compute = models::GptCompute::bf16;
  std::int64_t steps = 20, log_every = 1, micro = 1, accum = 1;
  double timeout = 600;
};

void require_at_least(std::string_view flag, std::int64_t value, std::int64_t least) {
  if (value < least) throw Error(cat(flag, " must be >= ", least, ", got ", value));
}

// nan, inf and negative values are errors: only 0 means "off" where a flag has an off.
void require_finite_nonneg(std::string_view flag, double value) {
  if (!std::isfinite(value) || value < 0)
    throw Error(cat(flag, " must be a finite number >= 0, got ", value));
}

struct Overflow : Error {
  using Error::Error;
};

std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view what) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw Overflow(cat(what, " overflows 64 bits"));
  return r;
}

std::uint64_t parse_seed(const std::string& text) {
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end)
    throw Error(cat("--seed: expected an integer 0..18446744073709551615, got '", text, "'"));
  return v;
}

// The flags alone, before any file is read.
void check_flags(const Flags& f, const boost::program_options::variables_map& vm) {
  if (f.model != "mlp" && f.model != "gpt")
    throw Error(cat("--model: expected mlp or gpt, got '", f.model, "'"));
  if (f.model == "gpt") {
    if (f.data.empty())
      throw Error("--model gpt needs --data FILE: a token file (llm.c's .bin shards or nanoGPT's "
                  "train.bin; `zero data TEXT --out PREFIX` makes one from a text file)");
    (void)preset_shape(f.preset);  // an unknown name is an error here
    if (vm.count("compute") && f.compute != "bf16" && f.compute != "fp32")
      throw Error(cat("--compute: expected bf16 or fp32, got '", f.compute, "'"));
    for (const char* mlp_only : {"layers", "width"})
      if (!vm[mlp_only].defaulted())
        throw Error(cat("--", mlp_only, " shapes the MLP; the GPT's shape comes from --preset"));
  } else {
    for (const char* gpt_only : {"data", "compute"})
      if (vm.count(gpt_only)) throw Error(cat("--", gpt_only, " is for --model gpt"));
    if (!vm["preset"].defaulted()) throw Error("--preset is for --model gpt");
  }
  if (f.device != "auto" && f.device != "cpu" && f.device != "cuda")
    throw Error(cat("--device: expected cpu, cuda or auto, got '", f.device, "'"));
  if (vm.count("ranks")) require_at_least("--ranks", f.ranks, 1);
  if (vm.count("stage") && (f.stage < 0 || f.stage > 3))
    throw Error(cat("--stage (zero_optimization.stage): expected 0..3, got ", f.stage));
  require_at_least("--steps", f.steps, 1);
  require_at_least("--log-every", f.log_every, 1);
  require_at_least("--layers", f.layers, 1);
  require_at_least("--width", f.width, 1);
  // One unit per layer: the engine's per-unit bookkeeping is sized for models of thousands.
  if (f.layers > 10'000) throw Error(cat("--layers must be at most 10000, got ", f.layers));
  if (vm.count("global-batch")) require_at_least("--global-batch", f.global_batch, 1);
  if (vm.count("micro-batch")) require_at_least("--micro-batch", f.micro_batch, 1);
  if (vm.count("accum")) require_at_least("--accum", f.accum, 1);
  if (vm.count("reduce-bucket-size")) require_at_least("--reduce-bucket-size", f.reduce_bucket, 1);
  if (vm.count("allgather-bucket-size"))
    require_at_least("--allgather-bucket-size", f.allgather_bucket, 1);
  if (vm.count("shard-size")) require_at_least("--shard-size", f.shard_size, 1);
  if (vm.count("hpz")) require_at_least("--hpz", f.hpz, 1);
  if (vm.count("ranks") && vm.count("shard-size") && f.ranks % f.shard_size != 0)
    throw Error(cat("--shard-size ", f.shard_size, " does not divide -n ", f.ranks,
                    ": shard groups must tile the ranks"));
  if (vm.count("ranks") && vm.count("hpz") && f.ranks % f.hpz != 0)
    throw Error(cat("--hpz ", f.hpz, " does not divide -n ", f.ranks));
  if (vm.count("lr")) require_finite_nonneg("--lr", f.lr);
  if (vm.count("clip")) require_finite_nonneg("--clip", f.clip);
  if (vm.count("timeout") &&
      (!std::isfinite(f.timeout) || f.timeout <= 0 || f.timeout > kMaxCommTimeoutSeconds))
    throw Error(cat("--timeout must be a number of seconds in (0, ", kMaxCommTimeoutSeconds,
                    "], got ", f.timeout));
  if (vm.count("seed")) parse_seed(f.seed);
  if (vm.count("config") && f.config_file.empty())
    throw Error("--config: the file name is empty");
  if (vm.count("json") && f.json_file.empty()) throw Error("--json: the file name is empty");
  if (vm.count("plot") && f.plot_file.empty()) throw Error("--plot: the file name is empty");
  if (vm.count("save") && f.ckpt.save.empty()) throw Error("--save: the folder name is empty");
  if (vm.count("resume") && f.ckpt.resume.empty()) throw Error("--resume: the folder name is empty");
  if (vm.count("save-every")) require_at_least("--save-every", f.ckpt.save_every, 1);
  if (vm.count("keep")) require_at_least("--keep", f.ckpt.keep, 1);
}

// The model's units as the engine will register them, before any model or data is loaded.
std::vector<UnitSpec> units_of(const Run& run) {
  return run.gpt ? gpt_units(run.gpt_shape) : models::mlp_units(run.shape);
}

// Available host memory in bytes (MemAvailable), or nullopt where it cannot be read.
std::optional<std::int64_t> available_host_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  while (f >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    f.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return std::int64_t{pages} * page;
  return std::nullopt;
}

// What one rank holds on the host, by the planner (model states, buffers and the activations of
// a micro-batch) on the CPU path, or the trainer's host sample buffers on the GPU path; refused
// with the figures before anything is allocated, instead of a std::bad_alloc in the middle.
void check_host_memory(const Run& run, int world, int ranks_here, bool on_gpu) {
  const std::int64_t w = run.shape.width, b = run.micro;
  std::int64_t per_rank = 0;
  try {
    if (run.gpt && on_gpu) {  // the host holds the micro-batch's token ids
      per_rank = checked_mul(checked_mul(2 * b, run.gpt_shape.seq_len, "the token buffers"), 4,
                             "the token buffers");
    } else if (run.gpt) {
      GptShape g = run.gpt_shape;
      g.micro_batch = static_cast<int>(b);
      PlanInput in = plan_input_from_config(run.config, world);
      in.units = gpt_units(g);
      in.activation_bytes = gpt_trainer_activation_bytes(
          g, run.compute == models::GptCompute::bf16 ? DType::bf16 : DType::f32);
      in.tied_head = true;
      in.device = false;
      per_rank = plan_memory(in).peak_total;
    } else if (on_gpu) {
      per_rank = checked_mul(checked_mul(2 * w, b, "the sample buffers"), 4, "the sample buffers");
    } else {
      PlanInput in = plan_input_from_config(run.config, world);
      in.units = models::mlp_units(run.shape);
      const std::int64_t floats = checked_mul(checked_mul(run.shape.layers + 4, b, "the activations"),
                                              w, "the activations");
      const std::int64_t weights = checked_mul(2 * w, w + 1, "the activations");  // w_, dw_, biases
      if (__builtin_add_overflow(floats, weights, &in.activation_bytes))
        throw Overflow("the activations overflow 64 bits");
      in.activation_bytes = checked_mul(in.activation_bytes, 4, "the activations");
      in.device = false;
      per_rank = plan_memory(in).peak_total;
    }
  } catch (const Overflow&) {  // far more than any machine holds
    throw Error(cat("this run's memory (", run.shape.layers, " layers of width ", w,
                    ", micro-batches of ", b, " samples) overflows 64-bit byte counts; lower "
                    "--width, --global-batch or --micro-batch"));
  }
  const auto avail = available_host_memory();
  if (!avail) return;
  std::int64_t need = 0;
  if (__builtin_mul_overflow(per_rank, std::int64_t{ranks_here}, &need) || need > *avail)
    throw Error(cat("this run needs ", format_bytes(per_rank), " of host memory per rank",
                    ranks_here > 1 ? cat(" (x ", ranks_here, " ranks on this node)") : std::string(),
                    ": model states, buffers and the activations of micro-batches of ", b,
                    " samples of width ", w, ", but ", format_bytes(*avail),
                    " is available (MemAvailable); lower --global-batch, --micro-batch or --width, "
                    "or raise --accum or -n"));
}

// Flags over the config over zero train's defaults; `world` is the rank count when known (0
// before a relaunch without -n inside a job: then the batch is resolved later, once MPI runs).
Run resolve_run(const Flags& f, const boost::program_options::variables_map& vm, int world) {
  Run run;
  Config& config = run.config;
  const bool from_file = vm.count("config") > 0;
  if (from_file) {
    config = load_config(f.config_file);
  } else {  // zero train's own defaults, where a config file would give its own
    config.precision = Precision::bf16;
    config.optimizer.lr = 3e-3;
    config.gradient_clipping = 1.0;
  }
  fill_auto_defaults(config, {.lr = 3e-3, .clip = 1.0, .precision = Precision::bf16,
                              .total_steps = f.steps});
  if (vm.count("stage")) config.zero.stage = f.stage;
  if (vm.count("precision")) config.precision = parse_precision(f.precision);
  if (vm.count("reduce-dtype")) config.communication_data_type = parse_reduce(f.reduce);
  if (vm.count("lr")) config.optimizer.lr = f.lr;
  if (vm.count("clip")) config.gradient_clipping = f.clip;
  if (vm.count("overlap")) config.zero.overlap_comm = true;
  if (vm.count("reduce-bucket-size")) config.zero.reduce_bucket_size = f.reduce_bucket;
  if (vm.count("allgather-bucket-size")) config.zero.allgather_bucket_size = f.allgather_bucket;
  if (vm.count("shard-size")) config.zero.mics_shard_size = f.shard_size;
  if (vm.count("hpz")) config.zero.zero_hpz_partition_size = f.hpz;
  if (vm.count("timeout")) config.comm_timeout_seconds = f.timeout;
  // Batch sizes: a flag sets its key as if the config had given it (DeepSpeed's rule then
  // derives the rest); with none given anywhere, zero train's global batch of 64.
  if (vm.count("global-batch")) config.train_batch_size = f.global_batch;
  if (vm.count("micro-batch")) {
    config.train_micro_batch_size_per_gpu = f.micro_batch;
    config.micro_batch_given = true;
  }
  if (vm.count("accum")) {
    config.gradient_accumulation_steps = f.accum;
    config.accumulation_given = true;
  }
  run.gpt = f.model == "gpt";
  // zero train's default global batch: 64 samples of the MLP, 16 sequences of the GPT.
  if (!config.train_batch_size && !config.micro_batch_given)
    config.train_batch_size = run.gpt ? 16 : 64;
  if (run.gpt) {
    run.gpt_shape = preset_shape(f.preset);
    run.compute = vm.count("compute") ? (f.compute == "bf16" ? models::GptCompute::bf16
                                                             : models::GptCompute::fp32)
                  : config.precision == Precision::bf16 ? models::GptCompute::bf16
                                                        : models::GptCompute::fp32;
    if (run.compute == models::GptCompute::bf16 && config.precision != Precision::bf16)
      throw Error(cat("--compute bf16 needs bf16 parameters, but the run trains in ",
                      name_of(config.precision), "; use --compute fp32 or --precision bf16"));
  }
  run.shape.layers = f.layers;
  run.shape.width = f.width;
  run.shape.seed = vm.count("seed")  ? parse_seed(f.seed)
                   : from_file       ? static_cast<std::uint64_t>(config.seed)
                                     : 1;
  run.steps = f.steps;
  run.log_every = vm.count("log-every") ? f.log_every : from_file ? config.steps_per_print : 1;
  run.timeout = config.comm_timeout_seconds;
  fill_auto_from_model(config, f.width);
  if (world < 1) return run;
  try {
    config.resolve_batch(world);
  } catch (const Error& e) {
    throw Error(cat(e.what(), " (with ", world, world == 1 ? " rank" : " ranks",
                    "; --global-batch, --micro-batch and --accum set these keys)"));
  }
  run.micro = config.train_micro_batch_size_per_gpu;
  run.accum = config.gradient_accumulation_steps;
  run.shape.global_batch = *config.train_batch_size;
  if (run.gpt) {
    if (run.micro > std::numeric_limits<int>::max())
      throw Error(cat("train_micro_batch_size_per_gpu: ", run.micro, " sequences is too many"));
    run.gpt_shape.micro_batch = static_cast<int>(run.micro);
    models::check_gpt_shape(run.gpt_shape);
  }
  // Sample indices run to steps x global batch.
  checked_mul(run.steps, run.shape.global_batch, "--steps x the global batch");
  return run;
}

}  // namespace

int cmd_train(const Args& argv) {
  namespace po = boost::program_options;
  Flags f;
  po::options_description opts("zero train options");
  opts.add_options()
      ("model", po::value(&f.model)->default_value("mlp"),
       "model to train: mlp (a synthetic teacher) or gpt (GPT-2's architecture on a token file)")
      ("preset", po::value(&f.preset)->default_value("gpt-nano"),
       "the GPT's shape (`zero plan --list-presets`; gpt-micro and gpt-nano are byte-level)")
      ("data", po::value(&f.data),
       "the GPT's token file: an llm.c shard (.bin, header 20240520) or nanoGPT's train.bin")
      ("compute", po::value(&f.compute),
       "the GPT's math: bf16 (GEMM inputs and kept activations in bf16, fp32 accumulation; the "
       "default with bf16 params) or fp32")
      ("device", po::value(&f.device)->default_value("auto"),
       "cpu (MPI, host memory), cuda (one GPU per rank, NCCL, cuBLASLt) or auto: cuda when every "
       "rank on a node has a GPU of its own, else cpu")
      ("ranks,n", po::value(&f.ranks), "ranks (outside an MPI job: relaunch under mpirun)")
      ("stage", po::value(&f.stage), "ZeRO stage 0..3 (overrides the config)")
      ("steps", po::value(&f.steps)->default_value(20), "optimizer steps")
      ("seed", po::value(&f.seed), "seed of weights, teacher and data (default 1, or the config's seed)")
      ("layers", po::value(&f.layers)->default_value(4), "MLP layers (one unit each)")
      ("width", po::value(&f.width)->default_value(512), "MLP width")
      ("global-batch", po::value(&f.global_batch),
       "samples per step over all ranks (train_batch_size; default 64 unless the config gives "
       "a batch size)")
      ("micro-batch", po::value(&f.micro_batch),
       "samples per rank per micro-batch (train_micro_batch_size_per_gpu)")
      ("accum", po::value(&f.accum), "micro-batches per step (gradient_accumulation_steps)")
      ("precision", po::value(&f.precision), "bf16 (default), fp16 or fp32")
      ("reduce-dtype", po::value(&f.reduce), "gradient reduce dtype: fp32 (default) or the training dtype")
      ("lr", po::value(&f.lr), "learning rate (overrides the config)")
      ("clip", po::value(&f.clip), "gradient clipping max norm, 0 = off (overrides the config)")
      ("overlap", "overlap gradient reduction with backward (zero_optimization.overlap_comm)")
      ("reduce-bucket-size", po::value(&f.reduce_bucket),
       "gradient elements reduced per collective, whole units (zero_optimization."
       "reduce_bucket_size; default 5e8, or the config's)")
      ("shard-size", po::value(&f.shard_size),
       "hierarchical sharding: shard the states over groups of this many ranks, replicated "
       "across the groups (zero_optimization.mics_shard_size; default: all ranks)")
      ("hpz", po::value(&f.hpz),
       "stage 3: keep a secondary copy of the params sharded over groups of this many ranks so "
       "that backward gathers stay inside them (zero_optimization.zero_hpz_partition_size)")
      ("allgather-bucket-size", po::value(&f.allgather_bucket),
       "new-param elements all-gathered per collective after the step, stages 1-2 (zero_"
       "optimization.allgather_bucket_size; default 5e8, or the config's)")
      ("timeout", po::value(&f.timeout),
       "seconds a collective may make no progress before the job fails (default: the config's "
       "comm_timeout, 600)")
      ("config", po::value(&f.config_file), "DeepSpeed-style JSON config file")
      ("json", po::value(&f.json_file), "write a JSON summary to this file")
      ("plot", po::value(&f.plot_file), "write the loss against the step to this SVG file")
      ("log-every", po::value(&f.log_every),
       "print the loss every this many steps (default 1, or the config's steps_per_print)")
      ("save", po::value(&f.ckpt.save),
       "write checkpoints into this folder (DIR/step_NNNNNNNN, DIR/latest; docs/checkpoints.md): "
       "at the end, and every --save-every steps")
      ("save-every", po::value(&f.ckpt.save_every), "also save every this many steps")
      ("keep", po::value(&f.ckpt.keep), "keep only the newest this many checkpoints (default: all)")
      ("save-sync", "write checkpoints in the training loop instead of in the background")
      ("resume", po::value(&f.ckpt.resume),
       "continue from a checkpoint (a step_* folder, or a --save folder: its newest complete one), "
       "at any rank count and stage; --steps counts from the run's start")
      ("help,h", "show this help");
  const po::variables_map vm = parse_options(argv, opts);
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  f.ckpt.sync = vm.count("save-sync") > 0;
  check_flags(f, vm);
  // Everything that can be checked without MPI, before a relaunch starts any rank.
  const int asked = vm.count("ranks") ? f.ranks : in_mpi_job() ? 0 : 1;
  double timeout = 0;
  {
    const Run early = resolve_run(f, vm, asked);
    if (early.gpt && !in_mpi_job()) {  // a bad token file is said once, before ranks start
      const models::TokenFile file(f.data);
      file.check_vocab(early.gpt_shape.vocab);
      (void)models::TokenSampler(file, early.gpt_shape.seq_len, 0);
    }
    if (!in_mpi_job())  // a wrong --resume or --save is one sentence, before ranks start
      (void)check_checkpoint_flags(f.ckpt, units_of(early), f.model, early.steps);
    if (asked > 0 && !in_mpi_job() && (f.device == "cpu" || !ZERO_HAVE_CUDA))
      check_host_memory(early, asked, asked, false);
    timeout = early.timeout;
  }
  // The GPT's MFU is against the cores' FMA peak, measured here while no rank runs (ranks
  // sharing cores would measure each other) and handed to the ranks.
  if (f.model == "gpt" && asked > 1 && !in_mpi_job() && !std::getenv("ZERO_FMA_PEAK")) {
    const kernels::cpu::FmaPeak peak = kernels::cpu::measure_fma_peak(0.05, 4);
    ::setenv("ZERO_FMA_PEAK", cat(peak.flops, " ", peak.kernel).c_str(), 1);
  }
  if (asked > 0) ensure_ranks(asked, argv);

  // A rank that never joins ends MPI startup after the same timeout as a collective.
  comm::MpiRuntime mpi({.startup_timeout_seconds = timeout, .error_prefix = "zero train: error: "});
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  check_job_size(n, "train");
  const bool on_gpu = use_gpu(f.device);
  Run run = resolve_run(f, vm, n);
  const std::optional<Resumed> resumed = check_checkpoint_flags(f.ckpt, units_of(run), f.model, run.steps);
  // The data order continues the saved run's: its seed, unless --seed says otherwise.
  if (resumed && !vm.count("seed")) run.shape.seed = resumed->trainer.seed;
  Config& config = run.config;
  models::MlpShape& shape = run.shape;
  const std::int64_t micro = run.micro, accum = run.accum, global_batch = shape.global_batch;
  const std::int64_t steps = run.steps, log_every = run.log_every;
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  check_host_memory(run, n, on_gpu ? 1 : std::max(1, local_size ? std::atoi(local_size) : 1), on_gpu);
  comm::Options co;
  co.timeout_seconds = run.timeout;
  std::unique_ptr<comm::Communicator> world =
      on_gpu ? comm::make_nccl_communicator(MPI_COMM_WORLD, comm::NcclOptions{.common = co})
             : comm::make_mpi_communicator(MPI_COMM_WORLD, co);
  const int rank = world->rank();
  const comm::Memory where = on_gpu ? comm::Memory::device : comm::Memory::host;
  if (rank == 0) {
    for (const auto& w : config.warnings) std::cerr << "zero train: warning: " << w << '\n';
    for (const auto& line : auto_fill_lines(config, "zero train")) std::cout << line << '\n';
    // The one case the first gemm is silent about (kernels/cpu/gemm.hpp): the environment chose
    // weaker kernels than this CPU's, which zero respects.
    if (const auto blas = kernels::cpu::blas_core_status();
        !on_gpu && blas.source == kernels::cpu::CoretypeSource::user && !blas.warning.empty())
      std::cerr << "zero train: warning: " << blas.warning << '\n';
    if (config.zero.stage > 0 && n == 1)
      std::cerr << "zero train: warning: stage " << config.zero.stage
                << " at 1 rank shards nothing (every state stays whole on the one rank); run with "
                   "-n 2 or more to see it shard\n";
  }

  std::unique_ptr<TrainModel> model =
      run.gpt ? make_gpt_model(run.gpt_shape, run.compute, f.preset, f.data, shape.seed, accum, n, where)
              : make_mlp_model(shape, micro, where);
  // The GPT's AdamW groups (no decay on biases, LayerNorm, embeddings) unless the config gives
  // its own param_groups.
  if (run.gpt && config.param_groups.empty()) {
    config.param_groups = models::gpt_param_groups();
    if (rank == 0)
      std::printf("zero train: AdamW weight decay %g on the blocks' 2-D weights, none on biases, "
                  "LayerNorm and embeddings (models::gpt_param_groups; a config's param_groups "
                  "replace these)\n", config.optimizer.weight_decay);
  }
  EngineOptions eo;
  eo.memory = where;
  Engine engine(config, *world, model->units(), eo);
  TrainerState trainer_state{model->kind(), 0, shape.seed, global_batch,
                             run.gpt ? f.data : std::string(),
                             run.gpt ? models::TokenFile(f.data).size() : 0};
  std::int64_t start = 0;  // the first step this process trains
  if (resumed) {
    (void)load_checkpoint(engine, resumed->path);
    start = resumed->trainer.next_step;
    if (rank == 0) {
      std::printf("zero train: resumed from %s: step %lld (%lld optimizer steps applied, saved by "
                  "%d rank%s at stage %d)\n", resumed->path.c_str(), static_cast<long long>(start),
                  static_cast<long long>(resumed->meta.step), resumed->meta.ranks,
                  resumed->meta.ranks == 1 ? "" : "s", resumed->meta.stage);
      for (const auto& w : resume_differences(resumed->trainer, trainer_state))
        std::cerr << "zero train: warning: " << w << '\n';
    }
  } else {
    engine.init_params([&](int p, std::span<float> out) { model->init(p, out); });
  }
  std::optional<Checkpointer> checkpointer;
  if (!f.ckpt.save.empty())
    checkpointer.emplace(engine, f.ckpt.save,
                         CheckpointOptions{.keep = f.ckpt.keep, .background = !f.ckpt.sync});
  std::vector<double> save_stalls;
  const std::int64_t run_steps = steps - start;
  const Layout& layout = engine.layout();
  if (rank == 0)
    std::printf("zero train: %s (%lld params), stage %d, %d rank%s on %s, %s, reduce %s, "
                "global batch %lld = %d x %lld micro-batches x %lld\n",
                model->describe().c_str(), static_cast<long long>(layout.numel), config.zero.stage, n,
                n == 1 ? "" : "s", on_gpu ? "cuda (NCCL)" : "cpu (MPI)", std::string(name_of(config.precision)).c_str(),
                std::string(name_of(reduce_dtype(config.precision, config.communication_data_type))).c_str(),
                static_cast<long long>(global_batch), n, static_cast<long long>(accum),
                static_cast<long long>(micro));

  engine.reset_comm_accounting();
  double loss = 0, first_loss = 0;
  std::int64_t skipped = 0;
  // MFU (the GPT on the CPU) against the measured fp32 FMA peak of the cores the ranks run on
  // (one core a rank, at most the node's): the bound a CPU GEMM reaches, bf16 or not, on a CPU
  // without bf16 FMA units (docs/gpt.md). Measured by the launcher before the ranks started; in
  // a job started by mpirun or srun, here, by rank 0, while the others may be starting up.
  double peak_flops = 0;
  std::string peak_source;
  if (model->flops_per_token() > 0 && on_gpu && rank == 0) {
    // On GPUs: each rank's device's dense bf16 tensor-core peak (kernels/cuda/device.hpp), as
    // llm.c counts it, whatever the compute dtype.
    const auto devices = kernels::cuda::describe_devices();
    const int local = comm::node_local_rank();
    if (local < static_cast<int>(devices.size())) {
      const auto& d = devices[static_cast<std::size_t>(local)];
      const auto p = kernels::cuda::bf16_peak(d.name, d.compute_capability);
      peak_flops = p.tflops * 1e12 * n;
      peak_source = cat(d.name, " bf16 peak x ", n, " (", p.source, ")");
    }
  }
  if (model->flops_per_token() > 0 && !on_gpu && rank == 0) {
    kernels::cpu::FmaPeak peak;
    std::string kernel;
    if (const char* given = std::getenv("ZERO_FMA_PEAK")) {
      std::istringstream in(given);
      in >> peak.flops;
      std::getline(in >> std::ws, kernel);
      peak.kernel = kernel;
    } else {
      peak = kernels::cpu::measure_fma_peak(0.05, 4);
    }
    const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    const long used = std::min<long>(cores, n);
    peak_flops = peak.flops * static_cast<double>(used);
    peak_source = cat(peak.kernel, " peak of ", used, " core", used == 1 ? "" : "s", ", measured");
  }
  StepClock clock(*model, engine, run_steps);
  const double tokens_per_step = static_cast<double>(global_batch * model->tokens_per_sample());
  const auto t0 = std::chrono::steady_clock::now();
  // On a terminal a progress bar with the ETA sits under the step lines; plain lines otherwise.
  const char* tty = std::getenv("ZERO_STDOUT_TTY");
  const bool bar = rank == 0 && (tty ? std::string_view(tty) == "1" : isatty(STDOUT_FILENO) == 1);
  for (std::int64_t s = start; s < steps; ++s) {
    double local = 0;
    for (std::int64_t k = 0; k < accum; ++k)
      local += model->micro_batch(engine, s, k, rank, n);
    StepReport rep = engine.step();
    skipped += rep.skipped;
    const auto reduce_at = std::chrono::steady_clock::now();
    MPI_Allreduce(MPI_IN_PLACE, &local, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const double loss_wait =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - reduce_at).count();
    loss = local / (static_cast<double>(n) * accum);
    const double step_seconds = clock.step_done(s - start, loss, rep.grad_norm, loss_wait);
    if (s == start) first_loss = loss;
    if (bar) std::printf("\r\033[K");
    if (rank == 0 && (s % log_every == 0 || s + 1 == steps))
      std::printf("step %4lld  loss %.6f  grad-norm %.4f  lr %.3g%s%s%s\n", static_cast<long long>(s + 1),
                  loss, rep.grad_norm, rep.lr,
                  model->tokens_per_sample() > 1
                      ? cat("  ", static_cast<long long>(tokens_per_step / step_seconds), " tok/s",
                            peak_flops > 0 ? percent("  MFU ", tokens_per_step / step_seconds *
                                                                   model->flops_per_token() / peak_flops)
                                           : std::string(),
                            "  ", std::llround(1e3 * step_seconds), " ms").c_str()
                      : "",
                  config.precision == Precision::fp16 ? ("  scale " + std::to_string(static_cast<long long>(rep.loss_scale))).c_str() : "",
                  rep.skipped ? "  (skipped)" : "");
    if (bar && s + 1 < steps) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s", progress_line(s + 1, steps, elapsed, loss).c_str());
      std::fflush(stdout);
    }
    if (checkpointer && ((f.ckpt.save_every > 0 && (s + 1) % f.ckpt.save_every == 0) || s + 1 == steps)) {
      const auto at = std::chrono::steady_clock::now();
      trainer_state.next_step = s + 1;
      checkpointer->save(to_json(trainer_state), s + 1);
      save_stalls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - at).count());
    }
  }
  if (checkpointer) checkpointer->wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const comm::Accounting acct = engine.comm_accounting();
  const Engine::GroupAccounting by_group = engine.comm_accounting_by_group();
  // Payload bytes per step of every op of one group: what hierarchical sharding and hpZ move
  // inside their groups and across them.
  auto group_bytes = [&](const comm::Accounting& a) {
    std::uint64_t b = 0;
    for (const comm::OpStats& o : a.ops) b += o.payload_bytes;
    return b / static_cast<std::uint64_t>(run_steps);
  };
  const bool grouped = engine.settings_shard_size() < n || by_group.secondary[comm::Op::all_gather].calls > 0;
  Throughput throughput = clock.result(global_batch, model->tokens_per_sample());
  if (rank == 0 && peak_flops > 0) {
    throughput.flops_per_token = model->flops_per_token();
    throughput.peak_flops = peak_flops;
    throughput.peak_source = peak_source;
  }
  // Memory of every rank, gathered to all (each rank's ledger is its own); read before the
  // checksum, whose gathers are inspection, not training.
  const MemoryReport mem = engine.memory();
  const std::uint64_t checksum = engine.master_checksum();
  std::int64_t mine[6] = {mem.master, mem.optimizer, mem.grads, mem.params, mem.buffers, mem.peak_total};
  std::vector<std::int64_t> all(6 * static_cast<std::size_t>(n));
  MPI_Allgather(mine, 6, MPI_INT64_T, all.data(), 6, MPI_INT64_T, MPI_COMM_WORLD);

  // What the planner predicted for this very run, beside what the ledger measured (rank 0's).
  PlanInput plan_in = plan_input_from_config(config, n);
  plan_in.units = model->units();
  plan_in.activation_bytes = model->activation_bytes();
  plan_in.tied_head = model->tied_head();
  plan_in.model_name = model->kind();
  plan_in.device = on_gpu;
  const Plan plan = plan_memory(plan_in);
  struct Row {
    const char* name;
    std::int64_t planned, measured;
  };
  const Row rows[] = {
      {"params", plan.device.params, mem.params},
      {"grads", plan.device.grads, mem.grads},
      {"master", plan.device.master, mem.master},
      {"optimizer", plan.device.optimizer, mem.optimizer},
      {"buffers", plan.device.buffers, mem.buffers},
      {"activations", plan.device.activations, mem.activations},
      {"peak total", plan.peak_total, mem.peak_total},
  };
  auto diff_pct = [](std::int64_t planned, std::int64_t measured) {
    return measured == 0 ? (planned == 0 ? 0.0 : 100.0)
                         : 100.0 * double(planned - measured) / double(measured);
  };

  const char* keys[] = {"master", "optimizer", "grads", "params", "buffers", "peak_total"};
  if (rank == 0) {
    std::printf("\nsummary: loss %.6f -> %.6f in %lld steps%s (%lld skipped), %.3f s/step, checksum %s\n",
                first_loss, loss, static_cast<long long>(run_steps),
                start > 0 ? cat(" (", start + 1, "..", steps, ")").c_str() : "",
                static_cast<long long>(skipped), seconds / run_steps, hex16(checksum).c_str());
    if (checkpointer) print_saves(checkpointer->completed(), save_stalls, human_bytes);
    std::printf("\nmemory per rank      %12s %12s %12s %12s %12s %12s\n", keys[0], keys[1], keys[2],
                keys[3], keys[4], "peak total");
    for (int r = 0; r < n; ++r) {
      std::printf("  rank %-14d", r);
      for (int k = 0; k < 6; ++k) std::printf(" %12s", human_bytes(double(all[6 * r + k])).c_str());
      std::printf("\n");
    }
    const double psi = static_cast<double>(layout.numel);
    std::printf("  (model states = params + grads + master + optimizer = %.2f bytes/param on rank 0)\n",
                double(all[0] + all[1] + all[2] + all[3]) / psi);
    std::printf("\nplanned vs measured (rank 0; `zero plan` predicts this before a run)\n");
    std::printf("  %-14s %12s %12s %9s\n", "category", "planned", "measured", "diff");
    for (const Row& row : rows)
      std::printf("  %-14s %12s %12s %8.2f%%\n", row.name, human_bytes(double(row.planned)).c_str(),
                  human_bytes(double(row.measured)).c_str(), diff_pct(row.planned, row.measured));
    std::printf("\ntraffic per step per rank (payload)   all_reduce %s   reduce_scatter %s   all_gather %s\n",
                human_bytes(double(acct[comm::Op::all_reduce].payload_bytes) / run_steps).c_str(),
                human_bytes(double(acct[comm::Op::reduce_scatter].payload_bytes) / run_steps).c_str(),
                human_bytes(double(acct[comm::Op::all_gather].payload_bytes) / run_steps).c_str());
    if (grouped)
      std::printf("by group, per step per rank (payload): inside the shard group %s, across "
                  "shard groups %s, inside the hpZ group %s, over all ranks %s\n",
                  human_bytes(double(group_bytes(by_group.shard))).c_str(),
                  human_bytes(double(group_bytes(by_group.replicate))).c_str(),
                  human_bytes(double(group_bytes(by_group.secondary))).c_str(),
                  human_bytes(double(group_bytes(by_group.world))).c_str());
    print_throughput(throughput, human_bytes);
  }

  if (rank == 0 && !f.plot_file.empty()) {
    std::ofstream out(f.plot_file);
    out << loss_svg(throughput.history, cat("zero train: ", model->describe(), ", stage ",
                                            config.zero.stage, ", ", n, n == 1 ? " rank" : " ranks"));
    if (!out) throw Error(cat("--plot: cannot write ", f.plot_file));
  }
  if (rank == 0 && !f.json_file.empty()) {
    boost::json::array memory;
    for (int r = 0; r < n; ++r) {
      boost::json::object o;
      for (int k = 0; k < 6; ++k) o[keys[k]] = all[6 * r + k];
      memory.push_back(o);
    }
    // Per step; the final checksum's gathers come after `acct` was read.
    auto per_step = [&](comm::Op op) { return acct[op].payload_bytes / static_cast<std::uint64_t>(run_steps); };
    auto wire = [&](comm::Op op) { return acct[op].wire_bytes / static_cast<std::uint64_t>(run_steps); };
    boost::json::object j{
        {"model", model->kind()},
        {"stage", config.zero.stage},
        {"ranks", n},
        {"steps", run_steps},
        {"first_step", start + 1},
        {"precision", std::string(name_of(config.precision))},
        {"device", on_gpu ? "cuda" : "cpu"},
        {"params", layout.numel},
        {"padded_params", layout.padded_numel},
        {"first_loss", first_loss},
        {"final_loss", loss},
        {"params_checksum", hex16(checksum)},
        {"skipped_steps", skipped},
        {"seconds_per_step", seconds / run_steps},
        {"memory_bytes", memory},
        {"memory_planned_vs_measured", [&] {
           boost::json::object o;
           for (const Row& row : rows)
             o[row.name] = {{"planned", row.planned}, {"measured", row.measured},
                            {"diff_percent", diff_pct(row.planned, row.measured)}};
           return o;
         }()},
        {"comm_bytes", {{"all_reduce", per_step(comm::Op::all_reduce)},
                        {"reduce_scatter", per_step(comm::Op::reduce_scatter)},
                        {"all_gather", per_step(comm::Op::all_gather)}}},
        {"comm_wire_bytes", {{"all_reduce", wire(comm::Op::all_reduce)},
                             {"reduce_scatter", wire(comm::Op::reduce_scatter)},
                             {"all_gather", wire(comm::Op::all_gather)}}},
    };
    j["comm_bytes_by_group"] = {{"shard", group_bytes(by_group.shard)},
                                {"replicate", group_bytes(by_group.replicate)},
                                {"secondary", group_bytes(by_group.secondary)},
                                {"world", group_bytes(by_group.world)}};
    add_throughput_json(j, throughput);
    if (resumed) j["resumed_from"] = resumed->path;
    if (checkpointer) j["checkpoints"] = saves_json(checkpointer->completed(), save_stalls);
    std::ofstream out(f.json_file);
    if (!out) throw Error(cat("cannot write ", f.json_file));
    out << boost::json::serialize(j) << '\n';
  }
  return 0;
}

}  // namespace zero::cli
