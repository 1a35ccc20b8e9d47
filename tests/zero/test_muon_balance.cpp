// Muon's whole matrices balanced across ranks by Newton-Schulz cost (zero/layout.hpp's
// balance_shards): on GPT-2-shaped models the busiest rank's FLOPs over the mean fall from what
// in-order placement gave to the figures stated in docs/optimizers.md, every matrix stays whole in
// its owner's shard, the layout is deterministic, and the planner and the time model (one layout
// per distinct unit) report the engine's owners' figures.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/muon_math.hpp"
#include "models/gpt_shape.hpp"
#include "zero/zero.hpp"

using namespace zero;

namespace {

std::vector<UnitSpec> gpt(const char* preset) {
  return models::gpt_units(*models::gpt_preset(preset));
}

LayoutOptions whole(const std::vector<UnitSpec>& units, int ranks) {
  LayoutOptions o;
  o.shard_ranks = ranks;
  for (const UnitSpec& u : units)
    for (const ParamSpec& p : u.params)
      if (p.shape.size() == 2 && p.name.find("block") == 0) o.whole_params.push_back(p.name);
  return o;
}

// Newton-Schulz FLOPs by owner.
std::vector<double> by_rank(const Layout& L) {
  std::vector<double> f(static_cast<std::size_t>(L.shard_ranks()), 0.0);
  for (const ParamLayout& p : L.params)
    if (p.owner >= 0)
      f[static_cast<std::size_t>(p.owner)] += kernels::muon_ns_flops(p.shape[0], p.shape[1]);
  return f;
}

double imbalance(const std::vector<double>& f) {
  double total = 0;
  for (double x : f) total += x;
  return *std::max_element(f.begin(), f.end()) / (total / static_cast<double>(f.size()));
}

// What placing each unit's shards in rank order gave: every block puts the same shard costs on
// the same ranks, so the model's figure is one block's (a layout of one block: its shard costs).
double in_order_imbalance(const std::vector<UnitSpec>& units, int ranks) {
  const std::vector<UnitSpec> one{units[1]};
  LayoutOptions o = whole(one, ranks);
  const Layout L = make_layout(one, o);
  std::vector<double> slot(static_cast<std::size_t>(ranks), 0.0);
  for (const ParamLayout& p : L.params)
    if (p.owner >= 0)
      slot[static_cast<std::size_t>(p.offset / L.units[0].shard_numel)] +=
          kernels::muon_ns_flops(p.shape[0], p.shape[1]);
  return imbalance(slot);
}

}  // namespace

TEST_CASE("Muon's matrices are balanced across ranks by Newton-Schulz cost over the whole model") {
  struct Case {
    const char* preset;
    int ranks;
    double before, after;  // busiest / mean: in rank order, balanced (docs/optimizers.md)
  };
  for (const Case& k : {Case{"gpt-nano", 2, 1.286, 1.000}, Case{"gpt-nano", 3, 1.071, 1.018},
                        Case{"gpt-nano", 4, 1.286, 1.071}, Case{"gpt-nano", 8, 2.572, 1.286},
                        Case{"gpt2-small", 2, 1.286, 1.000}, Case{"gpt2-small", 3, 1.071, 1.000},
                        Case{"gpt2-small", 4, 1.286, 1.024}, Case{"gpt2-small", 8, 2.572, 1.095}}) {
    CAPTURE(k.preset, k.ranks);
    const std::vector<UnitSpec> units = gpt(k.preset);
    const LayoutOptions o = whole(units, k.ranks);
    const Layout L = make_layout(units, o);
    CHECK(in_order_imbalance(units, k.ranks) == Approx(k.before).margin(5e-4));
    CHECK(imbalance(by_rank(L)) == Approx(k.after).margin(5e-4));

    // Each matrix whole in its owner's shard; a unit's params never overlap; same inputs, same
    // layout.
    const Layout again = make_layout(units, o);
    for (const UnitLayout& U : L.units) {
      std::vector<Range> taken;
      for (int q = U.first_param; q < U.first_param + U.param_count; ++q) {
        const ParamLayout& p = L.params[static_cast<std::size_t>(q)];
        CHECK(p.offset == again.params[static_cast<std::size_t>(q)].offset);
        CHECK(p.owner == again.params[static_cast<std::size_t>(q)].owner);
        CHECK(p.global_offset == U.offset + p.offset);
        CHECK(p.offset + p.numel <= U.padded_numel);
        taken.push_back({p.offset, p.offset + p.numel});
        if (p.owner < 0) continue;
        const Range r = U.shard_range(p.owner);
        CHECK((p.offset >= r.begin && p.offset + p.numel <= r.end));
      }
      std::ranges::sort(taken, {}, &Range::begin);
      for (std::size_t i = 1; i < taken.size(); ++i) CHECK(taken[i - 1].end <= taken[i].begin);
    }
  }
}

TEST_CASE("The planner and the time model report the engine's balanced Newton-Schulz load") {
  for (const char* preset : {"gpt-nano", "gpt2-small"})
    for (int ranks : {2, 3, 4, 8}) {
      CAPTURE(preset, ranks);
      Config c;
      c.optimizer.type = OptimizerType::muon;
      c.zero.stage = 1;
      PlanInput in = plan_input_from_config(c, ranks);
      in.units = gpt(preset);
      in.device = false;
      const std::vector<double> f = by_rank(make_layout(in.units, whole(in.units, ranks)));
      double total = 0;
      for (double x : f) total += x;
      const Plan p = plan_memory(in);
      CHECK(p.newton_schulz_flops_max == Approx(*std::max_element(f.begin(), f.end())));
      CHECK(p.newton_schulz_flops_mean == Approx(total / ranks));
      TimeInput t;
      t.cluster = *builtin_cluster("h100-sxm");
      CHECK(estimate_step(p, in, t).newton_schulz_imbalance == Approx(imbalance(f)));
    }
}

TEST_CASE("Balancing holds memory for the shards that hold params, not for every rank") {
  // 2^30 ranks: a vector of loads per rank would be 8 GiB per unit.
  const std::vector<UnitSpec> units = gpt("gpt-nano");
  const int ranks = 1 << 30;
  const Layout L = make_layout(units, whole(units, ranks));
  std::vector<int> owners;
  for (const ParamLayout& p : L.params)
    if (p.owner >= 0) owners.push_back(p.owner);
  std::ranges::sort(owners);
  CHECK(owners.size() == 16);  // 4 blocks of 4 matrices, each on a rank of its own
  CHECK(std::ranges::adjacent_find(owners) == owners.end());
  CHECK(owners.back() < ranks);
}

TEST_CASE("A unit whose shards a large param cuts keeps them in rank order, in the plan too") {
  // big.b (1000 elements) is larger than a shard of its unit, so it is cut; m.w stays in the
  // shard where it falls (rank 1) in every unit instead of moving to the least loaded rank.
  const std::vector<UnitSpec> units{UnitSpec{"u0", {{"u0.big.b", {1000}}, {"u0.m.w", {10, 10}}}},
                                    UnitSpec{"u1", {{"u1.big.b", {1000}}, {"u1.m.w", {10, 10}}}}};
  LayoutOptions o;
  o.shard_ranks = 2;
  o.align_elements = 4;
  o.whole_params = {"u0.m.w", "u1.m.w"};
  const Layout L = make_layout(units, o);
  CHECK(L.params[1].owner == 1);
  CHECK(L.params[3].owner == 1);
  CHECK(L.params[0].offset == 0);
  CHECK(L.params[2].offset == 0);
  // Whereas without the large param the second unit's matrix goes to the idle rank.
  const std::vector<UnitSpec> small{UnitSpec{"u0", {{"u0.b", {8}}, {"u0.m.w", {10, 10}}}},
                                    UnitSpec{"u1", {{"u1.b", {8}}, {"u1.m.w", {10, 10}}}}};
  const Layout S = make_layout(small, o);
  CHECK(S.params[1].owner != S.params[3].owner);

  // The planner lays out each distinct unit once and carries the loads as make_layout does.
  const double f = kernels::muon_ns_flops(10, 10);
  Config c;
  c.optimizer.type = OptimizerType::muon;
  c.zero.stage = 1;  // sharded: each matrix on its owner only
  PlanInput in = plan_input_from_config(c, 2);
  in.device = false;
  in.align_elements = 4;
  in.units = units;
  CHECK(plan_memory(in).newton_schulz_flops_max == 2 * f);
  in.units = small;
  CHECK(plan_memory(in).newton_schulz_flops_max == f);
}
