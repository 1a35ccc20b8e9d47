// Engine::Impl: the engine's objects, composed. The context every one of them reads (settings,
// layout, groups, backend, ledger), the model states, the gatherer (where the params are), the
// reducer (where the gradients go) and the step. Not part of the public API.
#pragma once

#include "zero/engine_context.hpp"
#include "zero/grad_reducer.hpp"
#include "zero/offload.hpp"
#include "zero/optimizer_step.hpp"
#include "zero/param_gatherer.hpp"

namespace zero {

// Declared in this order so that they are built in it and torn down in reverse: the reducer
// finishes its reductions, then the gatherer its gathers, before the buffers and the ledger go.
struct Engine::Impl {
  Impl(const Config& c, comm::Communicator& w, std::vector<UnitSpec> units, EngineOptions o)
      : ctx(c, w, std::move(units), std::move(o)),
        states(ctx),
        gatherer(ctx, states),
        reducer(ctx),
        step(ctx, states, gatherer, reducer) {}

  EngineContext ctx;
  ModelStates states;
  ParamGatherer gatherer;
  GradReducer reducer;
  OptimizerStep step;

  // The working params from the fp32 master (rounded to the working dtype; all-gathered where
  // the stage keeps them whole): after init_params and after a checkpoint's load.
  void params_from_master();
  void store(const Slice& dst, const float* src) { store_from_master(ctx, dst, src); }
};

}  // namespace zero
