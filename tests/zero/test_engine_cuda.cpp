// The engine on a GPU (one rank per GPU, NCCL, state in device memory, the MLP on cuBLASLt)
// against itself and against the CPU engine: stages 0-3 bitwise identical on the GPU; the GPU
// run within a stated tolerance of the CPU run of the same training (the only difference in
// the math is the GEMMs' summation order); the planner's model states equal the device ledger.
// Exits 77 (meson: skipped) unless every rank has a GPU of its own (tests/gpu_main.cpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <string>

#include "comm/nccl_communicator.hpp"
#include "kernels/cuda/device.hpp"
#include "models/mlp.hpp"
#include "tests/zero/shared_temp_dir.hpp"
#include "zero/zero.hpp"

using namespace zero;

namespace {

struct Run {
  std::uint64_t checksum = 0;
  std::vector<double> losses;
  std::vector<std::vector<float>> master;
  MemoryReport memory;
  Plan plan;
};

Run train(comm::Communicator& world, comm::Memory where, int stage, Precision precision,
          int steps = 20) {
  models::MlpShape shape{3, 64, 32, 5};
  Config c;
  c.zero.stage = stage;
  c.precision = precision;
  c.gradient_clipping = 1.0;
  c.optimizer.lr = 1e-2;
  c.optimizer.weight_decay = 0.01;
  c.zero.stage3_param_persistence_threshold = 0;
  EngineOptions eo;
  eo.memory = where;
  const int n = world.size(), r = world.rank();
  const std::int64_t micro = shape.global_batch / n;
  Engine engine(c, world, models::mlp_units(shape), eo);
  engine.init_params([&](int p, std::span<float> out) { models::mlp_init(shape, p, out); });
  models::MlpTrainer trainer(shape, micro, where);
  Run out;
  for (int s = 0; s < steps; ++s) {
    out.losses.push_back(trainer.micro_batch(engine, s * shape.global_batch + r * micro));
    engine.step();
  }
  out.memory = engine.memory();
  PlanInput in = plan_input_from_config(c, n);
  in.units = models::mlp_units(shape);
  in.activation_bytes = models::mlp_activation_bytes(shape, micro);
  in.device = where == comm::Memory::device;
  out.plan = plan_memory(in);
  for (int p = 0; p < static_cast<int>(engine.layout().params.size()); ++p)
    out.master.push_back(engine.gather_master(p));
  out.checksum = engine.master_checksum();
  return out;
}

double relative_l2(const std::vector<std::vector<float>>& a,
                   const std::vector<std::vector<float>>& b) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j) {
      d += (double(a[i][j]) - b[i][j]) * (double(a[i][j]) - b[i][j]);
      n += double(b[i][j]) * b[i][j];
    }
  return std::sqrt(d / n);
}

}  // namespace

TEST_CASE("On the GPU, stages 0-3 give bitwise identical weights after 20 steps") {
  auto gpu = comm::make_nccl_communicator(MPI_COMM_WORLD);
  for (Precision p : {Precision::bf16, Precision::fp32}) {
    const Run base = train(*gpu, comm::Memory::device, 0, p);
    for (int stage = 1; stage <= 3; ++stage) {
      const Run r = train(*gpu, comm::Memory::device, stage, p);
      INFO("stage " << stage << ", " << name_of(p));
      CHECK(r.checksum == base.checksum);
      CHECK(r.losses == base.losses);
    }
  }
}

TEST_CASE("GPU and CPU training agree to the stated tolerance") {
  auto gpu = comm::make_nccl_communicator(MPI_COMM_WORLD);
  auto cpu = comm::make_mpi_communicator();
  // fp32: only GEMM summation order differs -> 1e-4 relative (L2 over all weights) after 20 steps.
  // bf16: a last-bit difference can flip a bf16 rounding of a weight copy -> 1e-2.
  for (auto [p, tol] : {std::pair{Precision::fp32, 1e-4}, std::pair{Precision::bf16, 1e-2}}) {
    for (int stage = 0; stage <= 3; ++stage) {
      const Run g = train(*gpu, comm::Memory::device, stage, p);
      const Run c = train(*cpu, comm::Memory::host, stage, p);
      const double diff = relative_l2(g.master, c.master);
      INFO("stage " << stage << ", " << name_of(p) << ": relative L2 difference " << diff);
      CHECK(diff < tol);
      for (std::size_t s = 0; s < g.losses.size(); ++s)
        CHECK(g.losses[s] == Approx(c.losses[s]).epsilon(tol));
      std::printf(
          "gpu-vs-cpu stage %d %s: master relative L2 %.3g (bound %.0e), final loss gpu %.6f cpu "
          "%.6f\n",
          stage, std::string(name_of(p)).c_str(), diff, tol, g.losses.back(), c.losses.back());
    }
  }
}

TEST_CASE("The planner's model states equal the device ledger's") {
  auto gpu = comm::make_nccl_communicator(MPI_COMM_WORLD);
  for (int stage = 0; stage <= 3; ++stage) {
    const Run r = train(*gpu, comm::Memory::device, stage, Precision::bf16, 2);
    INFO("stage " << stage << "\n" << explain(r.plan) << describe(r.memory.ledger));
    CHECK(r.memory.ledger.memory == comm::Memory::device);
    CHECK(r.plan.device.model_states() == r.memory.model_states());
    CHECK(r.plan.device.activations == r.memory.activations);
    CHECK(std::abs(double(r.plan.peak_total - r.memory.peak_total)) <= 0.02 * r.memory.peak_total);
  }
}

TEST_CASE("A checkpoint saved from GPU memory loads bitwise into a CPU engine, and back") {
  auto gpu = comm::make_nccl_communicator(MPI_COMM_WORLD);
  auto cpu = comm::make_mpi_communicator();
  models::MlpShape shape{3, 64, 32, 5};
  Config c;
  c.zero.stage = 3;
  c.optimizer.lr = 1e-2;
  c.zero.stage3_param_persistence_threshold = 0;
  const zero::testing::SharedTempDir temp("zero-ckpt-gpu-");
  const std::string& dir = temp.path;
  const int n = cpu->size(), r = cpu->rank();
  const std::int64_t micro = shape.global_batch / n;
  auto run = [&](comm::Communicator& w, comm::Memory where, const std::string& from,
                 const std::string& to, int steps) {
    EngineOptions eo;
    eo.memory = where;
    Engine e(c, w, models::mlp_units(shape), eo);
    if (from.empty())
      e.init_params([&](int p, std::span<float> out) { models::mlp_init(shape, p, out); });
    else
      load_checkpoint(e, from);
    models::MlpTrainer t(shape, micro, where);
    for (int s = 0; s < steps; ++s) {
      t.micro_batch(e, s * shape.global_batch + r * micro);
      e.step();
    }
    if (!to.empty()) Checkpointer(e, to).save();
    return e.master_checksum();
  };
  const std::uint64_t on_gpu = run(*gpu, comm::Memory::device, "", dir + "/a", 3);
  // The CPU engine loads the GPU's state: the same master weights.
  CHECK(run(*cpu, comm::Memory::host, dir + "/a", dir + "/b", 0) == on_gpu);
  // And the GPU engine loads the CPU's save of it: still the same.
  CHECK(run(*gpu, comm::Memory::device, dir + "/b", "", 0) == on_gpu);
}
