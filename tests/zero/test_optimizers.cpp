// Lion and LAMB under mpirun (1 to 4 ranks): the sharded engine at every stage equals the
// single-rank fp32 reference that tests/zero/make_optimizer_reference.py computed from the
// published definitions (fixtures/optimizer_reference.hpp), each optimizer keeps exactly its
// state (Lion one fp32 buffer, LAMB two), and its checkpoints resume bitwise and reshard N -> M.
//
// The gradients are fp32 values given by rank 0 alone, reduced as a sum (the other ranks give
// zeros, and x + 0 = x exactly), so every rank count reduces exactly the reference's gradient and
// the update is the only arithmetic that could differ. Lion is element-wise: bitwise at every rank
// count. LAMB's trust ratio sums squares over the pieces that each rank count cuts differently;
// the double sums can then differ in their last bits and the fp32 ratio by one ulp. For these
// inputs it does not, and the check is bitwise; a future change of the inputs that lands a ratio
// on a rounding boundary would show as a one-ulp difference (docs/optimizers.md).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/zero/fixtures/optimizer_reference.hpp"
#include "tests/zero/optimizer_fixture.hpp"
#include "tests/zero/shared_temp_dir.hpp"
#include "zero/checkpoint_format.hpp"
#include "zero/zero.hpp"

using namespace zero;
namespace ref = zero::testing::optimizer_reference;
namespace optimizer_fixture = zero::testing::optimizer_fixture;
using optimizer_fixture::make_engine;
using optimizer_fixture::options;
using optimizer_fixture::units;
using optimizer_fixture::value;

namespace {

constexpr int kSteps = 5;

Config config_for(OptimizerType type, int stage, std::int64_t accumulation) {
  Config c;
  c.zero.stage = stage;
  c.precision = Precision::fp32;
  c.gradient_accumulation_steps = accumulation;
  c.gradient_clipping = 0;
  c.optimizer.type = type;
  c.param_groups.push_back({{"*.b"}, 0.0, 0.5});
  if (type == OptimizerType::lion) {
    c.optimizer.lr = 1e-3;
    c.optimizer.weight_decay = 0.1;
    c.optimizer.beta2 = 0.99;
  } else {
    c.optimizer.lr = 1e-2;
    c.optimizer.weight_decay = 0.01;
    c.optimizer.eps = 1e-6;
    c.optimizer.max_coeff = 0.3;
    c.optimizer.min_coeff = 0.01;
  }
  return c;
}

// The micro-batches of steps [from, to) (callers pass one step): rank 0 gives the reference's gradient in the first micro-batch, every other
// rank and micro-batch zeros.
void train(Engine& e, std::int64_t from, std::int64_t to) {
  const std::int64_t accumulation = e.config().gradient_accumulation_steps;
  for (std::int64_t s = from; s < to; ++s)
    for (std::int64_t k = 0; k < accumulation; ++k)
      for (int u = 0; u < static_cast<int>(e.layout().units.size()); ++u) {
        e.gather(u);
        const UnitLayout& U = e.layout().units[static_cast<std::size_t>(u)];
        for (int p = U.first_param; p < U.first_param + U.param_count; ++p) {
          const std::span<float> g = e.grad(p).as<float>();
          for (std::size_t i = 0; i < g.size(); ++i)
            g[i] = e.rank() == 0 && k == 0
                       ? value(7919 * static_cast<std::uint64_t>(s + 1) + p, i, 0.25)
                       : 0.0f;
        }
        e.release(u);
        e.reduce_grads(u);
      }
}

void train_steps(Engine& e, std::int64_t from, std::int64_t to) {
  for (std::int64_t s = from; s < to; ++s) {
    train(e, s, s + 1);
    const StepReport r = e.step();
    REQUIRE_FALSE(r.skipped);
  }
}

const std::vector<std::vector<std::uint32_t>>& reference(OptimizerType t) {
  return t == OptimizerType::lion ? ref::kLion : ref::kLamb;
}

// The first element whose bits differ from the reference, or "" when none does.
std::string first_difference(Engine& e, OptimizerType t) {
  return optimizer_fixture::first_difference(e, reference(t));
}

const char* name(OptimizerType t) {
  return t == OptimizerType::lion ? "Lion" : "LAMB";
}

}  // namespace

TEST_CASE("Lion and LAMB at every stage and rank count equal the single-rank fp32 reference") {
  auto w = comm::make_mpi_communicator();
  for (OptimizerType t : {OptimizerType::lion, OptimizerType::lamb})
    for (int stage = 0; stage <= 3; ++stage)
      for (std::int64_t accumulation : {1, 2}) {
        CAPTURE(name(t), stage, accumulation, w->size());
        auto e = make_engine(*w, config_for(t, stage, accumulation));
        train_steps(*e, 0, kSteps);
        CHECK(first_difference(*e, t) == "");
      }
}

TEST_CASE("Lion keeps one fp32 state buffer and LAMB two, and the planner counts exactly those") {
  auto w = comm::make_mpi_communicator();
  for (OptimizerType t : {OptimizerType::lion, OptimizerType::lamb, OptimizerType::adamw})
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(name_of(t), stage, w->size());
      auto own = w->split(0, w->rank());  // its staging is this engine's alone
      const Config c = config_for(t, stage, 1);
      auto e = make_engine(*own, c);
      train_steps(*e, 0, 1);
      e->reset_comm_accounting();
      train_steps(*e, 1, 2);
      const MemoryReport m = e->memory();
      const Engine::GroupAccounting moved = e->comm_accounting_by_group();
      const std::int64_t state = stage == 0 ? e->layout().padded_numel : e->layout().shard_numel;
      CHECK(m.optimizer == (t == OptimizerType::lion ? 4 : 8) * state);
      CHECK(m.master == 4 * state);
      PlanInput in = plan_input_from_config(c, own->size());
      in.units = units();
      in.device = false;
      in.align_elements = 4;
      const Plan p = plan_memory(in);
      CHECK(p.device.optimizer == m.optimizer);
      CHECK(p.device.model_states() == m.model_states());
      CHECK(p.peak_total == m.peak_total);
      // And a step's collectives, LAMB's all-gather of its norms among them.
      auto bytes = [](const comm::Accounting& a) {
        std::int64_t b = 0;
        for (const comm::OpStats& o : a.ops) b += static_cast<std::int64_t>(o.payload_bytes);
        return b;
      };
      CHECK(p.traffic.shard == bytes(moved.shard));
      CHECK(p.traffic.world == bytes(moved.world));
      CHECK(p.collectives.world.all_gather.calls ==
            static_cast<std::int64_t>(moved.world[comm::Op::all_gather].calls));
    }
}

TEST_CASE("Lion and LAMB resume bitwise from a checkpoint, holding exactly their state") {
  auto w = comm::make_mpi_communicator();
  for (OptimizerType t : {OptimizerType::lion, OptimizerType::lamb})
    for (int stage : {0, 2, 3}) {
      CAPTURE(name(t), stage, w->size());
      zero::testing::SharedTempDir dir;
      const Config c = config_for(t, stage, 1);
      {
        auto first = make_engine(*w, c);
        train_steps(*first, 0, 3);
        Checkpointer(*first, dir.path).save();
      }
      auto resumed = std::make_unique<Engine>(c, *w, units(), options());
      const LoadResult loaded = load_checkpoint(*resumed, dir.path);  // every rank: it is there
      CHECK(loaded.step == 3);
      CHECK(loaded.meta.tensors == (t == OptimizerType::lion ? 2 : 3));
      train_steps(*resumed, 3, kSteps);
      CHECK(first_difference(*resumed, t) == "");
      // The other optimizer's state does not fit: refused in one sentence, nothing loaded.
      const OptimizerType other = t == OptimizerType::lion ? OptimizerType::lamb : OptimizerType::lion;
      auto wrong = make_engine(*w, config_for(other, stage, 1));
      CHECK_THROWS_WITH(load_checkpoint(*wrong, dir.path),
                        Catch::Contains("resume with the optimizer that saved it"));
    }
}

TEST_CASE("A Lion or LAMB checkpoint saved at 4 ranks resumes at 3, 2 and 1 and ends on the "
          "reference",
          "[4ranks]") {
  auto w = comm::make_mpi_communicator();
  REQUIRE(w->size() == 4);
  const int r = w->rank();
  for (OptimizerType t : {OptimizerType::lion, OptimizerType::lamb}) {
    CAPTURE(name(t));
    zero::testing::SharedTempDir dir;
    {
      auto e4 = make_engine(*w, config_for(t, 3, 1));
      train_steps(*e4, 0, 3);
      Checkpointer(*e4, dir.path).save();
    }
    for (auto [m, stage] : {std::pair{3, 1}, std::pair{2, 0}, std::pair{1, 2}}) {
      CAPTURE(m, stage);
      auto group = w->split(r < m ? 0 : 1, r);
      if (r >= m) continue;
      auto e = std::make_unique<Engine>(config_for(t, stage, 1), *group, units(), options());
      CHECK(load_checkpoint(*e, dir.path).step == 3);
      train_steps(*e, 3, kSteps);
      CHECK(first_difference(*e, t) == "");
    }
  }
}
