// Layout: where every parameter lives in the flat buffers, each rank's shard and the bucket plan,
// computed as plain values before any memory exists (no communicator, no device needed).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zero {

// One registered parameter, as the trainer declares it.
struct ParamSpec {
  std::string name;                 // unique across the whole model: the checkpoint key
  std::vector<std::int64_t> shape;  // every dimension > 0; an empty shape is a scalar (numel 1)
};

// A unit: the parameters that are gathered, released and reduced together (a layer, or a group).
struct UnitSpec {
  std::string name;               // a label for reports and error messages
  std::vector<ParamSpec> params;  // at least one; their order is their order in the flat buffer
};

// The defaults every settings struct takes from here: DeepSpeed's bucket size (elements), and
// zero's alignment of every param start and shard size (elements).
inline constexpr std::int64_t kDefaultBucketElements = 500'000'000;
inline constexpr std::int64_t kDefaultAlignElements = 64;

struct LayoutOptions {
  int shard_ranks = 1;  // N: ranks that share the shards of every unit
  std::int64_t align_elements =
      kDefaultAlignElements;               // every param start and shard size is a multiple
  std::int64_t persistence_threshold = 0;  // units with fewer unpadded elements stay gathered
  std::int64_t bucket_elements = kDefaultBucketElements;  // reduce bucket limit, padded elements
  // Params each owned whole by one rank (Muon's matrices, zero/muon.hpp): no shard boundary
  // cuts them. Empty: every unit is laid out by the padding rule alone.
  std::vector<std::string> whole_params;
};

// A half-open range [begin, end) of elements.
struct Range {
  std::int64_t begin = 0;  // first element
  std::int64_t end = 0;    // one past the last element
  std::int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

struct ParamLayout {
  std::string name;                 // from ParamSpec
  std::vector<std::int64_t> shape;  // from ParamSpec
  int unit = 0;                     // index of the owning unit in Layout::units
  std::int64_t numel = 0;           // product of shape
  std::int64_t offset = 0;  // start in the unit's flat buffer; a multiple of align_elements (with
                            // whole params, not necessarily ascending with the param's index)
  std::int64_t global_offset = 0;  // start in the global flat buffer: unit offset + offset
  int owner = -1;  // the rank whose shard holds it whole (LayoutOptions::whole_params), or -1
};

// The part of one parameter that falls inside one rank's shard of a unit.
struct ShardPiece {
  int param = 0;                  // index in Layout::params
  std::int64_t param_offset = 0;  // first element of the piece within the parameter (row-major)
  std::int64_t shard_offset = 0;  // where it sits within the rank's shard of the unit
  std::int64_t count = 0;         // elements in the piece
  bool operator==(const ShardPiece&) const = default;
};

struct UnitLayout {
  std::string name;               // from UnitSpec
  int first_param = 0;            // the unit's params are Layout::params[first_param, +param_count)
  int param_count = 0;            // number of params in the unit
  std::int64_t offset = 0;        // start in the global flat buffer; a multiple of N * align
  std::int64_t shard_offset = 0;  // start of this unit's shard in each rank's flat shard buffer
  std::int64_t numel = 0;         // unpadded: the sum of its params' numel
  std::int64_t padded_numel = 0;  // with alignment gaps and tail padding; divisible by N * align
  std::int64_t shard_numel = 0;   // padded_numel / N, a multiple of align_elements
  bool persistent = false;        // numel < persistence_threshold: stage 3 keeps it gathered
  int bucket = 0;                 // index in Layout::buckets of the bucket that reduces it

  // Rank r's slice of the unit, in unit coordinates: [r * shard_numel, (r + 1) * shard_numel).
  Range shard_range(int rank) const;
};

// A gradient-reduction bucket: consecutive units, in backward order (highest index first).
struct Bucket {
  std::vector<int> units;         // unit indices, descending
  std::int64_t padded_numel = 0;  // sum of the units' padded_numel
};

struct Layout {
  LayoutOptions options;            // what the layout was computed with
  std::vector<ParamLayout> params;  // every param, unit by unit, in registration order
  std::vector<UnitLayout> units;    // in registration (forward) order
  std::vector<Bucket> buckets;      // in backward order: buckets[0] holds the last unit
  std::int64_t numel = 0;           // Ψ: unpadded parameter count of the model
  std::int64_t padded_numel = 0;    // size of the global flat buffer (sum of units' padded_numel)
  std::int64_t shard_numel = 0;     // each rank's flat shard buffer: padded_numel / N

  int shard_ranks() const { return options.shard_ranks; }
  // The params of `unit` (all of them, or only the parts) that lie in `rank`'s shard, in shard
  // order.
  std::vector<ShardPiece> shard_pieces(int unit, int rank) const;
  // Index in `params` of the param called `name`, if any.
  std::optional<int> param_index(std::string_view name) const;
};

// Computes the layout. Padding rule: each param starts at the next multiple of align_elements
// (A) after the previous one ends, and a unit's padded size is the end of its last param rounded
// up to a multiple of N * A, so each of its N shards is a multiple of A and starts A-aligned.
// A unit holding whole params (LayoutOptions::whole_params, N > 1) takes the smallest shard size
// S (a multiple of A, at least its largest whole param) at which, placing its params in order
// by the same rule, a param that fits in S and would straddle a shard boundary starts at the
// next shard instead and everything ends within N * S; its padded size is N * S. Those N shards
// of S elements (their contents in registration order) then go to ranks by balance_shards, the
// ranks' loads carried from unit to unit in registration order, so a param's offset need not
// ascend with its index (a unit where a param larger than S is cut keeps its shards in order).
// The rest is as above, and a unit without whole params is laid out exactly as without the
// option. Throws zero::Error naming the unit, param or option on invalid input.
Layout make_layout(const std::vector<UnitSpec>& units, const LayoutOptions& options);

// What a whole param costs its owner, for balance_shards: Newton-Schulz's FLOPs on a 2-D one
// (kernels::muon_ns_flops: 5 x (4 m^2 n + 2 m^3 + 3 m n), m <= n), 0 otherwise.
double whole_param_cost(const std::vector<std::int64_t>& shape);

// One shard of a unit as make_layout places its params in order: its index, and the cost of the
// whole params in it.
struct ShardCost {
  std::int64_t shard = 0;
  double cost = 0;
};

// One param of a unit as make_layout places it: where it starts (in the unit, or before the
// shards are balanced, in its shard's slot), its size, and what it costs its owner
// (whole_param_cost; 0 for one not owned whole).
struct PlacedParam {
  std::int64_t offset = 0, numel = 0;
  double cost = 0;
};

// The shards of one unit of `shard_numel`-element shards that hold params, in the order of their
// first param (`params` in registration order: make_layout's order before balancing, whatever
// the shards' places), each with its params' cost, and whether they may change places: no param
// cut by a shard boundary (only one larger than a shard can be). The one rule make_layout lays
// out by and the planner, which lays out each distinct unit once, replays.
struct UnitShards {
  std::vector<ShardCost> shards;
  bool movable = true;
};
UnitShards unit_shards(const std::vector<PlacedParam>& params, std::int64_t shard_numel);

// The rank of each of u.shards: by balance_shards over `load` when they may move over more than
// one rank, else each on the rank of its own index (its cost, when any, added to that rank's
// load).
std::vector<int> place_shards(const UnitShards& u, int ranks, std::map<int, double>& load);

// Assigns the shards of one unit that hold params (`shards`, each once; the others hold padding
// only and take the ranks left) to distinct ranks of `ranks`, largest cost first, each to the
// least loaded rank not yet given one (ties: the earlier shard in `shards`, the lower rank), and
// adds each cost to its rank's `load` (absent: 0); returns each listed shard's rank. The loads it
// leaves depend only on the costs' values, not on which shard holds which, so the planner's one
// layout per distinct unit gives the same loads. Memory: the listed shards and loaded ranks only.
std::vector<int> balance_shards(const std::vector<ShardCost>& shards, int ranks,
                                std::map<int, double>& load);

// "[768, 2304]": a shape as error messages and reports write it.
std::string shape_text(const std::vector<std::int64_t>& shape);

// A table of units, params, shards and buckets, for logs and debugging.
std::string describe(const Layout& layout);

}  // namespace zero
