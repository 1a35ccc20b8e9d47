// Every key docs/config.md marks as acting does act: for each one, a config with the key changed
// gives a different fingerprint than the same config without the change. The fingerprint is what
// a run shows: the plan (zero::plan_memory(plan_input_from_config(c, 4)) of a small model), and a
// few steps of a tiny engine at one rank (its StepReports, its master weights' checksum, its
// stats, or the error it ends in). The table below must name exactly the keys the doc marks
// "acts" (not "acts (zero train)", which zero train's own tests cover), so that the doc and the
// test cannot drift: the doc is parsed here (ZERO_CONFIG_DOC).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "models/mlp.hpp"
#include "zero/zero.hpp"

using zero::Config;

namespace {

// How the one-rank run makes its gradients: the MLP's own, or written by hand (fp16 runs only)
// with an overflow (inf) at chosen steps, to reach the loss scaler's rarer paths.
enum class Grads { mlp, overflow_at_0_and_2, overflow_always };

// Writes every gradient of the MLP's units by hand: a small fp16 value, or inf.
void scripted_step(zero::Engine& engine, bool overflow) {
  const std::uint16_t bits = overflow ? 0x7C00 : 0x2000;  // fp16 inf, 2^-7
  const int units = static_cast<int>(engine.layout().units.size());
  for (int u = units - 1; u >= 0; --u) {
    engine.gather(u);
    for (int p : {2 * u, 2 * u + 1}) {
      zero::TensorView g = engine.grad(p);
      REQUIRE(g.dtype == zero::DType::f16);
      auto* out = static_cast<std::uint16_t*>(g.data);
      std::fill(out, out + g.numel, bits);
    }
    engine.release(u);
    engine.reduce_grads(u);
  }
}

// What a run with this config shows, as text: two fingerprints differ iff something changed.
std::string fingerprint(const Config& config, Grads grads = Grads::mlp) {
  std::ostringstream out;
  try {
    zero::PlanInput in = zero::plan_input_from_config(config, 4);
    in.units = zero::uniform_units(1'600'000, 8);  // units above and below the persistence limit
    in.units.push_back({"small", {{"small.weight", {1000}}}});
    const zero::Plan p = zero::plan_memory(in);
    out << "plan " << p.device.params << ' ' << p.device.grads << ' ' << p.device.master << ' '
        << p.device.optimizer << ' ' << p.device.buffers << ' ' << p.peak_total << ' '
        << p.step_transient_peak << '\n';
  } catch (const zero::Error& e) {
    out << "plan error: " << e.what() << '\n';
  }
  try {
    auto world = zero::comm::make_mpi_communicator();
    const zero::models::MlpShape shape{2, 8, 4, 3};
    zero::Engine engine(config, *world, zero::models::mlp_units(shape));
    engine.init_params([&](int p, std::span<float> w) { zero::models::mlp_init(shape, p, w); });
    zero::models::MlpTrainer trainer(shape, shape.global_batch);
    const std::int64_t accum = config.gradient_accumulation_steps;
    for (std::int64_t s = 0; s < 6; ++s) {
      for (std::int64_t k = 0; k < accum; ++k) {
        if (grads == Grads::mlp)
          trainer.micro_batch(engine, (s * accum + k) * shape.global_batch);
        else
          scripted_step(engine, grads == Grads::overflow_always || s == 0 || s == 2);
      }
      const zero::StepReport r = engine.step();
      out << "step " << r.step << ' ' << r.skipped << ' ' << r.lr << ' ' << r.loss_scale << ' '
          << r.clip_coefficient << '\n';
    }
    const zero::EngineStats st = engine.stats();
    out << "stats " << st.reduce_collectives << ' ' << st.reductions_overlapped << ' '
        << st.max_reductions_in_flight << '\n';
    const zero::comm::Accounting acct = engine.comm_accounting();
    out << "collectives";
    for (const auto& op : acct.ops) out << ' ' << op.calls;
    out << '\n';
    out << "weights " << engine.master_checksum() << '\n';
  } catch (const zero::Error& e) {
    out << "engine error: " << e.what() << '\n';
  }
  return out.str();
}

// A row: the key as docs/config.md writes it (with its block), a base config and the change.
struct Row {
  std::string key;
  std::function<void(Config&)> base;
  std::function<void(Config&)> change;
  Grads grads = Grads::mlp;
};

void none(Config&) {}
void fp16(Config& c) {
  c.precision = zero::Precision::fp16;
}
void warmup(Config& c) {
  c.scheduler.type = zero::ScheduleType::warmup;
  c.scheduler.warmup_num_steps = 4;
  c.optimizer.lr = 1e-2;
}
void decay(Config& c) {
  warmup(c);
  c.scheduler.type = zero::ScheduleType::warmup_linear_decay;
  c.scheduler.warmup_num_steps = 2;
  c.scheduler.total_num_steps = 5;
}
void cosine(Config& c) {
  decay(c);
  c.scheduler.type = zero::ScheduleType::warmup_cosine;
}
void stage3(Config& c) {
  c.zero.stage = 3;
  c.zero.overlap_comm = true;  // DeepSpeed's default at stage 3
  c.precision = zero::Precision::bf16;
}
// fp16 that overflows at once: 2^127 times any gradient is infinite in fp16.
void overflowing(Config& c) {
  fp16(c);
  c.fp16.initial_scale_power = 127;
}

const std::vector<Row>& rows() {
  static const std::vector<Row> table = {
      {"gradient_accumulation_steps", none, [](Config& c) { c.gradient_accumulation_steps = 2; }},
      {"gradient_clipping", none, [](Config& c) { c.gradient_clipping = 1e-4; }},
      {"bf16.enabled", none, [](Config& c) { c.precision = zero::Precision::bf16; }},
      {"bfloat16.enabled", none, [](Config& c) { c.precision = zero::Precision::bf16; }},
      {"communication_data_type", [](Config& c) { c.precision = zero::Precision::bf16; },
       [](Config& c) { c.communication_data_type = zero::DType::bf16; }},
      // Static fp16 scaling and a gradient that always overflows: every step is skipped.
      {"max_consecutive_skipped_steps",
       [](Config& c) {
         fp16(c);
         c.fp16.loss_scale = 128;
       },
       [](Config& c) { c.max_consecutive_skipped_steps = 2; }, Grads::overflow_always},
      {"optimizer.type", [](Config& c) { c.optimizer.weight_decay = 0.1; },
       [](Config& c) { c.optimizer.type = zero::OptimizerType::adam; }},
      {"optimizer.params.lr", none, [](Config& c) { c.optimizer.lr = 0.1; }},
      {"optimizer.params.betas", none, [](Config& c) { c.optimizer.beta1 = 0.5; }},
      {"optimizer.params.eps", none, [](Config& c) { c.optimizer.eps = 0.1; }},
      {"optimizer.params.weight_decay", none, [](Config& c) { c.optimizer.weight_decay = 0.5; }},
      {"optimizer.params.adam_w_mode", [](Config& c) { c.optimizer.weight_decay = 0.1; },
       [](Config& c) { c.optimizer.type = zero::OptimizerType::adam; }},
      // Biases without decay at half the lr: their updates change (the MLP's "layer{l}.bias").
      {"param_groups", [](Config& c) { c.optimizer.weight_decay = 0.1; },
       [](Config& c) { c.param_groups.push_back({{"*.bias"}, 0.0, 0.5}); }},
      // LAMB's clamp: the MLP's trust ratios lie inside [0.01, 10]; these move them.
      {"optimizer.params.max_coeff", [](Config& c) { c.optimizer.type = zero::OptimizerType::lamb; },
       [](Config& c) { c.optimizer.max_coeff = 1e-3, c.optimizer.min_coeff = 1e-4; }},
      {"optimizer.params.min_coeff", [](Config& c) { c.optimizer.type = zero::OptimizerType::lamb; },
       [](Config& c) { c.optimizer.min_coeff = 5; }},
      {"optimizer.params.bias_correction", none,
       [](Config& c) { c.optimizer.bias_correction = false; }},
      {"scheduler.type", none, warmup},
      {"scheduler.params.warmup_min_lr", warmup,
       [](Config& c) { c.scheduler.warmup_min_lr = 1e-3; }},
      {"scheduler.params.warmup_max_lr", warmup,
       [](Config& c) { c.scheduler.warmup_max_lr = 5e-2; }},
      {"scheduler.params.warmup_num_steps", warmup,
       [](Config& c) { c.scheduler.warmup_num_steps = 3; }},
      {"scheduler.params.warmup_type", warmup,
       [](Config& c) { c.scheduler.warmup_type = zero::WarmupType::linear; }},
      {"scheduler.params.total_num_steps", decay,
       [](Config& c) { c.scheduler.total_num_steps = 4; }},
      {"scheduler.params.warmup_min_ratio", cosine,
       [](Config& c) { c.scheduler.warmup_min_ratio = 0.5; }},
      {"scheduler.params.cos_min_ratio", cosine,
       [](Config& c) { c.scheduler.cos_min_ratio = 0.5; }},
      {"fp16.enabled", none, fp16},
      {"fp16.loss_scale", fp16, [](Config& c) { c.fp16.loss_scale = 128; }},
      {"fp16.initial_scale_power", fp16, [](Config& c) { c.fp16.initial_scale_power = 8; }},
      {"fp16.loss_scale_window", fp16, [](Config& c) { c.fp16.loss_scale_window = 2; }},
      {"fp16.hysteresis", overflowing, [](Config& c) { c.fp16.hysteresis = 1; }},
      // Overflows at steps 0 and 2: with consecutive hysteresis the clean step 1 refills the
      // hysteresis, so the second overflow does not halve the scale.
      {"fp16.consecutive_hysteresis", fp16, [](Config& c) { c.fp16.consecutive_hysteresis = true; },
       Grads::overflow_at_0_and_2},
      {"fp16.min_loss_scale", overflowing, [](Config& c) { c.fp16.min_loss_scale = 1.7e38; }},
      {"zero_optimization.stage", none, stage3},
      {"zero_optimization.overlap_comm", [](Config& c) { c.zero.stage = 2; },
       [](Config& c) { c.zero.overlap_comm = true; }},
      {"zero_optimization.reduce_bucket_size", [](Config& c) { c.zero.stage = 2; },
       [](Config& c) { c.zero.reduce_bucket_size = 1; }},
      {"zero_optimization.allgather_bucket_size", [](Config& c) { c.zero.stage = 2; },
       [](Config& c) { c.zero.allgather_bucket_size = 1; }},
      {"zero_optimization.mics_shard_size", [](Config& c) { c.zero.stage = 2; },
       [](Config& c) { c.zero.mics_shard_size = 2; }},
      {"zero_optimization.zero_hpz_partition_size", stage3,
       [](Config& c) { c.zero.zero_hpz_partition_size = 2; }},
      {"zero_optimization.zero_quantized_gradients", none,
       [](Config& c) { c.zero.zero_quantized_gradients = true; }},
      {"zero_optimization.zero_quantized_weights", stage3,
       [](Config& c) { c.zero.zero_quantized_weights = true; }},
      {"compression.gradients", none,
       [](Config& c) { c.compression.gradients = zero::GradCompression::int8; }},
      {"compression.weights", stage3,
       [](Config& c) { c.compression.weights = zero::WeightCompression::int8; }},
      {"compression.block_size",
       [](Config& c) { c.compression.gradients = zero::GradCompression::int8; },
       [](Config& c) { c.compression.block_size = 3; }},
      {"compression.topk_ratio",
       [](Config& c) { c.compression.gradients = zero::GradCompression::topk; },
       [](Config& c) { c.compression.topk_ratio = 0.5; }},
      {"compression.error_feedback",
       [](Config& c) { c.compression.gradients = zero::GradCompression::topk; },
       [](Config& c) { c.compression.error_feedback = false; }},
      {"zero_optimization.stage3_prefetch_bucket_size", stage3,
       [](Config& c) { c.zero.stage3_prefetch_bucket_size = 0; }},
      {"zero_optimization.stage3_param_persistence_threshold", stage3,
       [](Config& c) { c.zero.stage3_param_persistence_threshold = 1'000'000; }},
      {"zero_optimization.stage3_max_live_parameters", stage3,
       [](Config& c) { c.zero.stage3_max_live_parameters = 60'000; }},
      // The plan is a GPU's: offload moves the state to the host (docs/offload.md).
      {"zero_optimization.offload_optimizer.device", [](Config& c) { c.zero.stage = 2; },
       [](Config& c) { c.zero.offload_optimizer_device = zero::OffloadDevice::cpu; }},
      {"zero_optimization.cpu_offload", [](Config& c) { c.zero.stage = 2; },
       [](Config& c) { c.zero.offload_optimizer_device = zero::OffloadDevice::cpu; }},
      {"zero_optimization.offload_param.device", stage3,
       [](Config& c) { c.zero.offload_param_device = zero::OffloadDevice::cpu; }},
      {"zero_optimization.cpu_offload_param", stage3,
       [](Config& c) { c.zero.offload_param_device = zero::OffloadDevice::cpu; }},
  };
  return table;
}

// The keys docs/config.md marks "acts" (or "acts (stage 3)"), with their block's prefix.
std::set<std::string> acting_keys_in_doc() {
  const char* path = std::getenv("ZERO_CONFIG_DOC");
  REQUIRE(path != nullptr);
  std::ifstream in(path);
  REQUIRE(in);
  std::set<std::string> out;
  std::string line, prefix;
  const std::regex section(R"(^### `([a-z0-9_]+)`)"), top(R"(^### Top level)");
  const std::regex code("`([^`]+)`");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, section)) prefix = m[1].str() + ".";
    if (std::regex_search(line, top)) prefix.clear();
    if (line.rfind("| `", 0) != 0) continue;
    const auto last = line.rfind('|', line.size() - 2);
    std::string status = line.substr(last + 1);
    status.erase(0, status.find_first_not_of(' '));
    status.erase(status.find_last_not_of(" |") + 1);
    if (status != "acts" && status != "acts (stage 3)") continue;
    const std::string first = line.substr(2, line.find('|', 2) - 2);
    for (std::sregex_iterator it(first.begin(), first.end(), code), end; it != end; ++it)
      out.insert(prefix + (*it)[1].str());
  }
  return out;
}

}  // namespace

TEST_CASE("The table of acting keys names exactly the keys docs/config.md marks as acting") {
  std::set<std::string> table;
  for (const auto& r : rows()) table.insert(r.key);
  const std::set<std::string> doc = acting_keys_in_doc();
  std::vector<std::string> only_doc, only_table;
  std::set_difference(doc.begin(), doc.end(), table.begin(), table.end(),
                      std::back_inserter(only_doc));
  std::set_difference(table.begin(), table.end(), doc.begin(), doc.end(),
                      std::back_inserter(only_table));
  INFO("marked acting in docs/config.md but not tested here: "
       << Catch::Detail::stringify(only_doc));
  INFO("tested here but not marked acting in docs/config.md: "
       << Catch::Detail::stringify(only_table));
  CHECK(only_doc.empty());
  CHECK(only_table.empty());
  CHECK(doc.size() >= 30);
}

TEST_CASE("Changing any acting key changes the plan, the engine's steps or its weights") {
  for (const auto& r : rows()) {
    Config base;
    r.base(base);
    Config changed = base;
    r.change(changed);
    REQUIRE_FALSE(base == changed);  // the row changes something
    const std::string a = fingerprint(base, r.grads), b = fingerprint(changed, r.grads);
    INFO(r.key << "\nbase:\n" << a << "changed:\n" << b);
    CHECK(a != b);
  }
}

TEST_CASE("The same config gives the same fingerprint, so a difference means the key acted") {
  Config c;
  overflowing(c);
  CHECK(fingerprint(c) == fingerprint(c));
  Config d;
  stage3(d);
  CHECK(fingerprint(d) == fingerprint(d));
}
