// Muon under ZeRO (docs/optimizers.md): which params Muon updates (each owned whole by one rank,
// zero/layout.hpp's whole_params), the optimizer that runs Newton-Schulz on them and AdamW on
// the rest, and the cost figures the time model reads from the same ownership.
// Internal to zero/: not part of the public API.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "zero/config.hpp"
#include "zero/layout.hpp"
#include "zero/muon_state.hpp"
#include "zero/optimizer.hpp"

namespace zero {

// The params Muon updates, by name, in registration order: none unless o.type is Muon; those
// matching one of o.muon_params (shell globs; each glob must match a param, and every match
// must be 2-D), or by default every 2-D param whose name contains none of "embed", "wte", "wpe",
// "head", "output" (the blocks' matrices: embeddings and the head stay on AdamW, as biases and
// norms, which are not 2-D). Throws zero::Error naming the glob or param otherwise.
std::vector<std::string> muon_params(const std::vector<UnitSpec>& units, const OptimizerConfig& o);

// What Muon's matrices put on each rank that owns some (by shard rank; absent: none): the
// Newton-Schulz FLOPs of a step and the matrices' elements.
struct MuonLoad {
  std::map<int, double> flops;
  std::map<int, std::int64_t> elements;
};
// Adds unit u's matrices to the ranks that own them when it follows the units whose load `load`
// holds: its shards go to ranks by make_layout's rule (unit_shards, place_shards) over those
// FLOPs, so `layout` may hold u once for many equal units (the planner's distinct units) and
// `load` still ends as the engine's owners' totals.
void add_muon_load(const Layout& layout, int u, MuonLoad& load);
// The busiest and the mean rank's Newton-Schulz FLOPs, from each owner's (`replicated`, stage 0:
// every rank does every matrix).
std::pair<double, double> newton_schulz_load(const std::map<int, double>& by_owner, int ranks,
                                             bool replicated);

// Muon over the matrices of `layout` each rank owns and AdamW over the rest of its regions;
// `groups` gives each param's group (param_groups_of), `v` where AdamW's second moments are.
std::unique_ptr<Optimizer> make_muon_optimizer(EngineContext& ctx, const std::vector<int>& groups,
                                               const SecondMomentIndex& v);

}  // namespace zero
