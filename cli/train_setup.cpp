// The flags `zero train` and `zero compare` share (cli/train_setup.hpp).
#include "cli/train_setup.hpp"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "cli/ckpt_io.hpp"
#include "cli/compress_flags.hpp"
#include "cli/fill_auto.hpp"
#include "cli/launch.hpp"
#include "cli/options.hpp"
#include "cli/run_flags.hpp"
#include "models/tokens.hpp"
#include "zero_build_config.hpp"

namespace zero::cli {
namespace {

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

}  // namespace

// --device auto: the GPU path when this build has it and every rank on every node has a GPU of
// its own (NCCL refuses two ranks on one device); all ranks decide together.
bool use_gpu(World& world, const std::string& device) {
  if (device == "cpu") return false;
  const bool ok = world.every_rank_has_gpu();
  if (device == "cuda" && !ok)
    throw Error(ZERO_HAVE_CUDA
                    ? "--device cuda: some rank has no GPU of its own (one GPU per rank; "
                      "run fewer ranks per node or use --device cpu)"
                    : "--device cuda: this build has no CUDA (configure with -Dcuda=enabled)");
  return ok;
}

void add_train_options(boost::program_options::options_description& opts, Flags& f) {
  namespace po = boost::program_options;
  // clang-format off
  opts.add_options()
      ("model", po::value(&f.model)->default_value("mlp"),
       "model to train: mlp (a synthetic teacher) or gpt (GPT-2's architecture on a token file)")
      ("preset", po::value(&f.preset)->default_value("gpt-nano"),
       "the GPT's shape (`zero plan --list-presets`; gpt-micro and gpt-nano are byte-level)")
      ("data", po::value(&f.data),
       "the GPT's token file: an llm.c shard (.bin, header 20240520) or nanoGPT's train.bin");
  // Defined with `zero plan`'s (cli/run_flags.hpp): the same flags plan the same run.
  add_compute_option(opts, f.compute);
  add_recompute_option(opts);
  add_device_option(opts, f.device);
  opts.add_options()
      ("ranks,n", po::value(&f.ranks), "ranks (outside an MPI job: relaunch under mpirun)")
      ("steps", po::value(&f.steps)->default_value(20), "optimizer steps")
      ("seed", po::value(&f.seed), "seed of weights, teacher and data (default 1, or the config's seed)")
      ("layers", po::value(&f.layers)->default_value(4), "MLP layers (one unit each)")
      ("width", po::value(&f.width)->default_value(512), "MLP width");
  add_batch_options(opts, {&f.global_batch, &f.micro_batch, &f.accum});
  // Defined with `zero plan`'s (cli/settings_flags.hpp): the same values give the same Config.
  add_stage_option(opts, f.stage, false);
  add_settings_options(opts, f.settings);
  opts.add_options()
      ("lr", po::value(&f.lr), "learning rate (overrides the config)")
      ("optimizer", po::value(&f.optimizer), "adamw, lion, lamb or muon (overrides the config's "
       "type; muon: Muon on the blocks' 2-D weights, AdamW on the rest, docs/optimizers.md)")
      ("muon-lr", po::value(&f.muon_lr), "Muon's lr for its matrices (default 0.02), scheduled as --lr")
      ("clip", po::value(&f.clip), "gradient clipping max norm, 0 = off (overrides the config)")
      ("threads", po::value(&f.threads),
       "threads of each rank's CPU math (default: the config's threads, else OMP_NUM_THREADS, "
       "else the node's cores / its ranks); results are the same bits at every count")
      ("timeout", po::value(&f.timeout),
       "seconds a collective may make no progress before the job fails (default: the config's "
       "comm_timeout, 600)")
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
      ("init", po::value(&f.init),
       "start from the weights in this safetensors file (`zero ckpt export`'s, or Hugging Face "
       "GPT-2's model.safetensors for the GPT); Adam's moments start at zero, the step at 0")
      ("resume", po::value(&f.ckpt.resume),
       "continue from a checkpoint (a step_* folder, or a --save folder: its newest complete one), "
       "at any rank count and stage; --steps counts from the run's start");
  // clang-format on
  add_compress_options(opts);
}

namespace {

// --model and the flags that belong to one model only.
void check_model_flags(const Flags& f, const boost::program_options::variables_map& vm) {
  if (f.model != "mlp" && f.model != "gpt")
    throw Error(cat("--model: expected mlp or gpt, got '", f.model, "'"));
  if (f.model == "gpt") {
    if (f.data.empty())
      throw Error(
          "--model gpt needs --data FILE: a token file (llm.c's .bin shards or nanoGPT's "
          "train.bin; `zero data TEXT --out PREFIX` makes one from a text file)");
    (void)preset_shape(f.preset);  // an unknown name is an error here
    check_compute_flag(vm, f.compute);
    for (const char* mlp_only : {"layers", "width"})
      if (!vm[mlp_only].defaulted())
        throw Error(cat("--", mlp_only, " shapes the MLP; the GPT's shape comes from --preset"));
  } else {
    for (const char* gpt_only : {"data", "compute", "recompute"})
      if (vm.count(gpt_only)) throw Error(cat("--", gpt_only, " is for --model gpt"));
    if (!vm["preset"].defaulted()) throw Error("--preset is for --model gpt");
  }
}

// The file and folder flags: none may be empty; --init and --resume exclude each other.
void check_file_flags(const Flags& f, const boost::program_options::variables_map& vm) {
  if (vm.count("json") && f.json_file.empty()) throw Error("--json: the file name is empty");
  if (vm.count("plot") && f.plot_file.empty()) throw Error("--plot: the file name is empty");
  // Said before any rank starts, not after the run (the write checks again).
  if (vm.count("json")) (void)check_output_path(f.json_file, "--json");
  if (vm.count("plot")) (void)check_output_path(f.plot_file, "--plot");
  if (vm.count("save") && f.ckpt.save.empty()) throw Error("--save: the folder name is empty");
  if (vm.count("resume") && f.ckpt.resume.empty())
    throw Error("--resume: the folder name is empty");
  if (vm.count("save-every")) require_at_least("--save-every", f.ckpt.save_every, 1);
  if (vm.count("init") && f.init.empty()) throw Error("--init: the file name is empty");
  if (vm.count("init") && vm.count("resume"))
    throw Error(
        "--init and --resume both give the starting weights: use one (--resume also "
        "restores Adam's moments and the step)");
  if (vm.count("keep")) require_at_least("--keep", f.ckpt.keep, 1);
}

}  // namespace

// The flags alone, before any file is read.
void check_flags(const Flags& f, const boost::program_options::variables_map& vm) {
  check_model_flags(f, vm);
  check_device_flag(f.device);
  if (vm.count("ranks")) require_at_least("--ranks", f.ranks, 1);
  if (vm.count("stage")) (void)parse_stage_flag(f.stage, false);
  require_at_least("--steps", f.steps, 1);
  require_at_least("--log-every", f.log_every, 1);
  require_at_least("--layers", f.layers, 1);
  require_at_least("--width", f.width, 1);
  // One unit per layer: the engine's per-unit bookkeeping is sized for models of thousands.
  if (f.layers > 10000) throw Error(cat("--layers must be at most 10000, got ", f.layers));
  check_batch_flags(vm, f.global_batch, f.micro_batch, f.accum);
  check_settings_flags(vm, f.settings, vm.count("ranks") ? f.ranks : 0);
  if (vm.count("lr")) require_finite_nonneg("--lr", f.lr);
  if (vm.count("muon-lr")) require_finite_nonneg("--muon-lr", f.muon_lr);
  if (vm.count("optimizer") && f.optimizer != "adamw" && f.optimizer != "lion" &&
      f.optimizer != "lamb" && f.optimizer != "muon")
    throw Error(cat("--optimizer: expected adamw, lion, lamb or muon, got '", f.optimizer, "'"));
  if (vm.count("clip")) require_finite_nonneg("--clip", f.clip);
  if (vm.count("threads") && (f.threads < 1 || f.threads > 1024))
    throw Error(cat("--threads must be from 1 to 1024, got ", f.threads));
  if (vm.count("timeout") &&
      (!std::isfinite(f.timeout) || f.timeout <= 0 || f.timeout > kMaxCommTimeoutSeconds))
    throw Error(cat("--timeout must be a number of seconds in (0, ", kMaxCommTimeoutSeconds,
                    "], got ", f.timeout));
  if (vm.count("seed")) parse_seed(f.seed);
  check_file_flags(f, vm);
}

// The model's units as the engine will register them, before any model or data is loaded.
std::vector<UnitSpec> units_of(const Run& run) {
  return run.gpt ? models::gpt_units(run.gpt_shape) : models::mlp_units(run.shape);
}

namespace {

// The model and micro-batch a memory sentence speaks of, in the words of the model trained.
std::string model_words(const Run& run) {
  const std::int64_t b = run.micro;
  if (run.gpt)
    return cat("a GPT of ", run.gpt_shape.layers, " layers, hidden ", run.gpt_shape.hidden,
               ", in micro-batches of ", b, b == 1 ? " sequence" : " sequences", " of ",
               run.gpt_shape.seq_len, " tokens");
  return cat(run.shape.layers, " layers of width ", run.shape.width, ", in micro-batches of ", b,
             b == 1 ? " sample" : " samples");
}

}  // namespace

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
      models::GptShape g = run.gpt_shape;
      g.micro_batch = static_cast<int>(b);
      PlanInput in = plan_input_from_config(run.config, world);
      in.units = models::gpt_units(g);
      in.activation_bytes = models::gpt_trainer_activation_bytes(
          g, run.compute == models::GptCompute::bf16 ? DType::bf16 : DType::f32);
      in.tied_head = true;
      in.device = false;
      per_rank = plan_memory(in).peak_total;
    } else if (on_gpu) {
      per_rank = checked_mul(checked_mul(2 * w, b, "the sample buffers"), 4, "the sample buffers");
    } else {
      PlanInput in = plan_input_from_config(run.config, world);
      in.units = models::mlp_units(run.shape);
      const std::int64_t floats = checked_mul(
          checked_mul(run.shape.layers + 4, b, "the activations"), w, "the activations");
      const std::int64_t weights = checked_mul(2 * w, w + 1, "the activations");  // w_, dw_, biases
      if (__builtin_add_overflow(floats, weights, &in.activation_bytes))
        throw Overflow("the activations overflow 64 bits");
      in.activation_bytes = checked_mul(in.activation_bytes, 4, "the activations");
      in.device = false;
      per_rank = plan_memory(in).peak_total;
    }
  } catch (const Overflow&) {  // far more than any machine holds
    throw Error(cat("this run's memory (", model_words(run), ") overflows 64-bit byte counts; lower ",
                    run.gpt ? "--global-batch or --micro-batch" : "--width, --global-batch or --micro-batch"));
  }
  const auto avail = available_host_memory();
  if (!avail) return;
  std::int64_t need = 0;
  if (__builtin_mul_overflow(per_rank, std::int64_t{ranks_here}, &need) || need > *avail)
    throw Error(
        cat("this run needs ", format_bytes(per_rank), " of host memory per rank",
            ranks_here > 1 ? cat(" (x ", ranks_here, " ranks on this node)") : std::string(),
            ": model states, buffers and the activations of ", model_words(run), ", but ",
            format_bytes(*avail), " is available (MemAvailable); lower ",
            run.gpt ? "--global-batch or --micro-batch" : "--global-batch, --micro-batch or --width",
            ", or raise --accum or -n"));
}

// Flags over the config over zero train's defaults; `world` is the rank count when known (0
// before a relaunch without -n inside a job: then the batch is resolved later, once MPI runs).
Run resolve_run(const Flags& f, const boost::program_options::variables_map& vm, int world,
                const std::string& config_file) {
  Run run;
  Config& config = run.config;
  const bool from_file = vm.count("config") > 0 || !config_file.empty();
  if (from_file) {
    config = load_config(config_file.empty() ? f.settings.config_file : config_file);
  } else {  // zero train's own defaults, where a config file would give its own
    config.precision = Precision::bf16;
    config.optimizer.lr = 3e-3;
    config.gradient_clipping = 1.0;
  }
  fill_auto_defaults(
      config, {.lr = 3e-3, .clip = 1.0, .precision = Precision::bf16, .total_steps = f.steps});
  if (vm.count("stage")) config.zero.stage = parse_stage_flag(f.stage, false).front();
  if (vm.count("lr")) config.optimizer.lr = f.lr;
  if (vm.count("optimizer"))
    config.optimizer.type = f.optimizer == "lion"   ? OptimizerType::lion
                            : f.optimizer == "lamb" ? OptimizerType::lamb
                            : f.optimizer == "muon" ? OptimizerType::muon
                                                    : OptimizerType::adamw;
  if (vm.count("muon-lr")) config.optimizer.muon_lr = f.muon_lr;
  if (vm.count("clip")) config.gradient_clipping = f.clip;
  if (vm.count("timeout")) config.comm_timeout_seconds = f.timeout;
  apply_compress_flags(vm, config);
  if (vm.count("threads")) config.threads = f.threads;
  if (vm.count("threads")) run.threads_by = "--threads";
  // Batch sizes: a flag sets its key as if the config had given it (DeepSpeed's rule then
  // derives the rest); with none given anywhere, the model's default global batch.
  apply_batch_flags(vm, f.global_batch, f.micro_batch, f.accum, config);
  run.gpt = f.model == "gpt";
  apply_default_batch(config, run.gpt, world);
  if (run.gpt) run.gpt_shape = preset_shape(f.preset);
  // Hugging Face's "auto" rules read the hidden size of the model trained; the settings flags
  // win over them (as over the file), as in `zero plan`.
  fill_auto_from_model(config, run.gpt ? run.gpt_shape.hidden : std::int64_t{f.width});
  config = apply_settings_flags(vm, f.settings, config);
  if (run.gpt) {
    run.compute = resolve_compute(vm, f.compute, config.precision);
    run.gpt_shape.recompute = vm.count("recompute") > 0 || config.activation_checkpointing;
  } else if (config.activation_checkpointing) {
    config.warnings.push_back(
        "activation_checkpointing has no effect on the MLP, which keeps every activation; it "
        "turns on the GPT's recomputation (--model gpt)");
  }
  run.shape.layers = f.layers;
  run.shape.width = f.width;
  run.shape.seed = vm.count("seed") ? parse_seed(f.seed)
                   : from_file      ? static_cast<std::uint64_t>(config.seed)
                                    : 1;
  run.steps = f.steps;
  run.log_every = vm.count("log-every") ? f.log_every : from_file ? config.steps_per_print : 1;
  run.timeout = config.comm_timeout_seconds;
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

double before_launch(const Flags& f, const boost::program_options::variables_map& vm, int asked,
                     bool steps_from_start) {
  double timeout = 0;
  bool bf16_math = false;  // the GPT's GEMMs in bf16: the peak is theirs
  {
    const Run early = resolve_run(f, vm, asked);
    bf16_math = early.gpt && early.compute == models::GptCompute::bf16;
    if (early.gpt && !in_mpi_job()) {  // a bad token file is said once, before ranks start
      const models::TokenFile file(f.data);
      file.check_vocab(early.gpt_shape.vocab);
      (void)models::TokenSampler(file, early.gpt_shape.seq_len, 0);
    }
    if (!f.init.empty() && !in_mpi_job())  // every tensor checked against the model, said once
      (void)safetensors_fill(f.init, make_layout(units_of(early), {}));
    if (!in_mpi_job())  // a wrong --resume or --save is one sentence, before ranks start
      (void)check_checkpoint_flags(f.ckpt, units_of(early), f.model,
                                   steps_from_start ? early.steps : INT64_MAX);
    const bool host_ranks = f.device == "cpu" || f.device == "emulated" || !ZERO_HAVE_CUDA;
    if (asked > 0 && !in_mpi_job() && host_ranks) check_host_memory(early, asked, asked, false);
    timeout = early.timeout;
    // A bad OMP_NUM_THREADS is one sentence, before ranks start.
    (void)threads_for(static_cast<int>(early.config.threads), early.threads_by, std::max(asked, 1));
  }
  // The GPT's MFU is against the cores' peak, measured here while no rank runs (ranks sharing
  // cores would measure each other) and handed to the ranks.
  if (f.model == "gpt" && asked > 1 && !in_mpi_job() && !std::getenv("ZERO_FMA_PEAK")) {
    const CpuPeak peak = cpu_peak(bf16_math);
    ::setenv("ZERO_FMA_PEAK", cat(peak.core.flops, " ", peak.core.kernel, "\t", peak.source).c_str(), 1);
  }
  return timeout;
}

Peak ranks_peak(bool on_gpu, int n, int local_rank, bool bf16_math, int threads) {
  Peak out;
  if (on_gpu) {
    // On GPUs: each rank's device's dense bf16 tensor-core peak (zero/build_info.hpp), as
    // llm.c counts it, whatever the compute dtype.
    const std::vector<GpuInfo> devices = find_gpus();
    if (local_rank < static_cast<int>(devices.size())) {
      const GpuInfo& d = devices[static_cast<std::size_t>(local_rank)];
      const GpuPeak p = gpu_bf16_peak(d);
      out.flops = p.tflops * 1e12 * n;
      out.source = cat(d.name, " bf16 peak x ", n, " (", p.source, ")");
    }
  } else {
    CpuPeak peak;
    if (const char* given = std::getenv("ZERO_FMA_PEAK")) {  // "FLOPS KERNEL\tSOURCE"
      std::istringstream in(given);
      in >> peak.core.flops;
      std::getline(in >> std::ws, peak.core.kernel, '\t');
      std::getline(in, peak.source);
      if (peak.source.empty()) peak.source = "given by ZERO_FMA_PEAK";
    } else {
      peak = cpu_peak(bf16_math);
    }
    const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    const long used = std::min<long>(cores, static_cast<long>(n) * std::max(threads, 1));
    out.flops = peak.core.flops * static_cast<double>(used);
    out.source = cat(peak.core.kernel, " peak of ", used, " core", used == 1 ? "" : "s", ", ",
                     peak.source);
  }
  return out;
}

}  // namespace zero::cli
