// The optimizers behind zero/optimizer.hpp: Adam/AdamW, Lion, LAMB (docs/optimizers.md).
#include "zero/optimizer.hpp"

#include <cstring>

#include "zero/backend.hpp"
#include "zero/muon.hpp"

namespace zero {

int state_buffers(OptimizerType t) {
  return t == OptimizerType::lion ? 1 : 2;  // Muon: m for all, v for AdamW's elements only
}

const char* state_buffer_name(int i) {
  return i == 0 ? "exp_avg" : "exp_avg_sq";
}

namespace {

// What every optimizer keeps: the slots, and per unit the first of them.
class SlotsBase : public Optimizer {
 public:
  SlotsBase(EngineContext& ctx, const std::vector<int>& groups, std::vector<UpdateSegment> slots)
      : ctx_(ctx), groups_of_params_(groups), slots_(std::move(slots)) {
    first_.assign(ctx.layout.units.size() + 1, 0);
    for (const UpdateSegment& s : slots_) ++first_[static_cast<std::size_t>(s.unit) + 1];
    for (std::size_t u = 1; u < first_.size(); ++u) first_[u] += first_[u - 1];
  }
  const std::vector<UpdateSegment>& slots() const override { return slots_; }

 protected:
  // The slots of unit u: [first, last).
  std::size_t first(int u) const { return first_[static_cast<std::size_t>(u)]; }
  std::size_t last(int u) const { return first_[static_cast<std::size_t>(u) + 1]; }
  // Group g's settings: its lr and weight decay ([0]: the optimizer's own, [g + 1]: group g).
  template <class Step, class Make>
  std::vector<Step> per_group(const StepScalars& s, Make make) const {
    const Config& c = ctx_.config;
    std::vector<Step> steps;
    steps.push_back(make(s.lr, c.optimizer.weight_decay));
    for (const ParamGroup& g : c.param_groups)
      steps.push_back(make(s.lr * g.lr_scale, g.weight_decay.value_or(c.optimizer.weight_decay)));
    return steps;
  }
  static void* at(const Slice& out, std::int64_t begin) {
    return static_cast<char*>(out.data) + bytes(begin, out.dtype);
  }

  EngineContext& ctx_;
  std::vector<int> groups_of_params_;
  std::vector<UpdateSegment> slots_;
  std::vector<std::size_t> first_;
};

// Adam/AdamW (kernels/adamw_math.hpp): one fused pass per segment of one group.
class AdamOptimizer final : public SlotsBase {
 public:
  using SlotsBase::SlotsBase;
  void begin_step(const StepScalars& s, const std::function<RegionUpdate(int)>&) override {
    const OptimizerConfig& o = ctx_.config.optimizer;
    kernels::AdamHyper h;
    h.beta1 = o.beta1;
    h.beta2 = o.beta2;
    h.eps = o.eps;
    h.mode = o.type == OptimizerType::adamw ? kernels::AdamMode::adamw : kernels::AdamMode::adam_l2;
    h.bias_correction = o.bias_correction;
    steps_ = per_group<kernels::AdamStep>(s, [&](double lr, double wd) {
      kernels::AdamHyper hg = h;
      hg.weight_decay = wd;
      return kernels::make_adam_step(hg, lr, s.step, s.grad_scale);
    });
  }
  void update(const RegionUpdate& r) override {
    for (std::size_t k = first(r.unit); k < last(r.unit); ++k) {
      const UpdateSegment& sg = slots_[k];
      ctx_.state_backend().adamw(r.p + sg.begin, r.m + sg.begin, r.v + sg.begin, r.g + sg.begin, sg.count,
                          steps_[static_cast<std::size_t>(sg.group + 1)], at(r.out, sg.begin),
                          r.out.dtype, static_cast<int>(k));
    }
  }

 private:
  std::vector<kernels::AdamStep> steps_;
};

// Lion (kernels/lion_math.hpp): element-wise, one momentum.
class LionOptimizer final : public SlotsBase {
 public:
  using SlotsBase::SlotsBase;
  void begin_step(const StepScalars& s, const std::function<RegionUpdate(int)>&) override {
    const OptimizerConfig& o = ctx_.config.optimizer;
    steps_ = per_group<kernels::LionStep>(s, [&](double lr, double wd) {
      return kernels::make_lion_step({o.beta1, o.beta2, wd}, lr, s.grad_scale);
    });
  }
  void update(const RegionUpdate& r) override {
    for (std::size_t k = first(r.unit); k < last(r.unit); ++k) {
      const UpdateSegment& sg = slots_[k];
      ctx_.state_backend().lion(r.p + sg.begin, r.m + sg.begin, r.g + sg.begin, sg.count,
                         steps_[static_cast<std::size_t>(sg.group + 1)], at(r.out, sg.begin),
                         r.out.dtype, static_cast<int>(k));
    }
  }

 private:
  std::vector<kernels::LionStep> steps_;
};

// LAMB (kernels/lamb_math.hpp). Its slots are cut at every parameter boundary (one trust ratio
// each); `params_[k]` is slot k's parameter (-1: padding only).
//
// The trust ratio of a parameter needs the squared norms of its weights and of its direction
// over all of its elements, which ZeRO spreads over the ranks. Each rank takes the norms of its
// pieces (the fixed-order tree of kernels/norm_order.hpp, in double), the ranks all-gather them
// (2 doubles per parameter: one small collective, like the global norm's) and every rank sums
// them in rank order. Stage 0 holds every element on every rank and takes the same norms over the
// same pieces (each rank's shard range), so its sums are bitwise those of stages 1-3 at the same
// rank count. A different rank count cuts the pieces elsewhere: the double sums may differ in
// their last bits, and the float trust ratio then by at most one ulp (docs/optimizers.md).
class LambOptimizer final : public SlotsBase {
 public:
  LambOptimizer(EngineContext& ctx, const std::vector<int>& groups,
                std::vector<UpdateSegment> by_param)
      : SlotsBase(ctx, groups, std::move(by_param)) {
    for (UpdateSegment& s : slots_) {
      params_.push_back(s.group);  // by_param's groups are param indices
      s.group = s.group < 0 ? -1 : groups[static_cast<std::size_t>(s.group)];
    }
    const Layout& layout = ctx.layout;
    const bool sharded = ctx.policy.shard_optimizer;
    for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) {
      const UnitLayout& U = layout.units[static_cast<std::size_t>(u)];
      for (int r = 0; r < ctx.groups.shard_ranks; ++r) {
        if (sharded && r != ctx.groups.shard_rank) continue;
        const std::int64_t base = sharded ? 0 : U.shard_range(r).begin;
        for (const ShardPiece& piece : layout.shard_pieces(u, r))
          norm_pieces_.push_back({u, base + piece.shard_offset, piece.count, piece.param});
      }
    }
  }

  void begin_step(const StepScalars& s, const std::function<RegionUpdate(int)>& region) override {
    const OptimizerConfig& o = ctx_.config.optimizer;
    steps_ = per_group<kernels::LambStep>(s, [&](double lr, double wd) {
      kernels::LambHyper h{o.beta1, o.beta2, o.eps, wd, o.bias_correction, o.max_coeff,
                           o.min_coeff};
      return kernels::make_lamb_step(h, lr, s.step, s.grad_scale);
    });
    const std::vector<double> sums = agreed_sums(local_norms(region));
    rates_.assign(slots_.size(), 0.0f);
    for (std::size_t k = 0; k < slots_.size(); ++k) {
      const int q = params_[k];
      if (q < 0) continue;  // padding: its direction is 0, nothing moves
      const kernels::LambStep& st = steps_[static_cast<std::size_t>(slots_[k].group + 1)];
      const float trust = kernels::lamb_trust(sums[2 * q], sums[2 * q + 1], st);
      rates_[k] = st.step_size * trust;
    }
  }

  void update(const RegionUpdate& r) override {
    for (std::size_t k = first(r.unit); k < last(r.unit); ++k) {
      const UpdateSegment& sg = slots_[k];
      ctx_.state_backend().lamb_apply(r.p + sg.begin, r.m + sg.begin, r.v + sg.begin, r.g + sg.begin,
                               sg.count, rates_[k], steps_[static_cast<std::size_t>(sg.group + 1)],
                               at(r.out, sg.begin), r.out.dtype, static_cast<int>(k));
    }
  }

 private:
  struct NormPiece {
    int unit = 0;
    std::int64_t begin = 0, count = 0;  // within the unit's region
    int param = 0;
  };

  // This rank's squared norms of each param's weights and direction ([2q], [2q + 1]), its pieces
  // summed in rank order (stage 0: every rank's pieces; stages 1-3: its own, one per param).
  std::vector<double> local_norms(const std::function<RegionUpdate(int)>& region) {
    const Layout& layout = ctx_.layout;
    std::int64_t most = 0;
    for (int u = 0; u < static_cast<int>(layout.units.size()); ++u)
      most = std::max(most, ctx_.state_count(u));
    // Where the state is (the host with optimizer offload), next to the state it is made from.
    Allocation scratch = ctx_.ledger.allocate(
        Category::step_scratch, static_cast<std::size_t>(bytes(most, DType::f32)), ctx_.state_mem());
    float* dir = scratch.as<float>().data();
    int slot = 0;
    std::size_t next = 0;  // norm pieces are in unit order
    for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) {
      const RegionUpdate r = region(u);
      for (std::size_t k = first(u); k < last(u); ++k) {
        const UpdateSegment& sg = slots_[k];
        ctx_.state_backend().lamb_direction(r.p + sg.begin, r.m + sg.begin, r.v + sg.begin,
                                     r.g + sg.begin, sg.count,
                                     steps_[static_cast<std::size_t>(sg.group + 1)],
                                     dir + sg.begin);
      }
      for (; next < norm_pieces_.size() && norm_pieces_[next].unit == u; ++next) {
        const NormPiece& np = norm_pieces_[next];
        ctx_.state_backend().squared_norm(r.p + np.begin, np.count, slot++);
        ctx_.state_backend().squared_norm(dir + np.begin, np.count, slot++);
      }
    }
    const std::vector<double> norms = ctx_.state_backend().fetch_norms(slot);
    std::vector<double> sums(2 * layout.params.size(), 0.0);
    for (std::size_t i = 0; i < norm_pieces_.size(); ++i) {
      const auto q = static_cast<std::size_t>(norm_pieces_[i].param);
      sums[2 * q] += norms[2 * i];
      sums[2 * q + 1] += norms[2 * i + 1];
    }
    return sums;
  }

  // Every rank's sums added in rank order (the first shard group covers each element once; the
  // other groups hold replicas). Replicated state (stage 0) needs no exchange: every rank
  // computed the same sums from the same elements.
  std::vector<double> agreed_sums(const std::vector<double>& mine) {
    if (!ctx_.policy.shard_optimizer) return mine;
    const std::size_t n = mine.size();
    const int ranks = ctx_.agreeing_ranks();
    std::vector<std::int64_t> in(n), all(n * static_cast<std::size_t>(ranks));
    std::memcpy(in.data(), mine.data(), n * sizeof(double));
    ctx_.all_gather_host(in.data(), all.data(), n, DType::i64);
    std::vector<double> sums(n, 0.0);
    for (int r = 0; r < std::min(ranks, ctx_.groups.shard_ranks); ++r)
      for (std::size_t i = 0; i < n; ++i) {
        double x = 0;
        std::memcpy(&x, &all[static_cast<std::size_t>(r) * n + i], sizeof(double));
        sums[i] += x;
      }
    return sums;
  }

  std::vector<int> params_;
  std::vector<NormPiece> norm_pieces_;
  std::vector<kernels::LambStep> steps_;
  std::vector<float> rates_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(EngineContext& ctx, const std::vector<int>& groups,
                                          std::vector<UpdateSegment> segments,
                                          const SecondMomentIndex& v) {
  switch (ctx.config.optimizer.type) {
    case OptimizerType::lion:
      return std::make_unique<LionOptimizer>(ctx, groups, std::move(segments));
    case OptimizerType::muon:
      return make_muon_optimizer(ctx, groups, v);
    case OptimizerType::lamb: {
      std::vector<int> self(ctx.layout.params.size());
      for (std::size_t p = 0; p < self.size(); ++p) self[p] = static_cast<int>(p);
      return std::make_unique<LambOptimizer>(
          ctx, groups,
          update_segments(ctx.layout, self, ctx.policy.shard_optimizer, ctx.groups.shard_rank));
    }
    default:
      return std::make_unique<AdamOptimizer>(ctx, groups, std::move(segments));
  }
}

}  // namespace zero
