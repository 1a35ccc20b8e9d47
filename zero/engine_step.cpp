// Engine::step(): wait for the reductions, agree across ranks on the call order and the global
// gradient norm, then skip (overflow) or update: clip, AdamW on each shard, cast, all-gather.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "zero/engine_impl.hpp"
#include "base/fnv.hpp"
#include "zero/lr_schedule.hpp"

namespace zero {

namespace {

// What every rank tells every other rank before a step: its part of the squared norm, the
// digest of the reduce_grads calls it made since the last step, and the loss passed to step().
// The same 32 bytes whether a loss was passed or not, so that a counting run (the planner) moves
// what a real one does.
struct RankSummary {
  double squared_norm = 0;     // over this rank's shard of every unit, unit by unit
  std::uint64_t order = 0;     // FNV-1a of the unit indices passed to reduce_grads, in order
  double loss = 0;             // step(loss)'s argument, or 0
  std::int64_t has_loss = 0;   // 1 when step() was given a loss
};
static_assert(sizeof(RankSummary) == 4 * sizeof(std::int64_t));

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
void check_update_finite(Engine::Impl& s, std::int64_t step_no) {
  const auto segments = static_cast<int>(s.update_segments.size());
  const std::vector<std::int64_t> first = s.backend->fetch_nonfinite(segments);
  std::int64_t mine[2] = {-1, -1};
  for (int k = 0; k < segments && mine[0] < 0; ++k) {  // segments are in (unit, offset) order
    if (first[k] < 0) continue;
    const UpdateSegment& sg = s.update_segments[k];
    mine[0] = sg.unit;  // the state region is the rank's shard of the unit, or the whole unit
    mine[1] = sg.begin + first[k] +
              (s.policy.shard_optimizer ? s.layout.units[sg.unit].shard_range(s.shard_rank).begin : 0);
  }
  const bool replicated = !s.policy.shard_optimizer;
  const int n = replicated ? 1 : s.agreeing_ranks();
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(n));
  if (replicated)
    std::copy_n(mine, 2, all.data());
  else
    s.all_gather_host(mine, all.data(), 2, DType::i64);
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
  std::string what = cat("the padding of unit ", u, " '", s.layout.units[u].name, "'");
  for (std::size_t p = 0; p < s.layout.params.size(); ++p) {
    const ParamLayout& pl = s.layout.params[p];
    if (pl.unit == u && at >= pl.offset && at < pl.offset + pl.numel) {
      what = cat("param ", p, " '", pl.name, "' (unit ", u, " '", s.layout.units[u].name,
                 "') element ", at - pl.offset);
      break;
    }
  }
  for (UnitRun& run : s.units) run.reductions = 0;
  s.reduce_log.clear();
  if (!s.accum.empty()) s.backend->fill_zero(s.accum.data(), s.accum.bytes());
  throw Error(cat("step ", step_no,
                  ": the update would make the master weights non-finite, first at ", what,
                  replicated ? std::string(" on every rank (each holds the same replica)")
                             : cat(" on rank ", worst),
                  ", with lr ", lr_at(s.config.scheduler, s.config.optimizer.lr, s.applied_steps),
                  "; nothing non-finite was stored (those elements kept their values from before "
                  "the step, the others took it): lower the learning rate and resume from the "
                  "last checkpoint"),
              {.rank = s.rank});
}

}  // namespace

StepReport Engine::step(std::optional<double> loss) {
  Impl& s = *impl_;
  const auto nu = static_cast<int>(s.layout.units.size());
  // optimizer_seconds: the whole call less the waits inside it (on every way out of it).
  struct OptimizerClock {
    EngineStats& st;
    const double waited_before = st.wait_seconds;
    ScopeTimer total{st.optimizer_seconds};
    ~OptimizerClock() { st.optimizer_seconds -= st.wait_seconds - waited_before; }
  } const clock{s.stats};

  // 1. Every reduction done; no stage-3 prefetch left in flight past the step.
  //    A bucket still waiting for some of its units was never issued (on any rank that made the
  //    same calls): it is dropped, and the reduction count check below names the unit.
  s.finish_all_reductions();
  s.drop_unissued_buckets();
  for (int u = 0; u < nu; ++u)
    if (s.policy.shard_params && !s.layout.units[u].persistent) s.release_unit(u);
  for (UnitRun& run : s.units) run.secondary.reset();  // hpZ: stale once the params change
  s.window = PrefetchFrontier{};

  // 2. The fp32 gradient of each unit's optimizer region, and this rank's part of the norm,
  //    computed over its own shard of each unit in unit order (the same elements and the same
  //    order on every stage, so the norm is bitwise the same on every stage).
  // The fp32 gradient of unit u's optimizer region: the accumulator, the reduced buffer itself
  // when it is fp32 already, or else a conversion into one unit-sized scratch (done again in the
  // update pass: converting twice costs far less than an fp32 copy of every gradient at once).
  const DType src_dtype = s.reduced_aliases_grads ? s.work_dtype : s.reduce_dtype;
  Allocation scratch;
  if (s.accumulation == 1 && src_dtype != DType::f32) {
    std::int64_t most = 0;
    for (int u = 0; u < nu; ++u) most = std::max(most, s.state_count(u));
    scratch = s.alloc(Category::step_scratch, bytes(most, DType::f32));
  }
  auto grad_f32 = [&](int u) -> const float* {
    const std::int64_t off = s.reduced_offset(u), n = s.state_count(u);
    if (s.accumulation > 1) return s.accum.as<float>().data() + off;
    const void* src = s.reduced_aliases_grads ? slice(s.grads_full, s.work_dtype, off, n).data
                                              : slice(s.reduced, s.reduce_dtype, off, n).data;
    if (src_dtype == DType::f32) return static_cast<const float*>(src);
    s.backend->load_to_f32(scratch.as<float>().data(), src, src_dtype, n);
    return scratch.as<float>().data();
  };
  RankSummary mine;
  for (int u = 0; u < nu; ++u) {
    const auto& U = s.layout.units[u];
    const float* own = grad_f32(u) + (s.policy.gather_grads ? U.shard_range(s.shard_rank).begin : 0);
    s.backend->squared_norm(own, U.shard_numel, u);
  }
  for (double n : s.backend->fetch_norms(nu)) mine.squared_norm += n;  // unit order
  Fnv1a order;
  for (int u : s.reduce_log) order.add(static_cast<std::uint64_t>(u), 4);
  mine.order = order.value;
  mine.loss = loss.value_or(0.0);
  mine.has_loss = loss.has_value();

  std::vector<RankSummary> all(static_cast<std::size_t>(s.agreeing_ranks()));
  s.all_gather_host(&mine, all.data(), 4, DType::i64);

  // 3. The ranks must have reduced the same units in the same order. On a mismatch every rank
  //    sees it (the digests are on every rank), so all of them take part in naming the unit.
  bool same_order = true;
  for (const auto& a : all) same_order &= a.order == all[0].order;
  if (!same_order) {
    std::vector<std::int32_t> mine_counts, counts(static_cast<std::size_t>(nu) * s.agreeing_ranks());
    for (const UnitRun& run : s.units) mine_counts.push_back(run.reductions);
    s.all_gather_host(mine_counts.data(), counts.data(), static_cast<std::size_t>(nu), DType::i32);
    std::ostringstream m;
    m << "ranks called reduce_grads differently since the last step";
    bool named = false;
    for (int u = 0; u < nu && !named; ++u)
      for (int r = 1; r < s.agreeing_ranks() && !named; ++r)
        if (counts[r * nu + u] != counts[u]) {
          m << ": unit " << u << " ('" << s.layout.units[u].name << "') was reduced "
            << counts[u] << " times on rank 0 but " << counts[r * nu + u] << " times on rank " << r;
          named = true;
        }
    if (!named) m << ": the same units, in a different order";
    m << ". Every rank must reduce every unit, in the same order.";
    throw Error(m.str(), {.rank = s.rank});
  }
  for (int u = 0; u < nu; ++u)
    if (s.units[u].reductions != s.accumulation)
      throw Error(cat("reduced ", s.units[u].reductions, " times since the last step, expected ",
                      s.accumulation, " (gradient_accumulation_steps) before step()"),
                  {.rank = s.rank, .unit = u});

  StepReport rep;
  for (int r = 1; r < s.agreeing_ranks(); ++r)
    if (all[r].has_loss != all[0].has_loss)
      throw Error(
          cat("step(loss): rank ", all[0].has_loss ? 0 : r, " passed a loss and rank ",
              all[0].has_loss ? r : 0,
              " did not; pass it on every rank (StepReport::loss is their mean) or on none"),
          {.rank = s.rank});
  if (all[0].has_loss) {
    double sum = 0;
    for (const RankSummary& a : all) sum += a.loss;  // rank order
    rep.loss = sum / s.agreeing_ranks();
  }
  double squared = 0;
  // Rank order, on every rank; the first shard group's ranks cover every element once (the
  // other groups hold the same reduced values: hierarchical sharding replicates them).
  for (int r = 0; r < std::min(s.agreeing_ranks(), s.shard_ranks); ++r) squared += all[r].squared_norm;
  const bool finite = std::isfinite(squared);
  rep.loss_scale = s.scaler ? s.scaler->scale() : 1.0;
  const double inv_scale = 1.0 / rep.loss_scale;
  const double mean = s.options.reduction == GradReduction::mean
                          ? 1.0 / (static_cast<double>(s.ranks) * static_cast<double>(s.accumulation))
                          : 1.0;
  rep.grad_norm = finite ? std::sqrt(squared) * inv_scale * mean : squared;

  auto end_step = [&] {
    for (UnitRun& run : s.units) run.reductions = 0;
    s.reduce_log.clear();
    if (!s.accum.empty()) s.backend->fill_zero(s.accum.data(), s.accum.bytes());
    s.spares.end_step();
  };

  // 4. Overflow: skip, and say so (DeepSpeed's rules for fp16; any precision skips a NaN/inf).
  //    At the minimum loss scale with hysteresis spent, the scaler throws (DeepSpeed's
  //    raise_error_at_min_scale); finite is agreed, so it throws on every rank.
  if (s.scaler) {
    StepDecision d = s.scaler->update(!finite);
    if (d.skip) {
      rep.skipped = true;
      rep.skip_reason = d.reason;
    }
  } else if (!finite) {
    rep.skipped = true;
    rep.skip_reason = "non-finite gradient (norm " + std::to_string(squared) + "): step skipped";
  }
  const std::int64_t step_no = s.applied_steps + s.skipped_steps + 1;  // as the log counts
  if (rep.skipped) {
    ++s.skipped_steps;
    rep.step = s.applied_steps;
    // A gradient that is non-finite at every step would skip forever: stop after K skips in a
    // row. With dynamic fp16 scaling a skip above min_loss_scale is the scaler finding its range
    // (from 2^16 down, hysteresis first), so it does not count and the run starts again from 0;
    // skips at the minimum scale count, and the scaler stops the run itself once it cannot
    // lower the scale further (above). bf16, fp32 and a static fp16 scale count every skip.
    const bool finding_range =
        s.scaler && s.scaler->dynamic() && rep.loss_scale > s.scaler->config().min_loss_scale;
    auto& run = s.stats.consecutive_skipped_steps;
    run = finding_range ? 0 : run + 1;
    s.log(cat("step ", step_no, ": skipped: ", rep.skip_reason));
    end_step();
    const std::int64_t k = s.config.max_consecutive_skipped_steps;
    if (k > 0 && run >= k)
      throw Error(cat("step ", step_no, ": ", run, " steps in a row were skipped (",
                      "max_consecutive_skipped_steps is ", k, "), the last for: ", rep.skip_reason,
                      "; the gradient never became finite: check the data, the loss and the "
                      "learning rate, or raise max_consecutive_skipped_steps"),
                  {.rank = s.rank});
    return rep;
  }
  s.stats.consecutive_skipped_steps = 0;

  // 5. Clip by the global norm (DeepSpeed: coefficient = max_norm / (norm + 1e-6) when below 1).
  if (s.config.gradient_clipping > 0) {
    const double c = s.config.gradient_clipping / (rep.grad_norm + 1e-6);
    if (c < 1) rep.clip_coefficient = c;
  }
  rep.lr = lr_at(s.config.scheduler, s.config.optimizer.lr, s.applied_steps);
  kernels::AdamHyper h;
  h.beta1 = s.config.optimizer.beta1;
  h.beta2 = s.config.optimizer.beta2;
  h.eps = s.config.optimizer.eps;
  h.weight_decay = s.config.optimizer.weight_decay;
  h.mode = s.config.optimizer.type == OptimizerType::adamw ? kernels::AdamMode::adamw
                                                           : kernels::AdamMode::adam_l2;
  h.bias_correction = s.config.optimizer.bias_correction;
  const auto grad_scale = static_cast<float>(inv_scale * mean * rep.clip_coefficient);
  // The step's scalars for the optimizer's own settings ([0]) and each parameter group ([g + 1]).
  std::vector<kernels::AdamStep> steps;
  steps.push_back(kernels::make_adam_step(h, rep.lr, s.applied_steps + 1, grad_scale));
  for (const ParamGroup& g : s.config.param_groups) {
    kernels::AdamHyper hg = h;
    if (g.weight_decay) hg.weight_decay = *g.weight_decay;
    steps.push_back(kernels::make_adam_step(hg, rep.lr * g.lr_scale, s.applied_steps + 1, grad_scale));
  }

  // 6. AdamW on each unit's region; the new working params go straight where they live
  //    (stage 0: the full buffer; stage 3: the shard) or through an all-gather (stages 1-2).
  float* master = s.master.as<float>().data();
  // The fused update of unit u's state region (from `off`), writing the new working params in the
  // training dtype in the same pass: once per segment of one parameter group.
  std::size_t seg = 0;
  auto update = [&](int u, std::int64_t off, const float* g, const Slice& out) {
    for (; seg < s.update_segments.size() && s.update_segments[seg].unit == u; ++seg) {
      const UpdateSegment& sg = s.update_segments[seg];
      const std::int64_t at = off + sg.begin;
      s.backend->adamw(master + at, s.exp_avg.as<float>().data() + at,
                       s.exp_avg_sq.as<float>().data() + at, g + sg.begin, sg.count,
                       steps[static_cast<std::size_t>(sg.group + 1)],
                       static_cast<char*>(out.data) + bytes(sg.begin, out.dtype), out.dtype,
                       static_cast<int>(seg));
    }
  };
  std::size_t next_run = 0;  // param_gather_runs, in unit order
  for (int u = 0; u < nu; ++u) {
    const auto& U = s.layout.units[u];
    const std::int64_t off = s.state_offset(u);
    if (s.policy.after_step == ParamsAfterStep::update_full) {
      update(u, off, grad_f32(u), slice(s.full_params(), s.work_dtype, U.offset, U.padded_numel));
    } else if (!s.gathers_params(u)) {
      update(u, off, grad_f32(u), slice(s.shard_params(), s.work_dtype, U.shard_offset, U.shard_numel));
    } else {
      // A run of units whose new shards are staged side by side (this rank's shards of the run
      // are contiguous in shard order) and all-gathered as one collective.
      const Impl::Run run = s.param_gather_runs[next_run++];
      const std::int64_t base = U.shard_offset;
      const auto& L = s.layout.units[run.last];
      const std::int64_t n = L.shard_offset + L.shard_numel - base;
      // One unit: its new shard, all-gathered straight into the unit. Several: written where
      // this rank's block of the packed all-gather output lies, gathered in place.
      const bool one = run.first == run.last;
      Allocation staged = s.bucket_buffer(bytes(one ? n : s.shard_ranks * n, s.work_dtype), false);
      const std::int64_t mine = one ? 0 : s.shard_rank * n;
      for (int v = run.first; v <= run.last; ++v) {
        const auto& V = s.layout.units[v];
        update(v, s.state_offset(v), grad_f32(v),
               slice(staged, s.work_dtype, mine + V.shard_offset - base, V.shard_numel));
      }
      s.all_gather_run(run, staged);
      s.spares.keep(std::move(staged));
      u = run.last;
    }
  }
  check_update_finite(s, step_no);
  ++s.applied_steps;
  rep.step = s.applied_steps;
  end_step();
  return rep;
}

std::vector<float> Engine::gather_master(int p) {
  Impl& s = *impl_;
  if (p < 0 || p >= static_cast<int>(s.layout.params.size()))
    throw Error(cat("gather_master(", p, "): no such parameter"), {.rank = s.rank});
  const ParamLayout& pl = s.layout.params[p];
  const auto& U = s.layout.units[pl.unit];
  const float* master = s.master.as<float>().data();
  std::vector<float> out(static_cast<std::size_t>(pl.numel));
  if (!s.policy.shard_optimizer) {
    s.backend->download(out.data(), master + pl.global_offset, out.size() * sizeof(float));
    return out;
  }
  const comm::ConstView shard{master + U.shard_offset, static_cast<std::size_t>(U.shard_numel),
                              DType::f32, s.mem()};
  if (s.mem() == comm::Memory::host) {  // an inspection copy: the trainer's memory, not the engine's
    std::vector<float> unit(static_cast<std::size_t>(U.padded_numel));
    const ScopeTimer t = s.waiting();
    s.shard->all_gather(shard, comm::View{unit.data(), unit.size(), DType::f32});
    std::copy_n(unit.begin() + pl.offset, pl.numel, out.begin());
    return out;
  }
  Allocation unit = s.alloc(Category::other, bytes(U.padded_numel, DType::f32));
  {
    const ScopeTimer t = s.waiting();
    s.shard->all_gather(shard, slice(unit, DType::f32, 0, U.padded_numel).view());
  }
  s.backend->download(out.data(), unit.as<float>().data() + pl.offset, out.size() * sizeof(float));
  return out;
}

std::uint64_t Engine::master_checksum() {
  Fnv1a h;
  for (int p = 0; p < static_cast<int>(impl_->layout.params.size()); ++p) {
    for (float x : gather_master(p)) {
      std::uint32_t b;
      std::memcpy(&b, &x, 4);
      h.add(b, 4);
    }
  }
  return h.value;
}

}  // namespace zero
