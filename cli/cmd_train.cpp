// `zero train`: trains the reference model on N ranks at any ZeRO stage, shows the loss as it
// goes, then a summary: loss, checksum of the weights, memory per rank by category, traffic.
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "cli/launch.hpp"
#include "comm/nccl_communicator.hpp"
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

}  // namespace

int cmd_train(const Args& argv) {
  namespace po = boost::program_options;
  std::string model = "mlp", precision, reduce, config_file, json_file, device = "auto";
  int ranks = 1, stage = 0;
  std::int64_t steps = 20, accum = 1, global_batch = 64, log_every = 1;
  std::uint64_t seed = 1;
  models::MlpShape shape;
  double lr = 0, clip = -1;
  po::options_description opts("zero train options");
  opts.add_options()
      ("model", po::value(&model)->default_value("mlp"), "model to train (mlp)")
      ("device", po::value(&device)->default_value("auto"),
       "cpu (MPI, host memory), cuda (one GPU per rank, NCCL, cuBLASLt) or auto: cuda when every "
       "rank on a node has a GPU of its own, else cpu")
      ("ranks,n", po::value(&ranks), "ranks (outside an MPI job: relaunch under mpirun)")
      ("stage", po::value(&stage), "ZeRO stage 0..3 (overrides the config)")
      ("steps", po::value(&steps)->default_value(20), "optimizer steps")
      ("seed", po::value(&seed)->default_value(1), "seed of weights, teacher and data")
      ("layers", po::value(&shape.layers)->default_value(4), "MLP layers (one unit each)")
      ("width", po::value(&shape.width)->default_value(512), "MLP width")
      ("global-batch", po::value(&global_batch)->default_value(64),
       "samples per step over all ranks (split evenly; independent of the rank count)")
      ("accum", po::value(&accum), "micro-batches per step (gradient_accumulation_steps)")
      ("precision", po::value(&precision), "bf16 (default), fp16 or fp32")
      ("reduce-dtype", po::value(&reduce), "gradient reduce dtype: fp32 (default) or the training dtype")
      ("lr", po::value(&lr), "learning rate (overrides the config)")
      ("clip", po::value(&clip), "gradient clipping max norm, 0 = off (overrides the config)")
      ("overlap", "overlap gradient reduction with backward (zero_optimization.overlap_comm)")
      ("config", po::value(&config_file), "DeepSpeed-style JSON config file")
      ("json", po::value(&json_file), "write a JSON summary to this file")
      ("log-every", po::value(&log_every)->default_value(1), "print the loss every this many steps")
      ("help,h", "show this help");
  const po::variables_map vm = parse_options(argv, opts);
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  if (model != "mlp") throw Error(cat("--model: only 'mlp' is available, got '", model, "'"));
  if (!vm.count("ranks")) ranks = in_mpi_job() ? 0 : 1;
  if (ranks > 0) ensure_ranks(ranks, argv);
  if (steps < 1) throw Error(cat("--steps must be >= 1, got ", steps));
  if (log_every < 1) throw Error(cat("--log-every must be >= 1, got ", log_every));

  Config config;
  config.precision = Precision::bf16;
  config.optimizer.lr = 3e-3;
  config.gradient_clipping = 1.0;
  if (!config_file.empty()) config = load_config(config_file);
  if (vm.count("stage")) config.zero.stage = stage;
  if (vm.count("precision")) config.precision = parse_precision(precision);
  if (vm.count("reduce-dtype")) config.communication_data_type = parse_reduce(reduce);
  if (vm.count("accum")) config.gradient_accumulation_steps = accum;
  if (vm.count("lr")) config.optimizer.lr = lr;
  if (vm.count("clip")) config.gradient_clipping = clip;
  if (vm.count("overlap")) config.zero.overlap_comm = true;
  if (config.train_batch_size && !vm.count("global-batch") ) global_batch = *config.train_batch_size;
  shape.seed = seed;
  shape.global_batch = global_batch;

  if (device != "auto" && device != "cpu" && device != "cuda")
    throw Error(cat("--device: expected cpu, cuda or auto, got '", device, "'"));
  comm::MpiRuntime mpi;
  const bool on_gpu = use_gpu(device);
  std::unique_ptr<comm::Communicator> world =
      on_gpu ? comm::make_nccl_communicator(MPI_COMM_WORLD) : comm::make_mpi_communicator();
  const int n = world->size(), rank = world->rank();
  const comm::Memory where = on_gpu ? comm::Memory::device : comm::Memory::host;
  accum = config.gradient_accumulation_steps;
  if (global_batch % (static_cast<std::int64_t>(n) * accum) != 0)
    throw Error(cat("--global-batch ", global_batch, " must divide evenly into ", n, " ranks x ",
                    accum, " micro-batches"));
  const std::int64_t micro = global_batch / (n * accum);
  config.train_micro_batch_size_per_gpu = micro;
  config.train_batch_size = global_batch;
  for (const auto& w : config.warnings)
    if (rank == 0) std::cerr << "zero train: warning: " << w << '\n';

  EngineOptions eo;
  eo.memory = where;
  Engine engine(config, *world, models::mlp_units(shape), eo);
  engine.init_params([&](int p, std::span<float> out) { models::mlp_init(shape, p, out); });
  models::MlpTrainer trainer(shape, micro, where);
  const Layout& layout = engine.layout();
  if (rank == 0)
    std::printf("zero train: mlp %d x %d (%lld params), stage %d, %d ranks on %s, %s, reduce %s, "
                "global batch %lld = %d x %lld micro-batches x %lld\n",
                shape.layers, shape.width, static_cast<long long>(layout.numel), config.zero.stage, n,
                on_gpu ? "cuda (NCCL)" : "cpu (MPI)", std::string(name_of(config.precision)).c_str(),
                std::string(name_of(config.precision == Precision::fp32 ? DType::f32 : config.communication_data_type)).c_str(),
                static_cast<long long>(global_batch), n, static_cast<long long>(accum),
                static_cast<long long>(micro));

  engine.reset_comm_accounting();
  double loss = 0, first_loss = 0;
  std::int64_t skipped = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t s = 0; s < steps; ++s) {
    double local = 0;
    for (std::int64_t k = 0; k < accum; ++k)
      local += trainer.micro_batch(engine, s * global_batch + rank * (global_batch / n) + k * micro);
    StepReport rep = engine.step();
    skipped += rep.skipped;
    MPI_Allreduce(MPI_IN_PLACE, &local, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    loss = local / (static_cast<double>(n) * accum);
    if (s == 0) first_loss = loss;
    if (rank == 0 && (s % log_every == 0 || s + 1 == steps))
      std::printf("step %4lld  loss %.6f  grad-norm %.4f  lr %.3g%s%s\n", static_cast<long long>(s + 1),
                  loss, rep.grad_norm, rep.lr,
                  config.precision == Precision::fp16 ? ("  scale " + std::to_string(static_cast<long long>(rep.loss_scale))).c_str() : "",
                  rep.skipped ? "  (skipped)" : "");
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const comm::Accounting acct = engine.comm_accounting();
  // Memory of every rank, gathered to all (each rank's ledger is its own); read before the
  // checksum, whose gathers are inspection, not training.
  const MemoryReport mem = engine.memory();
  const std::uint64_t checksum = engine.master_checksum();
  std::int64_t mine[6] = {mem.master, mem.optimizer, mem.grads, mem.params, mem.buffers, mem.peak_total};
  std::vector<std::int64_t> all(6 * static_cast<std::size_t>(n));
  MPI_Allgather(mine, 6, MPI_INT64_T, all.data(), 6, MPI_INT64_T, MPI_COMM_WORLD);

  // What the planner predicted for this very run, beside what the ledger measured (rank 0's).
  PlanInput plan_in = plan_input_from_config(config, n);
  plan_in.units = models::mlp_units(shape);
  plan_in.activation_bytes = models::mlp_activation_bytes(shape, micro);
  plan_in.model_name = "mlp";
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
    std::printf("\nsummary: loss %.6f -> %.6f in %lld steps (%lld skipped), %.3f s/step, checksum %s\n",
                first_loss, loss, static_cast<long long>(steps), static_cast<long long>(skipped),
                seconds / steps, hex16(checksum).c_str());
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
                human_bytes(double(acct[comm::Op::all_reduce].payload_bytes) / steps).c_str(),
                human_bytes(double(acct[comm::Op::reduce_scatter].payload_bytes) / steps).c_str(),
                human_bytes(double(acct[comm::Op::all_gather].payload_bytes) / steps).c_str());
  }

  if (rank == 0 && !json_file.empty()) {
    boost::json::array memory;
    for (int r = 0; r < n; ++r) {
      boost::json::object o;
      for (int k = 0; k < 6; ++k) o[keys[k]] = all[6 * r + k];
      memory.push_back(o);
    }
    // Per step; the final checksum's gathers come after `acct` was read.
    auto per_step = [&](comm::Op op) { return acct[op].payload_bytes / static_cast<std::uint64_t>(steps); };
    auto wire = [&](comm::Op op) { return acct[op].wire_bytes / static_cast<std::uint64_t>(steps); };
    boost::json::object j{
        {"model", "mlp"},
        {"stage", config.zero.stage},
        {"ranks", n},
        {"steps", steps},
        {"precision", std::string(name_of(config.precision))},
        {"device", on_gpu ? "cuda" : "cpu"},
        {"params", layout.numel},
        {"padded_params", layout.padded_numel},
        {"first_loss", first_loss},
        {"final_loss", loss},
        {"params_checksum", hex16(checksum)},
        {"skipped_steps", skipped},
        {"seconds_per_step", seconds / steps},
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
    std::ofstream f(json_file);
    if (!f) throw Error(cat("cannot write ", json_file));
    f << boost::json::serialize(j) << '\n';
  }
  return 0;
}

}  // namespace zero::cli
