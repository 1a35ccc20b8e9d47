// Muon under ZeRO (zero/muon.hpp; docs/optimizers.md).
#include "zero/muon.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <span>

#include "zero/backend.hpp"

namespace zero {

namespace {

bool default_muon_param(const ParamSpec& p) {
  if (p.shape.size() != 2) return false;
  for (const char* word : {"embed", "wte", "wpe", "head", "output"})
    if (p.name.find(word) != std::string::npos) return false;
  return true;
}

}  // namespace

std::vector<std::string> muon_params(const std::vector<UnitSpec>& units, const OptimizerConfig& o) {
  std::vector<std::string> out;
  if (o.type != OptimizerType::muon) return out;
  std::vector<bool> matched(o.muon_params.size(), false);
  for (const UnitSpec& u : units)
    for (const ParamSpec& p : u.params) {
      bool mine = o.muon_params.empty() && default_muon_param(p);
      for (std::size_t i = 0; i < o.muon_params.size(); ++i) {
        if (::fnmatch(o.muon_params[i].c_str(), p.name.c_str(), 0) != 0) continue;
        matched[i] = true;
        if (p.shape.size() != 2)
          throw Error(cat("'", o.muon_params[i], "' matches '", p.name, "' of shape ",
                          shape_text(p.shape), ", but Muon updates 2-D matrices only"),
                      {.key = cat("optimizer.params.muon_params[", i, "]")});
        mine = true;
      }
      if (mine) out.push_back(p.name);
    }
  for (std::size_t i = 0; i < matched.size(); ++i)
    if (!matched[i])
      throw Error(cat("'", o.muon_params[i], "' matches no parameter"),
                  {.key = cat("optimizer.params.muon_params[", i, "]")});
  return out;
}

void add_muon_load(const Layout& layout, int u, MuonLoad& load) {
  const UnitLayout& U = layout.units[static_cast<std::size_t>(u)];
  const auto params = std::span(layout.params)
                          .subspan(static_cast<std::size_t>(U.first_param),
                                   static_cast<std::size_t>(U.param_count));
  if (std::ranges::none_of(params, [](const ParamLayout& p) { return p.owner >= 0; })) return;
  // In registration order, as make_layout placed them before balancing: the same shards in the
  // same order, whichever ranks `layout` gave them.
  std::vector<PlacedParam> placed;
  for (const ParamLayout& p : params)
    placed.push_back({p.offset, p.numel, p.owner >= 0 ? whole_param_cost(p.shape) : 0.0});
  const UnitShards shards = unit_shards(placed, U.shard_numel);
  const std::vector<int> rank_of = place_shards(shards, layout.options.shard_ranks, load.flops);
  for (const ParamLayout& p : params) {
    if (p.owner < 0) continue;
    const auto k = std::ranges::find(shards.shards, p.offset / U.shard_numel, &ShardCost::shard);
    load.elements[rank_of[static_cast<std::size_t>(k - shards.shards.begin())]] += p.numel;
  }
}

std::pair<double, double> newton_schulz_load(const std::map<int, double>& by_owner, int ranks,
                                             bool replicated) {
  double total = 0, most = 0;
  for (const auto& [owner, f] : by_owner) total += f, most = std::max(most, f);
  if (replicated) return {total, total};
  return {most, total / static_cast<double>(std::max(1, ranks))};
}

namespace {

// Muon on the whole matrices of this rank's regions, AdamW (kernels/adamw_math.hpp) on the
// rest. Its slots are the update_segments by param with each Muon matrix cut out of its
// segment: a slot is either one whole matrix (matrix_[k] its param; its momentum in m, no v) or
// AdamW elements of one group (the padding around a matrix is AdamW's: zeros that stay zero),
// whose v starts at v_at_[k] in the unit's part of v (zero/muon_state.hpp).
class MuonOptimizer final : public Optimizer {
 public:
  MuonOptimizer(EngineContext& ctx, const std::vector<int>& groups, const SecondMomentIndex& v)
      : ctx_(ctx) {
    const Layout& layout = ctx.layout;
    const bool sharded = ctx.policy.shard_optimizer;
    const int rank = ctx.groups.shard_rank;
    std::vector<int> self(layout.params.size());
    for (std::size_t p = 0; p < self.size(); ++p) self[p] = static_cast<int>(p);
    for (const UpdateSegment& s : update_segments(layout, self, sharded, rank)) {
      const int q = s.group;  // by param: the param whose segment it is, -1 padding only
      const int group = q < 0 ? -1 : groups[static_cast<std::size_t>(q)];
      const ParamLayout* pl = q < 0 ? nullptr : &layout.params[static_cast<std::size_t>(q)];
      if (!pl || pl->owner < 0) {
        add(s.unit, s.begin, s.count, group, -1);
        continue;
      }
      const UnitLayout& U = layout.units[static_cast<std::size_t>(s.unit)];
      const std::int64_t at = pl->offset - (sharded ? U.shard_range(rank).begin : 0);
      if (sharded && (at < s.begin || at + pl->numel > s.begin + s.count))
        throw Error(cat("Muon: param '", pl->name, "' is not whole in rank ", rank,
                        "'s shard (the layout was made without its ownership)"));
      add(s.unit, s.begin, at - s.begin, group, -1);
      add(s.unit, at, pl->numel, group, q);
      add(s.unit, at + pl->numel, s.begin + s.count - at - pl->numel, group, -1);
    }
    for (std::size_t k = 0; k < slots_.size(); ++k)
      v_at_.push_back(matrix_[k] < 0 ? v.in_unit(slots_[k].unit, slots_[k].begin) : -1);
    first_.assign(layout.units.size() + 1, 0);
    for (const UpdateSegment& s : slots_) ++first_[static_cast<std::size_t>(s.unit) + 1];
    for (std::size_t u = 1; u < first_.size(); ++u) first_[u] += first_[u - 1];
  }

  const std::vector<UpdateSegment>& slots() const override { return slots_; }

  void begin_step(const StepScalars& s, const std::function<RegionUpdate(int)>&) override {
    const Config& c = ctx_.config;
    const OptimizerConfig& o = c.optimizer;
    kernels::AdamHyper h;
    h.beta1 = o.beta1;
    h.beta2 = o.beta2;
    h.eps = o.eps;
    h.mode = kernels::AdamMode::adamw;
    h.bias_correction = o.bias_correction;
    // Muon's lr follows the schedule as the base lr does: muon_lr x (scheduled lr / lr).
    const double muon_lr = o.lr > 0 ? o.muon_lr * (s.lr / o.lr) : o.muon_lr;
    adam_.clear();
    muon_.clear();
    for (int g = -1; g < static_cast<int>(c.param_groups.size()); ++g) {
      const double scale = g < 0 ? 1.0 : c.param_groups[static_cast<std::size_t>(g)].lr_scale;
      const double wd =
          g < 0 ? o.weight_decay
                : c.param_groups[static_cast<std::size_t>(g)].weight_decay.value_or(o.weight_decay);
      kernels::AdamHyper hg = h;
      hg.weight_decay = wd;
      adam_.push_back(kernels::make_adam_step(hg, s.lr * scale, s.step, s.grad_scale));
      muon_.push_back(
          {o.momentum, o.nesterov, wd,
           o.match_rms_adamw ? kernels::MuonScale::match_rms_adamw : kernels::MuonScale::original});
      muon_lr_.resize(muon_.size());
      muon_lr_.back() = muon_lr * scale;
    }
    grad_scale_ = s.grad_scale;
  }

  void update(const RegionUpdate& r) override {
    const Layout& layout = ctx_.layout;
    // Sized by the unit's largest matrix on every rank, owner or not, so that every rank's
    // peak is the same and the planner's (one rank's) holds for all.
    const UnitLayout& U = layout.units[static_cast<std::size_t>(r.unit)];
    std::int64_t scratch_floats = 0;
    for (int q = U.first_param; q < U.first_param + U.param_count; ++q) {
      const ParamLayout& pl = layout.params[static_cast<std::size_t>(q)];
      if (pl.owner >= 0)
        scratch_floats =
            std::max(scratch_floats, kernels::muon_scratch_floats(pl.shape[0], pl.shape[1]));
    }
    Allocation scratch;
    if (scratch_floats > 0)  // where the state is, next to what it is made from
      scratch = ctx_.ledger.allocate_unset(
          Category::step_scratch, static_cast<std::size_t>(bytes(scratch_floats, DType::f32)),
          ctx_.state_mem());
    for (std::size_t k = first(r.unit); k < last(r.unit); ++k) {
      const UpdateSegment& sg = slots_[k];
      const auto gi = static_cast<std::size_t>(sg.group + 1);
      void* out = static_cast<char*>(r.out.data) + bytes(sg.begin, r.out.dtype);
      if (matrix_[k] < 0) {
        ctx_.state_backend().adamw(r.p + sg.begin, r.m + sg.begin, r.v + v_at_[k], r.g + sg.begin,
                                   sg.count, adam_[gi], out, r.out.dtype, static_cast<int>(k));
        continue;
      }
      const ParamLayout& pl = layout.params[static_cast<std::size_t>(matrix_[k])];
      const kernels::MuonStep st =
          kernels::make_muon_step(muon_[gi], muon_lr_[gi], pl.shape[0], pl.shape[1], grad_scale_);
      ctx_.state_backend().muon(r.p + sg.begin, r.m + sg.begin, r.g + sg.begin, pl.shape[0],
                                pl.shape[1], st, scratch.as<float>().data(), out, r.out.dtype,
                                static_cast<int>(k));
    }
  }

 private:
  void add(int unit, std::int64_t begin, std::int64_t count, int group, int matrix) {
    if (count <= 0) return;
    slots_.push_back({unit, begin, count, group});
    matrix_.push_back(matrix);
  }
  std::size_t first(int u) const { return first_[static_cast<std::size_t>(u)]; }
  std::size_t last(int u) const { return first_[static_cast<std::size_t>(u) + 1]; }

  EngineContext& ctx_;
  std::vector<UpdateSegment> slots_;
  std::vector<int> matrix_;  // per slot: the Muon matrix's param, or -1 (AdamW)
  std::vector<std::int64_t> v_at_;  // per AdamW slot: its v in the unit's part of v
  std::vector<std::size_t> first_;
  std::vector<kernels::AdamStep> adam_;  // [0]: the optimizer's own, [g + 1]: group g
  std::vector<kernels::MuonHyper> muon_;
  std::vector<double> muon_lr_;
  float grad_scale_ = 1.0f;
};

}  // namespace

std::unique_ptr<Optimizer> make_muon_optimizer(EngineContext& ctx, const std::vector<int>& groups,
                                               const SecondMomentIndex& v) {
  return std::make_unique<MuonOptimizer>(ctx, groups, v);
}

}  // namespace zero
