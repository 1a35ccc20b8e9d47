// The time model's transfers beyond rings (zero/time_model.hpp): the all-to-all of compressed
// reductions, direct exchange loading a node's link from every rank that sends across, and
// offload's PCIe copies and host-memory update; fixtures in time_model_fixtures.hpp.
#include <catch2/catch.hpp>

#include "tests/zero/time_model_fixtures.hpp"
#include "zero/time_model.hpp"

using namespace zero;
using namespace zero::test;

TEST_CASE("An all-to-all sends (n-1)/n of its buffer through the slowest link, a latency a call") {
  // Inside a node: 7/8 of 1 GB at 100 GB/s, plus 10 us + one step of 1 us.
  CHECK(seconds(comm::Op::all_to_all, 1, 1e9, in_node(8)) ==
        Approx(11e-6 + 0.00875).epsilon(1e-12));
  // 16 ranks on 2 nodes: each node's 8 ranks push 8/16 of 1 GB each through 50 GB/s (0.08 s),
  // slower than the 7/16 inside the node (0.004375 s); one latency across nodes per call.
  CHECK(seconds(comm::Op::all_to_all, 2, 1e9, {16, 2, 8, 1}) ==
        Approx(2 * 15e-6 + 0.08).epsilon(1e-12));
  // Two groups of its kind on a node share its network.
  CHECK(seconds(comm::Op::all_to_all, 1, 1e9, {16, 2, 8, 2}) ==
        Approx(15e-6 + 0.16).epsilon(1e-12));
  // Whatever the algorithm asked for all-reduces; one rank or no call costs nothing.
  CHECK(seconds(comm::Op::all_to_all, 1, 1e9, in_node(8), Algorithm::tree) ==
        seconds(comm::Op::all_to_all, 1, 1e9, in_node(8)));
  CHECK(seconds(comm::Op::all_to_all, 3, 1e9, in_node(1)) == 0);
  CHECK(seconds(comm::Op::all_to_all, 0, 0, in_node(8)) == 0);
}

TEST_CASE("A compressed reduction is an all-to-all per bucket, and the step time counts it") {
  PlanInput in = bare_model(1e8, 8, 2);
  in.config.compression.gradients = GradCompression::int8;
  const Plan p = plan_memory(in);
  const GroupOps& r = p.phases.reductions.shard;
  CHECK(r.all_to_all.calls >= 1);
  CHECK(r.reduce_scatter.calls == 0);
  CHECK(r.all_gather.calls == 0);
  // Each bucket's input is the 8 owners' int8 segments with a scale per 2048 values: about Ψ.
  CHECK(static_cast<double>(r.all_to_all.payload_bytes) ==
        Approx(1e8 * (1 + 4.0 / 2048)).epsilon(0.01));
  const StepTime s = estimate_step(p, in, time_on(paper_cluster(), 1e8, 1e6));
  CHECK(s.all_to_all.calls == p.collectives.shard.all_to_all.calls);
  CHECK(s.all_to_all.payload_bytes == p.collectives.shard.all_to_all.payload_bytes);
  CHECK(s.all_to_all.seconds > 0);
  // With overlap_comm every bucket's all-to-all but the last hides behind backward.
  PlanInput ov = in;
  ov.config.zero.overlap_comm = true;
  ov.config.zero.reduce_bucket_size = 10'000'000;
  const Plan q = plan_memory(ov);
  const std::int64_t buckets = q.phases.reductions.shard.all_to_all.calls;
  CHECK(buckets > 1);
  const StepTime o = estimate_step(q, ov, time_on(paper_cluster(), 1e8, 1e6));
  CHECK(o.exposed_backward == Approx(o.all_to_all.seconds / double(buckets)).epsilon(1e-9));
}

TEST_CASE("Direct exchange loads a node's link by every rank it sends from, shared by all groups") {
  // Two nodes of 2 ranks, a 25 MB/s link each way (200 Mb/s): zero's MPI transport. Flat, ranks
  // 0 and 1 each send a quarter of a reduce-scatter's S to ranks 2 and 3: S leaves the node,
  // S / R, where a ring's one edge out carries 3/4 S. Hierarchical (shard groups of a node), the
  // two replicate groups {0, 2} and {1, 3} all-reduce their S / 2 at once: each rank sends S / 2,
  // both of a node's ranks together S, again S / R.
  ClusterProfile c = paper_cluster();
  c.gpus_per_node = 2;
  c.inter_bandwidth = 25e6;
  c.intra_latency = c.inter_latency = c.call_latency = 0;
  const Placements flat = place_groups(4, 4, 1, 2), hier = place_groups(4, 2, 1, 2);
  CHECK(link_loads(flat.shard, Algorithm::ring) == 1);
  CHECK(link_loads(flat.shard, Algorithm::direct) == Approx(4.0 / 3).epsilon(1e-12));
  CHECK(link_loads(hier.replicate, Algorithm::direct) == 2);  // the two groups share the link
  CHECK(link_loads(hier.shard, Algorithm::direct) == 0);      // inside a node
  const double S = 1e8;
  auto cost = [&](comm::Op op, double bytes, const GroupPlacement& g, Algorithm a) {
    return collective_seconds(op, {1, static_cast<std::int64_t>(bytes)}, g, c, a);
  };
  CHECK(cost(comm::Op::reduce_scatter, S, flat.shard, Algorithm::direct) ==
        Approx(S / 25e6).epsilon(1e-12));
  CHECK(cost(comm::Op::all_reduce, S / 2, hier.replicate, Algorithm::direct) ==
        Approx(S / 25e6).epsilon(1e-12));
  // A calibration reads the flat reduce-scatter's time as a bus bandwidth ((n-1)/n S / t) and
  // turns it into the node's link with the loads; the hierarchical step it then predicts is the
  // measured one. Read as a ring (one load), the link comes out at 3/4 of its rate and the
  // hierarchical all-reduce 4/3 of its time.
  const double measured = S / 25e6, busbw = 0.75 * S / measured;
  ClusterProfile calibrated = c;
  calibrated.inter_bandwidth = busbw * link_loads(flat.shard, Algorithm::direct);
  CHECK(collective_seconds(comm::Op::all_reduce, {1, static_cast<std::int64_t>(S / 2)},
                           hier.replicate, calibrated, Algorithm::direct) ==
        Approx(measured).epsilon(1e-9));
  calibrated.inter_bandwidth = busbw * link_loads(flat.shard, Algorithm::ring);
  CHECK(collective_seconds(comm::Op::all_reduce, {1, static_cast<std::int64_t>(S / 2)},
                           hier.replicate, calibrated, Algorithm::ring) ==
        Approx(measured * 4 / 3).epsilon(1e-9));
  // One rank a node: direct exchange and the ring load the link alike; the broadcast is a chain.
  const GroupPlacement spread{4, 4, 1, 1};
  CHECK(link_loads(spread, Algorithm::direct) == 1);
  CHECK(cost(comm::Op::broadcast, S, flat.shard, Algorithm::direct) ==
        cost(comm::Op::broadcast, S, flat.shard, Algorithm::ring));
}

TEST_CASE("Offload's step counts the PCIe transfers and the optimizer on host memory") {
  for (bool params : {false, true}) {
    PlanInput in = bare_model(1e9, 8, params ? 3 : 2);
    const StepTime on_device = estimate_step(plan_memory(in), in, time_on(paper_cluster(), 1e9, 1e6));
    in.config.zero.offload_optimizer_device = OffloadDevice::cpu;
    if (params) in.config.zero.offload_param_device = OffloadDevice::cpu;
    const Plan p = plan_memory(in);
    const StepTime s = estimate_step(p, in, time_on(paper_cluster(), 1e9, 1e6));
    const double shard = static_cast<double>(p.padded_numel) / 8;
    const double r = size_of(p.settings.reduce_dtype), w = size_of(p.settings.work_dtype);
    // The reduced shard down, hidden behind the compute but for the step's last bucket's; the
    // new params up, hidden behind the CPU update; with param offload each of the two gathers'
    // shards up, waited for.
    const double B = kOffloadPcieBandwidth;
    const double copies = static_cast<double>(p.phases.reductions.shard.reduce_scatter.calls);
    REQUIRE(copies > 1);
    const double down = shard * r / B, up = shard * w / B;
    const double exposed = down / copies + std::max(0.0, down * (1 - 1 / copies) - s.compute) +
                           std::max(0.0, up - s.optimizer) + (params ? 2 * shard * w / B : 0);
    CHECK(s.offload == Approx(exposed));
    CHECK(s.offload < (shard * r + shard * w + (params ? 2 * shard * w : 0)) / B);
    CHECK(s.optimizer == Approx(shard * s.optimizer_bytes_per_param / kOffloadHostBandwidth));
    CHECK(s.step == Approx(s.compute + s.comm_exposed + s.offload + s.optimizer));
    CHECK(on_device.offload == 0);
    CHECK(s.step > on_device.step);
  }
}
