// ZeRO-Offload's moves (zero/offload.hpp).
#include "zero/offload.hpp"

namespace zero {

ParamsOut::ParamsOut(EngineContext& ctx, const Slice& dst) : ctx_(ctx), dst_(dst), target_(dst) {
  const comm::Memory state = ctx.state_mem();
  if (dst.memory == state || dst.count == 0) return;
  staged_ = ctx.ledger.allocate_unset(Category::step_scratch,
                                      static_cast<std::size_t>(bytes(dst.count, dst.dtype)), state);
  target_ = slice(staged_, dst.dtype, 0, dst.count);
}

void ParamsOut::finish() {
  // A counting run's host buffers are addresses that were never mapped: nothing to move.
  if (staged_.empty() || ctx_.options.count_only) return;
  const auto n = static_cast<std::size_t>(bytes(dst_.count, dst_.dtype));
  // The state on the host, the params on the device (optimizer offload), or the state on the
  // device and the param shard on the host (param offload alone).
  if (target_.memory == comm::Memory::host)
    ctx_.backend->upload(dst_.data, target_.data, n);
  else
    ctx_.backend->download(dst_.data, target_.data, n);
  staged_.reset();
}

void store_from_master(EngineContext& ctx, const Slice& dst, const float* master) {
  ParamsOut out(ctx, dst);
  const Slice& t = out.target();
  ctx.state_backend().store_from_f32(t.data, t.dtype, master, t.count);
  out.finish();
}

void offload_reduced(EngineContext& ctx, const Slice& reduced, float* host) {
  const auto n = static_cast<std::size_t>(bytes(reduced.count, reduced.dtype));
  const bool moves = !ctx.options.count_only;  // a counting run's host buffers are not mapped
  if (ctx.settings.accumulation == 1 && reduced.dtype == DType::f32) {
    if (moves) ctx.backend->download(host, reduced.data, n);
    return;
  }
  Allocation staged = ctx.ledger.allocate_unset(Category::buckets, n, comm::Memory::host);
  if (moves) ctx.backend->download(staged.data(), reduced.data, n);
  if (ctx.settings.accumulation == 1)
    ctx.host_backend->load_to_f32(host, staged.data(), reduced.dtype, reduced.count);
  else
    ctx.host_backend->accumulate(host, staged.data(), reduced.dtype, reduced.count);
}

}  // namespace zero
