// The second moment beside Muon's matrices (zero/muon_state.hpp).
#include "zero/muon_state.hpp"

#include <algorithm>

namespace zero {

std::int64_t second_moment_elements(std::int64_t state_numel,
                                    const std::map<int, std::int64_t>& owned, int shard_ranks,
                                    bool sharded) {
  std::int64_t all = 0, least = 0;
  for (const auto& [rank, n] : owned) {
    least = all == 0 ? n : std::min(least, n);
    all += n;
  }
  if (!sharded) return state_numel - all;
  if (static_cast<std::int64_t>(owned.size()) < shard_ranks) least = 0;  // a rank owns none
  return state_numel - least;
}

SecondMomentIndex::SecondMomentIndex(const Layout& layout, bool sharded, int shard_rank) {
  const std::size_t nu = layout.units.size();
  unit_offset_.assign(nu, 0);
  cuts_.assign(nu, {});
  std::map<int, std::int64_t> owned;
  std::int64_t at = 0;
  for (std::size_t u = 0; u < nu; ++u) {
    const UnitLayout& U = layout.units[u];
    const Range region = sharded ? U.shard_range(shard_rank) : Range{0, U.padded_numel};
    unit_offset_[u] = at;
    at += region.size();
    for (int q = U.first_param; q < U.first_param + U.param_count; ++q) {
      const ParamLayout& p = layout.params[static_cast<std::size_t>(q)];
      if (holds(p)) continue;
      owned[p.owner] += p.numel;
      if (p.offset < region.begin || p.offset + p.numel > region.end) continue;
      cuts_[u].push_back({p.offset - region.begin, p.offset - region.begin + p.numel});
      at -= p.numel;
    }
    std::ranges::sort(cuts_[u], {}, &Cut::begin);
  }
  elements_ = second_moment_elements(sharded ? layout.shard_numel : layout.padded_numel, owned,
                                     layout.options.shard_ranks, sharded);
}

std::int64_t SecondMomentIndex::in_unit(int u, std::int64_t at) const {
  std::int64_t k = at;
  for (const Cut& c : cuts_[static_cast<std::size_t>(u)])
    if (c.end <= at) k -= c.end - c.begin;
  return k;
}

}  // namespace zero
