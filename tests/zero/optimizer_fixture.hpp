// What the optimizer tests against make_optimizer_reference.py share (test_optimizers.cpp: Lion
// and LAMB; test_optimizer_muon.cpp): its model, its values, the engine over them, and the first
// element whose bits differ from a reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "zero/zero.hpp"

namespace zero::testing::optimizer_fixture {

// The model of make_optimizer_reference.py (PARAMS): uneven shards at 2-4 ranks with 4-element
// alignment, params cut across ranks.
inline std::vector<UnitSpec> units() {
  return {UnitSpec{"a", {ParamSpec{"a.w", {8, 12}}, ParamSpec{"a.b", {8}}}},
          UnitSpec{"b", {ParamSpec{"b.w", {10, 10}}, ParamSpec{"b.b", {10}}}},
          UnitSpec{"c", {ParamSpec{"c.w", {5, 7}}}}};
}

// make_optimizer_reference.py's value(): splitmix64 of (seed << 32 | i), an fp32-exact value in
// [-scale, scale), 1 in 16 exactly 0.
inline float value(std::uint64_t seed, std::uint64_t i, double scale) {
  std::uint64_t z = (seed << 32 | i) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  if ((z & 15) == 0) return 0.0f;
  return static_cast<float>(static_cast<double>(static_cast<std::int64_t>(z >> 40) - (1 << 23)) *
                            std::ldexp(1.0, -23) * scale);
}

// Summed gradients (the reference's gradient comes whole from the ranks' parts) and its alignment.
inline EngineOptions options() {
  EngineOptions o;
  o.reduction = GradReduction::sum;
  o.align_elements = 4;
  o.log = [](const std::string&) {};
  return o;
}

// The engine over units(), its params the reference's initial values.
inline std::unique_ptr<Engine> make_engine(comm::Communicator& w, const Config& c) {
  auto e = std::make_unique<Engine>(c, w, units(), options());
  e->init_params([](int p, std::span<float> out) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = value(1000 + p, i, 0.5);
  });
  return e;
}

// The first element whose bits differ from `want` (per param, its fp32 bits), or "" when none
// does. A collective: every rank calls it.
inline std::string first_difference(Engine& e,
                                    const std::vector<std::vector<std::uint32_t>>& want) {
  std::vector<std::vector<float>> all;  // gathered first: gather_master is a collective
  for (int p = 0; p < static_cast<int>(want.size()); ++p) all.push_back(e.gather_master(p));
  for (std::size_t p = 0; p < want.size(); ++p) {
    if (all[p].size() != want[p].size()) return "a param's size";
    for (std::size_t i = 0; i < all[p].size(); ++i) {
      std::uint32_t b = 0;
      std::memcpy(&b, &all[p][i], 4);
      if (b != want[p][i])
        return cat("param ", e.layout().params[p].name, " element ", i, ": ", all[p][i], " (0x",
                   std::hex, b, "), reference 0x", want[p][i]);
    }
  }
  return "";
}

}  // namespace zero::testing::optimizer_fixture
