// ZeRO-Offload (docs/offload.md) on the engine's device code path, emulated on the CPU: host
// memory stands for the device (the ledger's device space), and the offloaded state lives in the
// ledger's host space. Runs under mpirun at 1 to 4 ranks. What it checks:
//  - with optimizer offload (stages 1-3) and param offload (stage 3) the weights and losses are
//    bitwise those of the run without offload;
//  - the device and host bytes of every category equal zero::plan_memory's, exactly;
//  - a checkpoint saved with offload resumes without it, and back, bitwise;
//  - the offload configs of tests/zero/deepspeed_configs train, on the emulated device and on
//    CPU ranks (where offload changes nothing: the state is in host memory already).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "comm/emulated_device.hpp"
#include "tests/zero/engine_harness.hpp"
#include "tests/zero/shared_temp_dir.hpp"
#include "zero/backend.hpp"

using namespace zero;
using zero::testing::RunSpec;

namespace {

struct Offload {
  bool optimizer = false;
  bool params = false;  // stage 3
};

Config config_of(const RunSpec& spec, Offload o) {
  Config c = zero::testing::make_config(spec);
  if (o.optimizer) c.zero.offload_optimizer_device = OffloadDevice::cpu;
  if (o.params) c.zero.offload_param_device = OffloadDevice::cpu;
  return c;
}

// This rank's own communicator (fresh staging, as the planner assumes), posing as a device one.
std::unique_ptr<comm::Communicator> world_of(comm::Communicator& parent, bool device) {
  auto own = parent.split(0, parent.rank());
  if (!device) return own;
  return comm::make_emulated_device_communicator(std::move(own));
}

std::unique_ptr<Engine> engine_on(const Config& c, comm::Communicator& world, const RunSpec& spec,
                                  bool device) {
  EngineOptions eo = zero::testing::quiet();
  eo.memory = device ? comm::Memory::device : comm::Memory::host;
  eo.emulate_device = device;
  return std::make_unique<Engine>(c, world, models::mlp_units(spec.shape), eo);
}

void init(Engine& e, const RunSpec& spec) {
  e.init_params([&](int p, std::span<float> out) { models::mlp_init(spec.shape, p, out); });
}

// Steps [from, to) of the harness's data; the losses of each step.
std::vector<double> train(Engine& e, const RunSpec& spec, int rank, int n, std::int64_t from,
                          std::int64_t to) {
  const std::int64_t G = spec.shape.global_batch, micro = G / (n * spec.accumulation);
  models::MlpTrainer t(spec.shape, micro);
  std::vector<double> losses;
  for (std::int64_t s = from; s < to; ++s) {
    double loss = 0;
    for (std::int64_t k = 0; k < spec.accumulation; ++k)
      loss += t.micro_batch(e, s * G + rank * (G / n) + k * micro);
    e.step();
    losses.push_back(loss);
  }
  return losses;
}

struct Result {
  std::uint64_t checksum = 0;
  std::vector<double> losses;
  LedgerSnapshot device, host;
  Plan plan;
};

Result run(comm::Communicator& parent, const RunSpec& spec, const Config& c, bool device = true) {
  auto world = world_of(parent, device);
  const int n = world->size();
  auto e = engine_on(c, *world, spec, device);
  init(*e, spec);
  Result r;
  r.losses = train(*e, spec, world->rank(), n, 0, spec.steps);
  r.device = e->ledger().snapshot(e->memory().ledger.memory);
  r.host = e->ledger().snapshot(comm::Memory::host);
  PlanInput in = plan_input_from_config(c, n);
  in.units = models::mlp_units(spec.shape);
  in.activation_bytes =
      models::mlp_activation_bytes(spec.shape, spec.shape.global_batch / (n * spec.accumulation));
  in.device = device;
  r.plan = plan_memory(in);
  r.checksum = e->master_checksum();
  return r;
}

std::int64_t cur(const LedgerSnapshot& s, Category c) { return s[c].current; }

// The ledger's bytes per category against the plan's, device and host.
void check_against_plan(const Result& r, int stage) {
  const Plan& p = r.plan;
  const LedgerSnapshot &d = r.device, &h = r.host;
  CHECK(cur(d, Category::params) == p.device.params);
  CHECK(cur(d, Category::grads) == p.device.grads);
  CHECK(cur(d, Category::master) == p.device.master);
  CHECK(cur(d, Category::optimizer_m) + cur(d, Category::optimizer_v) == p.device.optimizer);
  CHECK(cur(h, Category::params) == p.host.params);
  CHECK(cur(h, Category::grads) == p.host.grads);
  CHECK(cur(h, Category::master) == p.host.master);
  CHECK(cur(h, Category::optimizer_m) + cur(h, Category::optimizer_v) == p.host.optimizer);
  // The host's buffers: stage 1's fp32 reduced shard, and the staging of the transfers at its
  // peak (a reduced bucket on its way to the host and a unit's new params on their way to the
  // device are never held at once).
  const std::int64_t staging =
      std::max(h[Category::buckets].peak, h[Category::step_scratch].peak);
  CHECK(cur(h, Category::reduced_grads) + staging == p.host.buffers);
  if (p.settings.offload)
    CHECK((stage == 1 ? cur(h, Category::reduced_grads) > 0 : cur(h, Category::grads) > 0));
  // The device's peak, as the emulated-device test checks it: the plan's staging term (NCCL's
  // model) swapped for what this run's MPI staging holds, the activations being on the host.
  std::int64_t nccl_staging = 0;
  for (const PlanTerm& t : p.terms)
    if (t.name.find("NCCL staging") != std::string::npos) nccl_staging = t.bytes;
  CHECK(d.peak_total ==
        p.peak_total - p.device.activations - nccl_staging + cur(d, Category::comm_staging));
}

}  // namespace

TEST_CASE("Offload on the emulated device trains bitwise as without it, at stages 1-3") {
  auto world = comm::make_mpi_communicator();
  for (int stage = 1; stage <= 3; ++stage)
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
        spec.reduce_bucket = stage == 2 ? 1200 : 0;  // buckets of several units too
        spec.bias_group = stage == 3;
        const Result plain = run(*world, spec, config_of(spec, {}));
        std::vector<Offload> kinds = {{true, false}};
        if (stage == 3) kinds.insert(kinds.end(), {{true, true}, {false, true}});
        for (Offload o : kinds) {
          INFO("ranks " << world->size() << ", stage " << stage << ", " << name_of(prec)
                        << ", reduce " << name_of(reduce) << ", accumulation " << accum
                        << ", offload optimizer " << o.optimizer << ", params " << o.params);
          const Result off = run(*world, spec, config_of(spec, o));
          CHECK(off.checksum == plain.checksum);
          CHECK(off.losses == plain.losses);
          check_against_plan(off, stage);
          CHECK(off.plan.settings.offload == o.optimizer);
          CHECK(off.plan.settings.offload_params == o.params);
          if (o.optimizer) {
            CHECK(cur(off.device, Category::master) == 0);
            CHECK(cur(off.host, Category::master) == cur(plain.device, Category::master));
            CHECK(cur(off.host, Category::optimizer_v) == cur(plain.device, Category::optimizer_v));
          }
          if (o.params) CHECK(cur(off.host, Category::params) > 0);
        }
      }
}

// The schedule of the copies: a bucket's reduced shards start for the host when its reduction
// is done and are waited for only when the next reduction needs a device buffer, or at the step,
// so every copy but the step's last (with overlap_comm, the last two: their reductions finish in
// step()'s drain) runs while the trainer computes the next units (a micro-batch's last copy
// behind the next micro-batch's forward).
TEST_CASE("A reduced shard's copy to the host runs behind the next units' backward") {
  auto world = comm::make_mpi_communicator();
  for (int stage : {1, 2, 3})
    for (bool overlap : {false, true})
      for (std::int64_t accum : {1, 2}) {
        RunSpec spec;
        spec.stage = stage;
        spec.steps = 2;
        spec.overlap = overlap;
        spec.accumulation = accum;
        spec.reduce_bucket = 1;  // a bucket per unit
        INFO("stage " << stage << ", overlap " << overlap << ", accumulation " << accum);
        auto w = world_of(*world, true);
        auto e = engine_on(config_of(spec, {true, false}), *w, spec, true);
        init(*e, spec);
        train(*e, spec, w->rank(), w->size(), 0, spec.steps);
        const auto buckets = static_cast<std::int64_t>(e->layout().buckets.size());
        REQUIRE(buckets >= 3);
        CHECK(e->stats().offload_copies_overlapped ==
              spec.steps * (accum * buckets - (overlap ? 2 : 1)));
      }
}

TEST_CASE("The device backends' asynchronous copies move the bytes, waited for in any order") {
  for (auto make : {make_emulated_device_backend, make_cpu_backend}) {
    auto b = make();
    std::vector<float> src(1 << 16), mid(src.size()), back(src.size());
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f;
    const std::size_t n = src.size() * sizeof(float);
    const Backend::CopyTicket down = b->download_async(mid.data(), src.data(), n);
    b->wait_copy(down);
    const Backend::CopyTicket up = b->upload_async(back.data(), mid.data(), n);
    const Backend::CopyTicket again = b->download_async(src.data(), src.data(), n);
    b->wait_copy(again);  // later ticket first: the earlier one is done too (one copy engine)
    b->wait_copy(up);
    b->wait_copy(up);  // twice: returns at once
    b->wait_copy({});
    CHECK(back == src);
    CHECK(down.id != 0);
    CHECK(up.id != down.id);
  }
}

TEST_CASE("Offload trains bitwise as without it with shard groups (MiCS) and hpZ") {
  auto world = comm::make_mpi_communicator();
  if (world->size() % 2 != 0 || world->size() < 2) return;
  for (int stage : {1, 2, 3})
    for (bool hpz : {false, true}) {
      if (hpz && stage != 3) continue;
      RunSpec spec;
      spec.stage = stage;
      spec.steps = 3;
      spec.accumulation = 2;
      spec.overlap = true;
      (hpz ? spec.hpz : spec.shard_size) = 2;
      INFO("ranks " << world->size() << ", stage " << stage << (hpz ? ", hpZ 2" : ", groups of 2"));
      const Result plain = run(*world, spec, config_of(spec, {}));
      const Result off = run(*world, spec, config_of(spec, {true, stage == 3}));
      CHECK(off.checksum == plain.checksum);
      CHECK(off.losses == plain.losses);
      check_against_plan(off, stage);
    }
}

TEST_CASE("On CPU ranks an offload config trains and plans exactly as without it") {
  auto world = comm::make_mpi_communicator();
  for (int stage = 1; stage <= 3; ++stage) {
    RunSpec spec;
    spec.stage = stage;
    spec.steps = 3;
    const Result plain = run(*world, spec, config_of(spec, {}), false);
    const Result off = run(*world, spec, config_of(spec, {true, stage == 3}), false);
    INFO("stage " << stage);
    CHECK(off.checksum == plain.checksum);
    CHECK(off.device.peak_total == plain.device.peak_total);
    CHECK(off.plan.peak_total == plain.plan.peak_total);
    CHECK(off.plan.host.total() == 0);
    CHECK_FALSE(off.plan.settings.offload);
    REQUIRE(off.plan.notes.size() == 1);
    CHECK(off.plan.notes[0].find("in host memory already") != std::string::npos);
  }
}

TEST_CASE("A checkpoint saved with offload resumes without it, and back, bitwise") {
  auto parent = comm::make_mpi_communicator();
  const zero::testing::SharedTempDir temp("zero-ckpt-offload-");
  const int n = parent->size(), rank = parent->rank();
  for (int stage = 1; stage <= 3; ++stage) {
    RunSpec spec;
    spec.stage = stage;
    const Offload on{true, stage == 3};
    auto w0 = world_of(*parent, true);
    auto straight = engine_on(config_of(spec, {}), *w0, spec, true);
    init(*straight, spec);
    train(*straight, spec, rank, n, 0, 6);
    for (bool save_offloaded : {true, false}) {
      INFO("stage " << stage << ", saved " << (save_offloaded ? "with" : "without") << " offload");
      const std::string at = cat(temp.path, "/s", stage, save_offloaded);
      auto w1 = world_of(*parent, true);
      auto first = engine_on(config_of(spec, save_offloaded ? on : Offload{}), *w1, spec, true);
      init(*first, spec);
      train(*first, spec, rank, n, 0, 3);
      Checkpointer(*first, at).save();
      auto w2 = world_of(*parent, true);
      auto resumed = engine_on(config_of(spec, save_offloaded ? Offload{} : on), *w2, spec, true);
      CHECK(load_checkpoint(*resumed, at).step == 3);
      train(*resumed, spec, rank, n, 3, 6);
      CHECK(resumed->master_checksum() == straight->master_checksum());
    }
  }
}

// Each file of tests/zero/deepspeed_configs that asks for offload, read as zero train reads it,
// trains a few steps on the emulated device (offloaded) and on CPU ranks, bitwise as the same
// config without offload.
TEST_CASE("The offload configs of the real DeepSpeed configs train, on the device and on the CPU") {
  const char* dir = std::getenv("ZERO_DEEPSPEED_CONFIGS");
  REQUIRE(dir != nullptr);
  auto world = comm::make_mpi_communicator();
  int seen = 0;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    std::ifstream f(path);
    std::stringstream text;
    text << f.rdbuf();
    if (text.str().find("offload") == std::string::npos) continue;
    INFO(path.filename().string());
    Config c = load_config(path);
    if (c.zero.offload_optimizer_device == OffloadDevice::none &&
        c.zero.offload_param_device == OffloadDevice::none)
      continue;  // names offload only to turn it off
    ++seen;
    // The batch, written for one world size or "auto" (zero train fills it from its flags and the
    // world): here the harness's, one micro-batch; a constant lr.
    c.gradient_accumulation_steps = 1;
    c.train_batch_size.reset();
    c.scheduler = SchedulerConfig{};
    Config without = c;
    without.zero.offload_optimizer_device = OffloadDevice::none;
    without.zero.offload_param_device = OffloadDevice::none;
    RunSpec spec;
    spec.stage = c.zero.stage;
    spec.steps = 3;
    for (bool device : {true, false}) {
      INFO((device ? "emulated device" : "cpu ranks"));
      const Result off = run(*world, spec, c, device);
      const Result plain = run(*world, spec, without, device);
      CHECK(off.checksum == plain.checksum);
      CHECK(off.losses == plain.losses);
      CHECK(off.plan.settings.offload == device);
      if (device) check_against_plan(off, spec.stage);
    }
  }
  CHECK(seen == 7);
}
