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

namespace zero {

// A GPT-style decoder (pre-LayerNorm, learned positions, GELU MLP of ffn_hidden, tied or untied
// output head). Units: the embeddings, one per transformer block, the final LayerNorm (+ the
// head when untied), as Megatron and DeepSpeed group them.
struct GptShape {
  int layers = 12;
  int hidden = 768;
  int heads = 12;
  std::int64_t vocab = 50257;
  int seq_len = 1024;
  int ffn_hidden = 0;           // 0: 4 * hidden
  bool tied_embeddings = true;  // output head shares the token embedding
  int micro_batch = 1;          // sequences per micro-batch per rank
  bool recompute = false;       // full activation recomputation (keep only each block's input)
};

// Named sizes: gpt2-small .. gpt2-xl and gpt3-125m .. gpt3-175b (the GPT-3 paper's table).
// Empty when the name is unknown.
std::optional<GptShape> gpt_preset(std::string_view name);
std::vector<std::string> gpt_preset_names();

// The units a GPT of this shape registers (names and shapes, as a trainer would).
std::vector<UnitSpec> gpt_units(const GptShape& shape);
// The unpadded parameter count of a list of units.
std::int64_t count_params(const std::vector<UnitSpec>& units);
// Activation bytes per rank held at the peak of backward, Korthikanti et al. (2022), eq. 2,
// without tensor/sequence parallelism: per block s·b·h·(34 + 5·a·s/h) bytes at 16-bit, or
// 2·s·b·h with full recomputation (+ one block's full set while it is recomputed); plus the
// logits (4·s·b·V fp32 for the loss). Documented term by term in docs/memory.md.
std::int64_t gpt_activation_bytes(const GptShape& shape, DType work_dtype);
// The bytes zero's reference GPT trainer (models/gpt.hpp) holds per rank for one micro-batch,
// exactly: every activation it keeps for backward (compute_dtype: bf16 or fp32), its fp32
// LayerNorm statistics, attention probabilities and logits, its backward buffers, the widened
// parameters and gradients of one unit (and the tied embedding's gradient, kept across the
// backward) and its op scratch. Term by term in docs/memory.md; the trainer checks that its
// buffers add up to this. Less than gpt_activation_bytes's estimate for the same shape is
// expected: no dropout masks, one buffer per tensor, attention's probabilities only.
std::int64_t gpt_trainer_activation_bytes(const GptShape& shape, DType compute_dtype);

// A bare parameter count cut into `units` units of (nearly) equal size, for a model given only
// by its size. Throws zero::Error for a count < 1 or units < 1 or units > count.
std::vector<UnitSpec> uniform_units(std::int64_t params, int units);

enum class PlanOptimizer { adam, sgd_momentum };  // Adam/AdamW: m and v; SGD: one momentum buffer
enum class Offload { none, cpu };                 // optimizer offload (DeepSpeed offload_optimizer)

struct PlanInput {
  std::vector<UnitSpec> units;       // the model (gpt_units, uniform_units or the trainer's own)
  std::int64_t activation_bytes = 0; // the trainer's activations per rank (device), at their peak
  // The trainer's call order has a tied output head (models/gpt): after the forward pass it
  // gathers unit 0 (the token embedding) once more and releases it, before the backward pass.
  bool tied_head = false;
  std::string model_name;            // for reports ("gpt3-1.3b", "7.5e9 params", "mlp 4x512")
  int ranks = 1;                     // N: data-parallel ranks
  int ranks_per_node = 1;            // for reports and hierarchical sharding
  int shard_size = 0;                // ranks one shard group spans (0 = all N; MiCS/HSDP
                                     // hierarchical sharding: states replicated across groups)
  int hpz_partition_size = 1;        // ZeRO++ hpZ at stage 3: a secondary copy of the params
                                     // sharded over this many ranks (a node); 1 = off
  int stage = 0;                     // 0..3
  Precision precision = Precision::bf16;
  DType reduce_dtype = DType::f32;   // communication_data_type (fp32 or the training dtype)
  PlanOptimizer optimizer = PlanOptimizer::adam;
  Offload offload = Offload::none;
  std::int64_t gradient_accumulation_steps = 1;
  bool overlap_comm = false;
  std::int64_t align_elements = kDefaultAlignElements;
  std::int64_t reduce_bucket_size = kDefaultBucketElements;     // elements
  std::int64_t allgather_bucket_size = kDefaultBucketElements;  // elements (stages 1-2, after the step)
  std::int64_t prefetch_bucket_size = 50'000'000;         // elements (stage3_prefetch_bucket_size)
  std::int64_t max_live_parameters = 1'000'000'000;       // elements (stage3_max_live_parameters)
  std::int64_t param_persistence_threshold = 100'000;     // elements (stage 3)
  // The MPI backend's staging (comm::Options): chunk bytes per peer and pipeline slots (used
  // when !device; on a device the NCCL backend's fp32 widening copy is counted instead).
  std::size_t comm_chunk_bytes = std::size_t{1} << 20;
  int comm_pipeline_depth = 2;
  bool device = true;                // state on the device (GPU) vs host memory (CPU ranks)
};

// Fills a PlanInput's settings from a Config (stage, precision, reduce dtype, accumulation,
// overlap, buckets, prefetch, persistence, offload), as the engine reads them.
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
// counts them: payload is an all-reduce's buffer, a reduce-scatter's input, an all-gather's output.
struct OpCount {
  std::int64_t calls = 0;
  std::int64_t payload_bytes = 0;
};
// The ops the engine issues in one process group (it issues no barrier in a step).
struct GroupOps {
  OpCount all_reduce, reduce_scatter, all_gather, broadcast;
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
};

// The plan for input.stage. Throws zero::Error on bad input (naming the field).
Plan plan_memory(const PlanInput& input);

// Inverse questions. largest_model: the largest bare parameter count (cut into `units` equal
// units by uniform_units, activation_bytes kept as given) whose predicted peak fits
// `budget_bytes` per device, by bisection to within 0.1%; 0 if even `units` parameters do not.
std::int64_t largest_model(const PlanInput& input, std::int64_t budget_bytes, int units = 32);
// Fewest ranks (1..max_ranks), sharding over all of them (shard_size ignored), at which `input`
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
