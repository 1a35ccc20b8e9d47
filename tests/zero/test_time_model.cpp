// The time model (zero/time_model.hpp): the alpha-beta formulas against values worked by hand,
// nccl-tests' bus bandwidth read back from them, where the groups sit, the overlap rule, the
// planner's per-step collectives, the classic 13B case study and the cluster profile files.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "base/error.hpp"
#include "tests/zero/time_model_fixtures.hpp"
#include "zero/time_model.hpp"

using namespace zero;
using namespace zero::test;
using Catch::Matchers::Contains;

TEST_CASE("A ring all-reduce costs 2(n-1)/n of its payload over the bus bandwidth, plus latency") {
  // 8 GPUs in a node, 1 GB: 10 us + 14 steps x 1 us + 2 x 7/8 x 1e9 / 100e9 s.
  CHECK(seconds(comm::Op::all_reduce, 1, 1e9, in_node(8)) == Approx(24e-6 + 0.0175).epsilon(1e-12));
  // Ten calls of 100 MB: the same bytes, ten times the latency.
  CHECK(seconds(comm::Op::all_reduce, 10, 1e9, in_node(8)) ==
        Approx(240e-6 + 0.0175).epsilon(1e-12));
  // nccl-tests' bus bandwidth read back from a large call is the link's: algbw x 2(n-1)/n.
  const double t = seconds(comm::Op::all_reduce, 1, 1e12, in_node(8));
  CHECK(1e12 / t * 2 * 7 / 8 == Approx(100e9).epsilon(1e-5));
}

TEST_CASE("Reduce-scatter and all-gather cost (n-1)/n of the whole buffer, broadcast all of it") {
  CHECK(seconds(comm::Op::reduce_scatter, 1, 1e9, in_node(8)) ==
        Approx(10e-6 + 7e-6 + 0.00875).epsilon(1e-12));
  CHECK(seconds(comm::Op::all_gather, 2, 1e9, in_node(4)) ==
        Approx(2 * (10e-6 + 3e-6) + 0.0075).epsilon(1e-12));
  CHECK(seconds(comm::Op::broadcast, 1, 1e9, in_node(8)) == Approx(17e-6 + 0.01).epsilon(1e-12));
  // One rank, or no call, costs nothing.
  CHECK(seconds(comm::Op::all_reduce, 5, 1e9, in_node(1)) == 0);
  CHECK(seconds(comm::Op::all_reduce, 0, 0, in_node(8)) == 0);
}

TEST_CASE(
    "A ring across nodes runs at the network's rate and pays inter-node latency per crossing") {
  // 16 ranks on 2 nodes: bus bandwidth min(100, 50 / 1) GB/s; 30 steps, 2 of them across nodes.
  const GroupPlacement g{16, 2, 8, 1};
  CHECK(bus_bandwidth(paper_cluster(), g) == 50e9);
  CHECK(seconds(comm::Op::all_reduce, 1, 1e9, g) ==
        Approx(10e-6 + 28e-6 + 2 * 5e-6 + 2.0 * 15 / 16 / 50).epsilon(1e-12));
}

TEST_CASE("A tree all-reduce costs 2 S/B with logarithmic latency, and best picks the faster") {
  // 64 ranks, 8 nodes: tree latency 10 + 2 (7 x 1 + 3 x 5) = 54 us; ring 10 + 112 + 14 x 5 = 192
  // us.
  const GroupPlacement g{64, 8, 8, 1};
  CHECK(seconds(comm::Op::all_reduce, 1, 0, g, Algorithm::tree) == Approx(54e-6).epsilon(1e-12));
  CHECK(seconds(comm::Op::all_reduce, 1, 0, g, Algorithm::ring) == Approx(192e-6).epsilon(1e-12));
  CHECK(seconds(comm::Op::all_reduce, 1, 1e9, g, Algorithm::tree) ==
        Approx(54e-6 + 2.0 / 50).epsilon(1e-12));
  // Small calls: the tree's latency wins; large ones: the ring's bandwidth.
  CHECK(seconds(comm::Op::all_reduce, 1, 1e3, g, Algorithm::best) ==
        seconds(comm::Op::all_reduce, 1, 1e3, g, Algorithm::tree));
  CHECK(seconds(comm::Op::all_reduce, 1, 1e9, g, Algorithm::best) ==
        seconds(comm::Op::all_reduce, 1, 1e9, g, Algorithm::ring));
  // Reduce-scatter has no tree: every algorithm gives the ring.
  CHECK(seconds(comm::Op::reduce_scatter, 1, 1e9, g, Algorithm::tree) ==
        seconds(comm::Op::reduce_scatter, 1, 1e9, g, Algorithm::ring));
}

TEST_CASE("Shard groups of a node stay inside it and their replicate groups share its network") {
  const Placements flat = place_groups(64, 64, 1, 8);
  CHECK(flat.shard.nodes == 8);
  CHECK(flat.shard.per_node == 8);
  CHECK(flat.shard.sharing == 1);
  CHECK(bus_bandwidth(paper_cluster(), flat.shard) == 50e9);

  const Placements h = place_groups(64, 8, 1, 8);
  CHECK(h.shard.nodes == 1);
  CHECK(bus_bandwidth(paper_cluster(), h.shard) == 100e9);
  // Eight replicate groups of one rank per node: each gets an eighth of a node's network.
  CHECK(h.replicate.size == 8);
  CHECK(h.replicate.nodes == 8);
  CHECK(h.replicate.per_node == 1);
  CHECK(h.replicate.sharing == 8);
  CHECK(bus_bandwidth(paper_cluster(), h.replicate) == 50e9 / 8);
  // Shard groups of 4: two replicate groups' ranks... four groups of 2 ranks per node.
  const Placements q = place_groups(64, 4, 1, 8);
  CHECK(q.replicate.per_node == 2);
  CHECK(q.replicate.sharing == 4);
  // hpZ groups of a node, and a job smaller than a node.
  CHECK(place_groups(64, 64, 8, 8).secondary.nodes == 1);
  CHECK(place_groups(4, 4, 1, 8).shard.nodes == 1);
  CHECK_THROWS_WITH(place_groups(64, 6, 1, 8), Contains("must divide the ranks"));
}

TEST_CASE("The planner itemises one step's collectives by group, op and engine call") {
  PlanInput in = bare_model(1e9, 8, 3);
  in.config.communication_data_type = DType::bf16;
  const Plan p = plan_memory(in);
  const GroupOps& s = p.collectives.shard;
  CHECK(s.payload_bytes() == p.traffic.shard);
  CHECK(p.collectives.replicate.calls() == 0);
  // Stage 3: the gathers of forward and of backward, one reduce-scatter per bucket.
  CHECK(p.phases.forward.shard.all_gather.calls >= 32);
  CHECK(p.phases.backward_gathers.shard.all_gather.calls >= 32);
  CHECK(p.phases.reductions.shard.reduce_scatter.calls >= 1);
  CHECK(p.phases.reductions.shard.all_gather.calls == 0);
  std::int64_t sum = 0;
  for (const auto* ph :
       {&p.phases.forward, &p.phases.backward_gathers, &p.phases.reductions, &p.phases.step})
    sum += ph->shard.payload_bytes();
  CHECK(sum == s.payload_bytes());
  // Accumulation: four micro-batches gather and reduce four times, the step's collectives once.
  PlanInput acc = in;
  acc.config.gradient_accumulation_steps = 4;
  const Plan q = plan_memory(acc);
  CHECK(q.phases.forward.shard.all_gather.calls == 4 * p.phases.forward.shard.all_gather.calls);
  CHECK(q.phases.reductions.shard.reduce_scatter.payload_bytes ==
        4 * p.phases.reductions.shard.reduce_scatter.payload_bytes);
  CHECK(q.phases.step.shard.calls() == p.phases.step.shard.calls());
}

TEST_CASE(
    "Stage 3 moves 1.5 times the bytes of stage 2, and stage 2 those of stage 0's all-reduce") {
  // 16-bit gradients (the ZeRO paper's setting): 2Ψ all-reduce = 2Ψ reduce-scatter + 2Ψ
  // all-gather at stages 0-2; stage 3 gathers twice and reduce-scatters once.
  double moved[4] = {};
  for (int stage = 0; stage <= 3; ++stage) {
    PlanInput in = bare_model(1e9, 8, stage);
    in.config.communication_data_type = DType::bf16;
    moved[stage] = static_cast<double>(plan_memory(in).collectives.shard.payload_bytes());
  }
  CHECK(moved[0] == Approx(4e9).epsilon(0.001));
  CHECK(moved[1] == Approx(moved[0]).epsilon(0.001));
  CHECK(moved[2] == Approx(moved[0]).epsilon(0.001));
  CHECK(moved[3] / moved[2] == Approx(1.5).epsilon(0.001));
}

TEST_CASE("Without overlap every collective is waited for; with it all but the last bucket hide") {
  PlanInput in = bare_model(1e9, 8, 2);
  in.config.zero.reduce_bucket_size = 260'000'000;  // four buckets of eight padded units
  const Plan plain = plan_memory(in);
  REQUIRE(plain.phases.reductions.shard.reduce_scatter.calls == 4);
  const TimeInput t = time_on(paper_cluster(), 1e9, 1e6);  // 6e15 FLOP: 15 s of compute
  const StepTime a = estimate_step(plain, in, t);
  CHECK(a.compute == Approx(6e15 / 8 / 50e12));
  CHECK(a.comm_exposed == Approx(a.comm));
  CHECK(a.step == Approx(a.compute + a.comm + a.optimizer));

  in.config.zero.overlap_comm = true;
  const Plan over = plan_memory(in);
  const StepTime b = estimate_step(over, in, t);
  CHECK(b.comm == Approx(a.comm));
  // The last of four equal buckets is exposed; the step's all-gather always is.
  double reductions = 0, step = 0;
  const Placements at = place_groups(8, 8, 1, 8);
  auto add = [&](double& into, const GroupOps& g) {
    into +=
        collective_seconds(comm::Op::reduce_scatter, g.reduce_scatter, at.shard, t.cluster,
                           t.algorithm) +
        collective_seconds(comm::Op::all_gather, g.all_gather, at.shard, t.cluster, t.algorithm);
  };
  add(reductions, over.phases.reductions.shard);
  add(step, over.phases.step.shard);
  CHECK(b.exposed_backward == Approx(reductions / 4));
  CHECK(b.exposed_step == Approx(step));
  CHECK(b.comm_exposed == Approx(reductions / 4 + step));
  // Too little compute to hide behind: the excess is exposed.
  TimeInput tiny = t;
  tiny.flops_per_step = 1e6;
  const StepTime c = estimate_step(over, in, tiny);
  CHECK(c.exposed_backward == Approx(reductions).epsilon(1e-6));
}

TEST_CASE("Stage 3's prefetched gathers hide behind compute, the first of each pass does not") {
  PlanInput in = bare_model(1e9, 8, 3);
  const TimeInput t = time_on(paper_cluster(), 1e9, 1e6);
  const Plan p = plan_memory(in);
  const StepTime s = estimate_step(p, in, t);
  const std::int64_t n = p.phases.forward.shard.all_gather.calls;
  const double fwd = collective_seconds(comm::Op::all_gather, p.phases.forward.shard.all_gather,
                                        place_groups(8, 8, 1, 8).shard, t.cluster, t.algorithm);
  CHECK(s.exposed_forward == Approx(fwd / n));
  CHECK(p.prefetches);
  in.config.zero.stage3_prefetch_bucket_size = 0;  // nothing prefetched: every gather waited for
  const StepTime w = estimate_step(plan_memory(in), in, t);
  CHECK(w.exposed_forward == Approx(fwd));
}

TEST_CASE("A prefetch window or live limit smaller than a unit prefetches nothing, as the engine") {
  PlanInput in = bare_model(1e9, 8, 3);  // 32 units of 31.25M elements
  const TimeInput t = time_on(paper_cluster(), 1e9, 1e6);
  auto forward_gathers = [&](const Plan& p) {  // every forward gather, waited for
    return collective_seconds(comm::Op::all_gather, p.phases.forward.shard.all_gather,
                              place_groups(8, 8, 1, 8).shard, t.cluster, t.algorithm);
  };
  in.config.zero.stage3_prefetch_bucket_size = 1'000'000;  // a window smaller than a unit
  const Plan small_window = plan_memory(in);
  CHECK_FALSE(small_window.prefetches);
  CHECK(estimate_step(small_window, in, t).exposed_forward ==
        Approx(forward_gathers(small_window)));
  in.config.zero.stage3_prefetch_bucket_size = 50'000'000;
  in.config.zero.stage3_max_live_parameters = 40'000'000;  // one unit live, not two
  const Plan small_live = plan_memory(in);
  CHECK_FALSE(small_live.prefetches);
  CHECK(estimate_step(small_live, in, t).exposed_forward == Approx(forward_gathers(small_live)));
  const Settings set = resolve_settings(in.config, 8);
  CHECK(set.prefetches(0, 0, 40'000'000));
  CHECK_FALSE(set.prefetches(0, 1, 40'000'000));
  CHECK_FALSE(set.prefetches(20'000'000, 0, 31'000'000));
}

TEST_CASE("The optimizer step moves 34 bytes per owned parameter, 30 with 16-bit gradients") {
  PlanInput in = bare_model(1e9, 8, 2);
  auto bytes_per_param = [&] {
    return optimizer_bytes_per_param(resolve_settings(in.config, in.ranks), in.optimizer);
  };
  CHECK(bytes_per_param() == 34);
  in.config.communication_data_type = DType::bf16;
  CHECK(bytes_per_param() == 30);
  in.optimizer = PlanOptimizer::sgd_momentum;
  CHECK(bytes_per_param() == 22);
  // 1e9 / 8 owned parameters x 30 B at 1000 GB/s achieved.
  in.optimizer = PlanOptimizer::adam;
  const Plan p = plan_memory(in);
  const StepTime s = estimate_step(p, in, time_on(paper_cluster(), 1e9, 1e6));
  CHECK(s.optimizer == Approx(static_cast<double>(p.padded_numel) / 8 * 30 / 1000e9));
}

TEST_CASE("Tokens per second, MFU and the fastest stage that fits follow from the step") {
  const TimeInput t = time_on(paper_cluster(), 13e9, 1e6);
  std::vector<StepTime> steps;
  for (int stage = 0; stage <= 3; ++stage) {
    PlanInput in = bare_model(13e9, 8, stage);
    steps.push_back(estimate_step(plan_memory(in), in, t));
  }
  for (const StepTime& s : steps) {
    CHECK(s.tokens_per_second == Approx(1e6 / s.step));
    CHECK(s.mfu == Approx(6 * 13e9 * 1e6 / (s.step * 8 * 100e12)));
    CHECK(s.mfu < 0.5);  // never more than the compute's own efficiency
  }
  CHECK_FALSE(steps[0].fits);  // 16+ bytes per parameter: 208 GB
  CHECK(steps[3].fits);
  const auto best = fastest_fitting(steps);
  REQUIRE(best);
  CHECK(steps[*best].fits);
  for (const StepTime& s : steps)
    if (s.fits) CHECK(steps[*best].step <= s.step);
  CHECK_FALSE(fastest_fitting({steps[0]}));
}

TEST_CASE("The classic case: a 13B model's fp32 gradients are a 52 GB all-reduce") {
  // Pure fp32 training at stage 0 all-reduces 4 B x 13e9 = 52 GB (reduce-scatter + all-gather).
  PlanInput in = bare_model(13e9, 8, 0);
  in.config.precision = Precision::fp32;
  const Plan p = plan_memory(in);
  const GroupOps& g = p.collectives.shard;
  CHECK(g.reduce_scatter.payload_bytes == Approx(52e9).epsilon(0.001));
  CHECK(g.all_gather.payload_bytes == Approx(52e9).epsilon(0.001));
  // On 8 PCIe A100s at 25 GB/s: 2 x 7/8 x 52 GB / 25 GB/s = 3.64 s (the textbook's 52 / 64 =
  // 0.81 s divides by both directions and forgets the ring's 2(n-1)/n).
  const StepTime s = estimate_step(p, in, time_on(*builtin_cluster("a100-pcie"), 13e9, 1e6));
  CHECK(s.reduce_scatter.seconds + s.all_gather.seconds == Approx(3.64).epsilon(0.01));
  CHECK_FALSE(s.fits);
  // bf16 gradients halve the reduce-scatter's payload.
  PlanInput half = bare_model(13e9, 8, 0);
  half.config.communication_data_type = DType::bf16;
  CHECK(plan_memory(half).collectives.shard.reduce_scatter.payload_bytes ==
        Approx(26e9).epsilon(0.001));
}

TEST_CASE("Every built-in cluster profile is complete and names its sources") {
  REQUIRE(cluster_names().size() == 4);
  for (const auto& name : cluster_names()) {
    const auto c = builtin_cluster(name);
    REQUIRE(c);
    CHECK_NOTHROW(validate(*c));
    CHECK(c->gpus_per_node == 8);
    CHECK_THAT(c->sources, Contains("datasheet"));
  }
  CHECK(builtin_cluster("h200")->memory_bytes == 141LL << 30);
  CHECK(builtin_cluster("h200")->hbm_bandwidth == 4.8e12);
  CHECK_FALSE(builtin_cluster("tpu-v5"));
}

TEST_CASE("A cluster profile file gives every figure, or a base and what was measured") {
  const ClusterProfile full = read_cluster_profile(R"({"name": "lab", "peak_tflops": 100,
      "compute_efficiency": 0.5, "memory_GiB": 80, "hbm_bandwidth_GBs": 2000,
      "hbm_efficiency": 0.5, "gpus_per_node": 8, "intra_bandwidth_GBs": 100,
      "inter_bandwidth_GBs": 50, "intra_latency_us": 1, "inter_latency_us": 5,
      "call_latency_us": 10})",
                                                   "lab.json");
  const ClusterProfile paper = paper_cluster();
  CHECK(full.name == "lab");
  CHECK(full.peak_flops == paper.peak_flops);
  CHECK(full.memory_bytes == paper.memory_bytes);
  CHECK(full.intra_bandwidth == paper.intra_bandwidth);
  CHECK(full.inter_latency == Approx(paper.inter_latency));
  // A calibrated profile: measured bus bandwidth, latency and compute efficiency on an h200.
  const ClusterProfile cal = read_cluster_profile(
      R"({"base": "h200", "intra_bandwidth_GBs": 310.5, "call_latency_us": 22,
          "compute_efficiency": 0.41})",
      "calibrated.json");
  CHECK(cal.intra_bandwidth == 310.5e9);
  CHECK(cal.call_latency == Approx(22e-6));
  CHECK(cal.compute_efficiency == 0.41);
  CHECK(cal.hbm_bandwidth == 4.8e12);  // from the base
  CHECK_THAT(cal.name, Contains("calibrated.json"));
}

TEST_CASE("A bad cluster profile file is refused with one sentence naming the key") {
  auto refused = [](const char* json) {
    try {
      read_cluster_profile(json, "bad.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(refused(R"({"base": "h200", "call_latency_us": 22, "call_latency_us": 5})") ==
        "cluster profile bad.json: key 'call_latency_us' appears twice (at line 1, column 18 and "
        "line 1, column 41); say each once");
  CHECK_THAT(refused(R"({"base": "h200", "intra_bandwidth_GBs": -3})"),
             Contains("bad.json: intra_bandwidth_GBs: expected a number > 0, got -3"));
  CHECK_THAT(refused(R"({"base": "h200", "compute_efficiency": 1.5})"),
             Contains("compute_efficiency: expected a number in (0, 1], got 1.5"));
  CHECK_THAT(refused(R"({"base": "h200", "gpus_per_node": 2.5})"), Contains("gpus_per_node"));
  CHECK_THAT(refused(R"({"base": "h200", "peak_tflop": 900})"),
             Contains("unknown key 'peak_tflop' at top level; did you mean 'peak_tflops'?"));
  CHECK_THAT(refused(R"({"base": "h200", "memory_GiB": "80"})"),
             Contains("memory_GiB: expected a number, got string \"80\""));
  CHECK_THAT(refused(R"({"base": "v100"})"), Contains("base: expected a built-in profile"));
  CHECK_THAT(refused(R"({"peak_tflops": 100})"), Contains("lacks compute_efficiency, memory_GiB"));
  CHECK_THAT(refused(R"({"base": "h200", "inter_latency_us": -1})"),
             Contains("inter_latency_us: expected a number >= 0"));
  CHECK_THAT(refused(R"({"base": "h200",)"), Contains("bad.json: is not valid JSON"));
  CHECK_THAT(refused("[1, 2]"), Contains("expected an object"));
  CHECK_THAT(refused(R"({"base": "h200", "name": 7})"), Contains("name: expected a string"));
  CHECK_THROWS_WITH(load_cluster_profile("/nonexistent/cluster.json"),
                    Contains("cannot read the cluster profile file '/nonexistent/cluster.json'"));
}

TEST_CASE("The time model refuses impossible inputs with a sentence") {
  PlanInput in = bare_model(1e9, 8, 2);
  TimeInput t = time_on(paper_cluster(), 1e9, 1e6);
  t.flops_per_step = -1;
  CHECK_THROWS_WITH(estimate_step(plan_memory(in), in, t), Contains("FLOPs per step must be >= 0"));
  t = time_on(paper_cluster(), 1e9, 1e6);
  t.cluster.intra_bandwidth = 0;
  CHECK_THROWS_WITH(estimate_step(plan_memory(in), in, t),
                    Contains("cluster profile 'paper': intra_bandwidth must be > 0"));
}
