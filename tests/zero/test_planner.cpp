// The planner on its own: the ZeRO paper's analysis, pure fp32 training, offload, SGD, the
// inverse questions, bad input and absurd input, and the linear replay against the quadratic
// one it replaced. (tests/zero/test_planner_engine.cpp checks it against the
// engine's ledger.)
#include <catch2/catch.hpp>

#include <array>
#include <limits>
#include <random>

#include "base/error.hpp"
#include "zero/planner.hpp"
#include "zero/stage_policy.hpp"

using namespace zero;
using Catch::Matchers::Contains;

namespace {

PlanInput bare(std::int64_t params, int ranks, int stage) {
  PlanInput in;
  in.units = uniform_units(params, 32);
  in.ranks = ranks;
  in.config.zero.stage = stage;
  in.config.precision = Precision::bf16;
  in.config.communication_data_type = DType::bf16;  // the paper's 2-byte gradients
  return in;
}

double gb(std::int64_t b) { return static_cast<double>(b) / 1e9; }

}  // namespace

TEST_CASE("Mixed-precision Adam reproduces the ZeRO paper's Figure 1 (7.5B params, 64 ranks)") {
  const double expected[4] = {120.0, 31.4, 16.6, 1.9};  // GB per device, K = 12 (1.875 printed 1.9)
  for (int stage = 0; stage <= 3; ++stage) {
    const Plan p = plan_memory(bare(7'500'000'000, 64, stage));
    INFO("stage " << stage << "\n" << explain(p));
    CHECK(gb(p.device.model_states()) == Approx(expected[stage]).epsilon(0.015));
    // and the exact formulas in the padded count: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N
    const std::int64_t P = p.padded_numel, S = P / 64;
    const std::int64_t exact[4] = {16 * P, 4 * P + 12 * S, 2 * P + 14 * S, 16 * S};
    CHECK(p.device.model_states() == exact[stage]);
    CHECK(p.padded_numel - p.numel < 32 * 64 * 64);  // padding: under N x 64 per unit
  }
}

TEST_CASE("Every category is counted per the stage table") {
  const std::int64_t Psi = 1'000'000'000;
  for (int stage = 0; stage <= 3; ++stage) {
    const Plan p = plan_memory(bare(Psi, 8, stage));
    const std::int64_t P = p.padded_numel, S = P / 8;
    CHECK(p.device.params == 2 * (stage == 3 ? S : P));
    CHECK(p.device.grads == 2 * (stage >= 2 ? S : P));
    CHECK(p.device.master == 4 * (stage >= 1 ? S : P));
    CHECK(p.device.optimizer == 8 * (stage >= 1 ? S : P));
    CHECK(p.device.activations == 0);
    CHECK(p.device.total() == p.peak_total);
    CHECK(p.device.buffers > 0);  // gradient buffers in flight / gathered units
    CHECK(p.host.total() == 0);
  }
  // Stage 3 gathers the prefetch window: with the default 50M-element window, 2 units of
  // 31.25M elements (1 gathered + 1 prefetched) plus the unit's gradients in flight, when every
  // unit is a reduce bucket of its own.
  PlanInput per_unit = bare(Psi, 8, 3);
  per_unit.config.zero.reduce_bucket_size = Psi / 32;
  per_unit.config.zero.allgather_bucket_size = Psi / 32;  // and gathered one unit per all-gather
  const Plan p3 = plan_memory(per_unit);
  const std::int64_t unit = 2 * (Psi / 32 + 64);
  CHECK(p3.device.buffers >= 3 * unit - 3 * 2 * 64 * 8);
  CHECK(p3.device.buffers <= 3 * unit + 4 * (Psi / 32 / 8 + 64));
  // DeepSpeed's default reduce bucket, 5e8 elements, holds 15 of these units (16 would pass it
  // by their padding): the packed bucket is counted on top.
  const std::int64_t padded_unit = (Psi / 32 + 511) / 512 * 512;
  CHECK(plan_memory(bare(Psi, 8, 3)).device.buffers == p3.device.buffers + 2 * 15 * padded_unit);
}

TEST_CASE("Pure fp32 training: 16 bytes per parameter at stage 0, 16Ψ/N at stage 3") {
  for (int stage = 0; stage <= 3; ++stage) {
    PlanInput in = bare(100'000'000, 4, stage);
    in.config.precision = Precision::fp32;
    in.config.communication_data_type = DType::f32;
    const Plan p = plan_memory(in);
    const std::int64_t P = p.padded_numel, S = P / 4;
    // fp32 params are the master weights at stages 0 and 3 (updated in place, no copy);
    // stages 1-2 keep full fp32 params beside the sharded master.
    const std::int64_t exact[4] = {16 * P, 8 * P + 12 * S, 4 * P + 16 * S, 16 * S};
    INFO("stage " << stage << "\n" << explain(p));
    CHECK(p.device.model_states() == exact[stage]);
  }
}

TEST_CASE("fp32 gradient reduction makes the stage-2 gradient shard 4 bytes") {
  PlanInput in = bare(1'000'000, 4, 2);
  in.config.communication_data_type = DType::f32;
  const Plan p = plan_memory(in);
  CHECK(p.device.grads == 4 * (p.padded_numel / 4));
  in.config.zero.stage = 1;  // the fp32 shard is a buffer at stage 1 (the full bf16 buffer is the grads)
  const Plan p1 = plan_memory(in);
  CHECK(p1.device.grads == 2 * p1.padded_numel);
  bool found = false;
  for (const auto& t : p1.terms) found |= t.category == "buffers" && t.bytes == 4 * (p1.padded_numel / 4);
  CHECK(found);
}

TEST_CASE("Optimizer offload moves master, moments and the fp32 gradient shard to the host") {
  for (int stage = 1; stage <= 3; ++stage) {
    PlanInput in = bare(1'000'000'000, 8, stage);
    in.config.zero.offload_optimizer_device = OffloadDevice::cpu;
    const Plan p = plan_memory(in);
    const std::int64_t P = p.padded_numel, S = P / 8;
    CHECK(p.device.master == 0);
    CHECK(p.device.optimizer == 0);
    CHECK(p.host.master == 4 * S);
    CHECK(p.host.optimizer == 8 * S);
    CHECK(p.host.grads + p.host.buffers >= 4 * S);
    CHECK(p.device.params == 2 * (stage == 3 ? S : P));
    CHECK(plan_memory(in).peak_total < plan_memory(bare(1'000'000'000, 8, stage)).peak_total);
  }
  // Param offload: stage 3's shards on the host too; below stage 3 it changes nothing.
  PlanInput in = bare(1'000'000'000, 8, 3);
  in.config.zero.offload_param_device = OffloadDevice::cpu;
  const Plan p = plan_memory(in);
  CHECK(p.device.params == 0);
  CHECK(p.host.params == 2 * (p.padded_numel / 8));
  CHECK(p.settings.offload_params);
  in.config.zero.stage = 2;
  CHECK_FALSE(plan_memory(in).settings.offload_params);
  PlanInput bad = bare(1000, 1, 0);
  bad.config.zero.offload_optimizer_device = OffloadDevice::cpu;
  CHECK_THROWS_WITH(plan_memory(bad), Contains("offload") && Contains("stage"));
}

TEST_CASE("SGD with momentum keeps one fp32 state instead of Adam's two") {
  PlanInput in = bare(1'000'000'000, 4, 1);
  in.optimizer = PlanOptimizer::sgd_momentum;
  const Plan p = plan_memory(in);
  CHECK(p.device.optimizer == 4 * (p.padded_numel / 4));
}

TEST_CASE("Hierarchical sharding shards over the group, not the world") {
  PlanInput in = bare(1'000'000'000, 64, 3);
  in.config.zero.mics_shard_size = 8;
  const Plan p = plan_memory(in);
  CHECK(p.shard_size == 8);
  CHECK(p.device.model_states() == 16 * (p.padded_numel / 8));
  in.config.zero.mics_shard_size = 7;
  CHECK_THROWS_WITH(plan_memory(in), Contains("shard size") && Contains("64"));
}

TEST_CASE("Inverse questions: the largest model that fits, the fewest ranks that hold one") {
  const std::int64_t budget = 80LL << 30;  // 80 GiB
  for (int stage = 0; stage <= 3; ++stage) {
    PlanInput in = bare(1000, 64, stage);
    const std::int64_t n = largest_model(in, budget);
    INFO("stage " << stage << ": largest " << n);
    REQUIRE(n > 0);
    in.units = uniform_units(n, 32);
    CHECK(plan_memory(in).peak_total <= budget);
    in.units = uniform_units(n + n / 500 + 64, 32);
    CHECK(plan_memory(in).peak_total > budget);
  }
  // 16 bytes per parameter at stage 0: about 80 GiB / 16 = 5.3B parameters.
  CHECK(largest_model(bare(1000, 64, 0), budget) == Approx(80.0 * (1 << 30) / 16).epsilon(0.05));

  PlanInput in = bare(7'500'000'000, 1, 3);
  const auto n = fewest_ranks(in, budget);
  REQUIRE(n.has_value());
  in.ranks = *n;
  CHECK(plan_memory(in).peak_total <= budget);
  in.ranks = *n - 1;
  CHECK(plan_memory(in).peak_total > budget);
  CHECK_FALSE(fewest_ranks(bare(7'500'000'000, 1, 0), budget).has_value());  // 120 GB at any N
  CHECK(largest_model(bare(1000, 1, 0), 100) == 0);
}

TEST_CASE("Counts and sizes are read as people write them; bad ones are named") {
  CHECK(parse_count("7.5e9") == 7'500'000'000);
  CHECK(parse_count("13B") == 13'000'000'000);
  CHECK(parse_count("1.3b") == 1'300'000'000);
  CHECK(parse_count("350M") == 350'000'000);
  CHECK(parse_count("125k") == 125'000);
  CHECK(parse_count("1000") == 1000);
  CHECK_THROWS_WITH(parse_count("-5"), Contains("negative") && Contains("-5"));
  CHECK_THROWS_WITH(parse_count("lots"), Contains("lots"));
  CHECK_THROWS_WITH(parse_count("1.5"), Contains("whole"));
  CHECK(parse_bytes("80GiB") == 80LL << 30);
  CHECK(parse_bytes("80GB") == 80'000'000'000);
  CHECK(parse_bytes("1.5TiB") == 1649267441664);
  CHECK(parse_bytes("512 MiB") == 512LL << 20);
  CHECK_THROWS_WITH(parse_bytes("80"), Contains("no unit") && Contains("GiB"));
  CHECK_THROWS_WITH(parse_bytes("-1GB"), Contains("> 0"));
  CHECK_THROWS_WITH(parse_bytes("eightyGB"), Contains("eighty"));
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(100) == "100 B");
}

TEST_CASE("Bad plan input names the field") {
  PlanInput in = bare(1000, 1, 4);
  CHECK_THROWS_WITH(plan_memory(in), Contains("stage"));
  in = bare(1000, 0, 1);
  CHECK_THROWS_WITH(plan_memory(in), Contains("ranks"));
  CHECK_THROWS_WITH(uniform_units(-3, 1), Contains("-3"));
  CHECK_THROWS_WITH(uniform_units(10, 0), Contains("units"));
  in = bare(1000, 2, 2);
  in.config.precision = Precision::bf16;
  in.config.communication_data_type = DType::f16;
  CHECK_THROWS_WITH(plan_memory(in), Contains("reduce dtype"));
}

namespace {

// The planner's replay of the engine before the planner ran the engine itself, kept as an
// independent reference: every micro-batch, a rescan of the prefetch window and of every unit's
// reduction at each call (quadratic in units), one reduction per unit. Bucket buffers (stage 0's
// reduced blocks, the after-step staging) are kept for reuse, a request taking the smallest that
// holds it, and at the end of a step those no reduction used are freed (Spares,
// zero/engine_context.hpp): two steps run, the second one's peak counts.
std::int64_t reference_step_peak(const PlanInput& in) {
  LayoutOptions lo;
  lo.shard_ranks = in.config.zero.mics_shard_size > 0 ? in.config.zero.mics_shard_size : in.ranks;
  lo.align_elements = in.align_elements;
  lo.persistence_threshold = in.config.zero.stage == 3 ? in.config.zero.stage3_param_persistence_threshold : 0;
  lo.bucket_elements = in.config.zero.reduce_bucket_size;
  const Layout L = make_layout(in.units, lo);
  const StagePolicy pol = kStagePolicy[in.config.zero.stage];
  const DType wd = in.config.precision == Precision::bf16 ? DType::bf16
                   : in.config.precision == Precision::fp16 ? DType::f16 : DType::f32;
  const DType rd = in.config.precision == Precision::fp32 ? DType::f32 : in.config.communication_data_type;
  const std::int64_t w = static_cast<std::int64_t>(size_of(wd)), r = static_cast<std::int64_t>(size_of(rd));
  const int nu = static_cast<int>(L.units.size());
  // Stage 0 on one rank, reducing in the working dtype: the gradient buffer is the reduced
  // gradient, and a reduction takes no buffer.
  const bool alone = pol.gather_grads && in.ranks == 1 && rd == wd;
  std::int64_t current = 0, peak = 0;
  auto alloc = [&](std::int64_t b) { current += b, peak = std::max(peak, current); };
  auto dealloc = [&](std::int64_t b) { current -= b; };
  struct Buffer {
    std::int64_t bytes = 0;
    bool carried = false;  // a reduction used it in this step: kept past the step's end
  };
  std::vector<Buffer> kept;
  auto take = [&](std::int64_t b, bool reduction) {
    auto best = kept.end();
    for (auto k = kept.begin(); k != kept.end(); ++k)
      if (k->bytes >= b && (best == kept.end() || k->bytes < best->bytes)) best = k;
    Buffer got{b, false};
    if (best == kept.end())
      alloc(b);
    else
      got = *best, kept.erase(best);
    got.carried = got.carried || reduction;
    return got;
  };
  auto keep = [&](Buffer b) { kept.push_back(b); };
  auto end_step = [&] {
    for (const Buffer& b : kept)
      if (!b.carried) dealloc(b.bytes);
    std::erase_if(kept, [](const Buffer& b) { return !b.carried; });
    for (Buffer& b : kept) b.carried = false;
  };
  enum class St { sharded, gathered };
  std::vector<St> st(nu, St::sharded);
  std::vector<std::int64_t> pending(nu, 0);
  std::vector<bool> fresh(nu, false);
  int last = -1;
  auto issue = [&](int v) { alloc(w * L.units[v].padded_numel), st[v] = St::gathered; };
  auto gather = [&](int u) {
    if (!pol.shard_params || L.units[u].persistent) return;
    const int dir = last >= 0 && u <= last ? -1 : +1;
    last = u;
    if (st[u] == St::sharded) issue(u);
    std::int64_t live = 0, ahead = 0;
    for (int v = 0; v < nu; ++v)
      if (!L.units[v].persistent && st[v] != St::sharded) live += L.units[v].padded_numel;
    for (int v = u + dir; v >= 0 && v < nu; v += dir) {
      const auto& V = L.units[v];
      if (V.persistent) continue;
      if (st[v] != St::sharded) {
        ahead += V.padded_numel;
        continue;
      }
      if (ahead + V.padded_numel > in.config.zero.stage3_prefetch_bucket_size ||
          live + V.padded_numel > in.config.zero.stage3_max_live_parameters)
        break;
      issue(v);
      ahead += V.padded_numel;
      live += V.padded_numel;
    }
  };
  auto release = [&](int u) {
    if (!pol.shard_params || L.units[u].persistent || st[u] == St::sharded) return;
    dealloc(w * L.units[u].padded_numel), st[u] = St::sharded;
  };
  auto finish = [&](int u) {
    if (pending[u] == 0) return;
    pol.gather_grads ? keep({pending[u], true}) : dealloc(pending[u]);  // a block, or grads
    pending[u] = 0;
  };
  auto grads = [&](int u) {
    if (fresh[u]) return;
    finish(u);
    if (pol.shard_grads) alloc(w * L.units[u].padded_numel);
    fresh[u] = true;
  };
  auto reduce = [&](int u) {
    grads(u);
    const auto& U = L.units[u];
    if (pol.gather_grads && !alone) pending[u] = take(r * U.shard_numel, true).bytes;
    else if (pol.shard_grads) pending[u] = w * U.padded_numel;
    fresh[u] = false;
    for (int v = 0; v < nu; ++v)
      if (v != u || !in.config.zero.overlap_comm) finish(v);
  };
  for (int s = 0; s < 2; ++s) {
    peak = current;  // the second step's counts
    for (std::int64_t mb = 0; mb < in.config.gradient_accumulation_steps; ++mb) {
      for (int u = 0; u < nu; ++u) gather(u), release(u);
      for (int u = nu - 1; u >= 0; --u) gather(u), grads(u), release(u), reduce(u);
    }
    for (int u = 0; u < nu; ++u) finish(u);
    for (int u = 0; u < nu; ++u) release(u);
    std::int64_t scratch = 0;
    if (in.config.gradient_accumulation_steps == 1 && rd != DType::f32) {
      for (int u = 0; u < nu; ++u)
        scratch = std::max(scratch,
                           pol.shard_optimizer ? L.units[u].shard_numel : L.units[u].padded_numel);
      alloc(4 * scratch);
    }
    for (const auto& U : L.units)
      if (pol.shard_optimizer && (!pol.shard_params || U.persistent))
        keep(take(w * U.shard_numel, false));
    end_step();
    dealloc(4 * scratch);
  }
  return peak;
}

}  // namespace

TEST_CASE("The engine's count of one step equals a replay of every call and micro-batch") {
  std::mt19937_64 rng(20261202);
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  int stage3_with_prefetch = 0;
  for (int c = 0; c < 3000; ++c) {
    PlanInput in;
    const int nu = static_cast<int>(pick(1, 14));
    for (int u = 0; u < nu; ++u) {
      UnitSpec spec{cat("u", u), {}};
      for (int p = 0, np = static_cast<int>(pick(1, 3)); p < np; ++p)
        spec.params.push_back({cat("u", u, ".p", p), {pick(1, pick(0, 1) ? 300 : 6000)}});
      in.units.push_back(std::move(spec));
    }
    in.ranks = static_cast<int>(pick(1, 5));
    in.config.zero.stage = static_cast<int>(pick(0, 3));
    in.config.precision = std::array{Precision::bf16, Precision::fp16, Precision::fp32}[pick(0, 2)];
    in.config.communication_data_type = pick(0, 1) ? DType::f32
                      : in.config.precision == Precision::fp16 ? DType::f16 : DType::bf16;
    if (in.config.precision == Precision::fp32) in.config.communication_data_type = DType::f32;
    in.config.gradient_accumulation_steps = pick(1, 4);
    in.config.zero.overlap_comm = pick(0, 1);
    in.config.zero.stage3_param_persistence_threshold = pick(0, 2) == 0 ? pick(0, 4000) : 0;
    in.config.zero.stage3_prefetch_bucket_size = std::array<std::int64_t, 4>{0, pick(1, 20000), pick(1, 3000), 1'000'000'000}[pick(0, 3)];
    in.config.zero.stage3_max_live_parameters = pick(0, 2) == 0 ? pick(0, 30000) : 1'000'000'000;
    // Host ranks: the reference leaves out the few bytes of norm parts a device run stages
    // through device memory (tests/zero/test_engine_emulated.cpp checks that path exactly).
    in.device = false;
    in.config.zero.reduce_bucket_size = 1;  // every unit a bucket of its own, as the reference reduces
    in.config.zero.allgather_bucket_size = 1;  // and all-gathers
    const Plan p = plan_memory(in);
    INFO("case " << c << ": " << nu << " units, ranks " << in.ranks << ", stage " << in.config.zero.stage
                 << ", accumulation " << in.config.gradient_accumulation_steps << ", overlap "
                 << in.config.zero.overlap_comm << ", persistence " << in.config.zero.stage3_param_persistence_threshold
                 << ", prefetch " << in.config.zero.stage3_prefetch_bucket_size << ", max live "
                 << in.config.zero.stage3_max_live_parameters);
    REQUIRE(p.step_transient_peak == reference_step_peak(in));
    stage3_with_prefetch += in.config.zero.stage == 3 && in.config.zero.stage3_prefetch_bucket_size > 0;
  }
  CHECK(stage3_with_prefetch > 300);
}

TEST_CASE("Any accumulation and a large unit count answer at once") {
  // A step of 2^31 micro-batches of this model moves 2^63 bytes at most: the count holds it.
  PlanInput in = bare(1'000'000, 8, 3);
  in.config.gradient_accumulation_steps = 2'147'483'647;  // the replay once looped accumulation x units
  CHECK(plan_memory(in).peak_total > 0);
  in.config.gradient_accumulation_steps = 4'294'967'297;  // 64 bits, not truncated to an int
  CHECK(plan_memory(in).device.buffers > plan_memory(bare(1'000'000, 8, 3)).device.buffers);
  Config config;
  config.gradient_accumulation_steps = 4'294'967'297;
  CHECK(resolve_settings(plan_input_from_config(config, 8).config, 8).accumulation == 4'294'967'297);
  // Quadratic in the units once: 200k units took minutes.
  in.units = uniform_units(200'000, 200'000);
  in.config.zero.overlap_comm = true;
  in.config.zero.stage3_prefetch_bucket_size = 1'000'000;
  for (int stage = 0; stage <= 3; stage += 3) {
    in.config.zero.stage = stage;
    CHECK(plan_memory(in).numel == 200'000);
  }
}

TEST_CASE("Byte counts that would pass 2^63 are refused in a sentence, never wrapped") {
  CHECK_THROWS_WITH(plan_memory(bare(1'000'000'000'000'000'000, 1, 0)),
                    Contains("too large to plan") && Contains("1,000,000,000,000,000,000 params"));
  // A count that fits a byte count at stage 3 over many ranks still plans.
  CHECK(plan_memory(bare(1'000'000'000'000'000'000, 1024, 3)).peak_total > 0);
  CHECK_THROWS_WITH(uniform_units(10'000'000, 5'000'000), Contains("more than the planner handles"));
  const std::vector<UnitSpec> big = {{"a", {{"a.w", {std::int64_t{1} << 62}}}},
                                     {"b", {{"b.w", {std::int64_t{1} << 62}}}}};
  CHECK_THROWS_WITH(count_params(big), Contains("2^63"));
  PlanInput in = bare(1000, 1, 0);
  in.activation_bytes = std::numeric_limits<std::int64_t>::max() - 10;
  CHECK_THROWS_WITH(plan_memory(in), Contains("too large to plan"));
  CHECK(largest_model(bare(1000, 1, 0), std::numeric_limits<std::int64_t>::max()) > 0);
}

TEST_CASE("A step's collectives past 2^63 bytes at a large accumulation are refused, never wrapped") {
  // 1e9 params at stage 3 move gigabytes per micro-batch: 2^31 of them pass 2^63 - 1 bytes.
  for (const std::int64_t accumulation :
       {std::int64_t{2'147'483'647}, std::int64_t{4'294'967'297},
        std::numeric_limits<std::int64_t>::max()}) {
    CAPTURE(accumulation);
    PlanInput in = bare(1'000'000'000, 8, 3);
    in.config.gradient_accumulation_steps = accumulation;
    CHECK_THROWS_WITH(plan_memory(in), Contains("too large to plan: one step's collectives") &&
                                           Contains("lower gradient_accumulation_steps"));
  }
  PlanInput in = bare(1'000'000'000, 8, 3);
  in.config.gradient_accumulation_steps = 1'000'000;  // 1e6 micro-batches still fit
  const Plan p = plan_memory(in);
  CHECK(p.traffic.shard > 0);
  CHECK(p.collectives.shard.calls() > 1'000'000);
}
