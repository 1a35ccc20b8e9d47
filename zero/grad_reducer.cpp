// GradReducer (zero/grad_reducer.hpp): gradient buffers, buckets and their reductions.
#include "zero/grad_reducer.hpp"

#include <algorithm>
#include <string>

#include "zero/offload.hpp"

namespace zero {

GradReducer::GradReducer(EngineContext& ctx)
    : ctx_(ctx), path_(make_reduce_path(ctx)), units_(ctx.layout.units.size()) {
  const Layout& layout = ctx.layout;
  const StagePolicy& policy = ctx.policy;
  const DType rd = reduced_dtype();
  if (!policy.shard_grads)
    grads_full_ = ctx.alloc(Category::grads, bytes(layout.padded_numel, ctx.work_dtype()));
  // The reduced gradient. Stage 0 all-gathers it back to full; when it has the working dtype it
  // lands in the gradient buffer itself. Stages 2-3 count their shard as the ZeRO "grads" term;
  // at stage 1 the full gradient buffer is that term and the shard is a buffer.
  if (policy.gather_grads) {
    if (!ctx.settings.reduced_aliases_grads)
      reduced_ = ctx.alloc(Category::reduced_grads, bytes(layout.padded_numel, rd));
  } else if (ctx.settings.offload) {
    // Optimizer offload: the shard goes to the host in fp32 as each bucket is reduced; it is
    // also the sum over the micro-batches (no accumulator of its own).
    offloaded_ = ctx.ledger.allocate(
        policy.reduced_shard_is_buffer() ? Category::reduced_grads : Category::grads,
        static_cast<std::size_t>(bytes(layout.shard_numel, DType::f32)), comm::Memory::host);
    buckets_.resize(layout.buckets.size());
    return;
  } else {
    reduced_ = ctx.alloc(policy.reduced_shard_is_buffer() ? Category::reduced_grads : Category::grads,
                         bytes(layout.shard_numel, rd));
  }
  if (ctx.settings.accumulation > 1)
    accum_ = ctx.alloc(Category::accumulator,
                       bytes(policy.gather_grads ? layout.padded_numel : layout.shard_numel, DType::f32));
  buckets_.resize(layout.buckets.size());
}

GradReducer::~GradReducer() {
  try {
    finish_all();
  } catch (...) {
    // A failed collective already reported its error to the caller that issued it.
  }
}

DType GradReducer::reduced_dtype() const { return path_->encoding().reduced_dtype(); }

DType GradReducer::reduced_data_dtype() const {
  return ctx_.settings.reduced_aliases_grads ? ctx_.work_dtype() : reduced_dtype();
}

const void* GradReducer::reduced_data(std::int64_t offset, std::int64_t n) const {
  if (ctx_.settings.reduced_aliases_grads)
    return slice(grads_full_, ctx_.work_dtype(), offset, n).data;
  return slice(reduced_, reduced_dtype(), offset, n).data;
}

bool GradReducer::idle() const {
  bool idle = reduce_log_.empty() && in_flight_.empty();
  for (const UnitGrads& u : units_) idle = idle && u.reductions == 0;
  return idle;
}

void GradReducer::end_step() {
  for (UnitGrads& run : units_) run.reductions = 0;
  reduce_log_.clear();
  if (!accum_.empty()) ctx_.backend->fill_zero(accum_.data(), accum_.bytes());
  downloads_.finish_all();  // a step that skipped may not have read every unit
  if (!offloaded_.empty() && ctx_.settings.accumulation > 1)
    ctx_.host_backend->fill_zero(offloaded_.data(), offloaded_.bytes());
}

Slice GradReducer::grads_of_unit(int u) {
  const auto& U = ctx_.layout.units[u];
  const DType wd = ctx_.work_dtype();
  UnitGrads& run = units_[u];
  if (!run.grads_fresh) {
    // A new micro-batch for this unit: its previous reduction must be done before we reuse
    // (stages 0-1) or replace (stages 2-3) the buffer it reads, and its bucket must have gone.
    if (run.waiting) {
      const Bucket& b = ctx_.layout.buckets[U.bucket];
      std::string missing;
      for (int v : b.units)
        if (!units_[v].waiting) missing += cat(missing.empty() ? "" : ", ", v);
      throw Error(cat("its gradients were reduced in this micro-batch and its bucket (units ",
                      b.units.back(), "..", b.units.front(), ", reduce_bucket_size ",
                      ctx_.layout.options.bucket_elements, ") still waits for unit(s) ", missing,
                      ": reduce every unit once per micro-batch before touching any again"),
                  {.rank = ctx_.rank, .unit = u});
    }
    finish_reductions_of(u);
    const ScopeTimer t(ctx_.stats.optimizer_seconds);  // zeroing: the optimizer's zero_grad
    if (ctx_.policy.shard_grads) {
      run.grads = ctx_.alloc(Category::grad_buffers, bytes(U.padded_numel, wd));
    } else {
      Slice s = slice(grads_full_, wd, U.offset, U.padded_numel);
      ctx_.backend->fill_zero(s.data, static_cast<std::size_t>(bytes(s.count, wd)));
    }
    run.grads_fresh = true;
  }
  if (ctx_.policy.shard_grads) return slice(run.grads, wd, 0, U.padded_numel);
  return slice(grads_full_, wd, U.offset, U.padded_numel);
}

void GradReducer::reduce_grads(int u) {
  UnitGrads& run = units_[u];
  const std::int64_t accumulation = ctx_.settings.accumulation;
  if (run.reductions >= accumulation)
    throw Error(cat("reduce_grads called ", run.reductions + 1,
                    " times since the last step, but gradient_accumulation_steps is ",
                    accumulation, "; call step() after every ", accumulation, " micro-batches"),
                {.rank = ctx_.rank, .unit = u});
  const Slice g = grads_of_unit(u);  // a unit with no gradient written still reduces its zeros
  ++ctx_.stats.reductions;
  run.grads_fresh = false;
  ++run.reductions;
  reduce_log_.push_back(u);
  if (alone()) {
    // A world of one rank at stage 0: the sum over the group is this rank's gradient, already
    // where the step reads it (the reduced gradient is the gradient buffer). No bucket, no
    // collective, no copy: only the sum over micro-batches.
    const auto& U = ctx_.layout.units[u];
    accumulate(U.offset, U.padded_numel);
    return;
  }
  bucket_arrived(u, g);
}

bool GradReducer::alone() const {
  return ctx_.policy.gather_grads && ctx_.groups.shard_ranks == 1 &&
         ctx_.groups.replicate == nullptr && ctx_.settings.reduced_aliases_grads &&
         ctx_.settings.compression.gradients == GradCompression::none;
}

void GradReducer::bucket_arrived(int u, const Slice& g) {
  const auto& U = ctx_.layout.units[u];
  const Bucket& b = ctx_.layout.buckets[U.bucket];
  const DType wd = ctx_.work_dtype();
  const int G = ctx_.groups.shard_ranks;
  UnitGrads& run = units_[u];
  run.waiting = true;
  if (b.units.size() == 1) {  // a bucket of one unit: the unit's buffer is rank-major already
    start_grad_sync(u, u, ctx_.policy.shard_grads ? std::move(run.grads) : Allocation(), g);
    return;
  }
  // Copy the unit's gradients into the bucket (DeepSpeed's reduce bucket, FSDP2's copy-in); at
  // stages 2-3 its own buffer is freed at once: the bucket holds them now.
  const PackedRun packed{ctx_.layout, b.units.back(), b.units.front()};
  BucketFill& fill = buckets_[U.bucket];
  if (fill.packed.empty()) fill.packed = ctx_.bucket_buffer(bytes(G * packed.shard(), wd), true);
  {
    const ScopeTimer t = ctx_.waiting();  // packing for the collective is communication work
    packed.copy(*ctx_.backend, G, wd, static_cast<std::byte*>(fill.packed.data()), u, u,
                [&](int) { return static_cast<std::byte*>(g.data); }, true);
  }
  run.grads.reset();
  if (++fill.arrived < static_cast<int>(b.units.size())) return;
  fill.arrived = 0;
  Allocation input = std::move(fill.packed);
  const Slice in = slice(input, wd, 0, G * packed.shard());
  start_grad_sync(packed.first, packed.last, std::move(input), in);
}

void GradReducer::start_grad_sync(int first, int last, Allocation input, const Slice& in) {
  // Its units' earlier reductions write the same regions of the reduced gradient: they finish
  // first.
  for (int u = first; u <= last; ++u) finish_reductions_of(u);
  const Layout& layout = ctx_.layout;
  const PackedRun run{layout, first, last};
  const std::int64_t shard = run.shard();
  const DType rd = reduced_dtype(), wd = ctx_.work_dtype();
  const int G = ctx_.groups.shard_ranks;
  Reduction r;
  r.first = first;
  r.last = last;
  // Optimizer offload: the copy of the bucket before has run behind the backward since; it is
  // finished, and its device buffer freed, before this reduction takes one.
  downloads_.finish_all();
  {
    // Handing a collective to the communicator wakes its thread, which may run at once on a busy
    // CPU: that is communication time too (EngineStats::wait_seconds).
    const ScopeTimer issuing = ctx_.waiting();
    if (ctx_.policy.gather_grads) {
      // Stage 0: all-reduce as reduce-scatter into this rank's blocks, then all-gather, straight
      // into the unit's full buffer (one unit) or into a packed buffer unpacked when it is done.
      r.block = ctx_.bucket_buffer(bytes(shard, rd), true);
      const Slice block = slice(r.block, rd, 0, shard);
      const auto& F = layout.units[first];
      Slice full;
      if (first == last) {
        full = ctx_.settings.reduced_aliases_grads ? slice(grads_full_, wd, F.offset, F.padded_numel)
                                                   : slice(reduced_, rd, F.offset, F.padded_numel);
      } else {
        r.packed_out = ctx_.bucket_buffer(bytes(G * shard, rd), true);
        full = slice(r.packed_out, rd, 0, G * shard);
      }
      r.work = path_->start(in.cview(), block.view(), full.view(), F.shard_offset);
    } else if (!offloaded_.empty()) {
      // Optimizer offload: into a device buffer of the bucket's shard, to the host when done.
      r.block = ctx_.bucket_buffer(bytes(shard, rd), true);
      r.work = path_->start(in.cview(), slice(r.block, rd, 0, shard).view(), std::nullopt,
                            layout.units[first].shard_offset);
    } else {
      const Slice out = slice(reduced_, rd, layout.units[first].shard_offset, shard);
      r.work = path_->start(in.cview(), out.view(), std::nullopt, layout.units[first].shard_offset);
    }
  }
  r.input = std::move(input);
  r.issued_at = ctx_.trainer_calls;
  for (int u = first; u <= last; ++u) {
    units_[u].waiting = false;
    units_[u].in_flight = true;
  }
  in_flight_.push_back(std::move(r));
  ++ctx_.stats.reduce_collectives;
  // With overlap_comm this reduction runs while the trainer computes the next units; the one
  // before it is finished now, so at most one is in flight (and stages 2-3 hold at most one
  // bucket's gradients besides the unit being computed). Without overlap: finished here.
  while (in_flight_.size() > (ctx_.settings.overlap ? 1u : 0u)) finish_grad_sync();
  ctx_.stats.max_reductions_in_flight =
      std::max(ctx_.stats.max_reductions_in_flight, static_cast<int>(in_flight_.size()));
}

void GradReducer::finish_grad_sync() {
  Reduction& r = in_flight_.front();
  const Layout& layout = ctx_.layout;
  try {
    const ScopeTimer t = ctx_.waiting();
    path_->wait(r.work);
  } catch (const Error& e) {
    // The communicator names the collective; the engine knows which units it was for.
    throw Error(cat(e.what(), " [while reducing the gradients of ",
                    r.first == r.last ? cat("unit ", r.first, " '", layout.units[r.first].name, "'")
                                      : cat("units ", r.first, "..", r.last, " (one bucket)"),
                    "]"));
  }
  {
    const ScopeTimer t = ctx_.waiting();
    path_->complete(r.work);  // hierarchical: the sum across the replicas
  }
  // It ran behind the trainer's work if the trainer computed another unit since it was issued.
  if (ctx_.trainer_calls > r.issued_at) ++ctx_.stats.reductions_overlapped;
  ctx_.record_comm_scratch();
  unpack_and_accumulate(r);
  for (int u = r.first; u <= r.last; ++u) units_[u].in_flight = false;
  ctx_.spares.keep(std::move(r.input));  // the packed bucket (a unit's gradient buffer is freed)
  ctx_.spares.keep(std::move(r.block));
  ctx_.spares.keep(std::move(r.packed_out));
  in_flight_.pop_front();
}

void GradReducer::unpack_and_accumulate(Reduction& r) {
  const Layout& layout = ctx_.layout;
  const auto& F = layout.units[r.first];
  const auto& L = layout.units[r.last];
  const bool aliases = ctx_.settings.reduced_aliases_grads;
  const DType dt = reduced_data_dtype();
  if (!offloaded_.empty()) {
    const std::int64_t n = L.shard_offset + L.shard_numel - F.shard_offset;
    const Slice reduced = slice(r.block, dt, 0, n);
    downloads_.start(std::move(r.block), reduced, offloaded_.as<float>().data() + F.shard_offset,
                     r.first, r.last);
    return;
  }
  if (!r.packed_out.empty()) {            // stage 0, several units: back to unit-major order
    const ScopeTimer t = ctx_.waiting();  // unpacking the collective's output, as packing its input
    const Allocation& full = aliases ? grads_full_ : reduced_;
    const PackedRun run{layout, r.first, r.last};
    run.copy(*ctx_.backend, ctx_.groups.shard_ranks, dt,
             static_cast<std::byte*>(r.packed_out.data()), r.first, r.last,
             [&](int u) {
               return static_cast<std::byte*>(full.data()) + bytes(layout.units[u].offset, dt);
             },
             false);
  }
  // The run's region of the reduced gradient is contiguous in both coordinates (full at stage 0,
  // shards otherwise).
  const bool full = ctx_.policy.gather_grads;
  const std::int64_t off = full ? F.offset : F.shard_offset;
  accumulate(off, full ? L.offset + L.padded_numel - off : L.shard_offset + L.shard_numel - off);
}

void GradReducer::accumulate(std::int64_t offset, std::int64_t n) {
  // Sum over micro-batches in fp32, in micro-batch order: the same on every stage.
  if (ctx_.settings.accumulation > 1)
    ctx_.backend->accumulate(accum_.as<float>().data() + offset, reduced_data(offset, n),
                             reduced_data_dtype(), n);
}

void GradReducer::finish_reductions_of(int u) {
  while (units_[u].in_flight) finish_grad_sync();
}

void GradReducer::finish_all() {
  while (!in_flight_.empty()) finish_grad_sync();
}

void GradReducer::drop_unissued_buckets() {
  for (BucketFill& b : buckets_) {
    b.packed.reset();
    b.arrived = 0;
  }
  for (UnitGrads& r : units_) r.waiting = false;
}

}  // namespace zero
