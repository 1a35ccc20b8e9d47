// OptimizerStep: Engine::step() as named parts. Waits for the reductions, agrees across ranks on
// the call order, the loss and the global gradient norm, then skips (overflow) or updates: clip,
// AdamW on each shard, the cast to the working dtype, the all-gather of the new params, and the
// agreement that no update made the state non-finite. Owns what only the step uses: the
// optimizer (zero/optimizer.hpp: Adam/AdamW, Lion or LAMB over the update's segments) and the
// fp16 loss scaler.
// Internal to zero/: not part of the public API.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "precision/loss_scaler.hpp"
#include "zero/engine_context.hpp"
#include "zero/grad_reducer.hpp"
#include "zero/offload.hpp"
#include "zero/optimizer.hpp"
#include "zero/param_gatherer.hpp"
#include "zero/param_groups.hpp"

namespace zero {

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

class OptimizerStep {
 public:
  OptimizerStep(EngineContext& ctx, ModelStates& states, ParamGatherer& gatherer,
                GradReducer& reducer);

  StepReport run(std::optional<double> loss);
  std::optional<LossScaler>& scaler() { return scaler_; }
  const std::optional<LossScaler>& scaler() const { return scaler_; }

 private:
  class GradF32;  // the fp32 gradient of a unit's optimizer region (optimizer_step.cpp)

  void drain();                                            // reductions done, gathers released
  RankSummary summarize(GradF32& grads, std::optional<double> loss);
  std::vector<RankSummary> agree(const RankSummary& mine);  // every rank's, checked
  void check_same_calls(const std::vector<RankSummary>& all);
  StepReport report(const std::vector<RankSummary>& all, double& squared) const;
  bool skip(StepReport& rep, double squared, std::int64_t step_no);
  StepScalars scalars(StepReport& rep) const;
  RegionUpdate region(int u, const float* g, const Slice& out) const;
  // The optimizer on unit u's region, its new params moved to `out_params` (optimizer offload).
  void update_unit(int u, const float* g, const Slice& out_params);
  void update(GradF32& grads, const StepScalars& sc);
  void update_run(GradF32& grads, const ParamGatherer::Run& run);
  void check_update_finite(std::int64_t step_no);
  void end_step();
  double mean_factor() const;  // 1 / (ranks x micro-batches) for GradReduction::mean, else 1

  EngineContext& ctx_;
  ModelStates& states_;
  ParamGatherer& gatherer_;
  GradReducer& reducer_;
  ParamsUploads uploads_{ctx_};  // the new params on their way to the device (optimizer offload)
  // The update, over segments of one parameter group unit by unit; a slot's index is its
  // Backend slot (fetch_nonfinite).
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<LossScaler> scaler_;  // fp16 only
};

}  // namespace zero
