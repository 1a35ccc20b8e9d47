// The time model (zero/time_model.hpp): group placement, collective costs, the step.
#include "zero/time_model.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "zero/config.hpp"

namespace zero {
namespace {

// Groups g = 0 .. groups-1 of `size` ranks each, member i of group g being rank
// g * between + i * within: their worst placement (most nodes, fewest ranks on a node, most
// groups sharing a node), in time linear in the ranks.
GroupPlacement place_kind(int ranks, int per_node, int groups, int size, int within, int between) {
  const int nodes = (ranks + per_node - 1) / per_node;
  std::vector<int> sharing(static_cast<std::size_t>(nodes), 0);
  auto each_node = [&](int g, auto&& f) {  // f(node, ranks of g on it); members ascend
    int node = -1, count = 0;
    for (int i = 0; i < size; ++i) {
      const int n = (g * between + i * within) / per_node;
      if (n != node && count > 0) f(node, count), count = 0;
      node = n;
      ++count;
    }
    if (count > 0) f(node, count);
  };
  for (int g = 0; g < groups; ++g) each_node(g, [&](int n, int) { ++sharing[n]; });
  GroupPlacement worst{size, 1, size, 1};
  for (int g = 0; g < groups; ++g) {
    int used = 0;
    each_node(g, [&](int n, int k) {
      ++used;
      worst.per_node = std::min(worst.per_node, k);
      worst.sharing = std::max(worst.sharing, sharing[n]);
    });
    worst.nodes = std::max(worst.nodes, used);
  }
  return worst;
}

int ceil_log2(int m) {
  int l = 0;
  while ((1 << l) < m) ++l;
  return l;
}

// The seconds of every collective in one phase (one GroupedOps), into the per-op totals too.
struct PhaseCost {
  const Placements& at;
  const ClusterProfile& cluster;
  Algorithm algorithm;
  OpTime* totals[5];  // all_reduce, reduce_scatter, all_gather, broadcast, all_to_all
  double operator()(const GroupedOps& ops) const {
    double t = 0;
    const std::pair<const GroupOps*, const GroupPlacement*> groups[] = {
        {&ops.shard, &at.shard},
        {&ops.replicate, &at.replicate},
        {&ops.secondary, &at.secondary},
        {&ops.world, &at.world}};
    for (const auto& [g, place] : groups) {
      const std::pair<comm::Op, const OpCount*> each[] = {
          {comm::Op::all_reduce, &g->all_reduce},
          {comm::Op::reduce_scatter, &g->reduce_scatter},
          {comm::Op::all_gather, &g->all_gather},
          {comm::Op::broadcast, &g->broadcast},
          {comm::Op::all_to_all, &g->all_to_all}};
      for (int i = 0; i < 5; ++i) {
        const double s =
            collective_seconds(each[i].first, *each[i].second, *place, cluster, algorithm);
        totals[i]->calls += each[i].second->calls;
        totals[i]->payload_bytes += each[i].second->payload_bytes;
        totals[i]->seconds += s;
        t += s;
      }
    }
    return t;
  }
};

std::int64_t calls(const GroupedOps& g) {
  return g.shard.calls() + g.replicate.calls() + g.secondary.calls() + g.world.calls();
}

// What the optimizer pass moves a param besides its state: the fp32 master read and written (8),
// the reduced gradient read twice (2r) and the new working param written (w).
double bytes_besides_state(const Settings& settings) {
  const double r = static_cast<double>(size_of(settings.reduce_dtype));
  const double w = static_cast<double>(size_of(settings.work_dtype));
  return 8.0 + 2 * r + w;
}

}  // namespace

Placements place_groups(int ranks, int shard_size, int secondary_size, int gpus_per_node) {
  if (ranks < 1 || gpus_per_node < 1 || shard_size < 1 || ranks % shard_size != 0 ||
      secondary_size < 1 || ranks % secondary_size != 0)
    throw Error(cat("place_groups: ", ranks, " ranks, shard groups of ", shard_size,
                    ", hpZ groups of ", secondary_size, ", ", gpus_per_node,
                    " GPUs per node: the groups must divide the ranks"));
  const int P = gpus_per_node, S = shard_size, H = secondary_size;
  Placements p;
  p.world = place_kind(ranks, P, 1, ranks, 1, 0);
  p.shard = place_kind(ranks, P, ranks / S, S, 1, S);
  p.replicate = place_kind(ranks, P, S, ranks / S, S, 1);
  p.secondary = place_kind(ranks, P, ranks / H, H, 1, H);
  return p;
}

std::string_view name_of(Algorithm a) {
  switch (a) {
    case Algorithm::ring:
      return "ring";
    case Algorithm::tree:
      return "tree";
    case Algorithm::best:
      return "best of ring and tree";
    case Algorithm::direct:
      return "direct exchange (zero's MPI transport)";
  }
  return "?";
}

double link_loads(const GroupPlacement& g, Algorithm algorithm) {
  if (g.nodes <= 1) return 0;
  const double groups = std::max(1, g.sharing);
  if (algorithm != Algorithm::direct) return groups;
  const double k = g.per_node, m = g.nodes;
  return groups * k * k * (m - 1) / (k * m - 1);
}

double bus_bandwidth(const ClusterProfile& c, const GroupPlacement& g, Algorithm algorithm) {
  if (g.nodes <= 1) return c.intra_bandwidth;
  const double share = c.inter_bandwidth / link_loads(g, algorithm);
  return g.per_node > 1 ? std::min(c.intra_bandwidth, share) : share;
}

double collective_seconds(comm::Op op, const OpCount& count, const GroupPlacement& g,
                          const ClusterProfile& c, Algorithm algorithm) {
  if (count.calls <= 0 || g.size <= 1) return 0;
  if (op == comm::Op::all_to_all) return all_to_all_seconds(count, g, c);
  const double n = g.size, m = g.nodes, calls = static_cast<double>(count.calls);
  const bool all_reduce = op == comm::Op::all_reduce || op == comm::Op::barrier;
  // zero's broadcast is a chain: a ring's load whatever the transport.
  const bool direct = algorithm == Algorithm::direct && op != comm::Op::broadcast;
  const double S = static_cast<double>(count.payload_bytes),
               B = bus_bandwidth(c, g, direct ? Algorithm::direct : Algorithm::ring);
  // Ring: the steps and the share of the payload each rank sends (nccl-tests' busbw factor).
  const double steps = all_reduce ? 2 * (n - 1) : n - 1;
  const double inter_steps = all_reduce ? 2 * (m - 1) : m - 1;
  const double factor = all_reduce ? 2 * (n - 1) / n : op == comm::Op::broadcast ? 1 : (n - 1) / n;
  const double ring = calls * (c.call_latency + (steps - inter_steps) * c.intra_latency +
                               inter_steps * c.inter_latency) +
                      factor * S / B;
  if (!all_reduce || algorithm == Algorithm::ring || algorithm == Algorithm::direct) return ring;
  const double tree = calls * (c.call_latency + 2 * ((g.per_node - 1) * c.intra_latency +
                                                     ceil_log2(g.nodes) * c.inter_latency)) +
                      2 * S / B;
  return algorithm == Algorithm::tree ? tree : std::min(ring, tree);
}

double optimizer_bytes_per_param(const Settings& settings, PlanOptimizer optimizer) {
  return bytes_besides_state(settings) + 8.0 * state_buffers(optimizer);  // fp32 state(s), r+w
}

namespace {

// Offload's PCIe time over one step that no computation hides, as the engine schedules the
// copies (zero/offload.hpp): the reduced shards go down bucket by bucket, each copy running
// behind the backward (or the next micro-batch's forward) that follows its reduction, so all but
// the step's last bucket's hide behind the compute, as far as it lasts; the new params go up unit
// by unit, each behind the CPU update of the next unit, so they hide behind the optimizer's time,
// as far as it lasts (the last unit's upload is counted as hidden: one unit of many). With param
// offload each stage-3 gather (forward and backward) uploads its shard first, waited for.
double offload_seconds(const Plan& plan, double compute, double optimizer) {
  const Settings& set = plan.settings;
  const double shard = static_cast<double>(plan.padded_numel) / plan.shard_size;
  const double K = static_cast<double>(std::max<std::int64_t>(1, set.accumulation));
  const double r = static_cast<double>(size_of(set.reduce_dtype));
  const double w = static_cast<double>(size_of(set.work_dtype));
  const double copies = static_cast<double>(
      std::max<std::int64_t>(1, plan.phases.reductions.shard.reduce_scatter.calls));
  const double down = set.offload ? K * shard * r / kOffloadPcieBandwidth : 0;
  const double up = set.offload ? shard * w / kOffloadPcieBandwidth : 0;
  const double gathers = set.offload_params ? 2 * K * shard * w / kOffloadPcieBandwidth : 0;
  const double hidden_down = std::min(down * (1 - 1 / copies), compute);
  return down - hidden_down + up - std::min(up, optimizer) + gathers;
}

}  // namespace

double all_to_all_seconds(const OpCount& count, const GroupPlacement& g, const ClusterProfile& c) {
  if (count.calls <= 0 || g.size <= 1) return 0;
  const double n = g.size, S = static_cast<double>(count.payload_bytes);
  const int k = (g.size + g.nodes - 1) / g.nodes;  // ranks on the busiest node
  const double inside = (k - 1) / n * S / c.intra_bandwidth;
  const double across =
      g.nodes > 1 ? k * ((n - k) / n) * S / (c.inter_bandwidth / std::max(1, g.sharing)) : 0.0;
  const double latency = g.nodes > 1 ? c.inter_latency : c.intra_latency;
  return static_cast<double>(count.calls) * (c.call_latency + latency) + std::max(inside, across);
}

StepTime estimate_step(const Plan& plan, const PlanInput& in, const TimeInput& t) {
  const ClusterProfile& c = t.cluster;
  validate(c);
  if (!(t.flops_per_step >= 0) || !std::isfinite(t.flops_per_step))
    throw Error(cat("time model: FLOPs per step must be >= 0, got ", t.flops_per_step));
  if (!(t.tokens_per_step >= 0) || !std::isfinite(t.tokens_per_step))
    throw Error(cat("time model: tokens per step must be >= 0, got ", t.tokens_per_step));
  if (!(t.backward_share >= 0 && t.backward_share <= 1))
    throw Error(cat("time model: backward's share of the compute must be in [0, 1], got ",
                    t.backward_share));
  const Settings& set = plan.settings;
  StepTime s;
  s.stage = plan.stage;
  const Placements at =
      place_groups(plan.ranks, plan.shard_size, plan.secondary_size, c.gpus_per_node);
  const PhaseCost cost{
      at,
      c,
      t.algorithm,
      {&s.all_reduce, &s.reduce_scatter, &s.all_gather, &s.broadcast, &s.all_to_all}};
  const Plan::Phases& ph = plan.phases;
  const double forward_comm = cost(ph.forward), gathers = cost(ph.backward_gathers),
               reductions = cost(ph.reductions), step_comm = cost(ph.step);
  s.comm = forward_comm + gathers + reductions + step_comm;

  s.compute = t.flops_per_step / plan.ranks / (c.peak_flops * c.compute_efficiency);
  // Encoding and decoding run on the compute thread: each pass is longer by its share.
  const CodecTime codec = codec_seconds(plan, c);
  s.codec_forward = codec.forward;
  s.codec_backward = codec.backward;
  s.codec = codec.forward + codec.backward;
  const double forward_compute = s.compute * (1 - t.backward_share);
  const double forward = forward_compute + codec.forward,
               backward = s.compute - forward_compute + codec.backward;
  // What may hide: every prefetched gather but the first of each pass (one per micro-batch), and
  // with overlap_comm every reduction but the step's last bucket's.
  const double K = static_cast<double>(std::max<std::int64_t>(1, set.accumulation));
  const bool prefetch = plan.prefetches;  // the engine's rule (Settings::prefetches)
  auto all_but_first = [&](double seconds, std::int64_t n) {
    return prefetch && n > 0 ? seconds * (1 - std::min(K, double(n)) / double(n)) : 0.0;
  };
  const double hide_forward = all_but_first(forward_comm, calls(ph.forward));
  const double hide_gathers = all_but_first(gathers, calls(ph.backward_gathers));
  const std::int64_t buckets = std::max<std::int64_t>(
      1, ph.reductions.shard.reduce_scatter.calls + ph.reductions.shard.all_to_all.calls);
  const double hide_reductions = set.overlap ? reductions * (1 - 1.0 / buckets) : 0.0;
  s.exposed_forward = forward_comm - hide_forward + std::max(0.0, hide_forward - forward);
  s.exposed_backward = gathers + reductions - hide_gathers - hide_reductions +
                       std::max(0.0, hide_gathers + hide_reductions - backward);
  s.exposed_step = step_comm;
  s.comm_exposed = s.exposed_forward + s.exposed_backward + s.exposed_step;

  // The optimizer over this rank's shard: the params it owns from its fp32 master weights (4 B
  // each), its state read and written once as planned (Muon's v holds AdamW's elements only, so
  // its state is not two buffers of the shard).
  const double owned = static_cast<double>(plan.device.master + plan.host.master) / 4;
  const double state = static_cast<double>(plan.device.optimizer + plan.host.optimizer);
  s.optimizer_bytes_per_param = owned > 0 ? bytes_besides_state(set) + 2 * state / owned
                                           : optimizer_bytes_per_param(set, in.optimizer);
  s.optimizer = owned * s.optimizer_bytes_per_param /
                (set.offload ? kOffloadHostBandwidth : c.hbm_bandwidth * c.hbm_efficiency);
  // Muon's Newton-Schulz: the busiest owner's GEMM FLOPs at the GPU's achieved rate.
  s.newton_schulz = plan.newton_schulz_flops_max / (c.peak_flops * c.compute_efficiency);
  if (plan.newton_schulz_flops_mean > 0)
    s.newton_schulz_imbalance = plan.newton_schulz_flops_max / plan.newton_schulz_flops_mean;
  s.optimizer += s.newton_schulz;
  s.offload = offload_seconds(plan, s.compute, s.optimizer);

  s.step = s.compute + s.codec + s.comm_exposed + s.offload + s.optimizer;
  s.tokens_per_second = s.step > 0 ? t.tokens_per_step / s.step : 0;
  s.mfu = s.step > 0 ? t.flops_per_step / (s.step * plan.ranks * c.peak_flops) : 0;
  s.memory_bytes = plan.peak_total;
  s.memory_budget = t.memory_budget > 0 ? t.memory_budget : c.memory_bytes;
  s.fits = s.memory_bytes <= s.memory_budget;
  return s;
}

std::optional<std::size_t> fastest_fitting(const std::vector<StepTime>& steps) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (steps[i].fits && (!best || steps[i].step < steps[*best].step)) best = i;
  return best;
}

}  // namespace zero
