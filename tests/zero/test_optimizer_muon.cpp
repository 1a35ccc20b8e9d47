// Muon under mpirun (1 to 4 ranks): each 2-D weight owned whole by one rank, Newton-Schulz on
// the owner once per optimizer step, AdamW on the rest; the sharded engine at every stage equals
// the single-rank fp32 reference of tests/zero/make_optimizer_reference.py bit for bit
// (fixtures/optimizer_reference.hpp), gradient accumulation does not change the step (DeepSpeed
// #8443), stage 0 runs Muon (DeepSpeed #8442), the state, plan and ledger agree, and a
// checkpoint resumes bitwise at another rank count.
//
// The reference is bitwise, not within a bound: the owner of a matrix computes Newton-Schulz
// from the whole, summed gradient, whatever the rank count, and every product adds its terms in
// index order (kernels/cpu/optimizers.cpp), which the reference does too. The gradients are
// fp32 values whose elements each come from one rank and one micro-batch (zeros elsewhere), so
// every rank count and accumulation reduces exactly the reference's gradient.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "tests/zero/fixtures/optimizer_reference.hpp"
#include "tests/zero/optimizer_fixture.hpp"
#include "kernels/muon_math.hpp"
#include "models/gpt_shape.hpp"
#include "tests/zero/shared_temp_dir.hpp"
#include "zero/zero.hpp"

using namespace zero;
namespace ref = zero::testing::optimizer_reference;
using namespace zero::testing::optimizer_fixture;

namespace {

constexpr int kSteps = 5;

// make_optimizer_reference.py's kMuon (moonshot: kMuonMoonshot).
Config config_for(int stage, std::int64_t accumulation, bool moonshot = false) {
  Config c;
  c.zero.stage = stage;
  c.precision = Precision::fp32;
  c.gradient_accumulation_steps = accumulation;
  c.gradient_clipping = 0;
  c.optimizer.type = OptimizerType::muon;
  c.optimizer.lr = 1e-3;
  c.optimizer.beta2 = 0.95;
  c.optimizer.eps = 1e-8;
  c.optimizer.muon_lr = moonshot ? 0.01 : 0.02;
  c.optimizer.weight_decay = moonshot ? 0.0 : 0.1;
  c.optimizer.momentum = moonshot ? 0.9 : 0.95;
  c.optimizer.nesterov = !moonshot;
  c.optimizer.match_rms_adamw = moonshot;
  c.param_groups.push_back({{"*.b"}, 0.0, 0.5});
  return c;
}

// Step s's gradient, each element given by one rank (i mod ranks) in one micro-batch
// ((i / ranks) mod accumulation), zeros elsewhere: the same sum at any split, the same samples
// cut into micro-batches.
void train_steps(Engine& e, std::int64_t from, std::int64_t to) {
  const std::int64_t accumulation = e.config().gradient_accumulation_steps;
  const auto ranks = static_cast<std::size_t>(e.ranks());
  for (std::int64_t s = from; s < to; ++s) {
    for (std::int64_t k = 0; k < accumulation; ++k)
      for (int u = 0; u < static_cast<int>(e.layout().units.size()); ++u) {
        e.gather(u);
        const UnitLayout& U = e.layout().units[static_cast<std::size_t>(u)];
        for (int p = U.first_param; p < U.first_param + U.param_count; ++p) {
          const std::span<float> g = e.grad(p).as<float>();
          for (std::size_t i = 0; i < g.size(); ++i) {
            const bool mine = i % ranks == static_cast<std::size_t>(e.rank()) &&
                              static_cast<std::int64_t>(i / ranks) % accumulation == k;
            g[i] = mine ? value(7919 * static_cast<std::uint64_t>(s + 1) + p, i, 0.25) : 0.0f;
          }
        }
        e.release(u);
        e.reduce_grads(u);
      }
    REQUIRE_FALSE(e.step().skipped);
  }
}

}  // namespace

TEST_CASE("Muon at every stage, rank count and accumulation equals the single-rank fp32 "
          "reference (stage 0 runs Muon, not SGD; 4 micro-batches step as 1)") {
  auto w = comm::make_mpi_communicator();
  for (bool moonshot : {false, true})
    for (int stage = 0; stage <= 3; ++stage)
      for (std::int64_t accumulation : {1, 4}) {
        CAPTURE(moonshot, stage, accumulation, w->size());
        auto e = make_engine(*w, config_for(stage, accumulation, moonshot));
        train_steps(*e, 0, kSteps);
        CHECK(first_difference(*e, moonshot ? ref::kMuonMoonshot : ref::kMuon) == "");
      }
}

TEST_CASE("Each Muon matrix lies whole in its owner's shard; units without one are laid out as "
          "without Muon") {
  auto w = comm::make_mpi_communicator();
  const Config c = config_for(1, 1);
  auto e = make_engine(*w, c);
  const Layout& L = e->layout();
  for (const ParamLayout& p : L.params) {
    CAPTURE(p.name, w->size());
    CHECK((p.owner >= 0) == (p.shape.size() == 2));
    if (p.owner < 0) continue;
    const Range r = L.units[static_cast<std::size_t>(p.unit)].shard_range(p.owner);
    CHECK(p.offset >= r.begin);
    CHECK(p.offset + p.numel <= r.end);
  }
  // No whole params: the same layout, field by field, as the padding rule alone.
  LayoutOptions lo;
  lo.shard_ranks = 4;
  lo.align_elements = 4;
  const std::vector<UnitSpec> specs = units();
  const Layout plain = make_layout(specs, lo);
  lo.whole_params = {"a.w"};
  const Layout owned = make_layout(specs, lo);
  for (std::size_t u = 1; u < specs.size(); ++u) {
    CHECK(owned.units[u].padded_numel == plain.units[u].padded_numel);
    for (int p = plain.units[u].first_param; p < plain.units[u].first_param + plain.units[u].param_count; ++p)
      CHECK(owned.params[static_cast<std::size_t>(p)].offset == plain.params[static_cast<std::size_t>(p)].offset);
  }
  CHECK(owned.params[0].owner == 0);
  CHECK(owned.units[0].shard_numel >= 96);  // a.w's 96 elements in one shard
}

TEST_CASE("The planner equals the ledger for every optimizer, Muon's layout and state included") {
  auto w = comm::make_mpi_communicator();
  for (OptimizerType t : {OptimizerType::adamw, OptimizerType::lion, OptimizerType::lamb,
                          OptimizerType::muon})
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(name_of(t), stage, w->size());
      auto own = w->split(0, w->rank());
      Config c = config_for(stage, 1);
      c.optimizer.type = t;
      auto e = make_engine(*own, c);
      train_steps(*e, 0, 2);
      const MemoryReport m = e->memory();
      const std::int64_t state = stage == 0 ? e->layout().padded_numel : e->layout().shard_numel;
      // Muon keeps no v for its matrices: v holds the rest of the state, as many elements on
      // every rank as the rank owning the fewest matrix elements needs (stage 0: none).
      std::vector<std::int64_t> owned(static_cast<std::size_t>(own->size()), 0);
      std::int64_t all = 0;
      for (const ParamLayout& p : e->layout().params)
        if (p.owner >= 0) owned[static_cast<std::size_t>(p.owner)] += p.numel, all += p.numel;
      const std::int64_t v = t == OptimizerType::lion ? 0
                             : t != OptimizerType::muon ? state
                             : stage == 0               ? state - all
                                          : state - *std::ranges::min_element(owned);
      CHECK(m.ledger[Category::optimizer_m].current == 4 * state);
      CHECK(m.ledger[Category::optimizer_v].current == 4 * v);
      CHECK(m.optimizer == 4 * (state + v));
      PlanInput in = plan_input_from_config(c, own->size());
      in.units = units();
      in.device = false;
      in.align_elements = 4;
      const Plan p = plan_memory(in);
      CHECK(p.device.optimizer == m.optimizer);
      CHECK(p.device.model_states() == m.model_states());
      CHECK(p.peak_total == m.peak_total);
    }
}

TEST_CASE("The time model counts Newton-Schulz on the busiest owner and the imbalance") {
  auto w = comm::make_mpi_communicator();
  auto own = w->split(0, w->rank());
  for (int stage : {0, 1, 3}) {
    CAPTURE(stage, w->size());
    const Config c = config_for(stage, 1);
    auto e = make_engine(*own, c);  // its layout: the owners
    std::vector<double> by_rank(static_cast<std::size_t>(own->size()), 0.0);
    double total = 0;
    for (const ParamLayout& p : e->layout().params)
      if (p.owner >= 0) {
        const double f = kernels::muon_ns_flops(p.shape[0], p.shape[1]);
        by_rank[static_cast<std::size_t>(p.owner)] += f;
        total += f;
      }
    PlanInput in = plan_input_from_config(c, own->size());
    in.units = units();
    in.device = false;
    in.align_elements = 4;
    const Plan p = plan_memory(in);
    const double most = stage == 0 ? total : *std::max_element(by_rank.begin(), by_rank.end());
    CHECK(p.newton_schulz_flops_max == most);
    CHECK(p.newton_schulz_flops_mean == Approx(stage == 0 ? total : total / own->size()));
    TimeInput t;
    t.cluster = *builtin_cluster("h100-sxm");
    const StepTime s = estimate_step(p, in, t);
    CHECK(s.newton_schulz == Approx(most / (t.cluster.peak_flops * t.cluster.compute_efficiency)));
    CHECK(s.newton_schulz_imbalance == Approx(most / p.newton_schulz_flops_mean));
    CHECK(s.optimizer >= s.newton_schulz);
    in.optimizer = PlanOptimizer::adam;
    in.config.optimizer.type = OptimizerType::adamw;
    CHECK(plan_memory(in).newton_schulz_flops_max == 0);
  }
}

TEST_CASE("A Muon checkpoint resumes bitwise and refuses another optimizer") {
  auto w = comm::make_mpi_communicator();
  for (int stage : {0, 2, 3}) {
    CAPTURE(stage, w->size());
    zero::testing::SharedTempDir dir;
    const Config c = config_for(stage, 1);
    {
      auto first = make_engine(*w, c);
      train_steps(*first, 0, 3);
      Checkpointer(*first, dir.path).save();
    }
    auto resumed = std::make_unique<Engine>(c, *w, units(), options());
    CHECK(load_checkpoint(*resumed, dir.path).step == 3);
    train_steps(*resumed, 3, kSteps);
    CHECK(first_difference(*resumed, ref::kMuon) == "");
    Config lion = c;
    lion.optimizer.type = OptimizerType::lion;
    auto wrong = make_engine(*w, lion);
    CHECK_THROWS_WITH(load_checkpoint(*wrong, dir.path),
                      Catch::Contains("resume with the optimizer that saved it"));
  }
}

TEST_CASE("A Muon checkpoint saved at 4 ranks resumes at 3, 2 and 1, ownership moving with the "
          "rank count, and ends on the reference",
          "[4ranks]") {
  auto w = comm::make_mpi_communicator();
  REQUIRE(w->size() == 4);
  const int r = w->rank();
  zero::testing::SharedTempDir dir;
  {
    auto e4 = make_engine(*w, config_for(3, 1));
    train_steps(*e4, 0, 3);
    Checkpointer(*e4, dir.path).save();
  }
  for (auto [m, stage] : {std::pair{3, 1}, std::pair{2, 2}, std::pair{1, 0}}) {
    CAPTURE(m, stage);
    auto group = w->split(r < m ? 0 : 1, r);
    if (r >= m) continue;
    auto e = std::make_unique<Engine>(config_for(stage, 1), *group, units(), options());
    CHECK(load_checkpoint(*e, dir.path).step == 3);
    train_steps(*e, 3, kSteps);
    CHECK(first_difference(*e, ref::kMuon) == "");
  }
}

TEST_CASE("DeepSpeed's Muon block configures Muon; a non-matrix in muon_params is refused") {
  const Config c = parse_config(R"({"train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "Muon", "params": {"lr": 3e-4, "muon_lr": 0.05, "momentum": 0.9,
                    "nesterov": false, "adjust_lr_fn": "match_rms_adamw", "weight_decay": 0.1,
                    "muon_params": ["*.w"]}}})",
                                "test");
  CHECK(c.optimizer.type == OptimizerType::muon);
  CHECK(c.optimizer.muon_lr == 0.05);
  CHECK(c.optimizer.momentum == 0.9);
  CHECK_FALSE(c.optimizer.nesterov);
  CHECK(c.optimizer.match_rms_adamw);
  CHECK(parse_config(to_json(c), "round trip") == c);
  auto w = comm::make_mpi_communicator();
  Config bad = config_for(1, 1);
  bad.optimizer.muon_params = {"*.b"};
  CHECK_THROWS_WITH(Engine(bad, *w, units(), options()),
                    Catch::Contains("Muon updates 2-D matrices only"));
}

TEST_CASE("A Muon checkpoint holds no exp_avg_sq for Muon's matrices; one holding it, or "
          "another optimizer's, is refused with the reason") {
  auto w = comm::make_mpi_communicator();
  zero::testing::SharedTempDir dir;
  const Config c = config_for(2, 1);
  {
    auto e = make_engine(*w, c);
    train_steps(*e, 0, 2);
    Checkpointer ck(*e, dir.path + "/muon");
    ck.save();
    ck.wait();  // complete on every rank before any reads it
  }
  const std::string folder = find_checkpoint(dir.path + "/muon");
  const CheckpointMeta meta = read_checkpoint_meta(folder);
  std::int64_t bytes = 0, want = 0;
  for (const CheckpointFile& f : meta.files) bytes += f.bytes;
  for (int i = 0; i < static_cast<int>(meta.params.size()); ++i) {
    const CheckpointParam& p = meta.params[static_cast<std::size_t>(i)];
    CAPTURE(p.name);
    CHECK(meta.tensors_of(i) == (p.shape.size() == 2 ? 2 : 3));  // the matrices: master, momentum
    want += 4 * meta.tensors_of(i) * p.numel;
  }
  CHECK(bytes == want);
  CheckpointReader reader(folder, meta);
  std::vector<float> one(1);
  CHECK_THROWS_WITH(reader.read(*meta.param_index("a.w"), StateTensor::exp_avg_sq, 0, one),
                    Catch::Contains("holds no exp_avg_sq for param 'a.w'"));

  Config adamw = c;
  adamw.optimizer.type = OptimizerType::adamw;
  auto a = make_engine(*w, adamw);
  CHECK_THROWS_WITH(load_checkpoint(*a, folder),
                    Catch::Contains("'a.w' holds Muon's momentum alone") &&
                        Catch::Contains("resume with the optimizer"));
  train_steps(*a, 0, 1);
  Checkpointer ck(*a, dir.path + "/adamw");
  ck.save();
  ck.wait();
  const std::string adam_folder = find_checkpoint(dir.path + "/adamw");
  auto m = make_engine(*w, c);
  CHECK_THROWS_WITH(load_checkpoint(*m, adam_folder),
                    Catch::Contains("'a.w' holds Adam's two moments") &&
                        Catch::Contains("resume with the optimizer that saved it"));
  // An older zero's Muon checkpoint: Adam's layout (an exp_avg_sq for every param), saved by Muon.
  if (w->rank() == 0) {
    CheckpointMeta old = read_checkpoint_meta(adam_folder);
    const std::string from = R"("type":"AdamW")";
    const std::size_t at = old.config.find(from);
    REQUIRE(at != std::string::npos);
    old.config.replace(at, from.size(), R"("type":"Muon")");
    std::ofstream(adam_folder + "/" + kCheckpointMeta) << to_json(old);
  }
  w->barrier();
  CHECK_THROWS_WITH(load_checkpoint(*m, adam_folder),
                    Catch::Contains("older zero's Muon") && Catch::Contains("zero ckpt export"));
}

TEST_CASE("Muon keeps AdamW's v for AdamW's elements only: 1.5 MiB a rank less for gpt-nano at 2 "
          "ranks, 78.75 MiB for gpt2-small at 4 (stages 1-3)") {
  for (auto [preset, ranks, saved] : {std::tuple{"gpt-nano", 2, std::int64_t{1'572'864}},
                                      std::tuple{"gpt2-small", 4, std::int64_t{82'575'360}}})
    for (int stage = 1; stage <= 3; ++stage) {
      CAPTURE(preset, ranks, stage);
      Config c;
      c.optimizer.type = OptimizerType::muon;
      c.zero.stage = stage;
      PlanInput in = plan_input_from_config(c, ranks);
      in.units = models::gpt_units(*models::gpt_preset(preset));
      in.device = false;
      const Plan p = plan_memory(in);  // itself checked against the engine's counting run
      // v: a shard less the matrix elements of the rank that owns the fewest (make_layout's).
      const Layout L = make_layout(in.units, p.settings.layout);
      std::vector<std::int64_t> owned(static_cast<std::size_t>(ranks), 0);
      for (const ParamLayout& q : L.params)
        if (q.owner >= 0) owned[static_cast<std::size_t>(q.owner)] += q.numel;
      const std::int64_t v = L.shard_numel - *std::ranges::min_element(owned);
      CHECK(p.device.optimizer == 4 * (L.shard_numel + v));
      CHECK(8 * L.shard_numel - p.device.optimizer == saved);  // m and v over the whole shard
      // The time model's optimizer pass moves that state, not two buffers of the shard: 8 B of
      // master and 2r + w of gradient and param a param, plus the state read and written.
      TimeInput t;
      t.cluster = *builtin_cluster("h100-sxm");
      const StepTime st = estimate_step(p, in, t);
      const double r = static_cast<double>(size_of(p.settings.reduce_dtype));
      const double w = static_cast<double>(size_of(p.settings.work_dtype));
      const double shard = static_cast<double>(L.shard_numel);
      CHECK(st.optimizer_bytes_per_param ==
            Approx(8 + 2 * r + w + 2.0 * static_cast<double>(p.device.optimizer) / shard));
      CHECK(st.optimizer_bytes_per_param < 8 + 2 * r + w + 16);  // AdamW's m and v over the shard
    }
}
