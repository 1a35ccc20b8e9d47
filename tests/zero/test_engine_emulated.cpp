// The engine's device code path on the CPU (EngineOptions::emulate_device): host memory counted
// as device memory, CPU kernels, and a communicator that, like NCCL, accepts only device-tagged
// buffers. Runs under mpirun at 1 to 4 ranks. What it checks, without a GPU:
//  - every buffer the engine hands to the communicator is tagged device (a host-tagged one throws);
//  - the memory report comes from the device ledger, and the host ledger holds nothing;
//  - the device path computes bitwise what the host path computes (weights, losses, checksums);
//  - the planner equals the device ledger, as it equals the host ledger.
#include <catch2/catch.hpp>

#include "comm/emulated_device.hpp"
#include "tests/zero/engine_harness.hpp"
#include "tests/zero/shared_temp_dir.hpp"

using namespace zero;
using zero::testing::RunSpec;

namespace {

struct Result {
  std::uint64_t checksum = 0;
  std::vector<double> losses;
  MemoryReport memory;
  LedgerSnapshot host_space;
  Plan plan;
  Plan emulated_plan;  // PlanInput::emulated_device: the device path with MPI's staging
};

Result run(comm::Communicator& parent, const RunSpec& spec, bool device) {
  auto own = parent.split(0, parent.rank());  // fresh staging, as the planner assumes
  std::unique_ptr<comm::Communicator> world =
      device ? comm::make_emulated_device_communicator(std::move(own)) : std::move(own);
  const int n = world->size();
  const std::int64_t G = spec.shape.global_batch, micro = G / (n * spec.accumulation);
  EngineOptions eo;
  eo.memory = device ? comm::Memory::device : comm::Memory::host;
  eo.emulate_device = device;
  const Config config = zero::testing::make_config(spec);
  Engine engine(config, *world, models::mlp_units(spec.shape), eo);
  engine.init_params([&](int p, std::span<float> out) { models::mlp_init(spec.shape, p, out); });
  // The trainer works on host memory: emulated device memory is host memory.
  models::MlpTrainer trainer(spec.shape, micro);
  // The plan's peak holds the activations, so it is a step's; a device ledger without them
  // could peak earlier, on construction's agreement staged through device memory (a world of
  // one rank at stage 0 holds no step buffer above it). The steps' peak is what is compared.
  if (device) engine.ledger().reset_peaks();
  Result r;
  for (std::int64_t s = 0; s < spec.steps; ++s) {
    double loss = 0;
    for (std::int64_t k = 0; k < spec.accumulation; ++k)
      loss += trainer.micro_batch(engine, s * G + world->rank() * (G / n) + k * micro);
    engine.step();
    r.losses.push_back(loss);
  }
  r.memory = engine.memory();
  r.host_space = engine.ledger().snapshot(comm::Memory::host);
  PlanInput in = plan_input_from_config(config, n);
  in.units = models::mlp_units(spec.shape);
  in.activation_bytes = models::mlp_activation_bytes(spec.shape, micro);
  // A device run plans the device path (nothing kept between steps, the norm parts staged
  // through device memory) with NCCL's staging; this run's staging is MPI's (posing as a device): the
  // test swaps the one term.
  in.device = device;
  r.plan = plan_memory(in);
  in.emulated_device = device;
  r.emulated_plan = plan_memory(in);
  r.checksum = engine.master_checksum();
  return r;
}

}  // namespace

TEST_CASE("The device code path, emulated on the CPU, equals the host path bitwise") {
  auto world = comm::make_mpi_communicator();
  for (int stage = 0; stage <= 3; ++stage)
    for (auto [prec, reduce] :
         {std::pair{Precision::bf16, DType::f32}, std::pair{Precision::bf16, DType::bf16},
          std::pair{Precision::fp32, DType::f32}})
      for (std::int64_t accum : {1, 2}) {
        RunSpec spec;
        spec.stage = stage;
        spec.precision = prec;
        spec.reduce = reduce;
        spec.accumulation = accum;
        spec.steps = 4;
        spec.overlap = accum == 2;
        const Result h = run(*world, spec, false);
        const Result d = run(*world, spec, true);
        INFO("ranks " << world->size() << ", stage " << stage << ", " << name_of(prec)
                      << ", reduce " << name_of(reduce) << ", accumulation " << accum);
        CHECK(d.checksum == h.checksum);
        CHECK(d.losses == h.losses);
        // The report is the device ledger's. The host ledger holds only what the trainer
        // recorded there (its activations: this trainer computes on the host).
        const int n = world->size();
        const std::int64_t micro = spec.shape.global_batch / (n * accum);
        CHECK(d.memory.ledger.memory == comm::Memory::device);
        CHECK(d.memory.activations == 0);
        CHECK(d.host_space.peak_total == models::mlp_activation_bytes(spec.shape, micro));
        CHECK(d.host_space.live_allocations == 0);
        // The planner against the device ledger, exact: the plan's staging term (NCCL's model)
        // swapped for what this run's MPI staging holds (grow-only, so at its size at the peak).
        std::int64_t nccl_staging = 0;  // no term: none (a 16-bit reduce needs no fp32 copy)
        for (const PlanTerm& t : d.plan.terms)
          if (t.name.find("NCCL staging") != std::string::npos) nccl_staging = t.bytes;
        const std::int64_t planned = d.plan.peak_total - d.plan.device.activations - nccl_staging +
                                     d.memory.ledger[Category::comm_staging].current;
        CHECK(d.memory.peak_total == planned);
        // Planned as an emulated device (MPI's staging on the device), the device ledger
        // exactly, but the activations, which this trainer records in host memory.
        CHECK(d.memory.peak_total ==
              d.emulated_plan.peak_total - d.emulated_plan.device.activations);
        CHECK(d.memory.buffers == d.emulated_plan.device.buffers);
        CHECK(h.memory.peak_total == h.plan.peak_total);  // the host path: the plan, exactly
        CHECK(d.memory.model_states() == h.memory.model_states());
        CHECK(d.memory.params == h.memory.params);
        CHECK(d.memory.grads == h.memory.grads);
        CHECK(d.memory.master == h.memory.master);
        CHECK(d.memory.optimizer == h.memory.optimizer);
        CHECK(d.plan.device.model_states() == d.memory.model_states());
      }
}

TEST_CASE("A checkpoint saved on the device path resumes bitwise on the host path, and back") {
  auto parent = comm::make_mpi_communicator();
  const zero::testing::SharedTempDir temp("zero-ckpt-dev-");
  const std::string& dir = temp.path;
  for (int stage : {1, 3}) {
    RunSpec spec;
    spec.stage = stage;
    const int n = parent->size();
    const std::int64_t G = spec.shape.global_batch, micro = G / n;
    auto engine_on = [&](bool device, std::unique_ptr<comm::Communicator>& world) {
      auto own = parent->split(0, parent->rank());
      world = device ? comm::make_emulated_device_communicator(std::move(own)) : std::move(own);
      EngineOptions eo;
      eo.memory = device ? comm::Memory::device : comm::Memory::host;
      eo.emulate_device = device;
      return std::make_unique<Engine>(zero::testing::make_config(spec), *world,
                                      models::mlp_units(spec.shape), eo);
    };
    auto train = [&](Engine& e, std::int64_t from, std::int64_t to) {
      models::MlpTrainer t(spec.shape, micro);
      for (std::int64_t s = from; s < to; ++s) {
        t.micro_batch(e, s * G + parent->rank() * (G / n));
        e.step();
      }
    };
    std::unique_ptr<comm::Communicator> w1, w2, w3, w4;
    auto straight = engine_on(false, w1);
    straight->init_params(
        [&](int p, std::span<float> out) { models::mlp_init(spec.shape, p, out); });
    train(*straight, 0, 6);
    for (bool save_on_device : {true, false}) {
      INFO("stage " << stage << ", saved on the " << (save_on_device ? "device" : "host"));
      const std::string at = cat(dir, "/s", stage, save_on_device);
      auto first = engine_on(save_on_device, w2);
      first->init_params(
          [&](int p, std::span<float> out) { models::mlp_init(spec.shape, p, out); });
      train(*first, 0, 3);
      Checkpointer(*first, at).save();
      auto resumed = engine_on(!save_on_device, w3);
      CHECK(load_checkpoint(*resumed, at).step == 3);
      train(*resumed, 3, 6);
      CHECK(resumed->master_checksum() == straight->master_checksum());
    }
  }
}
