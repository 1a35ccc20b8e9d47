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

#include "cli/ckpt_io.hpp"
#include "cli/commands.hpp"
#include "cli/fill_auto.hpp"
#include "cli/launch.hpp"
#include "cli/options.hpp"
#include "cli/train_checkpoint.hpp"
#include "cli/train_model.hpp"
#include "cli/train_report.hpp"
#include "cli/train_setup.hpp"
#include "comm/nccl_communicator.hpp"
#include "kernels/cpu/blas_core.hpp"
#include "kernels/cpu/peak.hpp"
#include "kernels/cuda/device.hpp"
#include "models/mlp.hpp"
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

}  // namespace

int cmd_train(const Args& argv) {
  namespace po = boost::program_options;
  Flags f;
  po::options_description opts("zero train options");
  add_train_options(opts, f);
  opts.add_options()("help,h", "show this help");
  const po::variables_map vm = parse_options(argv, opts);
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  f.ckpt.sync = vm.count("save-sync") > 0;
  check_flags(f, vm);
  const int asked = vm.count("ranks") ? f.ranks : in_mpi_job() ? 0 : 1;
  const double timeout = before_launch(f, vm, asked);
  if (asked > 0) ensure_ranks(asked, argv);

  // A rank that never joins ends MPI startup after the same timeout as a collective.
  comm::MpiRuntime mpi({.startup_timeout_seconds = timeout, .error_prefix = "zero train: error: "});
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  check_job_size(n, "train");
  const bool on_gpu = use_gpu(f.device);
  Run run = resolve_run(f, vm, n);
  const std::optional<Resumed> resumed =
      check_checkpoint_flags(f.ckpt, units_of(run), f.model, run.steps);
  // The data order continues the saved run's: its seed, unless --seed says otherwise.
  if (resumed && !vm.count("seed")) run.shape.seed = resumed->trainer.seed;
  Config& config = run.config;
  models::MlpShape& shape = run.shape;
  const std::int64_t micro = run.micro, accum = run.accum, global_batch = shape.global_batch;
  const std::int64_t steps = run.steps, log_every = run.log_every;
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  check_host_memory(run, n, on_gpu ? 1 : std::max(1, local_size ? std::atoi(local_size) : 1),
                    on_gpu);
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

  std::unique_ptr<TrainModel> model = run.gpt ? make_gpt_model(run.gpt_shape, run.compute, f.preset,
                                                               f.data, shape.seed, accum, n, where)
                                              : make_mlp_model(shape, micro, where);
  // The GPT's AdamW groups (no decay on biases, LayerNorm, embeddings) unless the config gives
  // its own param_groups.
  if (run.gpt && config.param_groups.empty()) {
    config.param_groups = models::gpt_param_groups();
    if (rank == 0)
      std::printf(
          "zero train: AdamW weight decay %g on the blocks' 2-D weights, none on biases, "
          "LayerNorm and embeddings (models::gpt_param_groups; a config's param_groups "
          "replace these)\n",
          config.optimizer.weight_decay);
  }
  EngineOptions eo;
  eo.memory = where;
  Engine engine(config, *world, model->units(), eo);
  TrainerState trainer_state{model->kind(),
                             0,
                             shape.seed,
                             global_batch,
                             run.gpt ? f.data : std::string(),
                             run.gpt ? models::TokenFile(f.data).size() : 0};
  std::int64_t start = 0;  // the first step this process trains
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
    std::printf(
        "zero train: %s (%lld params), stage %d, %d rank%s on %s, %s, reduce %s, "
        "global batch %lld = %d x %lld micro-batches x %lld\n",
        model->describe().c_str(), static_cast<long long>(layout.numel), config.zero.stage, n,
        n == 1 ? "" : "s", on_gpu ? "cuda (NCCL)" : "cpu (MPI)",
        std::string(name_of(config.precision)).c_str(),
        std::string(name_of(reduce_dtype(config.precision, config.communication_data_type)))
            .c_str(),
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
  if (model->flops_per_token() > 0 && rank == 0) {
    const Peak peak = ranks_peak(on_gpu, n);
    peak_flops = peak.flops;
    peak_source = peak.source;
  }
  StepClock clock(*model, engine, run_steps);
  const double tokens_per_step = static_cast<double>(global_batch * model->tokens_per_sample());
  const auto t0 = std::chrono::steady_clock::now();
  // On a terminal a progress bar with the ETA sits under the step lines; plain lines otherwise.
  const char* tty = std::getenv("ZERO_STDOUT_TTY");
  const bool bar = rank == 0 && (tty ? std::string_view(tty) == "1" : isatty(STDOUT_FILENO) == 1);
  for (std::int64_t s = start; s < steps; ++s) {
    double local = 0;
    for (std::int64_t k = 0; k < accum; ++k) local += model->micro_batch(engine, s, k, rank, n);
    // The loss rides with the step's own agreement: no all-reduce of it after the step.
    StepReport rep = engine.step(local / static_cast<double>(accum));
    skipped += rep.skipped;
    loss = *rep.loss;
    const double step_seconds = clock.step_done(s - start, loss, rep.grad_norm);
    if (s == start) first_loss = loss;
    if (bar) std::printf("\r\033[K");
    if (rank == 0 && (s % log_every == 0 || s + 1 == steps))
      std::printf(
          "step %4lld  loss %.6f  grad-norm %.4f  lr %.3g%s%s%s\n", static_cast<long long>(s + 1),
          loss, rep.grad_norm, rep.lr,
          model->tokens_per_sample() > 1
              ? cat("  ", static_cast<long long>(tokens_per_step / step_seconds), " tok/s",
                    peak_flops > 0 ? percent("  MFU ", tokens_per_step / step_seconds *
                                                           model->flops_per_token() / peak_flops)
                                   : std::string(),
                    "  ", std::llround(1e3 * step_seconds), " ms")
                    .c_str()
              : "",
          config.precision == Precision::fp16
              ? ("  scale " + std::to_string(static_cast<long long>(rep.loss_scale))).c_str()
              : "",
          rep.skipped ? "  (skipped)" : "");
    if (bar && s + 1 < steps) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s", progress_line(s + 1, steps, elapsed, loss).c_str());
      std::fflush(stdout);
    }
    if (checkpointer &&
        ((f.ckpt.save_every > 0 && (s + 1) % f.ckpt.save_every == 0) || s + 1 == steps)) {
      const auto at = std::chrono::steady_clock::now();
      trainer_state.next_step = s + 1;
      checkpointer->save(to_json(trainer_state), s + 1);
      save_stalls.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - at).count());
    }
  }
  if (checkpointer) checkpointer->wait();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const comm::Accounting acct = engine.comm_accounting();
  const Engine::GroupAccounting by_group = engine.comm_accounting_by_group();
  // Payload bytes per step of every op of one group: what hierarchical sharding and hpZ move
  // inside their groups and across them.
  auto group_bytes = [&](const comm::Accounting& a) {
    std::uint64_t b = 0;
    for (const comm::OpStats& o : a.ops) b += o.payload_bytes;
    return b / static_cast<std::uint64_t>(run_steps);
  };
  const bool grouped =
      engine.settings_shard_size() < n || by_group.secondary[comm::Op::all_gather].calls > 0;
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
  std::int64_t mine[6] = {mem.master, mem.optimizer, mem.grads,
                          mem.params, mem.buffers,   mem.peak_total};
  std::vector<std::int64_t> all(6 * static_cast<std::size_t>(n));
  MPI_Allgather(mine, 6, MPI_INT64_T, all.data(), 6, MPI_INT64_T, MPI_COMM_WORLD);

  // What the planner predicted for this very run, beside what the ledger measured (rank 0's).
  const Plan plan = plan_memory(plan_input_of(config, n, *model, on_gpu));
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
    std::printf(
        "\nsummary: loss %.6f -> %.6f in %lld steps%s (%lld skipped), %.3f s/step, checksum %s\n",
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
    std::printf(
        "  (model states = params + grads + master + optimizer = %.2f bytes/param on rank 0)\n",
        double(all[0] + all[1] + all[2] + all[3]) / psi);
    std::printf("\nplanned vs measured (rank 0; `zero plan` predicts this before a run)\n");
    std::printf("  %-14s %12s %12s %9s\n", "category", "planned", "measured", "diff");
    for (const Row& row : rows)
      std::printf("  %-14s %12s %12s %8.2f%%\n", row.name, human_bytes(double(row.planned)).c_str(),
                  human_bytes(double(row.measured)).c_str(), diff_pct(row.planned, row.measured));
    std::printf(
        "\ntraffic per step per rank (payload)   all_reduce %s   reduce_scatter %s   all_gather "
        "%s\n",
        human_bytes(double(acct[comm::Op::all_reduce].payload_bytes) / run_steps).c_str(),
        human_bytes(double(acct[comm::Op::reduce_scatter].payload_bytes) / run_steps).c_str(),
        human_bytes(double(acct[comm::Op::all_gather].payload_bytes) / run_steps).c_str());
    if (grouped)
      std::printf(
          "by group, per step per rank (payload): inside the shard group %s, across "
          "shard groups %s, inside the hpZ group %s, over all ranks %s\n",
          human_bytes(double(group_bytes(by_group.shard))).c_str(),
          human_bytes(double(group_bytes(by_group.replicate))).c_str(),
          human_bytes(double(group_bytes(by_group.secondary))).c_str(),
          human_bytes(double(group_bytes(by_group.world))).c_str());
    print_throughput(throughput, human_bytes);
  }

  if (rank == 0 && !f.plot_file.empty()) {
    std::ofstream out(f.plot_file);
    out << loss_svg(throughput.history,
                    cat("zero train: ", model->describe(), ", stage ", config.zero.stage, ", ", n,
                        n == 1 ? " rank" : " ranks"));
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
    auto per_step = [&](comm::Op op) {
      return acct[op].payload_bytes / static_cast<std::uint64_t>(run_steps);
    };
    auto wire = [&](comm::Op op) {
      return acct[op].wire_bytes / static_cast<std::uint64_t>(run_steps);
    };
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
        {"memory_planned_vs_measured",
         [&] {
           boost::json::object o;
           for (const Row& row : rows)
             o[row.name] = {{"planned", row.planned},
                            {"measured", row.measured},
                            {"diff_percent", diff_pct(row.planned, row.measured)}};
           return o;
         }()},
        {"comm_bytes",
         {{"all_reduce", per_step(comm::Op::all_reduce)},
          {"reduce_scatter", per_step(comm::Op::reduce_scatter)},
          {"all_gather", per_step(comm::Op::all_gather)}}},
        {"comm_wire_bytes",
         {{"all_reduce", wire(comm::Op::all_reduce)},
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
