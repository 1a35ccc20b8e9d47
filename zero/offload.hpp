// ZeRO-Offload's moves between the device and the host state (docs/offload.md): the reduced
// gradient shard device -> host into the fp32 gradient the CPU optimizer reads, and the new
// 16-bit params host -> device after the update (or after rounding the master at init and load).
// Without offload the state and the params share one memory and nothing is staged or moved.
// Internal to zero/: not part of the public API.
#pragma once

#include <cstdint>

#include "zero/engine_context.hpp"

namespace zero {

// Where the working params meet the state's backend: it writes them (the update's rounded
// output, or the master rounded at init) into target(), beside the state; finish() moves them
// to `dst` where the params live. Same memory: target() is dst and finish() does nothing.
class ParamsOut {
 public:
  ParamsOut(EngineContext& ctx, const Slice& dst);
  ParamsOut(const ParamsOut&) = delete;
  ParamsOut& operator=(const ParamsOut&) = delete;
  const Slice& target() const { return target_; }
  void finish();

 private:
  EngineContext& ctx_;
  Slice dst_, target_;
  Allocation staged_;  // step_scratch in the state's memory, when dst lives elsewhere
};

// dst = master rounded to dst's dtype, wherever each lives (init_params, a checkpoint's load).
void store_from_master(EngineContext& ctx, const Slice& dst, const float* master);

// The reduced gradient `reduced` (device, the reduce dtype) into the fp32 host gradient at
// `host`: converted (one micro-batch a step) or added (accumulation > 1: `host` is the sum over
// the micro-batches, zeroed at the end of each step), with the same per-element code as the
// device path's GradF32 and accumulator, so the optimizer sees the same bits.
void offload_reduced(EngineContext& ctx, const Slice& reduced, float* host);

}  // namespace zero
