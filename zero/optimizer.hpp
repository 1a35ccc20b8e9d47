// Optimizer: the update OptimizerStep applies to each unit's optimizer-state region, one object
// per optimizer (Adam/AdamW, Lion, LAMB: docs/optimizers.md) behind one interface, so that the
// step, and anything else that runs an update (an offloaded step), calls any of them alike.
// Each knows its own state (how many fp32 buffers beside the master weights) and the backend
// calls of its update; the step keeps what they share: the norm, the clip, the skip, the
// after-step gather and the agreement that nothing non-finite was stored.
// Internal to zero/: not part of the public API.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "zero/config.hpp"
#include "zero/engine_context.hpp"
#include "zero/param_groups.hpp"

namespace zero {

// fp32 buffers of optimizer state beside the master weights: Adam's and LAMB's m and v (2),
// Lion's momentum (1), Muon's (2: its momentum in m, and v for AdamW's elements alone:
// zero/muon_state.hpp).
int state_buffers(OptimizerType t);
// The state buffers' names, as checkpoints write them: "exp_avg", then "exp_avg_sq".
const char* state_buffer_name(int i);

// The scalars of one applied step, agreed across ranks before any update.
struct StepScalars {
  double lr = 0;            // the scheduled lr (a group's is lr x its lr_scale)
  std::int64_t step = 1;    // the step being applied, from 1
  float grad_scale = 1.0f;  // what multiplies each gradient: 1/loss scale x mean x clip
};

// One unit's region of the optimizer state (the shard at stages 1-3, the padded unit at stage
// 0), as the update sees it: the state at the region's first element, its fp32 gradient, and
// where the new working params go.
struct RegionUpdate {
  int unit = 0;
  float* p = nullptr;  // master weights
  float* m = nullptr;  // state buffer 0
  float* v = nullptr;  // state buffer 1 at the unit's part of it (SecondMomentIndex), or null
  const float* g = nullptr;
  Slice out;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // The update's backend slots in (unit, offset) order: slot k covers slots()[k] of its unit's
  // region, and Backend::fetch_nonfinite's k-th value is an element offset within it.
  virtual const std::vector<UpdateSegment>& slots() const = 0;
  // Once per applied step, before any update(): the step's scalars. region(u) gives unit u's
  // region (its gradient valid until the next call). LAMB reads every region here for its trust
  // ratios and agrees them across ranks: every rank calls this, in the same order.
  virtual void begin_step(const StepScalars& s, const std::function<RegionUpdate(int)>& region) = 0;
  // The update of one unit's region, after begin_step; units in any order.
  virtual void update(const RegionUpdate& r) = 0;
};

// The optimizer Config::optimizer names, over this rank's regions. `groups` gives each param's
// group (param_groups_of); `segments` the update's segments (update_segments); `v` where state
// buffer 1's elements are (ModelStates::second_moment).
std::unique_ptr<Optimizer> make_optimizer(EngineContext& ctx, const std::vector<int>& groups,
                                          std::vector<UpdateSegment> segments,
                                          const SecondMomentIndex& v);

}  // namespace zero
