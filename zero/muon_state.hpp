// The second moment (v) beside Muon's matrices: Muon keeps one momentum for each matrix it owns
// (in exp_avg, where AdamW keeps m) and no v, so v holds only AdamW's elements of this rank's
// optimizer-state regions, unit by unit in region order with the matrices cut out
// (docs/optimizers.md). Without Muon nothing is cut and v is indexed exactly as m.
// Internal to zero/: not part of the public API.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "zero/layout.hpp"

namespace zero {

// v's length on every rank: the state's (`state_numel`: a shard, or the padded model at stage 0)
// less the Muon elements of the rank that owns the fewest (`sharded`; `owned`: elements by
// owner, absent: none), or less all of them (replicated state, stage 0). Every rank holds the
// same bytes, so that one rank's count (the planner's) holds for all.
std::int64_t second_moment_elements(std::int64_t state_numel,
                                    const std::map<int, std::int64_t>& owned, int shard_ranks,
                                    bool sharded);

class SecondMomentIndex {
 public:
  // `sharded`: the regions are rank `shard_rank`'s shards; else every whole padded unit.
  SecondMomentIndex(const Layout& layout, bool sharded, int shard_rank);

  std::int64_t elements() const { return elements_; }
  // Where unit u's part of v starts.
  std::int64_t unit_offset(int u) const { return unit_offset_[static_cast<std::size_t>(u)]; }
  // Element `at` of unit u's region (region coordinates, outside any Muon matrix) within unit u's
  // part of v.
  std::int64_t in_unit(int u, std::int64_t at) const;
  // Whether v holds param p's elements (no: a matrix Muon owns).
  static bool holds(const ParamLayout& p) { return p.owner < 0; }

 private:
  struct Cut {
    std::int64_t begin = 0, end = 0;  // region coordinates
  };
  std::vector<std::int64_t> unit_offset_;
  std::vector<std::vector<Cut>> cuts_;  // by unit, ascending
  std::int64_t elements_ = 0;
};

}  // namespace zero
