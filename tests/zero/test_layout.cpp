// Tests of the layout: offsets, padding, shards, shard pieces, persistence, buckets, validation.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/error.hpp"
#include "zero/layout.hpp"

using Catch::Matchers::Contains;
using zero::LayoutOptions;
using zero::make_layout;
using zero::ParamSpec;
using zero::Range;
using zero::UnitSpec;

namespace {

LayoutOptions options(int n, std::int64_t align, std::int64_t bucket = 1'000'000,
                      std::int64_t persist = 0) {
  LayoutOptions o;
  o.shard_ranks = n;
  o.align_elements = align;
  o.bucket_elements = bucket;
  o.persistence_threshold = persist;
  return o;
}

// Units whose sizes are awkward on purpose: primes, a scalar, params that straddle shards.
std::vector<UnitSpec> awkward_model() {
  return {
      {"embed", {{"embed.w", {13, 7}}}},
      {"block0", {{"block0.w", {5, 11}}, {"block0.b", {5}}, {"block0.g", {}}}},
      {"block1", {{"block1.w", {3, 3, 3}}, {"block1.b", {1}}, {"block1.c", {129}}}},
      {"head", {{"head.w", {1}}}},
  };
}

// One unit per entry of `sizes`, each a single 1-D param.
std::vector<UnitSpec> units_of_sizes(const std::vector<std::int64_t>& sizes) {
  std::vector<UnitSpec> units;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    units.push_back({zero::cat("u", i), {{zero::cat("p", i), {sizes[i]}}}});
  return units;
}

}  // namespace

TEST_CASE("offsets and padding match a hand-worked example", "[layout]") {
  // N = 2, align = 4, so units are padded to multiples of 8.
  // unit a: w [3,5] = 15 at 0..15; b [5] at 16 (15 rounded up to 4) ..21; c scalar at 24..25.
  //         end 25 -> padded 32, shard 16. unit b: x [2,2] = 4 at 0..4 -> padded 8, shard 4.
  const auto l = make_layout(
      {{"a", {{"w", {3, 5}}, {"b", {5}}, {"c", {}}}}, {"b", {{"x", {2, 2}}}}}, options(2, 4));
  REQUIRE(l.params.size() == 4);
  CHECK(l.params[0].offset == 0);
  CHECK(l.params[0].numel == 15);
  CHECK(l.params[1].offset == 16);
  CHECK(l.params[1].numel == 5);
  CHECK(l.params[2].offset == 24);
  CHECK(l.params[2].numel == 1);
  CHECK(l.params[3].offset == 0);
  CHECK(l.params[3].numel == 4);
  CHECK(l.params[3].unit == 1);
  CHECK(l.params[3].global_offset == 32);
  CHECK(l.params[2].global_offset == 24);

  REQUIRE(l.units.size() == 2);
  CHECK(l.units[0].offset == 0);
  CHECK(l.units[0].numel == 21);
  CHECK(l.units[0].padded_numel == 32);
  CHECK(l.units[0].shard_numel == 16);
  CHECK(l.units[0].shard_offset == 0);
  CHECK(l.units[0].first_param == 0);
  CHECK(l.units[0].param_count == 3);
  CHECK(l.units[1].offset == 32);
  CHECK(l.units[1].numel == 4);
  CHECK(l.units[1].padded_numel == 8);
  CHECK(l.units[1].shard_numel == 4);
  CHECK(l.units[1].shard_offset == 16);

  CHECK(l.numel == 25);
  CHECK(l.padded_numel == 40);
  CHECK(l.shard_numel == 20);
}

TEST_CASE("the default alignment pads a 100-element unit on 3 ranks to 192", "[layout]") {
  // 100 rounded up to a multiple of 3 * 64 = 192: three shards of 64 elements.
  LayoutOptions o;
  o.shard_ranks = 3;
  const auto l = make_layout({{"u", {{"p", {100}}}}}, o);
  CHECK(l.units[0].padded_numel == 192);
  CHECK(l.units[0].shard_numel == 64);
  CHECK(l.shard_numel == 64);
}

TEST_CASE("units divide into N equal aligned shards for N = 1, 2, 3, 4, 7", "[layout]") {
  const int n = GENERATE(1, 2, 3, 4, 7);
  const std::int64_t align = GENERATE(1, 4, 64);
  const auto l = make_layout(awkward_model(), options(n, align));
  std::int64_t shard_total = 0;
  for (const auto& u : l.units) {
    INFO("unit " << u.name << ", N = " << n << ", align = " << align);
    const auto& last = l.params[u.first_param + u.param_count - 1];
    const std::int64_t end = last.offset + last.numel;
    CHECK(u.padded_numel % (n * align) == 0);
    CHECK(u.padded_numel >= end);
    CHECK(u.padded_numel - end < n * align);  // the smallest such multiple
    CHECK(u.shard_numel * n == u.padded_numel);
    CHECK(u.shard_numel % align == 0);
    CHECK(u.offset % (n * align) == 0);
    CHECK(u.shard_offset * n == u.offset);
    shard_total += u.shard_numel;
  }
  CHECK(l.shard_numel == shard_total);
  CHECK(l.shard_numel * n == l.padded_numel);
}

TEST_CASE("every param starts aligned, in order, without overlap", "[layout]") {
  const int n = GENERATE(1, 3, 7);
  const std::int64_t align = GENERATE(1, 4, 64);
  const auto l = make_layout(awkward_model(), options(n, align));
  std::int64_t numel = 0;
  for (const auto& u : l.units) {
    std::int64_t end = 0;
    for (int p = u.first_param; p < u.first_param + u.param_count; ++p) {
      const auto& pl = l.params[p];
      INFO(pl.name);
      CHECK(pl.offset % align == 0);
      CHECK(pl.global_offset % align == 0);
      CHECK(pl.global_offset == u.offset + pl.offset);
      CHECK(pl.offset >= end);
      CHECK(pl.offset - end < align);  // no gap larger than alignment needs
      end = pl.offset + pl.numel;
      numel += pl.numel;
    }
  }
  CHECK(l.numel == numel);
  CHECK(l.numel == 13 * 7 + 5 * 11 + 5 + 1 + 27 + 1 + 129 + 1);
}

TEST_CASE("the shards of a unit partition it exactly", "[layout]") {
  const int n = GENERATE(1, 2, 3, 4, 7);
  const auto l = make_layout(awkward_model(), options(n, 4));
  for (const auto& u : l.units) {
    std::int64_t next = 0;
    for (int r = 0; r < n; ++r) {
      const Range range = u.shard_range(r);
      CHECK(range.begin == next);  // contiguous and disjoint, in rank order
      CHECK(range.size() == u.shard_numel);
      next = range.end;
    }
    CHECK(next == u.padded_numel);
  }
}

TEST_CASE("a shard range outside 0..N-1 is an error naming the unit", "[layout]") {
  const auto l = make_layout(awkward_model(), options(3, 4));
  CHECK_THROWS_WITH(l.units[1].shard_range(3), Contains("block0") && Contains("3 ranks"));
  CHECK_THROWS_AS(l.units[1].shard_range(-1), zero::Error);
  CHECK_THROWS_AS(l.shard_pieces(4, 0), zero::Error);
}

TEST_CASE("shard pieces map back to the right param elements", "[layout]") {
  const int n = GENERATE(1, 2, 3, 4, 7);
  const std::int64_t align = GENERATE(1, 4);
  const auto l = make_layout(awkward_model(), options(n, align));
  // Global flat buffer: element i of param p holds p * 1'000'000 + i; padding holds -1.
  std::vector<std::int64_t> flat(l.padded_numel, -1);
  for (std::size_t p = 0; p < l.params.size(); ++p)
    for (std::int64_t i = 0; i < l.params[p].numel; ++i)
      flat[l.params[p].global_offset + i] = static_cast<std::int64_t>(p) * 1'000'000 + i;

  std::vector<std::int64_t> covered(l.params.size(), 0);
  for (int u = 0; u < static_cast<int>(l.units.size()); ++u) {
    const auto& ul = l.units[u];
    for (int r = 0; r < n; ++r) {
      INFO("unit " << ul.name << ", rank " << r << ", N = " << n << ", align = " << align);
      const std::int64_t shard_begin = ul.offset + ul.shard_range(r).begin;
      std::vector<bool> seen(ul.shard_numel, false);
      std::int64_t prev_end = 0;
      for (const auto& piece : l.shard_pieces(u, r)) {
        CHECK(l.params[piece.param].unit == u);
        CHECK(piece.count > 0);
        CHECK(piece.shard_offset >= prev_end);  // in shard order, disjoint
        prev_end = piece.shard_offset + piece.count;
        CHECK(prev_end <= ul.shard_numel);
        CHECK(piece.param_offset + piece.count <= l.params[piece.param].numel);
        for (std::int64_t k = 0; k < piece.count; ++k) {
          CHECK(flat[shard_begin + piece.shard_offset + k] ==
                piece.param * 1'000'000 + piece.param_offset + k);
          seen[piece.shard_offset + k] = true;
        }
        covered[piece.param] += piece.count;
      }
      // Everything the pieces leave out is padding.
      for (std::int64_t k = 0; k < ul.shard_numel; ++k)
        if (!seen[k]) CHECK(flat[shard_begin + k] == -1);
    }
  }
  for (std::size_t p = 0; p < l.params.size(); ++p) CHECK(covered[p] == l.params[p].numel);
}

TEST_CASE("a param that straddles two shards is split into two pieces", "[layout]") {
  // N = 2, align 1: one param of 10 -> padded 10, shards [0,5) and [5,10).
  const auto l = make_layout({{"u", {{"a", {3}}, {"b", {7}}}}}, options(2, 1));
  using zero::ShardPiece;
  CHECK(l.shard_pieces(0, 0) == std::vector<ShardPiece>{{0, 0, 0, 3}, {1, 0, 3, 2}});
  CHECK(l.shard_pieces(0, 1) == std::vector<ShardPiece>{{1, 2, 0, 5}});
}

TEST_CASE("units below the persistence threshold are persistent, at or above are not", "[layout]") {
  // Unpadded sizes decide: 9 is padded to 64 but still counts as 9.
  const auto l = make_layout(units_of_sizes({9, 10, 11}), options(1, 64, 1'000'000, 10));
  CHECK(l.units[0].persistent);
  CHECK_FALSE(l.units[1].persistent);
  CHECK_FALSE(l.units[2].persistent);
}

TEST_CASE("a persistence threshold of 0 makes no unit persistent", "[layout]") {
  const auto l = make_layout(units_of_sizes({1, 2, 3}), options(2, 1, 1'000'000, 0));
  for (const auto& u : l.units) CHECK_FALSE(u.persistent);
}

TEST_CASE("buckets take whole units in backward order up to the size limit", "[layout]") {
  // align 1, N = 1: padded sizes equal the sizes. Limit 6. Walking back from unit 5:
  // {5}=5 (+2 would be 7) | {4,3}=4 (+10 too big) | {2}=10 alone (oversized) | {1}=3 (+4 = 7)
  // | {0}=4.
  const auto l = make_layout(units_of_sizes({4, 3, 10, 2, 2, 5}), options(1, 1, 6));
  REQUIRE(l.buckets.size() == 5);
  CHECK(l.buckets[0].units == std::vector<int>{5});
  CHECK(l.buckets[1].units == std::vector<int>{4, 3});
  CHECK(l.buckets[2].units == std::vector<int>{2});
  CHECK(l.buckets[3].units == std::vector<int>{1});
  CHECK(l.buckets[4].units == std::vector<int>{0});
  CHECK(l.buckets[0].padded_numel == 5);
  CHECK(l.buckets[1].padded_numel == 4);
  CHECK(l.buckets[2].padded_numel == 10);
  for (std::size_t b = 0; b < l.buckets.size(); ++b)
    for (int u : l.buckets[b].units) CHECK(l.units[u].bucket == static_cast<int>(b));
}

TEST_CASE("a bucket may be filled exactly to its limit", "[layout]") {
  // Limit 6: {3,2} = 3+3 = 6 fits exactly; {1,0} = 2+4 = 6 too.
  const auto l = make_layout(units_of_sizes({4, 2, 3, 3}), options(1, 1, 6));
  REQUIRE(l.buckets.size() == 2);
  CHECK(l.buckets[0].units == std::vector<int>{3, 2});
  CHECK(l.buckets[1].units == std::vector<int>{1, 0});
}

TEST_CASE("bucket sizes count padded elements and cover every unit once", "[layout]") {
  // Each unit of 1..5 elements pads to 2 * 4 = 8 with N = 2, align 4; limit 20 holds two.
  const auto l = make_layout(units_of_sizes({1, 2, 3, 4, 5}), options(2, 4, 20));
  REQUIRE(l.buckets.size() == 3);
  CHECK(l.buckets[0].units == std::vector<int>{4, 3});
  CHECK(l.buckets[1].units == std::vector<int>{2, 1});
  CHECK(l.buckets[2].units == std::vector<int>{0});
  CHECK(l.buckets[0].padded_numel == 16);
}

TEST_CASE("a unit without params is rejected with its name", "[layout]") {
  CHECK_THROWS_WITH(make_layout({{"ok", {{"p", {1}}}}, {"empty_unit", {}}}, options(1, 1)),
                    Contains("unit 1") && Contains("'empty_unit'") && Contains("no parameters"));
}

TEST_CASE("a zero or negative dimension is rejected naming the param and unit", "[layout]") {
  CHECK_THROWS_WITH(make_layout({{"blk", {{"blk.w", {4, 0}}}}}, options(1, 1)),
                    Contains("'blk.w'") && Contains("'blk'") && Contains("dimension 1 = 0") &&
                        Contains("[4, 0]"));
  CHECK_THROWS_WITH(make_layout({{"blk", {{"blk.w", {-3}}}}}, options(1, 1)),
                    Contains("'blk.w'") && Contains("-3"));
}

TEST_CASE("a shape whose element count overflows is rejected", "[layout]") {
  const std::int64_t big = std::int64_t{1} << 40;
  CHECK_THROWS_WITH(make_layout({{"blk", {{"huge", {big, big}}}}}, options(1, 1)),
                    Contains("'huge'") && Contains("overflow"));
}

TEST_CASE("a parameter name registered twice is rejected naming both units", "[layout]") {
  CHECK_THROWS_WITH(
      make_layout({{"first", {{"w", {2}}}}, {"second", {{"v", {2}}, {"w", {3}}}}}, options(1, 1)),
      Contains("'w'") && Contains("'first'") && Contains("'second'") && Contains("twice"));
}

TEST_CASE("an empty parameter name is rejected", "[layout]") {
  CHECK_THROWS_WITH(make_layout({{"blk", {{"", {2}}}}}, options(1, 1)),
                    Contains("'blk'") && Contains("empty name"));
}

TEST_CASE("no units at all is rejected", "[layout]") {
  CHECK_THROWS_WITH(make_layout({}, options(1, 1)), Contains("no units"));
}

TEST_CASE("invalid layout options are rejected naming the option and value", "[layout]") {
  const std::vector<UnitSpec> m = units_of_sizes({4});
  CHECK_THROWS_WITH(make_layout(m, options(0, 1)), Contains("shard_ranks") && Contains("got 0"));
  CHECK_THROWS_WITH(make_layout(m, options(1, 0)), Contains("align_elements") && Contains("got 0"));
  CHECK_THROWS_WITH(make_layout(m, options(1, 1, 0)),
                    Contains("bucket_elements") && Contains("got 0"));
  CHECK_THROWS_WITH(make_layout(m, options(1, 1, 10, -1)),
                    Contains("persistence_threshold") && Contains("-1"));
}

TEST_CASE("param_index finds params by name", "[layout]") {
  const auto l = make_layout(awkward_model(), options(2, 4));
  CHECK(l.param_index("block1.c") == 6);
  CHECK(l.params[*l.param_index("block1.c")].name == "block1.c");
  CHECK_FALSE(l.param_index("nope").has_value());
}

TEST_CASE("describe lists units, params, buckets and totals", "[layout]") {
  const auto l = make_layout(awkward_model(), options(2, 4, 100, 2));
  const std::string d = zero::describe(l);
  for (const auto& u : l.units) CHECK_THAT(d, Contains(u.name));
  for (const auto& p : l.params) CHECK_THAT(d, Contains(p.name));
  CHECK_THAT(d, Contains("[13, 7]"));
  CHECK_THAT(d, Contains("buckets"));
  CHECK_THAT(d, Contains(std::to_string(l.numel) + " params"));
  CHECK_THAT(d, Contains(std::to_string(l.padded_numel) + " padded"));
}
