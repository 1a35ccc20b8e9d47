// OptimizerStep (zero/optimizer_step.hpp): the parts of Engine::step() in the order they run.
#include "zero/optimizer_step.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "base/fnv.hpp"
#include "zero/lr_schedule.hpp"
#include "zero/offload.hpp"

namespace zero {

// The fp32 gradient of unit u's optimizer region: the accumulator, the reduced buffer itself
// when it is fp32 already, or else a conversion into one unit-sized scratch (done again in the
// update pass: converting twice costs far less than an fp32 copy of every gradient at once).
// With optimizer offload: the fp32 shard the reducer brought to the host.
class OptimizerStep::GradF32 {
 public:
  GradF32(EngineContext& ctx, GradReducer& reducer)
      : ctx_(ctx), reducer_(reducer), dtype_(reducer.reduced_data_dtype()) {
    if (ctx.settings.accumulation == 1 && dtype_ != DType::f32 && !ctx.settings.offload) {
      std::int64_t most = 0;
      for (int u = 0; u < static_cast<int>(ctx.layout.units.size()); ++u)
        most = std::max(most, ctx.state_count(u));
      scratch_ = ctx.alloc(Category::step_scratch, bytes(most, DType::f32));
    }
  }
  const float* operator()(int u) {
    const std::int64_t off = ctx_.reduced_offset(u), n = ctx_.state_count(u);
    if (ctx_.settings.offload) {
      reducer_.offloaded_unit(u);  // waits for this unit's copy only
      return reducer_.offloaded().as<float>().data() + off;
    }
    if (ctx_.settings.accumulation > 1) return reducer_.accumulator().as<float>().data() + off;
    const void* src = reducer_.reduced_data(off, n);
    if (dtype_ == DType::f32) return static_cast<const float*>(src);
    ctx_.backend->load_to_f32(scratch_.as<float>().data(), src, dtype_, n);
    return scratch_.as<float>().data();
  }

 private:
  EngineContext& ctx_;
  GradReducer& reducer_;
  DType dtype_;
  Allocation scratch_;
};

OptimizerStep::OptimizerStep(EngineContext& ctx, ModelStates& states, ParamGatherer& gatherer,
                             GradReducer& reducer)
    : ctx_(ctx), states_(states), gatherer_(gatherer), reducer_(reducer) {
  const Config& config = ctx.config;
  const std::vector<int> groups = param_groups_of(ctx.layout, config.param_groups);
  optimizer_ = make_optimizer(
      ctx, groups,
      update_segments(ctx.layout, groups, ctx.policy.shard_optimizer, ctx.groups.shard_rank),
      states.second_moment);
  if (config.precision == Precision::fp16) {
    LossScalerConfig sc;
    sc.loss_scale = static_cast<float>(config.fp16.loss_scale);
    sc.initial_scale_power = config.fp16.initial_scale_power;
    sc.loss_scale_window = static_cast<int>(config.fp16.loss_scale_window);
    sc.hysteresis = config.fp16.hysteresis;
    sc.consecutive_hysteresis = config.fp16.consecutive_hysteresis;
    sc.min_loss_scale = static_cast<float>(config.fp16.min_loss_scale);
    scaler_.emplace(sc);
  }
}

StepReport OptimizerStep::run(std::optional<double> loss) {
  // optimizer_seconds: the whole call less the waits inside it (on every way out of it).
  struct OptimizerClock {
    EngineStats& st;
    const double waited_before = st.wait_seconds;
    ScopeTimer total{st.optimizer_seconds};
    ~OptimizerClock() { st.optimizer_seconds -= st.wait_seconds - waited_before; }
  } const clock{ctx_.stats};

  drain();
  GradF32 grads(ctx_, reducer_);
  const std::vector<RankSummary> all = agree(summarize(grads, loss));
  double squared = 0;
  StepReport rep = report(all, squared);
  const std::int64_t step_no = ctx_.stats.applied_steps + ctx_.stats.skipped_steps + 1;
  if (skip(rep, squared, step_no)) return rep;
  ctx_.stats.consecutive_skipped_steps = 0;
  update(grads, scalars(rep));
  check_update_finite(step_no);
  ++ctx_.stats.applied_steps;
  rep.step = ctx_.stats.applied_steps;
  end_step();
  return rep;
}

// 1. Every reduction done; no stage-3 prefetch left in flight past the step (and hpZ's copies,
//    stale once the params change, dropped). A bucket still waiting for some of its units was
//    never issued (on any rank that made the same calls): it is dropped, and the reduction count
//    check names the unit.
void OptimizerStep::drain() {
  reducer_.finish_all();
  reducer_.drop_unissued_buckets();
  gatherer_.release_all();
}

// 2. This rank's part of the norm, computed over its own shard of each unit in unit order (the
//    same elements and the same order on every stage, so the norm is bitwise the same on every
//    stage), the digest of its reduce_grads calls, and its loss.
RankSummary OptimizerStep::summarize(GradF32& grads, std::optional<double> loss) {
  const auto nu = static_cast<int>(ctx_.layout.units.size());
  RankSummary mine;
  for (int u = 0; u < nu; ++u) {
    const auto& U = ctx_.layout.units[u];
    const float* own =
        grads(u) + (ctx_.policy.gather_grads ? U.shard_range(ctx_.groups.shard_rank).begin : 0);
    ctx_.state_backend().squared_norm(own, U.shard_numel, u);
  }
  for (double n : ctx_.state_backend().fetch_norms(nu)) mine.squared_norm += n;  // unit order
  Fnv1a order;
  for (int u : reducer_.reduce_log()) order.add(static_cast<std::uint64_t>(u), 4);
  mine.order = order.value;
  mine.loss = loss.value_or(0.0);
  mine.has_loss = loss.has_value();
  return mine;
}

std::vector<RankSummary> OptimizerStep::agree(const RankSummary& mine) {
  std::vector<RankSummary> all(static_cast<std::size_t>(ctx_.agreeing_ranks()));
  ctx_.all_gather_host(&mine, all.data(), 4, DType::i64);
  check_same_calls(all);
  return all;
}

// 3. The ranks must have reduced the same units in the same order. On a mismatch every rank
//    sees it (the digests are on every rank), so all of them take part in naming the unit.
void OptimizerStep::check_same_calls(const std::vector<RankSummary>& all) {
  const auto nu = static_cast<int>(ctx_.layout.units.size());
  const int n = ctx_.agreeing_ranks();
  bool same_order = true;
  for (const auto& a : all) same_order &= a.order == all[0].order;
  if (!same_order) {
    std::vector<std::int32_t> mine_counts, counts(static_cast<std::size_t>(nu) * n);
    for (int u = 0; u < nu; ++u) mine_counts.push_back(reducer_.reductions(u));
    ctx_.all_gather_host(mine_counts.data(), counts.data(), static_cast<std::size_t>(nu), DType::i32);
    std::ostringstream m;
    m << "ranks called reduce_grads differently since the last step";
    bool named = false;
    for (int u = 0; u < nu && !named; ++u)
      for (int r = 1; r < n && !named; ++r)
        if (counts[r * nu + u] != counts[u]) {
          m << ": unit " << u << " ('" << ctx_.layout.units[u].name << "') was reduced "
            << counts[u] << " times on rank 0 but " << counts[r * nu + u] << " times on rank " << r;
          named = true;
        }
    if (!named) m << ": the same units, in a different order";
    m << ". Every rank must reduce every unit, in the same order.";
    throw Error(m.str(), {.rank = ctx_.rank});
  }
  const std::int64_t accumulation = ctx_.settings.accumulation;
  for (int u = 0; u < nu; ++u)
    if (reducer_.reductions(u) != accumulation)
      throw Error(cat("reduced ", reducer_.reductions(u), " times since the last step, expected ",
                      accumulation, " (gradient_accumulation_steps) before step()"),
                  {.rank = ctx_.rank, .unit = u});
  for (int r = 1; r < n; ++r)
    if (all[r].has_loss != all[0].has_loss)
      throw Error(
          cat("step(loss): rank ", all[0].has_loss ? 0 : r, " passed a loss and rank ",
              all[0].has_loss ? r : 0,
              " did not; pass it on every rank (StepReport::loss is their mean) or on none"),
          {.rank = ctx_.rank});
}

double OptimizerStep::mean_factor() const {
  return ctx_.options.reduction == GradReduction::mean
             ? 1.0 / (static_cast<double>(ctx_.ranks) * static_cast<double>(ctx_.settings.accumulation))
             : 1.0;
}

// The agreed loss and norm. `squared`: the global squared norm, as summed.
StepReport OptimizerStep::report(const std::vector<RankSummary>& all, double& squared) const {
  StepReport rep;
  if (all[0].has_loss) {
    double sum = 0;
    for (const RankSummary& a : all) sum += a.loss;  // rank order
    rep.loss = sum / ctx_.agreeing_ranks();
  }
  squared = 0;
  // Rank order, on every rank; the first shard group's ranks cover every element once (the
  // other groups hold the same reduced values: hierarchical sharding replicates them).
  for (int r = 0; r < std::min(ctx_.agreeing_ranks(), ctx_.groups.shard_ranks); ++r)
    squared += all[r].squared_norm;
  const bool finite = std::isfinite(squared);
  rep.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  rep.grad_norm = finite ? std::sqrt(squared) * (1.0 / rep.loss_scale) * mean_factor() : squared;
  return rep;
}

// 4. Overflow: skip, and say so (DeepSpeed's rules for fp16; any precision skips a NaN/inf).
//    At the minimum loss scale with hysteresis spent, the scaler throws (DeepSpeed's
//    raise_error_at_min_scale); finite is agreed, so it throws on every rank.
bool OptimizerStep::skip(StepReport& rep, double squared, std::int64_t step_no) {
  const bool finite = std::isfinite(squared);
  if (scaler_) {
    StepDecision d = scaler_->update(!finite);
    if (d.skip) {
      rep.skipped = true;
      rep.skip_reason = d.reason;
    }
  } else if (!finite) {
    rep.skipped = true;
    rep.skip_reason = "non-finite gradient (norm " + std::to_string(squared) + "): step skipped";
  }
  if (!rep.skipped) return false;
  ++ctx_.stats.skipped_steps;
  rep.step = ctx_.stats.applied_steps;
  // A gradient that is non-finite at every step would skip forever: stop after K skips in a
  // row. With dynamic fp16 scaling a skip above min_loss_scale is the scaler finding its range
  // (from 2^16 down, hysteresis first), so it does not count and the run starts again from 0;
  // skips at the minimum scale count, and the scaler stops the run itself once it cannot
  // lower the scale further (above). bf16, fp32 and a static fp16 scale count every skip.
  const bool finding_range =
      scaler_ && scaler_->dynamic() && rep.loss_scale > scaler_->config().min_loss_scale;
  auto& run = ctx_.stats.consecutive_skipped_steps;
  run = finding_range ? 0 : run + 1;
  ctx_.log(cat("step ", step_no, ": skipped: ", rep.skip_reason));
  end_step();
  const std::int64_t k = ctx_.config.max_consecutive_skipped_steps;
  if (k > 0 && run >= k)
    throw Error(cat("step ", step_no, ": ", run, " steps in a row were skipped (",
                    "max_consecutive_skipped_steps is ", k, "), the last for: ", rep.skip_reason,
                    "; the gradient never became finite: check the data, the loss and the "
                    "learning rate, or raise max_consecutive_skipped_steps"),
                {.rank = ctx_.rank});
  return true;
}

// 5. Clip by the global norm (DeepSpeed: coefficient = max_norm / (norm + 1e-6) when below 1),
//    and the step's scalars, from which the optimizer makes its own for each parameter group.
StepScalars OptimizerStep::scalars(StepReport& rep) const {
  const Config& config = ctx_.config;
  if (config.gradient_clipping > 0) {
    const double c = config.gradient_clipping / (rep.grad_norm + 1e-6);
    if (c < 1) rep.clip_coefficient = c;
  }
  const std::int64_t applied = ctx_.stats.applied_steps;
  rep.lr = lr_at(config.scheduler, config.optimizer.lr, applied);
  StepScalars sc;
  sc.lr = rep.lr;
  sc.step = applied + 1;
  sc.grad_scale =
      static_cast<float>((1.0 / rep.loss_scale) * mean_factor() * rep.clip_coefficient);
  return sc;
}

// Unit u's region of the state, its gradient g and where its new working params go.
RegionUpdate OptimizerStep::region(int u, const float* g, const Slice& out) const {
  const std::int64_t off = ctx_.state_offset(u);
  RegionUpdate r;
  r.unit = u;
  r.p = states_.master.as<float>().data() + off;
  r.m = states_.exp_avg.as<float>().data() + off;
  r.v = !states_.exp_avg_sq.empty()
            ? states_.exp_avg_sq.as<float>().data() + states_.second_moment.unit_offset(u)
            : nullptr;
  r.g = g;
  r.out = out;
  return r;
}

// The optimizer on unit u's region. The one seam every optimizer goes through: it runs on the
// state's backend (the device's kernels, or the CPU's with optimizer offload, zero/offload.hpp),
// and the new params reach `out_params` from there.
void OptimizerStep::update_unit(int u, const float* g, const Slice& out_params) {
  ParamsOut& moved = uploads_.open(out_params);
  optimizer_->update(region(u, g, moved.target()));
  uploads_.started();  // on its way while the next unit is updated
}

// 6. The optimizer on each unit's region; the new working params go straight where they live
//    (stage 0: the full buffer; stage 3: the shard) or through an all-gather (stages 1-2).
void OptimizerStep::update(GradF32& grads, const StepScalars& sc) {
  optimizer_->begin_step(sc, [&](int u) { return region(u, grads(u), Slice{}); });
  const auto nu = static_cast<int>(ctx_.layout.units.size());
  const DType wd = ctx_.work_dtype();
  std::size_t next_run = 0;  // the gatherer's after-step runs, in unit order
  for (int u = 0; u < nu; ++u) {
    const auto& U = ctx_.layout.units[u];
    if (ctx_.policy.after_step == ParamsAfterStep::update_full) {
      update_unit(u, grads(u), slice(states_.full_params(), wd, U.offset, U.padded_numel));
    } else if (!gatherer_.gathers_params(u)) {
      update_unit(u, grads(u), slice(states_.shard_params(), wd, U.shard_offset, U.shard_numel));
    } else {
      const ParamGatherer::Run run = gatherer_.after_step_runs()[next_run++];
      update_run(grads, run);
      u = run.last;
    }
  }
  uploads_.finish_all();
}

// A run of units whose new shards are staged side by side (this rank's shards of the run are
// contiguous in shard order) and all-gathered as one collective.
void OptimizerStep::update_run(GradF32& grads, const ParamGatherer::Run& run) {
  const DType wd = ctx_.work_dtype();
  const auto& F = ctx_.layout.units[run.first];
  const auto& L = ctx_.layout.units[run.last];
  const std::int64_t base = F.shard_offset;
  const std::int64_t n = L.shard_offset + L.shard_numel - base;
  // One unit: its new shard, all-gathered straight into the unit. Several: written where this
  // rank's block of the packed all-gather output lies, gathered in place.
  const bool one = run.first == run.last;
  Allocation staged = ctx_.bucket_buffer(bytes(one ? n : ctx_.groups.shard_ranks * n, wd), false);
  const std::int64_t mine = one ? 0 : ctx_.groups.shard_rank * n;
  for (int v = run.first; v <= run.last; ++v) {
    const auto& V = ctx_.layout.units[v];
    update_unit(v, grads(v), slice(staged, wd, mine + V.shard_offset - base, V.shard_numel));
  }
  uploads_.finish_all();
  gatherer_.all_gather_run(run, staged);
  ctx_.spares.keep(std::move(staged));
}

// 7. No non-finite value entered the master weights or the moments: where an update would have
//    made one, the kernel kept the element's old values and noted it (adam_element_guarded).
//    Sharded state: one all-gather of two integers a rank (the first such element: unit, offset
//    in the unit) tells every rank, so all throw the same error together and none is left in a
//    collective. Replicated state (stage 0): every rank has just applied the same update (the
//    same all-reduced gradient, norm and scale) to the same weights and moments, so its own first
//    such element is every rank's and each throws the same error with no exchange. That exchange
//    was a synchronisation point of its own after the optimizer: without it the 8 x 1024 MLP's
//    step on 4 ranks is 9% faster idle and 8% under load (docs/benchmarks.md). What the skip
//    rests on, equal replicas, init_params checks.
void OptimizerStep::check_update_finite(std::int64_t step_no) {
  const Layout& layout = ctx_.layout;
  const bool sharded = ctx_.policy.shard_optimizer;
  const std::vector<UpdateSegment>& slots = optimizer_->slots();
  const auto segments = static_cast<int>(slots.size());
  const std::vector<std::int64_t> first = ctx_.state_backend().fetch_nonfinite(segments);
  std::int64_t mine[2] = {-1, -1};
  for (int k = 0; k < segments && mine[0] < 0; ++k) {  // segments are in (unit, offset) order
    if (first[k] < 0) continue;
    const UpdateSegment& sg = slots[static_cast<std::size_t>(k)];
    mine[0] = sg.unit;  // the state region is the rank's shard of the unit, or the whole unit
    mine[1] = sg.begin + first[k] +
              (sharded ? layout.units[sg.unit].shard_range(ctx_.groups.shard_rank).begin : 0);
  }
  const int n = sharded ? ctx_.agreeing_ranks() : 1;
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(n));
  if (sharded)
    ctx_.all_gather_host(mine, all.data(), 2, DType::i64);
  else
    std::copy_n(mine, 2, all.data());
  int worst = -1;  // the rank with the lowest (unit, offset); replicated: all[0] is everyone's
  for (int r = 0; r < n; ++r) {
    if (all[2 * r] < 0) continue;
    if (worst < 0 || all[2 * r] < all[2 * worst] ||
        (all[2 * r] == all[2 * worst] && all[2 * r + 1] < all[2 * worst + 1]))
      worst = r;
  }
  if (worst < 0) return;
  const int u = static_cast<int>(all[2 * worst]);
  const std::int64_t at = all[2 * worst + 1];
  std::string what = cat("the padding of unit ", u, " '", layout.units[u].name, "'");
  for (std::size_t p = 0; p < layout.params.size(); ++p) {
    const ParamLayout& pl = layout.params[p];
    if (pl.unit == u && at >= pl.offset && at < pl.offset + pl.numel) {
      what = cat("param ", p, " '", pl.name, "' (unit ", u, " '", layout.units[u].name,
                 "') element ", at - pl.offset);
      break;
    }
  }
  reducer_.end_step();
  const Config& c = ctx_.config;
  throw Error(cat("step ", step_no,
                  ": the update would make the master weights non-finite, first at ", what,
                  sharded ? cat(" on rank ", worst)
                          : std::string(" on every rank (each holds the same replica)"),
                  ", with lr ", lr_at(c.scheduler, c.optimizer.lr, ctx_.stats.applied_steps),
                  "; nothing non-finite was stored (those elements kept their values from before "
                  "the step, the others took it): lower the learning rate and resume from the "
                  "last checkpoint"),
              {.rank = ctx_.rank});
}

void OptimizerStep::end_step() {
  reducer_.end_step();
  ctx_.spares.end_step();
}

}  // namespace zero
