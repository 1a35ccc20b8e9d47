// The helpers the engine's check tests share (test_engine_checks.cpp, test_engine_options.cpp,
// test_engine.cpp): a two-unit model with uneven shards and padding, gradients written in the
// training dtype, one training step, every master weight, the bytes of the step's agreements.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "tests/zero/engine_harness.hpp"

namespace zero::testing::checks {

inline std::unique_ptr<comm::Communicator> world() {
  return comm::make_mpi_communicator();
}

// What step() all-gathers a rank besides the model's own collectives: before the update its
// summary (norm part, call digest, loss, whether a loss was passed: 32 bytes), and after it,
// where the optimizer state is sharded (stages 1-3), the first non-finite update (16 bytes; at
// stage 0 every rank applies the same update, so each knows without asking).
inline std::uint64_t agreement_bytes(int stage) {
  return 32 + (stage == 0 ? 0 : 16);
}
inline std::int64_t agreement_calls(int stage) {
  return stage == 0 ? 1 : 2;
}

// Two units of 40 and 37 elements: uneven shards at 2-4 ranks, and padding in each unit.
inline std::vector<UnitSpec> two_units() {
  return {UnitSpec{"a", {ParamSpec{"a.w", {40}}}},
          UnitSpec{"b", {ParamSpec{"b.w", {30}}, ParamSpec{"b.b", {7}}}}};
}

// Writes `value` into every gradient element of every param, in the training dtype; with
// `poison`, element 3 of param 0 is NaN instead.
inline void write_grads(Engine& e, float value, bool poison = false) {
  for (int p = 0; p < static_cast<int>(e.layout().params.size()); ++p) {
    TensorView g = e.grad(p);
    for (std::int64_t i = 0; i < g.numel; ++i) {
      const float x = poison && p == 0 && i == 3 ? std::numeric_limits<float>::quiet_NaN() : value;
      switch (g.dtype) {
        case DType::f32:
          g.as<float>()[i] = x;
          break;
        case DType::bf16:
          g.as<bf16>()[i] = to_bf16(x);
          break;
        case DType::f16:
          g.as<fp16>()[i] = to_fp16(x);
          break;
        default:
          FAIL("unexpected dtype");
      }
    }
  }
}

// Every unit's reduce_grads, in backward order.
inline void reduce_all(Engine& e) {
  for (int u = static_cast<int>(e.layout().units.size()) - 1; u >= 0; --u) e.reduce_grads(u);
}

inline StepReport train_step(Engine& e, float value, bool poison = false) {
  write_grads(e, value, poison);
  reduce_all(e);
  return e.step();
}

inline std::vector<std::vector<float>> all_master(Engine& e) {
  std::vector<std::vector<float>> out;
  for (int p = 0; p < static_cast<int>(e.layout().params.size()); ++p)
    out.push_back(e.gather_master(p));
  return out;
}

}  // namespace zero::testing::checks
