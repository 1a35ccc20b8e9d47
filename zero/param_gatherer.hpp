// ParamGatherer: where each unit's working params are and the collectives that bring them there.
// Stage 3: the gather/prefetch/release windows (DeepSpeed's stage3_prefetch_bucket_size and
// stage3_max_live_parameters), small neighbours coalesced into one all-gather, and the route a
// gather takes (zero/wire.hpp: the primary shards, or hpZ's secondary copy inside the node).
// Stages 1-2 (and stage 3's persistent units): the all-gather of the new shards after the step.
// Internal to zero/: not part of the public API.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "zero/engine_context.hpp"
#include "zero/wire.hpp"

namespace zero {

// Stage 3 coalesces the gathers of consecutive units of at most this many padded elements (see
// ParamGatherer::issue_gathers); larger units are gathered one per collective.
inline constexpr std::int64_t kSmallGatherUnit = 65'536;

class ParamGatherer {
 public:
  ParamGatherer(EngineContext& ctx, ModelStates& states);
  ~ParamGatherer();  // waits for every gather in flight (the buffers it writes are freed next)
  ParamGatherer(const ParamGatherer&) = delete;
  ParamGatherer& operator=(const ParamGatherer&) = delete;

  // Stage 3: unit u gathered (waiting for its prefetch) and the window ahead of it prefetched.
  void gather(int u);
  // Stage 3: unit u back to its shard (persistent units stay gathered).
  void release(int u);
  UnitState state(int u) const { return units_[static_cast<std::size_t>(u)].state; }
  // The full working params of a gathered (or persistent, or stage 0-2) unit.
  Slice params_of_unit(int u) const;
  // Before the step: every non-persistent unit released, every copy made from the params
  // dropped, the window forgotten.
  void release_all();

  // After the step: consecutive units whose new params are all-gathered as one collective, at
  // most allgather_bucket_size padded elements.
  struct Run {
    int first, last;
  };
  bool gathers_params(int u) const;  // unit u's new params come through an all-gather
  const std::vector<Run>& after_step_runs() const { return runs_; }
  // All-gathers the new shard of unit u into its full params (blocking).
  void all_gather_params(int u, const Slice& shard_values);
  // All-gathers the new shards of run [first, last] into each unit's full params. `staged`
  // holds this rank's shards of the run, in unit order: alone for one unit, or for several at
  // block shard_rank of a packed buffer of shard_ranks blocks (the all-gather runs in place).
  void all_gather_run(const Run& run, const Allocation& staged);

  comm::Communicator* own_group() const { return route_->own_group(); }  // hpZ's, or nullptr

 private:
  // One unit's gathering state (stage 3; persistent units and stages 0-2: gathered).
  struct UnitGather {
    UnitState state = UnitState::gathered;
    Allocation gathered;   // the full unit while gathered
    Allocation primary;    // param offload: its shard on the device while its gather is in flight
    comm::Handle gather;   // its all-gather, while in flight alone
    int group = -1;        // the coalesced gather it is part of (the group's first unit), or -1
  };
  // Consecutive units gathered by one all-gather into a packed buffer, unpacked into each unit's
  // gathered buffer when the first of them is needed. Indexed by the first unit.
  struct GatherGroup {
    int first = 0, last = 0;
    comm::Handle handle;
    Allocation packed;
    Allocation primary;  // param offload: the group's shards on the device while in flight
  };
  // The prefetch window in the direction of travel: [last, front] has been scanned, every
  // non-persistent unit in it is gathered or on its way, and `ahead` is their padded size beyond
  // `last`. It only moves forward, so a pass over the model costs time linear in the units.
  struct Frontier {
    int last = -1;      // the unit gathered last (-1: none since the step)
    int dir = 0;        // +1 forward, -1 backward
    int front = -1;     // the farthest unit scanned
    std::int64_t ahead = 0;
    bool valid = false;  // false: rescan from the next gathered unit
  };

  void prefetch_after(int u);        // gathers ahead of u in the direction of travel
  void reserve_gather(int u);        // its buffer and state now; issued by issue_gathers
  // The reserved gathers, coalesced where they can be (the first alone when the trainer waits
  // for it now).
  void issue_gathers(bool first_alone);
  void complete_gather(int u);       // waits for the unit's gather (and its group's)
  void release_unit(int u);          // back to its shard (waiting for a gather in flight)
  std::byte* full_params_of(int u) const;
  // This rank's primary shards [offset, offset + count) where a gather reads them: the shard
  // buffer, or with param offload a device copy uploaded now and held in `staged`.
  Slice primary(std::int64_t offset, std::int64_t count, Allocation& staged);

  EngineContext& ctx_;
  ModelStates& states_;
  std::unique_ptr<GatherRoute> route_;
  std::vector<UnitGather> units_;
  std::vector<GatherGroup> groups_;
  std::vector<int> to_issue_;        // reserved by prefetch_after, issued together at its end
  Frontier window_;
  std::int64_t live_elements_ = 0;   // gathered or gathering non-persistent elements
  std::vector<Run> runs_;
};

}  // namespace zero
