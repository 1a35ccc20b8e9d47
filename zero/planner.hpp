// Planner: the bytes per rank a training run will hold, by category, before anything runs.
// A pure function of the model and the settings (no communicator, no device). The model states
// and persistent buffers are ZeRO's formulas, term by term (docs/memory.md); everything transient
// is counted by running the engine itself over counting memory and a communicator that moves
// nothing (EngineOptions::count_only), so the plan equals the engine's ledger by construction and
// the formulas are checked against that run at every call. Any input answers in seconds: time is
// linear in the units (at most a million) and independent of the accumulation, and byte counts
// past 2^63 - 1 are a zero::Error, never a wrapped (negative) size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "precision/dtype.hpp"
#include "zero/config.hpp"
#include "zero/layout.hpp"
#include "zero/settings.hpp"

namespace zero {

// The planner builds the layout the engine builds, a few hundred bytes per unit and per tensor:
// bounded, so that an absurd model (--layers 2147483647) is refused in a sentence instead of
// exhausting memory. Real models have a few thousand tensors; a million answers in seconds.
inline constexpr std::int64_t kMaxPlanUnits = 1'000'000;
inline constexpr std::int64_t kMaxPlanTensors = 2'000'000;

// The unpadded parameter count of a list of units.
std::int64_t count_params(const std::vector<UnitSpec>& units);
// A bare parameter count cut into `units` units of (nearly) equal size, for a model given only
// by its size. Throws zero::Error for a count < 1 or units < 1 or units > count.
std::vector<UnitSpec> uniform_units(std::int64_t params, int units);

// The optimizer's state: Adam/AdamW and LAMB keep m and v, SGD and Lion one momentum buffer.
enum class PlanOptimizer { adam, sgd_momentum, lamb, lion, muon };
int state_buffers(PlanOptimizer o);               // 2 or 1 (Muon: m, and v for AdamW's)
PlanOptimizer plan_optimizer_of(OptimizerType t);  // the one Config::optimizer names

// What the planner needs: the model as units and activation bytes (models/gpt_shape.hpp gives
// a GPT's, uniform_units a bare count's), the ranks, and the run's Config, whose every rule
// (stage, dtypes, groups, buckets, prefetch, offload) zero::resolve_settings decides, as for the
// engine. The planner reads the resolved Settings, never the Config's fields.
struct PlanInput {
  std::vector<UnitSpec> units;       // the model
  std::int64_t activation_bytes = 0; // the trainer's activations per rank (device), at their peak
  // The trainer's call order has a tied output head (models/gpt): after the forward pass it
  // gathers unit 0 (the token embedding) once more and releases it, before the backward pass.
  bool tied_head = false;
  std::string model_name;            // for reports ("gpt3-1.3b", "7.5e9 params", "mlp 4x512")
  int ranks = 1;                     // N: data-parallel ranks
  int ranks_per_node = 1;            // for reports and the time model's placement
  Config config;                     // the run's settings, as the engine reads them
  // The optimizer's state (plan_input_from_config: Config::optimizer's); the planner also sizes
  // SGD's one buffer, which the engine does not run (its count is then the formula's alone).
  PlanOptimizer optimizer = PlanOptimizer::adam;
  std::int64_t align_elements = kDefaultAlignElements;
  // The MPI backend's staging (comm::Options): chunk bytes per peer and pipeline slots (used
  // when !device; on a device the NCCL backend's fp32 widening copy is counted instead).
  std::size_t comm_chunk_bytes = std::size_t{1} << 20;
  int comm_pipeline_depth = 2;
  bool device = true;                // state on the device (GPU) vs host memory (CPU ranks)
  // With device: host memory standing for the device (EngineOptions::emulate_device), MPI's
  // staging (comm/emulated_device.hpp) instead of NCCL's.
  bool emulated_device = false;
};

// A PlanInput of `config` at `ranks` ranks, the model left for the caller to give.
PlanInput plan_input_from_config(const Config& config, int ranks);

// One term of the formula: which category, what it is, how it was computed, its bytes.
struct PlanTerm {
  std::string category;   // params, grads, master, optimizer, buffers, activations
  std::string name;       // e.g. "bf16 params (full)"
  std::string formula;    // e.g. "2 B x Ψp = 2 x 1,048,576"
  std::int64_t bytes = 0;
  bool host = false;      // in host memory (offload, or CPU ranks)
};

// Bytes per rank by category in one memory space.
struct PlanBytes {
  std::int64_t params = 0;
  std::int64_t grads = 0;
  std::int64_t master = 0;
  std::int64_t optimizer = 0;
  std::int64_t buffers = 0;      // peak of the engine's transient buffers (buckets, gathered
                                 // units and prefetch window, fp32 accumulator, comm staging)
  std::int64_t activations = 0;
  std::int64_t model_states() const { return params + grads + master + optimizer; }
  std::int64_t total() const { return model_states() + buffers + activations; }
};

// Calls and payload bytes of one collective op over one optimizer step, as comm::Accounting
// counts them: payload is an all-reduce's buffer, a reduce-scatter's input, an all-gather's output,
// an all-to-all's input (the compressed reductions of zero/wire_compress.cpp).
struct OpCount {
  std::int64_t calls = 0;
  std::int64_t payload_bytes = 0;
};
// The ops the engine issues in one process group (it issues no barrier in a step).
struct GroupOps {
  OpCount all_reduce, reduce_scatter, all_gather, broadcast, all_to_all;
  std::int64_t calls() const;
  std::int64_t payload_bytes() const;
};
// One GroupOps per process group: inside the shard group, across the shard groups (hierarchical
// sharding's replicate group), inside the hpZ group, over all ranks. Flat ZeRO's world is its
// shard group: the engine counts the world's small agreements there (Engine::GroupAccounting).
struct GroupedOps {
  GroupOps shard, replicate, secondary, world;
};

struct Plan {
  int stage = 0;
  int ranks = 1;
  int shard_size = 1;               // the shard group actually used
  int secondary_size = 1;           // the hpZ group actually used (1: none)
  std::int64_t numel = 0;           // Ψ
  std::int64_t padded_numel = 0;    // Ψ with the layout's padding
  // Muon: Newton-Schulz FLOPs of one step on the busiest rank and on the average one (each
  // matrix on its owner; stage 0: every matrix on every rank). 0 for the other optimizers.
  double newton_schulz_flops_max = 0, newton_schulz_flops_mean = 0;
  PlanBytes device;                 // on the GPU (or the ranks' memory when !input.device)
  PlanBytes host;                   // offloaded state (and staging) in host memory
  std::int64_t peak_total = 0;      // the predicted peak of the device space (the engine's
                                    // ledger peak_total is compared with this)
  std::int64_t step_transient_peak = 0;  // the most a step's transient allocations (gathered
                                         // units, grads and buckets in flight, scratch) hold at
                                         // once, in the engine's counting run
  std::vector<PlanTerm> terms;      // every term, in report order
  // Payload bytes one rank moves in one optimizer step (every micro-batch and the step), by
  // process group, as the engine's counting run moved them: inside the shard group, across the
  // shard groups (hierarchical sharding), inside the hpZ group, over all ranks.
  struct Traffic {
    std::int64_t shard = 0, replicate = 0, secondary = 0, world = 0;
  } traffic;
  // The same step itemised: calls and payload per group and op (traffic is their payload sum).
  GroupedOps collectives;
  // And split by the engine call that issued them, which is what decides what overlap can hide
  // (zero/time_model.hpp): the forward pass's gathers (stage 3; with a tied head, its extra
  // gather), the backward pass's gathers, the gradient reductions (grad, release and
  // reduce_grads: the reduce-scatter, the replicas' all-reduce, stage 0's all-gather), and step()
  // (the new params' all-gather, the norm, the agreements; with overlap_comm, the replicas'
  // all-reduce of the last bucket, finished there). The four add up to `collectives`.
  struct Phases {
    GroupedOps forward, backward_gathers, reductions, step;
  } phases;
  std::vector<std::string> notes;   // settings the input asked for that the run overrides, one
                                    // sentence each (zero::resolve_settings), for the caller to say
  Settings settings;                // what the input's Config resolved to at this rank count
  // Stage 3: whether the engine's prefetch rule (Settings::prefetches) gathers any unit ahead
  // in this layout, forward or backward; false when the window or the live limit is smaller
  // than the units, or below stage 3.
  bool prefetches = false;
};

// The plan for input.config's stage. Throws zero::Error on bad input (naming the field).
Plan plan_memory(const PlanInput& input);

// Inverse questions. largest_model: the largest bare parameter count (cut into `units` equal
// units by uniform_units, activation_bytes kept as given) whose predicted peak fits
// `budget_bytes` per device, by bisection to within 0.1%; 0 if even `units` parameters do not.
std::int64_t largest_model(const PlanInput& input, std::int64_t budget_bytes, int units = 32);
// Fewest ranks (1..max_ranks), sharding over all of them (mics_shard_size ignored), at which `input`
// fits the budget; nullopt if none does.
std::optional<int> fewest_ranks(const PlanInput& input, std::int64_t budget_bytes,
                                int max_ranks = 65536);

// "7.5e9", "13B", "1.3b", "350M", "125k", "1000" -> a count. Throws zero::Error naming the text.
std::int64_t parse_count(std::string_view text);
// "80GiB", "80GB", "1.5TiB", "512MiB", "64KB", "1024B" -> bytes (GB = 1e9, GiB = 2^30). A number
// without a unit is an error (was it GB or GiB?).
std::int64_t parse_bytes(std::string_view text);
// 1536 -> "1.50 KiB" (powers of 1024).
std::string format_bytes(std::int64_t bytes);

// A table (one column per plan) for people, and the terms with their formulas (--explain).
std::string describe(const std::vector<Plan>& plans);
std::string explain(const Plan& plan);

}  // namespace zero
