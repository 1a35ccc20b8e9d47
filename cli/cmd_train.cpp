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
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

#include "cli/ckpt_io.hpp"
#include "cli/commands.hpp"
#include "cli/fill_auto.hpp"
#include "cli/launch.hpp"
#include "cli/no_update.hpp"
#include "cli/options.hpp"
#include "cli/rank_memory.hpp"
#include "cli/run_device.hpp"
#include "cli/train_checkpoint.hpp"
#include "cli/train_model.hpp"
#include "cli/train_report.hpp"
#include "cli/train_setup.hpp"
#include "models/mlp.hpp"
#include "precision/loss_scaler.hpp"
#include "zero/zero.hpp"
#include "zero_build_config.hpp"

namespace zero::cli {
namespace {

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

// The flags, parsed and checked; false after --help (printed).
bool parse_train_flags(const Args& argv, Flags& f, boost::program_options::variables_map& vm) {
  namespace po = boost::program_options;
  po::options_description opts("zero train options");
  add_train_options(opts, f);
  opts.add_options()("help,h", "show this help");
  vm = parse_options(argv, opts);
  if (vm.count("help")) {
    std::cout << opts;
    return false;
  }
  f.ckpt.sync = vm.count("save-sync") > 0;
  check_flags(f, vm);
  return true;
}

// What rank 0 says before the model is built: the config's warnings, the keys filled in, a BLAS
// the environment weakened, a stage that shards nothing.
void warn_at_start(const Config& config, bool on_gpu, int n) {
  for (const auto& w : config.warnings) std::cerr << "zero train: warning: " << w << '\n';
  for (const auto& line : auto_fill_lines(config, "zero train")) std::cout << line << '\n';
  // The one case the first gemm is silent about (kernels/cpu/gemm.hpp): the environment chose
  // weaker kernels than this CPU's, which zero respects.
  if (const BlasCore blas = blas_core(); !on_gpu && blas.source == "user" && !blas.warning.empty())
    std::cerr << "zero train: warning: " << blas.warning << '\n';
  if (config.zero.stage > 0 && n == 1)
    std::cerr << "zero train: warning: stage " << config.zero.stage
              << " at 1 rank shards nothing (every state stays whole on the one rank); run with "
                 "-n 2 or more to see it shard\n";
}

// The model the flags name, and the GPT's AdamW groups (no decay on biases, LayerNorm,
// embeddings) unless the config gives its own param_groups.
std::unique_ptr<TrainModel> build_model(const Flags& f, Run& run, int n, int rank,
                                        comm::Memory where) {
  Config& config = run.config;
  std::unique_ptr<TrainModel> model =
      run.gpt ? make_gpt_model(run.gpt_shape, run.compute, f.preset, f.data, run.shape.seed,
                               run.accum, n, where)
              : make_mlp_model(run.shape, run.micro, where);
  if (run.gpt && config.param_groups.empty()) {
    config.param_groups = models::gpt_param_groups();
    if (rank == 0)
      std::printf(
          "zero train: %s weight decay %g on the blocks' 2-D weights, none on biases, "
          "LayerNorm and embeddings (models::gpt_param_groups; a config's param_groups "
          "replace these)\n",
          std::string(name_of(config.optimizer.type)).c_str(), config.optimizer.weight_decay);
  }
  return model;
}

// One training run's pieces, as the steps below share them.
struct Trainer {
  const Flags& f;
  const Run& run;
  int n = 1, rank = 0, local_rank = 0;
  RunDevice device;
  TrainModel& model;
  Engine& engine;
  TrainerState& state;
  std::optional<Checkpointer>& checkpointer;
  std::int64_t start = 0;       // the first step this process trains
  std::int64_t stopped_at = 0;  // 0: the run goes to --steps; else the last step it trained
  std::int64_t run_steps() const { return (stopped_at > 0 ? stopped_at : run.steps) - start; }
};

// The starting weights: a checkpoint (--resume), a safetensors file (--init) or the model's
// own initialisation. Returns the first step to train.
std::int64_t start_weights(const Flags& f, const std::optional<Resumed>& resumed, Engine& engine,
                           TrainModel& model, const TrainerState& trainer_state, int rank) {
  std::int64_t start = 0;
  if (resumed) {
    (void)load_checkpoint(engine, resumed->path);
    start = resumed->trainer.next_step;
    if (rank == 0) {
      std::printf(
          "zero train: resumed from %s: step %lld (%lld optimizer steps applied, saved by "
          "%d rank%s at stage %d)\n",
          resumed->path.c_str(), static_cast<long long>(start),
          static_cast<long long>(resumed->meta.step), resumed->meta.ranks,
          resumed->meta.ranks == 1 ? "" : "s", resumed->meta.stage);
      for (const auto& w : resume_differences(resumed->trainer, trainer_state))
        std::cerr << "zero train: warning: " << w << '\n';
    }
  } else if (!f.init.empty()) {
    engine.init_params(safetensors_fill(f.init, engine.layout()));
    if (rank == 0) std::printf("zero train: initial weights from %s\n", f.init.c_str());
  } else {
    engine.init_params([&](int p, std::span<float> out) { model.init(p, out); });
  }
  return start;
}

// The line that says what is about to train (rank 0).
void print_run_line(const Trainer& t) {
  const Config& config = t.run.config;
  const int n = t.n;
  std::printf(
      "zero train: %s (%lld params), stage %d, %d rank%s on %s, %s, reduce %s, "
      "global batch %lld = %d x %lld micro-batches x %lld\n",
      t.model.describe().c_str(), static_cast<long long>(t.engine.layout().numel),
      config.zero.stage, n, n == 1 ? "" : "s", t.device.words(),
      std::string(name_of(config.precision)).c_str(),
      std::string(name_of(t.engine.settings().reduce_dtype)).c_str(),
      static_cast<long long>(t.run.shape.global_batch), n, static_cast<long long>(t.run.accum),
      static_cast<long long>(t.run.micro));
}

// What the training loop leaves for the report.
struct Trained {
  double loss = 0, first_loss = 0, seconds = 0;
  std::int64_t skipped = 0;
  NoUpdateRule no_update;  // the steps that applied no update, and the verdict on them
  std::vector<double> save_stalls;
  Throughput throughput;
};

// The step line (rank 0, every --log-every steps and the last).
void print_step(const Trainer& t, std::int64_t s, const StepReport& rep, double loss,
                double step_seconds, double tokens_per_step, double mfu) {
  const TrainModel& model = t.model;
  std::printf(
      "step %4lld  loss %.6f  grad-norm %.4f  lr %.3g%s%s%s\n", static_cast<long long>(s + 1),
      loss, rep.grad_norm, rep.lr,
      model.tokens_per_sample() > 1
          ? cat("  ", static_cast<long long>(tokens_per_step / step_seconds), " tok/s",
                mfu > 0 ? percent("  MFU ", mfu) : std::string(),
                "  ", std::llround(1e3 * step_seconds), " ms")
                .c_str()
          : "",
      t.run.config.precision == Precision::fp16
          ? ("  scale " + loss_scale_text(rep.loss_scale)).c_str()
          : "",
      rep.skipped ? "  (skipped)" : "");
}

// The steps from t.start to --steps: micro-batches, the engine's step, the step line, the
// progress bar, the checkpoints; then the throughput against the ranks' peak.
Trained train_loop(Trainer& t) {
  const std::int64_t steps = t.run.steps, log_every = t.run.log_every, accum = t.run.accum;
  const std::int64_t global_batch = t.run.shape.global_batch;
  TrainModel& model = t.model;
  Engine& engine = t.engine;
  const int rank = t.rank, n = t.n;
  Trained out;
  // MFU against the peak of the instructions the model's GEMMs run on the cores the ranks use
  // (docs/gpt.md), raised by any step that runs faster (MfuMeter).
  Peak peak;
  if (model.flops_per_token() > 0 && rank == 0)
    peak = ranks_peak(t.device.gpu, n, t.local_rank,
                      t.run.gpt && t.run.compute == models::GptCompute::bf16, t.run.threads);
  MfuMeter mfu(peak.flops, peak.source);
  out.no_update = NoUpdateRule(t.run.config);
  // The per-step record lives on the rank that writes it, bounded (StepHistory).
  StepClock clock(model, engine, t.run_steps(),
                  rank == 0 && (!t.f.json_file.empty() || !t.f.plot_file.empty()));
  const double tokens_per_step = static_cast<double>(global_batch * model.tokens_per_sample());
  const auto t0 = std::chrono::steady_clock::now();
  // On a terminal a progress bar with the ETA sits under the step lines; plain lines otherwise.
  const char* tty = std::getenv("ZERO_STDOUT_TTY");
  const bool bar = rank == 0 && (tty ? std::string_view(tty) == "1" : isatty(STDOUT_FILENO) == 1);
  for (std::int64_t s = t.start; s < steps; ++s) {
    double local = 0;
    for (std::int64_t k = 0; k < accum; ++k) local += model.micro_batch(engine, s, k, rank, n);
    // The loss rides with the step's own agreement: no all-reduce of it after the step.
    StepReport rep = engine.step(local / static_cast<double>(accum));
    out.skipped += rep.skipped;
    out.loss = *rep.loss;
    const double step_seconds = clock.step_done(s - t.start, out.loss, rep.grad_norm);
    if (s == t.start) out.first_loss = out.loss;
    const double step_mfu =
        mfu.fraction(tokens_per_step / step_seconds * model.flops_per_token(), s + 1);
    if (out.no_update.step(rep, s + 1)) t.stopped_at = s + 1;  // the same on every rank
    if (bar) std::printf("\r\033[K");
    if (rank == 0 && (s % log_every == 0 || s + 1 == steps || t.stopped_at))
      print_step(t, s, rep, out.loss, step_seconds, tokens_per_step, step_mfu);
    mfu.print_note();
    if (t.stopped_at) break;
    if (bar && s + 1 < steps) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s", progress_line(s + 1, steps, elapsed, out.loss).c_str());
      std::fflush(stdout);
    }
    if (t.checkpointer &&
        ((t.f.ckpt.save_every > 0 && (s + 1) % t.f.ckpt.save_every == 0) || s + 1 == steps)) {
      const auto at = std::chrono::steady_clock::now();
      t.state.next_step = s + 1;
      t.checkpointer->save(to_json(t.state), s + 1);
      out.save_stalls.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - at).count());
    }
  }
  if (t.checkpointer) t.checkpointer->wait();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.throughput = clock.result(global_batch, model.tokens_per_sample());
  if (rank == 0 && mfu.peak() > 0) {
    out.throughput.flops_per_token = model.flops_per_token();
    out.throughput.peak_flops = mfu.peak();
    out.throughput.peak_source = mfu.source();
  }
  return out;
}

using Row = MemoryRow;

double diff_pct(std::int64_t planned, std::int64_t measured) {
  return measured == 0 ? (planned == 0 ? 0.0 : 100.0)
                       : 100.0 * double(planned - measured) / double(measured);
}

// What the engine measured after the loop, and what the planner predicted.
struct Measured {
  comm::Accounting acct;
  Engine::GroupAccounting by_group;
  bool grouped = false;  // hierarchical sharding or hpZ: traffic by group is reported
  MemoryReport mem;
  std::uint64_t checksum = 0;
  std::vector<std::int64_t> all;  // every rank's memory, kRankMemoryKeys a rank
  std::vector<Row> rows;          // planned vs measured, rank 0's
};

// Payload bytes per step of every op of one group: what hierarchical sharding and hpZ move
// inside their groups and across them.
std::uint64_t group_bytes(const comm::Accounting& a, std::int64_t run_steps) {
  std::uint64_t b = 0;
  for (const comm::OpStats& o : a.ops) b += o.payload_bytes;
  return b / static_cast<std::uint64_t>(run_steps);
}

Measured measure(const Trainer& t, World& world) {
  Engine& engine = t.engine;
  Measured m;
  m.acct = engine.comm_accounting();
  m.by_group = engine.comm_accounting_by_group();
  m.grouped = engine.settings_shard_size() < t.n ||
              m.by_group.secondary[comm::Op::all_gather].calls > 0;
  // Memory of every rank, gathered to all (each rank's ledger is its own); read before the
  // checksum, whose gathers are inspection, not training.
  m.mem = engine.memory();
  m.checksum = engine.master_checksum();
  const MemoryReport& mem = m.mem;
  m.all = gather_rank_memory(world, mem);
  // What the planner predicted for this very run, beside what the ledger measured (rank 0's).
  const Plan plan = plan_memory(plan_input_on(t.run.config, t.n, t.model, t.device));
  m.rows = {
      {"params", plan.device.params, mem.params},
      {"grads", plan.device.grads, mem.grads},
      {"master", plan.device.master, mem.master},
      {"optimizer", plan.device.optimizer, mem.optimizer},
      {"buffers", plan.device.buffers, mem.buffers},
      {"activations", plan.device.activations, mem.activations},
      {"peak total", plan.peak_total, mem.peak_total},
  };
  for (const Row& row : host_memory_rows(plan, engine.ledger().snapshot(comm::Memory::host)))
    m.rows.push_back(row);
  return m;
}

// The summary, the memory per rank, planned vs measured, the traffic and the throughput
// (rank 0).
void print_summary(const Trainer& t, const Trained& r, const Measured& m) {
  const std::int64_t run_steps = t.run_steps(), start = t.start, steps = t.run.steps;
  std::printf("\nsummary: loss %.6f -> %.6f in %lld steps%s %s, %.3f s/step, checksum %s\n",
              r.first_loss, r.loss, static_cast<long long>(run_steps),
              start > 0 ? cat(" (", start + 1, "..", steps, ")").c_str() : "",
              r.no_update.summary_text(r.skipped).c_str(), r.seconds / run_steps,
              hex16(m.checksum).c_str());
  if (t.checkpointer) print_saves(t.checkpointer->completed(), r.save_stalls, human_bytes);
  print_rank_memory(m.all, static_cast<double>(t.engine.layout().numel), human_bytes);
  std::printf("\nplanned vs measured (rank 0; `zero plan` predicts this before a run)\n");
  std::printf("  %-14s %12s %12s %9s\n", "category", "planned", "measured", "diff");
  for (const Row& row : m.rows)
    std::printf("  %-14s %12s %12s %8.2f%%\n", row.name, human_bytes(double(row.planned)).c_str(),
                human_bytes(double(row.measured)).c_str(), diff_pct(row.planned, row.measured));
  const comm::Accounting& acct = m.acct;
  std::printf(
      "\ntraffic per step per rank (payload)   all_reduce %s   reduce_scatter %s   all_gather "
      "%s   all_to_all %s\n",
      human_bytes(double(acct[comm::Op::all_reduce].payload_bytes) / run_steps).c_str(),
      human_bytes(double(acct[comm::Op::reduce_scatter].payload_bytes) / run_steps).c_str(),
      human_bytes(double(acct[comm::Op::all_gather].payload_bytes) / run_steps).c_str(),
      human_bytes(double(acct[comm::Op::all_to_all].payload_bytes) / run_steps).c_str());
  if (m.grouped)
    std::printf(
        "by group, per step per rank (payload): inside the shard group %s, across "
        "shard groups %s, inside the hpZ group %s, over all ranks %s\n",
        human_bytes(double(group_bytes(m.by_group.shard, run_steps))).c_str(),
        human_bytes(double(group_bytes(m.by_group.replicate, run_steps))).c_str(),
        human_bytes(double(group_bytes(m.by_group.secondary, run_steps))).c_str(),
        human_bytes(double(group_bytes(m.by_group.world, run_steps))).c_str());
  print_throughput(r.throughput, human_bytes);
  print_collectives_legend();
}

// --plot: the loss against the step, as SVG (rank 0).
void write_plot(const Trainer& t, const Trained& r) {
  write_output_file(t.f.plot_file,
                    loss_svg(r.throughput.history,
                             cat("zero train: ", t.model.describe(), ", stage ",
                                 t.run.config.zero.stage, ", ", t.n, t.n == 1 ? " rank" : " ranks")),
                    "--plot");
}

// --json: the summary as one JSON object (rank 0).
void write_json(const Trainer& t, const Trained& r, const Measured& m,
                const std::optional<Resumed>& resumed) {
  const std::int64_t run_steps = t.run_steps();
  const int n = t.n;
  const Config& config = t.run.config;
  const Layout& layout = t.engine.layout();
  const boost::json::array memory = rank_memory_json(m.all);
  // Per step; the final checksum's gathers come after `acct` was read.
  auto per_step = [&](comm::Op op) {
    return m.acct[op].payload_bytes / static_cast<std::uint64_t>(run_steps);
  };
  auto wire = [&](comm::Op op) {
    return m.acct[op].wire_bytes / static_cast<std::uint64_t>(run_steps);
  };
  boost::json::object j{
      {"model", t.model.kind()},
      {"stage", config.zero.stage},
      {"ranks", n},
      {"steps", run_steps},
      {"first_step", t.start + 1},
      {"precision", std::string(name_of(config.precision))},
      {"device", t.device.name()},
      {"params", layout.numel},
      {"padded_params", layout.padded_numel},
      {"first_loss", r.first_loss},
      {"final_loss", r.loss},
      {"params_checksum", hex16(m.checksum)},
      {"skipped_steps", r.skipped},
      {"no_update_steps", r.no_update.no_update()},
      {"seconds_per_step", r.seconds / run_steps},
      {"memory_bytes", memory},
      {"memory_planned_vs_measured",
       [&] {
         boost::json::object o;
         for (const Row& row : m.rows)
           o[row.name] = {{"planned", row.planned},
                          {"measured", row.measured},
                          {"diff_percent", diff_pct(row.planned, row.measured)}};
         return o;
       }()},
      {"comm_bytes",
       {{"all_reduce", per_step(comm::Op::all_reduce)},
        {"reduce_scatter", per_step(comm::Op::reduce_scatter)},
        {"all_gather", per_step(comm::Op::all_gather)},
        {"all_to_all", per_step(comm::Op::all_to_all)}}},
      {"comm_wire_bytes",
       {{"all_reduce", wire(comm::Op::all_reduce)},
        {"reduce_scatter", wire(comm::Op::reduce_scatter)},
        {"all_gather", wire(comm::Op::all_gather)},
        {"all_to_all", wire(comm::Op::all_to_all)}}},
  };
  j["comm_bytes_by_group"] = {{"shard", group_bytes(m.by_group.shard, run_steps)},
                              {"replicate", group_bytes(m.by_group.replicate, run_steps)},
                              {"secondary", group_bytes(m.by_group.secondary, run_steps)},
                              {"world", group_bytes(m.by_group.world, run_steps)}};
  j["settings"] = settings_json(config);  // as zero plan's --json reports them
  add_throughput_json(j, r.throughput);
  if (resumed) j["resumed_from"] = resumed->path;
  if (t.checkpointer) j["checkpoints"] = saves_json(t.checkpointer->completed(), r.save_stalls);
  write_output_file(t.f.json_file, boost::json::serialize(j) + '\n', "--json");
}

}  // namespace

int cmd_train(const Args& argv) {
  Flags f;
  boost::program_options::variables_map vm;
  if (!parse_train_flags(argv, f, vm)) return 0;
  const int asked = vm.count("ranks") ? f.ranks : in_mpi_job() ? 0 : 1;
  const double timeout = before_launch(f, vm, asked);
  if (asked > 0) ensure_ranks(asked, argv);

  // A rank that never joins ends MPI startup after the same timeout as a collective.
  World world({.startup_timeout_seconds = timeout, .error_prefix = "zero train: error: "});
  const int n = world.size();
  check_job_size(n, "train");
  const RunDevice device = resolve_device(world, f.device);
  const bool on_gpu = device.gpu;
  Run run = resolve_run(f, vm, n);
  const std::optional<Resumed> resumed =
      check_checkpoint_flags(f.ckpt, units_of(run), f.model, run.steps);
  // The data order continues the saved run's: its seed, unless --seed says otherwise.
  if (resumed && !vm.count("seed")) run.shape.seed = resumed->trainer.seed;
  check_host_memory(run, n, on_gpu ? 1 : world.local_size(), on_gpu);
  const int local_rank = world.local_rank();  // every rank asks: collective the first time
  // This thread runs the model's math: its threads, for every library, until the run ends.
  const ThreadsChoice threads = threads_for(static_cast<int>(run.config.threads), run.threads_by,
                                            world.local_size());
  const ComputeThreads compute_threads(threads.threads);
  run.threads = threads.threads;
  comm::Options co;
  co.timeout_seconds = run.timeout;
  const comm::Memory where = device.trainer_memory();
  comm::Communicator& communicator = connect(world, device, co);
  const int rank = communicator.rank();
  if (rank == 0) warn_at_start(run.config, on_gpu, n);

  std::unique_ptr<TrainModel> model = on_device(build_model(f, run, n, rank, where), device);
  Engine engine(run.config, communicator, model->units(), engine_options(device));
  TrainerState trainer_state{model->kind(),
                             0,
                             run.shape.seed,
                             run.shape.global_batch,
                             run.gpt ? f.data : std::string(),
                             run.gpt ? models::TokenFile(f.data).size() : 0};
  const std::int64_t start = start_weights(f, resumed, engine, *model, trainer_state, rank);
  std::optional<Checkpointer> checkpointer;
  if (!f.ckpt.save.empty())
    checkpointer.emplace(engine, f.ckpt.save,
                         CheckpointOptions{.keep = f.ckpt.keep, .background = !f.ckpt.sync});
  Trainer t{f, run, n, rank, local_rank, device, *model, engine, trainer_state, checkpointer, start};
  if (rank == 0) print_run_line(t);
  if (rank == 0) std::printf("zero train: %s\n", threads_line(threads).c_str());

  engine.reset_comm_accounting();
  const Trained trained = train_loop(t);
  const Measured measured = measure(t, world);
  if (rank == 0) print_summary(t, trained, measured);
  if (rank == 0 && !f.plot_file.empty()) write_plot(t, trained);
  if (rank == 0 && !f.json_file.empty()) write_json(t, trained, measured, resumed);
  // Every rank reads the same reports, so every rank ends the run here (cli/no_update.hpp).
  if (const std::string v = trained.no_update.verdict(t.run_steps()); !v.empty()) throw Error(v);
  return 0;
}

}  // namespace zero::cli
