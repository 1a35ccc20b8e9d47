// The time model's compression terms (zero/time_model.hpp, codec_seconds): quantising, TopK's
// selection, the owner's dequantise-and-sum and qwZ's dequantise, priced at a profile's measured
// per-value rates (or derived from its memory bandwidth), on the compute thread of the pass
// that runs them; fixtures in time_model_fixtures.hpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "base/error.hpp"
#include "tests/zero/time_model_fixtures.hpp"
#include "zero/time_model.hpp"

using namespace zero;
using namespace zero::test;

namespace {

// Round codec figures (seconds per value), so that the expected values work out on paper.
ClusterProfile codec_cluster() {
  ClusterProfile c = paper_cluster();
  c.quantize = 2e-9;
  c.dequantize_add = 1e-9;
  c.dequantize = 0.5e-9;
  c.topk_select = 10e-9;
  c.topk_sort = 4e-9;
  return c;
}

}  // namespace

TEST_CASE("A profile file gives the codec's per-value rates in ns, optional even without a base") {
  const ClusterProfile c = read_cluster_profile(
      R"({"base": "h200", "quantize_ns": 3.5, "dequantize_add_ns": 0.7, "dequantize_ns": 0.5,
          "topk_select_ns": 8.6, "topk_sort_ns": 4.5})",
      "codec.json");
  CHECK(c.quantize == Approx(3.5e-9));
  CHECK(c.dequantize_add == Approx(0.7e-9));
  CHECK(c.dequantize == Approx(0.5e-9));
  CHECK(c.topk_select == Approx(8.6e-9));
  CHECK(c.topk_sort == Approx(4.5e-9));
  // A full profile without them is still whole: they are derived.
  const ClusterProfile full = read_cluster_profile(
      R"({"peak_tflops": 1, "compute_efficiency": 1, "memory_GiB": 1, "hbm_bandwidth_GBs": 10,
          "hbm_efficiency": 0.5, "gpus_per_node": 2, "intra_bandwidth_GBs": 1,
          "inter_bandwidth_GBs": 1, "intra_latency_us": 0, "inter_latency_us": 0,
          "call_latency_us": 0})",
      "full.json");
  CHECK(full.quantize == 0);
  try {
    read_cluster_profile(R"({"base": "h200", "topk_sort_ns": 0})", "bad.json");
    FAIL("a zero rate was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("topk_sort_ns") != std::string::npos);
  }
}

TEST_CASE("An unmeasured codec rate is the bytes its loop moves at the optimizer's bandwidth") {
  ClusterProfile c = paper_cluster();  // 2000 GB/s at 0.5: 1e12 B/s
  const CodecRates r = codec_rates(c);
  CHECK(r.quantize == Approx(5e-12));
  CHECK(r.dequantize_add == Approx(9e-12));
  CHECK(r.dequantize == Approx(3e-12));
  CHECK(r.topk_select == Approx(16e-12));
  CHECK(r.topk_sort == Approx(16e-12));
  c.quantize = 7e-9;  // a measured figure is kept as it is
  CHECK(codec_rates(c).quantize == 7e-9);
  CHECK(codec_rates(c).dequantize == Approx(3e-12));
}

TEST_CASE("Quantised gradients cost a quantise and a dequantise-add per value, in backward") {
  PlanInput in = bare_model(1e8, 8, 2);
  in.config.compression.gradients = GradCompression::int4;
  const Plan p = plan_memory(in);
  const CodecTime t = codec_seconds(p, codec_cluster());
  // Every rank encodes its whole gradient (8 segments a bucket) and, as owner, adds 8 segments
  // of its shard: Ψ values each way, at 2 + 1 ns.
  const double values = static_cast<double>(p.padded_numel);
  CHECK(t.forward == 0);
  CHECK(t.backward == Approx(values * 3e-9).epsilon(1e-3));
  // Dense gradients cost nothing.
  CHECK(codec_seconds(plan_memory(bare_model(1e8, 8, 2)), codec_cluster()).backward == 0);
}

TEST_CASE("TopK costs its selection per value, its sort per k log2 k, and the owner's adds") {
  PlanInput in = bare_model(1e8, 8, 2);
  in.config.compression.gradients = GradCompression::topk;
  in.config.compression.topk_ratio = 0.01;
  const Plan p = plan_memory(in);
  const OpCount& a2a = p.phases.reductions.shard.all_to_all;
  const double pairs = static_cast<double>(a2a.payload_bytes) / 8;
  const double segments = static_cast<double>(a2a.calls) * 8;
  const double k = pairs / segments;
  const double values = static_cast<double>(p.padded_numel);
  CHECK(pairs == Approx(0.01 * values).epsilon(1e-3));  // ceil(ratio n) per segment
  const CodecTime t = codec_seconds(p, codec_cluster());
  CHECK(t.backward ==
        Approx(values * 10e-9 + segments * k * std::log2(k) * 4e-9 + pairs * 1e-9).epsilon(1e-3));
}

TEST_CASE("qwZ quantises a rank's shard and dequantises the whole unit, in the pass gathering") {
  PlanInput in = bare_model(1e8, 8, 3);
  in.config.compression.weights = WeightCompression::int8;
  const Plan p = plan_memory(in);
  const CodecTime t = codec_seconds(p, codec_cluster());
  // Every unit is gathered once in forward and once in backward: its shard quantised (Ψ / 8 at
  // 2 ns), all of it dequantised (Ψ at 0.5 ns).
  const double values = static_cast<double>(p.padded_numel);
  const double per_pass = values / 8 * 2e-9 + values * 0.5e-9;
  CHECK(t.forward == Approx(per_pass).epsilon(1e-3));
  CHECK(t.backward == Approx(per_pass).epsilon(1e-3));
  // qwZ with hpZ: backward gathers from the dense secondary copy, so only forward decodes.
  PlanInput hpz = in;
  hpz.config.zero.zero_hpz_partition_size = 2;
  const CodecTime h = codec_seconds(plan_memory(hpz), codec_cluster());
  CHECK(h.forward == Approx(per_pass).epsilon(1e-3));
  CHECK(h.backward == 0);
}

TEST_CASE("The step pays the codec on the compute thread: it adds, and longer passes hide more") {
  PlanInput in = bare_model(1e8, 8, 2);
  in.config.compression.gradients = GradCompression::int8;
  const Plan p = plan_memory(in);
  const TimeInput t = time_on(codec_cluster(), 1e8, 1e5);
  const StepTime s = estimate_step(p, in, t);
  const CodecTime c = codec_seconds(p, t.cluster);
  CHECK(s.codec == Approx(c.forward + c.backward));
  CHECK(s.codec_backward == Approx(c.backward));
  CHECK(s.codec > 0.2);  // 1e8 values at 3 ns
  CHECK(s.step == Approx(s.compute + s.codec + s.comm_exposed + s.optimizer).epsilon(1e-12));
  // Without overlap nothing hides: the step is the same one with the codec added.
  TimeInput free_codec = t;
  free_codec.cluster.quantize = free_codec.cluster.dequantize_add = 1e-30;
  const StepTime free = estimate_step(p, in, free_codec);
  CHECK(free.codec < 1e-12);
  CHECK(s.step - free.step == Approx(s.codec).epsilon(1e-9));
  // With overlap_comm the all-to-alls but the last hide behind backward, which the codec
  // lengthens: with almost no compute and a slow link, the codec's length more of them hides.
  PlanInput ov = in;
  ov.config.zero.overlap_comm = true;
  ov.config.zero.reduce_bucket_size = 10'000'000;
  const Plan q = plan_memory(ov);
  TimeInput slow = time_on(codec_cluster(), 1e8, 1);
  slow.cluster.inter_bandwidth = slow.cluster.intra_bandwidth = 1e8;  // 1 s of all-to-all
  TimeInput slow_free = slow;
  slow_free.cluster.quantize = slow_free.cluster.dequantize_add = 1e-30;
  const StepTime with = estimate_step(q, ov, slow), without = estimate_step(q, ov, slow_free);
  CHECK(with.comm == Approx(without.comm));
  CHECK(with.comm > 2 * with.codec);
  CHECK(with.comm_exposed == Approx(without.comm_exposed - with.codec_backward).epsilon(1e-9));
  CHECK(with.step == Approx(without.step).epsilon(1e-9));
}
