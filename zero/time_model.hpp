// Time model: how long one optimizer step takes on a cluster, from the collectives the planner
// counted (zero/planner.hpp: calls and payload by process group, op and engine call), the
// model's FLOPs and a cluster profile. Collectives cost alpha-beta times with nccl-tests' bus
// bandwidth; what the engine overlaps hides behind compute by the rule at estimate_step; the
// AdamW step is bound by HBM bandwidth. Pure arithmetic: no device, no communicator.
// docs/time.md has every formula, the overlap rule and each built-in figure with its source.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.hpp"
#include "zero/planner.hpp"

namespace zero {

// One node type of a cluster: what a GPU computes, holds and moves. Plain SI units (FLOP/s,
// bytes, B/s, seconds); a profile file gives them in the units named by its keys
// (read_cluster_profile). Every figure a measurement can replace is a field of its own, so a
// calibrated profile is the same struct with measured values.
struct ClusterProfile {
  std::string name;               // "h100-sxm", or a profile file's "name"
  std::string description;        // one line: the GPU, the node, the links
  double peak_flops = 0;          // dense bf16 tensor FLOP/s per GPU (datasheet, without sparsity)
  double compute_efficiency = 0;  // achieved fraction of peak_flops in forward and backward
  std::int64_t memory_bytes = 0;  // HBM per GPU
  double hbm_bandwidth = 0;       // B/s per GPU
  double hbm_efficiency = 0;      // achieved fraction of hbm_bandwidth in the optimizer step
  int gpus_per_node = 0;
  // Bus bandwidth (nccl-tests' busbw) of a ring inside one node, per GPU, one direction: what a
  // large all-reduce reaches there. A profile's value is achievable, not the line rate.
  double intra_bandwidth = 0;
  // One node's network, all its NICs together, one direction (B/s, achievable).
  double inter_bandwidth = 0;
  double intra_latency = 0;  // seconds per ring step between two GPUs of a node
  double inter_latency = 0;  // seconds per ring step that crosses to another node
  double call_latency = 0;   // seconds per collective, whatever its size (launch, setup)
  // Compression's per-element loops on one rank (kernels/cpu/quant.cpp), seconds per value, as
  // bench/codec_bench measures them; 0: not measured, priced as bound by the optimizer's memory
  // bandwidth (codec_rates).
  double quantize = 0;        // a value read and quantised (qgZ's and qwZ's encoding)
  double dequantize_add = 0;  // a value decoded and added into the owner's fp32 sum
  double dequantize = 0;      // a value decoded and written into the gathered unit (qwZ)
  double topk_select = 0;     // a value of a TopK segment: the residual add and the selection
  double topk_sort = 0;       // per k log2 k of the k values a segment keeps (their sort)
  std::string sources;        // where the figures come from
};

// The codec's per-value seconds a profile prices: each measured figure as it is, each 0 as the
// bytes its loop moves over hbm_bandwidth x hbm_efficiency (an assumption, not a measurement:
// quantise 5 B, a 16-bit value read twice and its code written; dequantise-add 9 B, the code and
// the fp32 sum read and written; dequantise 3 B; TopK's selection 16 B, a radix select's four
// passes over a 32-bit key; its sort 16 B per k log2 k).
struct CodecRates {
  double quantize = 0, dequantize_add = 0, dequantize = 0, topk_select = 0, topk_sort = 0;
};
CodecRates codec_rates(const ClusterProfile& cluster);

// The built-in profiles: a100-pcie, a100-sxm, h100-sxm, h200 (docs/time.md: every figure and
// its source). Empty for an unknown name.
std::vector<std::string> cluster_names();
std::optional<ClusterProfile> builtin_cluster(std::string_view name);
// A profile from JSON text: every field by its key in the units the key names (peak_tflops,
// compute_efficiency, memory_GiB, hbm_bandwidth_GBs, hbm_efficiency, gpus_per_node,
// intra_bandwidth_GBs, inter_bandwidth_GBs, intra_latency_us, inter_latency_us,
// call_latency_us; optional: quantize_ns, dequantize_add_ns, dequantize_ns, topk_select_ns,
// topk_sort_ns; and name, description, sources), or "base": a built-in profile whose fields
// the others override (a calibrated profile gives only what it measured). A missing, misspelt,
// mistyped or out-of-range key is a zero::Error of one sentence naming `origin` and the key.
ClusterProfile read_cluster_profile(std::string_view json_text, const std::string& origin);
ClusterProfile load_cluster_profile(const std::string& path);
// Throws zero::Error naming the first field out of range (a profile built in code).
void validate(const ClusterProfile& profile);

// Where one process group's ranks sit: `size` ranks on `nodes` nodes, at least `per_node` of them
// on each node it uses, and at most `sharing` groups of its kind (itself included) with ranks on
// one of its nodes, which run the same collective at the same time and share that node's
// network. Ranks are placed node by node (rank r on node r / gpus_per_node), as mpirun and srun
// place them by default.
struct GroupPlacement {
  int size = 1;
  int nodes = 1;
  int per_node = 1;
  int sharing = 1;
};
// The engine's groups (Engine::GroupAccounting) for `ranks` ranks with shard groups of
// `shard_size` consecutive ranks (the world when shard_size = ranks) and hpZ groups of
// `secondary_size` (1: none). Of the groups of one kind, the placement of the slowest.
struct Placements {
  GroupPlacement shard, replicate, secondary, world;
};
Placements place_groups(int ranks, int shard_size, int secondary_size, int gpus_per_node);

enum class Algorithm : std::uint8_t {
  ring,  // every op
  tree,  // all-reduce only (NCCL's double binary tree); the other ops stay rings
  best,  // the faster of the two for each all-reduce, as NCCL's tuner picks
  // zero's MPI transport (comm/reduce_scatter.hpp, all_gather.hpp): every rank sends each peer
  // its block at once, the all-reduce is the two in turn, the broadcast a chain. A rank sends what
  // a ring rank sends, but k ranks on a node all send across: more of it leaves the node.
  direct,
};
std::string_view name_of(Algorithm a);

// How many ring-loads of bytes cross one node's network while each of a kind's groups runs one
// collective (a ring-load: the (n-1)/n S a ring's one edge out of the node carries, per
// reduce-scatter of S). A ring enters and leaves each node once per channel and NCCL runs a
// channel per NIC, so one ring group is one load, and the `sharing` groups of its kind with ranks
// on a node, running at the same time, are `sharing` loads. With direct exchange each of the k
// ranks a group has on a node sends (n-k)/n S across, k(n-k)/n S in all for n = k m ranks on m
// nodes: k^2 (m-1) / (k m - 1) loads per group (4/3 for 2 nodes of 2; 1 for one rank a node).
// A group inside one node puts none on the network (0).
double link_loads(const GroupPlacement& group, Algorithm algorithm);

// The bus bandwidth a group's collectives run at (B/s). Inside one node: intra_bandwidth. Across
// nodes, the node's inter_bandwidth split among the loads that cross it at once (link_loads:
// the replicate groups of hierarchical sharding, with shard groups of one node, are
// gpus_per_node groups, each 1/gpus_per_node of the network). The bus bandwidth is then
// min(intra_bandwidth, inter_bandwidth / loads); a group of one rank per node has no intra-node
// hop and gets its share alone.
double bus_bandwidth(const ClusterProfile& cluster, const GroupPlacement& group,
                     Algorithm algorithm = Algorithm::ring);

// Seconds for `count.calls` collectives of op `op` moving `count.payload_bytes` in all, in one
// group (nccl-tests' definitions, S the payload of one call, n = group.size, B = bus_bandwidth):
//   ring all-reduce      2(n-1)/n * S/B   (busbw = algbw * 2(n-1)/n)
//   reduce-scatter,
//   all-gather           (n-1)/n * S/B    (busbw = algbw * (n-1)/n; S the whole buffer)
//   broadcast            S/B              (busbw = algbw)
//   tree all-reduce      2 * S/B          (reduce up, broadcast down; NCCL's tree algbw = busbw/2)
// plus, per call, call_latency and the steps' latency: a ring of n ranks on m nodes takes
// 2(n-1) steps for an all-reduce, (n-1) for the others, of which 2(m-1) or (m-1) cross nodes at
// inter_latency and the rest are intra_latency (NCCL's tuning model); a tree
// 2((k-1) intra + ceil(log2 m) inter) with k ranks per node. A group of one rank costs nothing.
// Both terms are linear in the calls and the bytes, so many calls cost as one call of their
// average size repeated; `best` picks the faster algorithm for that average call. `direct` costs
// every op but the broadcast as the ring does, its bytes at bus_bandwidth(.., direct) and its
// latency the ring's (a rank's n-1 messages leave at once; the fitted call_latency holds them).
// An all-to-all is all_to_all_seconds, whatever the algorithm.
double collective_seconds(comm::Op op, const OpCount& count, const GroupPlacement& group,
                          const ClusterProfile& cluster, Algorithm algorithm = Algorithm::ring);

// An all-to-all (the compressed reductions): no ring, every rank sends a block to every peer at
// once, (n-1)/n of its buffer S in all. With k = ceil(n / m) ranks on the busiest node, the
// (k-1)/n that stays inside the node goes at intra_bandwidth, and the busiest node's k ranks push
// (n-k)/n each through its network, inter_bandwidth / sharing: the slower of the two, plus per
// call call_latency and one step's latency (inter_latency when the group spans nodes).
double all_to_all_seconds(const OpCount& count, const GroupPlacement& group,
                          const ClusterProfile& cluster);

// Compression's encoding and decoding on one rank over one step (zero/wire_compress.cpp), in
// the pass whose compute thread runs it: the engine encodes a bucket's segments as it issues the
// all-to-all and decodes them when it waits, both inside reduce_grads (backward), and qwZ
// quantises its shard as it issues a gather and dequantises the unit when it waits (forward, or
// backward for backward's gathers). It is compute, never hidden: the collectives it feeds may
// hide behind it. Counted from the plan's compressed collectives: a qgZ all-to-all of payload S
// carries S / (b + 4 / block) values (b = 1 or 1/2 byte a value, a scale a block), each
// quantised by its rank and dequantised and added by its owner; a TopK one S / 8 pairs of
// segments of k = pairs / (calls x G) kept values of about k / ratio, each value passed by
// topk_select, each segment's k sorted, each pair added by its owner; a qwZ gather of payload S
// S / (1 + 4 / block) values, of which the rank quantises its 1/G and dequantises all.
struct CodecTime {
  double forward = 0, backward = 0;
};
CodecTime codec_seconds(const Plan& plan, const ClusterProfile& cluster);

// What estimate_step needs besides the plan.
struct TimeInput {
  ClusterProfile cluster;
  double flops_per_step = 0;   // model FLOPs of one optimizer step over all ranks (6 Ψ T)
  double tokens_per_step = 0;  // tokens of one optimizer step over all ranks (for tokens/s)
  // Backward's share of the compute: 4 of the 6 Ψ T (forward 2), 6 of 8 with recomputation.
  double backward_share = 2.0 / 3.0;
  Algorithm algorithm = Algorithm::best;
  std::int64_t memory_budget = 0;  // bytes the plan's peak must fit per GPU; 0: the profile's
};

// One op over every group of one step.
struct OpTime {
  std::int64_t calls = 0;
  std::int64_t payload_bytes = 0;
  double seconds = 0;
};

struct StepTime {
  int stage = 0;
  OpTime all_reduce, reduce_scatter, all_gather, broadcast, all_to_all;
  double comm = 0;  // every collective of the step, as if none overlapped
  double exposed_forward = 0, exposed_backward = 0, exposed_step = 0;
  double comm_exposed = 0;  // what the step waits for: the three above
  double compute = 0;       // forward and backward on one GPU
  // Compression's encoding and decoding (codec_seconds), forward's and backward's: on the
  // compute thread, so they lengthen the pass the collectives hide behind, and the step.
  double codec = 0, codec_forward = 0, codec_backward = 0;
  double optimizer = 0;     // the optimizer step over this GPU's shard (on the CPU when offloaded)
  double optimizer_bytes_per_param = 0;
  // Muon's Newton-Schulz on the busiest owner (part of optimizer), and that rank's FLOPs over
  // the average rank's (1: balanced; whole-matrix ownership makes it uneven).
  double newton_schulz = 0, newton_schulz_imbalance = 1;
  double offload = 0;       // offload's PCIe transfers that nothing hides (0 without offload)
  double step = 0;          // compute + codec + comm_exposed + offload + optimizer
  double tokens_per_second = 0;
  double mfu = 0;                  // flops_per_step / (step * ranks * peak_flops)
  std::int64_t memory_bytes = 0;   // the plan's predicted peak per GPU
  std::int64_t memory_budget = 0;  // what it was held against
  bool fits = false;
};

// Bytes the optimizer step moves through HBM per parameter this rank owns: AdamW reads and writes
// the fp32 master, m and v (24), reads the reduced gradient twice (the norm's pass and the
// update's: 2r) and writes the new working param (w): 34 for bf16 with an fp32 reduction, 30
// with bf16 gradients. SGD with momentum keeps one state: 16 + 2r + w. estimate_step's figure
// counts the state a plan holds instead (Muon: one momentum a param, v for AdamW's only).
double optimizer_bytes_per_param(const Settings& settings, PlanOptimizer optimizer);

// ZeRO-Offload's two figures, the same for every profile: PCIe 4.0 x16's achievable rate between
// pinned host memory and one GPU, one direction (about 25 GB/s of its 32), and the host memory
// bandwidth one rank's CPU AdamW streams at (a two-socket node's ~200 GB/s shared by 8 ranks).
inline constexpr double kOffloadPcieBandwidth = 25e9;
inline constexpr double kOffloadHostBandwidth = 25e9;

// The time of one optimizer step for `plan` (made from `input`; its settings are plan.settings).
// Compute is flops_per_step / ranks / (peak_flops * compute_efficiency), split forward / backward
// by backward_share; each pass is then longer by its codec_seconds. Each phase's collectives
// (Plan::phases) run one after another on the engine's communication stream, and overlap as the
// engine overlaps them:
//   - forward: where the engine prefetches (Plan::prefetches: the window and the live limit
//     hold a unit, Settings::prefetches) every gather but the first of each micro-batch is
//     issued while the unit before it computes, and hides behind forward compute, up to its
//     length; otherwise every gather is waited for;
//   - backward: the gathers likewise (prefetched in backward order); with overlap_comm every
//     gradient reduction but the step's last also hides behind backward compute (they share the
//     stream with the gathers: the sum of what may hide is held against backward's length);
//     without overlap_comm each reduction is waited for inside reduce_grads;
//   - step: the new params' all-gather (stages 1-2), the norm and the agreements are waited for.
// Exposed = what may not hide + max(0, what may hide - the compute it hides behind). The step
// then is compute + codec + exposed + optimizer (optimizer_bytes_per_param x owned params / (HBM x
// hbm_efficiency)). With optimizer offload (docs/offload.md) the optimizer streams host memory
// at kOffloadHostBandwidth instead, and offload's transfers (the reduced shard down at each
// micro-batch, the new params up, with param offload each gather's shard up) cross PCIe at
// kOffloadPcieBandwidth: the reduced shards hide behind the compute but the step's last
// bucket's, the uploads behind the CPU update, the gathers' uploads are waited for (the engine's
// schedule, zero/offload.hpp). Throws zero::Error for a bad TimeInput.
StepTime estimate_step(const Plan& plan, const PlanInput& input, const TimeInput& time);

// The index of the fastest step among those that fit, or nullopt when none fits.
std::optional<std::size_t> fastest_fitting(const std::vector<StepTime>& steps);

}  // namespace zero
