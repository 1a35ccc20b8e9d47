// Layout computation: offsets, padding, shards, persistence and the bucket plan (see layout.hpp).
#include "zero/layout.hpp"

#include <algorithm>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "base/error.hpp"
#include "kernels/muon_math.hpp"

namespace zero {
namespace {

// Sizes come from user shapes; an overflow would silently corrupt every offset after it. `what`
// names the quantity: a string, or a callable making one (built only when the check fails).
template <class What>
std::string describe_what(const What& what) {
  if constexpr (std::is_invocable_v<const What&>)
    return what();
  else
    return std::string(what);
}

template <class What>
std::int64_t checked_add(std::int64_t a, std::int64_t b, const What& what) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    throw Error(cat(describe_what(what), " overflows 64-bit element counts"));
  return r;
}

template <class What>
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const What& what) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    throw Error(cat(describe_what(what), " overflows 64-bit element counts"));
  return r;
}

template <class What>
std::int64_t round_up(std::int64_t x, std::int64_t m, const What& what) {
  return checked_add(x, m - 1, what) / m * m;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

Error::Where at_key(std::string key) {
  Error::Where w;
  w.key = std::move(key);
  return w;
}

Error::Where at_unit(int unit) {
  Error::Where w;
  w.unit = unit;
  return w;
}

void validate_options(const LayoutOptions& o) {
  if (o.shard_ranks < 1)
    throw Error(cat("must be at least 1, got ", o.shard_ranks), at_key("shard_ranks"));
  if (o.align_elements < 1)
    throw Error(cat("must be at least 1, got ", o.align_elements), at_key("align_elements"));
  if (o.persistence_threshold < 0)
    throw Error(cat("must be 0 (no persistent units) or positive, got ", o.persistence_threshold),
                at_key("persistence_threshold"));
  if (o.bucket_elements < 1)
    throw Error(cat("must be at least 1, got ", o.bucket_elements), at_key("bucket_elements"));
}

std::int64_t numel_of(const ParamSpec& p, int unit, const std::string& unit_name) {
  std::int64_t n = 1;
  for (std::size_t d = 0; d < p.shape.size(); ++d) {
    if (p.shape[d] <= 0)
      throw Error(cat("parameter '", p.name, "' of unit '", unit_name, "' has dimension ", d, " = ",
                      p.shape[d], " in shape ", shape_string(p.shape),
                      "; every dimension must be positive"),
                  at_unit(unit));
    n = checked_mul(n, p.shape[d],
                    [&] { return cat("parameter '", p.name, "' shape ", shape_string(p.shape)); });
  }
  return n;
}

// Greedy over units from last to first: a bucket closes when the next unit would push it past
// the limit, and a unit larger than the limit is a bucket of its own (never split: the engine
// reduces whole units, and a unit's grads are ready all at once at the end of its backward).
std::vector<Bucket> plan_buckets(std::vector<UnitLayout>& units, std::int64_t limit) {
  std::vector<Bucket> buckets;
  Bucket open;
  auto close = [&] {
    if (open.units.empty()) return;
    for (int u : open.units) units[u].bucket = static_cast<int>(buckets.size());
    buckets.push_back(std::move(open));
    open = Bucket{};
  };
  for (int u = static_cast<int>(units.size()) - 1; u >= 0; --u) {
    const std::int64_t n = units[u].padded_numel;
    if (!open.units.empty() && open.padded_numel + n > limit) close();
    open.units.push_back(u);
    open.padded_numel += n;  // an oversized unit closes on the next unit: nothing fits with it
  }
  close();
  return buckets;
}

// Offsets of one unit's params with `whole` ones, and every other that fits in a shard, never
// cut at a multiple of `shard` (so that the shards can change places: balance_shards), the end
// of the last, or -1 when they do not fit in `ranks` shards of `shard` elements.
std::int64_t place_whole(const std::vector<std::int64_t>& numel, const std::vector<bool>& whole,
                         std::int64_t shard, int ranks, std::int64_t align,
                         std::vector<std::int64_t>& offsets) {
  std::int64_t end = 0;
  for (std::size_t i = 0; i < numel.size(); ++i) {
    std::int64_t at = (end + align - 1) / align * align;
    const bool keep = whole[i] || numel[i] <= shard;
    if (keep && at / shard != (at + numel[i] - 1) / shard) at = (at / shard + 1) * shard;
    offsets[i] = at;
    end = at + numel[i];
    if (end > shard * ranks) return -1;
  }
  return end;
}

// The smallest shard size of a unit with whole params (make_layout's rule) and its offsets.
std::int64_t whole_shard_size(const std::vector<std::int64_t>& numel,
                              const std::vector<bool>& whole, int ranks, std::int64_t align,
                              std::vector<std::int64_t>& offsets) {
  std::int64_t total = 0, largest = 0;
  for (std::size_t i = 0; i < numel.size(); ++i) {
    total += (numel[i] + align - 1) / align * align;
    if (whole[i]) largest = std::max(largest, numel[i]);
  }
  std::int64_t shard = std::max((total + ranks - 1) / ranks, largest);
  shard = (shard + align - 1) / align * align;
  offsets.assign(numel.size(), 0);
  while (place_whole(numel, whole, shard, ranks, align, offsets) < 0) shard += align;
  return shard;
}

}  // namespace

double whole_param_cost(const std::vector<std::int64_t>& shape) {
  if (shape.size() != 2) return 0.0;
  return kernels::muon_ns_flops(shape[0], shape[1]);
}

std::vector<int> balance_shards(const std::vector<ShardCost>& shards, int ranks,
                                std::map<int, double>& load) {
  std::vector<std::size_t> order(shards.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return shards[a].cost > shards[b].cost; });
  std::vector<int> rank_of(shards.size(), -1);
  std::set<int> taken;
  for (std::size_t k : order) {
    // The least loaded rank not taken, ties to the lower: the first idle one (no load yet),
    // or the least loaded of those with a load if none is idle or one with a load is lower.
    int idle = 0;
    while (idle < ranks && (taken.contains(idle) || load.contains(idle))) ++idle;
    int best = idle < ranks ? idle : -1;
    for (const auto& [r, l] : load) {
      if (taken.contains(r)) continue;
      const double lb = best < 0 ? 0.0 : load.contains(best) ? load.at(best) : 0.0;
      if (best < 0 || l < lb || (l == lb && r < best)) best = r;
    }
    if (best < 0) std::abort();  // more shards than ranks: a broken caller, not a user error
    taken.insert(best);
    rank_of[k] = best;
    load[best] += shards[k].cost;
  }
  return rank_of;
}

UnitShards unit_shards(const std::vector<PlacedParam>& params, std::int64_t shard_numel) {
  UnitShards out;
  for (const PlacedParam& p : params) {
    const std::int64_t shard = p.offset / shard_numel;
    out.movable = out.movable && shard == (p.offset + p.numel - 1) / shard_numel;
    if (out.shards.empty() || out.shards.back().shard != shard) out.shards.push_back({shard, 0.0});
    out.shards.back().cost += p.cost;
  }
  return out;
}

std::vector<int> place_shards(const UnitShards& u, int ranks, std::map<int, double>& load) {
  if (u.movable && ranks > 1) return balance_shards(u.shards, ranks, load);
  std::vector<int> rank_of;
  for (const ShardCost& c : u.shards) {
    rank_of.push_back(static_cast<int>(c.shard));
    if (c.cost > 0) load[static_cast<int>(c.shard)] += c.cost;
  }
  return rank_of;
}

Range UnitLayout::shard_range(int rank) const {
  const std::int64_t n = shard_numel > 0 ? padded_numel / shard_numel : 0;
  if (rank < 0 || rank >= n)
    throw Error(cat("rank ", rank, " has no shard of unit '", name, "', which is split over ", n,
                    " ranks"));
  return Range{rank * shard_numel, (rank + 1) * shard_numel};
}

std::vector<ShardPiece> Layout::shard_pieces(int unit, int rank) const {
  if (unit < 0 || unit >= static_cast<int>(units.size()))
    throw Error(cat("no unit ", unit, " in a layout of ", units.size(), " units"));
  const UnitLayout& u = units[unit];
  const Range shard = u.shard_range(rank);
  std::vector<ShardPiece> pieces;
  for (int p = u.first_param; p < u.first_param + u.param_count; ++p) {
    const ParamLayout& pl = params[p];
    const std::int64_t begin = std::max(shard.begin, pl.offset);
    const std::int64_t end = std::min(shard.end, pl.offset + pl.numel);
    if (begin >= end) continue;
    pieces.push_back({p, begin - pl.offset, begin - shard.begin, end - begin});
  }
  // Balanced whole params (make_layout) need not lie in registration order.
  std::sort(pieces.begin(), pieces.end(), [](const ShardPiece& a, const ShardPiece& b) {
    return a.shard_offset < b.shard_offset;
  });
  return pieces;
}

std::optional<int> Layout::param_index(std::string_view name) const {
  for (std::size_t p = 0; p < params.size(); ++p)
    if (params[p].name == name) return static_cast<int>(p);
  return std::nullopt;
}

namespace {

// A unit laid out by the padding rule, redone by the whole-params rule (make_layout) when it
// holds any whole param and is sharded over N > 1 ranks; its shards then go to ranks by
// balance_shards over `load` (each rank's cost so far), and every whole param gets its owner.
void place_unit_whole(Layout& layout, UnitLayout& unit,
                      const std::unordered_set<std::string_view>& whole_names,
                      std::map<int, double>& load) {
  const int ranks = layout.options.shard_ranks;
  std::vector<std::int64_t> numel, offsets;
  std::vector<bool> whole;
  for (int p = unit.first_param; p < unit.first_param + unit.param_count; ++p) {
    numel.push_back(layout.params[static_cast<std::size_t>(p)].numel);
    whole.push_back(whole_names.contains(layout.params[static_cast<std::size_t>(p)].name));
  }
  if (std::find(whole.begin(), whole.end(), true) == whole.end()) return;
  if (ranks == 1) {
    for (std::size_t i = 0; i < numel.size(); ++i)
      if (whole[i]) layout.params[static_cast<std::size_t>(unit.first_param) + i].owner = 0;
    return;
  }
  const std::int64_t shard =
      whole_shard_size(numel, whole, ranks, layout.options.align_elements, offsets);
  unit.padded_numel = shard * ranks;
  // The shards that hold params (at most one per param; the others are padding only).
  std::vector<PlacedParam> placed;
  for (std::size_t i = 0; i < numel.size(); ++i)
    placed.push_back(
        {offsets[i], numel[i],
         whole[i]
             ? whole_param_cost(layout.params[static_cast<std::size_t>(unit.first_param) + i].shape)
             : 0.0});
  const UnitShards shards = unit_shards(placed, shard);
  const std::vector<int> r = place_shards(shards, ranks, load);
  std::map<std::int64_t, int> rank_of;  // shard -> rank
  for (std::size_t k = 0; k < shards.shards.size(); ++k) rank_of[shards.shards[k].shard] = r[k];
  for (std::size_t i = 0; i < numel.size(); ++i) {
    ParamLayout& pl = layout.params[static_cast<std::size_t>(unit.first_param) + i];
    const std::int64_t slot = offsets[i] / shard;
    const std::int64_t rank = rank_of.at(slot);
    pl.offset = rank * shard + offsets[i] - slot * shard;
    pl.global_offset = unit.offset + pl.offset;
    if (whole[i]) pl.owner = static_cast<int>(rank);
  }
}

}  // namespace

Layout make_layout(const std::vector<UnitSpec>& specs, const LayoutOptions& options) {
  validate_options(options);
  if (specs.empty()) throw Error("no units registered: a layout needs at least one parameter");

  const std::int64_t align = options.align_elements;
  const std::int64_t unit_multiple =
      checked_mul(options.shard_ranks, align, "shard_ranks * align_elements");

  Layout layout;
  layout.options = options;
  std::unordered_map<std::string_view, int> unit_of_name;  // param name -> unit, for duplicates
  const std::unordered_set<std::string_view> whole_names(options.whole_params.begin(),
                                                         options.whole_params.end());
  std::map<int, double> load;  // by rank: whole params' cost so far (absent: none yet)
  std::size_t tensors = 0;
  for (const UnitSpec& spec : specs) tensors += spec.params.size();
  unit_of_name.reserve(tensors);
  layout.params.reserve(tensors);
  layout.units.reserve(specs.size());

  for (std::size_t ui = 0; ui < specs.size(); ++ui) {
    const int u = static_cast<int>(ui);
    const UnitSpec& spec = specs[ui];
    if (spec.params.empty())
      throw Error(cat("unit '", spec.name, "' has no parameters; every unit needs at least one"),
                  at_unit(u));

    UnitLayout unit;
    unit.name = spec.name;
    unit.first_param = static_cast<int>(layout.params.size());
    unit.param_count = static_cast<int>(spec.params.size());
    unit.offset = layout.padded_numel;

    std::int64_t end = 0;  // end of the last param placed, in unit coordinates
    const auto unit_what = [&] { return cat("unit '", spec.name, "'"); };
    for (const ParamSpec& ps : spec.params) {
      if (ps.name.empty())
        throw Error(cat("unit '", spec.name, "' has a parameter with an empty name"), at_unit(u));
      auto [it, fresh] = unit_of_name.emplace(ps.name, u);
      if (!fresh)
        throw Error(cat("parameter name '", ps.name, "' is registered twice: in unit ", it->second,
                        " '", specs[it->second].name, "' and in unit ", u, " '", spec.name,
                        "'; parameter names must be unique"),
                    at_unit(u));
      ParamLayout p;
      p.name = ps.name;
      p.shape = ps.shape;
      p.unit = u;
      p.numel = numel_of(ps, u, spec.name);
      p.offset = round_up(end, align, unit_what);
      p.global_offset = checked_add(unit.offset, p.offset, unit_what);
      end = checked_add(p.offset, p.numel, unit_what);
      unit.numel += p.numel;  // <= end, so it cannot overflow
      layout.params.push_back(std::move(p));
    }

    unit.padded_numel = round_up(end, unit_multiple, unit_what);
    if (!whole_names.empty()) place_unit_whole(layout, unit, whole_names, load);
    unit.shard_numel = unit.padded_numel / options.shard_ranks;
    unit.shard_offset = unit.offset / options.shard_ranks;  // every unit offset divides by N
    unit.persistent = unit.numel < options.persistence_threshold;
    layout.numel = checked_add(layout.numel, unit.numel, "model size");
    layout.padded_numel = checked_add(layout.padded_numel, unit.padded_numel, "model size");
    layout.units.push_back(std::move(unit));
  }
  layout.shard_numel = layout.padded_numel / options.shard_ranks;
  layout.buckets = plan_buckets(layout.units, options.bucket_elements);
  return layout;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string describe(const Layout& l) {
  std::ostringstream s;
  const auto& o = l.options;
  s << "layout: " << l.units.size() << " units, " << l.params.size()
    << " params, N = " << o.shard_ranks << ", align = " << o.align_elements
    << ", persistence_threshold = " << o.persistence_threshold
    << ", bucket_elements = " << o.bucket_elements << '\n';
  s << std::left << std::setw(6) << "unit" << std::setw(28) << "name" << std::right << std::setw(14)
    << "offset" << std::setw(14) << "numel" << std::setw(14) << "padded" << std::setw(14) << "shard"
    << std::setw(8) << "bucket"
    << "  persistent\n";
  for (std::size_t u = 0; u < l.units.size(); ++u) {
    const UnitLayout& ul = l.units[u];
    s << std::left << std::setw(6) << u << std::setw(28) << ul.name << std::right << std::setw(14)
      << ul.offset << std::setw(14) << ul.numel << std::setw(14) << ul.padded_numel << std::setw(14)
      << ul.shard_numel << std::setw(8) << ul.bucket << (ul.persistent ? "  yes" : "  no") << '\n';
    for (int p = ul.first_param; p < ul.first_param + ul.param_count; ++p) {
      const ParamLayout& pl = l.params[p];
      s << "      " << std::left << std::setw(26) << pl.name << std::setw(16)
        << shape_string(pl.shape) << std::right << "  offset " << pl.offset << "  numel "
        << pl.numel << "  global " << pl.global_offset << '\n';
    }
  }
  s << "buckets (backward order):\n";
  for (std::size_t b = 0; b < l.buckets.size(); ++b) {
    s << "  " << b << ": units";
    for (int u : l.buckets[b].units) s << ' ' << u;
    s << "  (" << l.buckets[b].padded_numel << " elements)\n";
  }
  s << "total: " << l.numel << " params (Ψ), " << l.padded_numel << " padded ("
    << (l.padded_numel - l.numel) << " padding), " << l.shard_numel << " per rank shard\n";
  return s.str();
}

}  // namespace zero
