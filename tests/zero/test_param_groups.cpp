// Parameter groups as the engine applies them (zero/param_groups.hpp): which group each param
// is in, and each unit's state region cut into segments of one group. The engine's use of them
// is tested against the fp64 reference in test_engine.cpp.
#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "zero/param_groups.hpp"

using zero::UpdateSegment;

namespace {

// Two units: a [100] weight and a [10] bias, then a [50] norm weight; align 64.
zero::Layout layout(int ranks) {
  return zero::make_layout({{"a", {{"a.weight", {100}}, {"a.bias", {10}}}},
                            {"b", {{"b.norm.weight", {50}}}}},
                           {.shard_ranks = ranks, .align_elements = 64});
}

}  // namespace

TEST_CASE("The first group with a matching glob wins; a param in none gets -1") {
  const auto l = layout(1);
  std::vector<zero::ParamGroup> groups = {{{"*.bias"}, 0.0, 1.0}, {{"*norm*", "a.*"}, {}, 0.5}};
  CHECK(zero::param_groups_of(l, groups) == std::vector<int>{1, 0, 1});
  CHECK(zero::param_groups_of(l, {}) == std::vector<int>{-1, -1, -1});
}

TEST_CASE("A glob that matches no param is an error naming it") {
  const auto l = layout(1);
  try {
    zero::param_groups_of(l, {{{"*.bias"}, 0.0, 1.0}, {{"*norm*", "*.bais"}, {}, 1.0}});
    FAIL("no error");
  } catch (const zero::Error& e) {
    CHECK(std::string(e.what()) ==
          "param_groups[1].params[1]: '*.bais' matches no parameter (the model's are named like "
          "'a.weight')");
  }
}

TEST_CASE("Segments cover every unit's state region once, cut where the group changes") {
  const std::vector<int> bias_apart = {-1, 0, -1};
  // One rank, unsharded: unit a is [weight 0..100) pad [bias 128..138) pad to 192; unit b 64.
  CHECK(zero::update_segments(layout(1), bias_apart, false, 0) ==
        std::vector<UpdateSegment>{{0, 0, 128, -1}, {0, 128, 64, 0}, {1, 0, 64, -1}});
  // No groups: one segment a unit, as the engine ran before groups existed.
  CHECK(zero::update_segments(layout(1), {-1, -1, -1}, true, 0) ==
        std::vector<UpdateSegment>{{0, 0, 192, -1}, {1, 0, 64, -1}});
  // Two ranks: unit a pads to 256, shards of 128: rank 0 holds weight only, rank 1 the bias
  // (at 128, its shard's start) and padding; unit b pads to 128, rank 1's shard is padding only.
  CHECK(zero::update_segments(layout(2), bias_apart, true, 0) ==
        std::vector<UpdateSegment>{{0, 0, 128, -1}, {1, 0, 64, -1}});
  CHECK(zero::update_segments(layout(2), bias_apart, true, 1) ==
        std::vector<UpdateSegment>{{0, 0, 128, 0}, {1, 0, 64, -1}});
}
