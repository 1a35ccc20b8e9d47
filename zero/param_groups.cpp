// Parameter groups as segments of the update (zero/param_groups.hpp).
#include "zero/param_groups.hpp"

#include <fnmatch.h>

#include <algorithm>

#include "base/error.hpp"

namespace zero {

std::vector<int> param_groups_of(const Layout& layout, const std::vector<ParamGroup>& groups) {
  std::vector<int> group_of(layout.params.size(), -1);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t i = 0; i < groups[g].params.size(); ++i) {
      const std::string& glob = groups[g].params[i];
      bool matched = false;
      for (std::size_t p = 0; p < layout.params.size(); ++p) {
        if (::fnmatch(glob.c_str(), layout.params[p].name.c_str(), 0) != 0) continue;
        matched = true;
        if (group_of[p] < 0) group_of[p] = static_cast<int>(g);
      }
      if (!matched)
        throw Error(cat("'", glob, "' matches no parameter (the model's are named like '",
                        layout.params.empty() ? std::string() : layout.params.front().name, "')"),
                    {.key = cat("param_groups[", g, "].params[", i, "]")});
    }
  }
  return group_of;
}

std::vector<UpdateSegment> update_segments(const Layout& layout, const std::vector<int>& group_of,
                                           bool sharded, int rank) {
  std::vector<UpdateSegment> out;
  for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) {
    const UnitLayout& U = layout.units[u];
    const std::int64_t n = sharded ? U.shard_numel : U.padded_numel;
    const std::size_t first = out.size();
    auto start = [&](std::int64_t at, int group) {
      if (out.size() > first && out.back().group == group) return;
      if (out.size() == first) at = 0;  // the region's leading padding goes with the first
      out.push_back({u, at, 0, group});
    };
    if (sharded) {
      for (const ShardPiece& piece : layout.shard_pieces(u, rank))
        start(piece.shard_offset, group_of[static_cast<std::size_t>(piece.param)]);
    } else {
      // In offset order: balanced whole params (make_layout) need not ascend with the index.
      std::vector<int> by_offset(static_cast<std::size_t>(U.param_count));
      for (int i = 0; i < U.param_count; ++i)
        by_offset[static_cast<std::size_t>(i)] = U.first_param + i;
      std::ranges::sort(by_offset, {},
                        [&](int p) { return layout.params[static_cast<std::size_t>(p)].offset; });
      for (int p : by_offset)
        start(layout.params[static_cast<std::size_t>(p)].offset,
              group_of[static_cast<std::size_t>(p)]);
    }
    if (out.size() == first) out.push_back({u, 0, 0, -1});  // a shard of padding only
    for (std::size_t k = first; k < out.size(); ++k)
      out[k].count = (k + 1 < out.size() ? out[k + 1].begin : n) - out[k].begin;
  }
  return out;
}

}  // namespace zero
