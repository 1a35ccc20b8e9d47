// Parameter groups (Config::param_groups) as the engine applies them: which group each param is
// in, and each unit's optimizer-state region cut into segments of one group, so that the fused
// update runs once per segment with that group's weight decay and learning-rate scale.
// Internal to the engine; plain functions of the layout, so that they are tested without one.
#pragma once

#include <cstdint>
#include <vector>

#include "zero/config.hpp"
#include "zero/layout.hpp"

namespace zero {

// For every param of the layout, the index of the first group with a glob (fnmatch) matching its
// name, or -1. Throws zero::Error naming param_groups[g].params[i] for a glob that matches no
// param (a typo would otherwise silently leave its params at the default decay).
std::vector<int> param_groups_of(const Layout& layout, const std::vector<ParamGroup>& groups);

struct UpdateSegment {
  int unit = 0;
  std::int64_t begin = 0;  // first element, within the unit's state region on this rank
  std::int64_t count = 0;
  int group = -1;          // index in Config::param_groups, -1: the optimizer's own settings
  bool operator==(const UpdateSegment&) const = default;
};

// Every unit's state region on `rank` (its shard when `sharded`, else the whole padded unit) cut
// where the group changes: unit by unit, in order, covering each region exactly once. Padding
// goes with the segment before it (its elements are zeros that no update changes).
std::vector<UpdateSegment> update_segments(const Layout& layout, const std::vector<int>& group_of,
                                           bool sharded, int rank);

}  // namespace zero
