// The engine configuration as plain values, read from DeepSpeed-compatible JSON.
//
// A DeepSpeed user's ds_config.json works as it is: every key DeepSpeed documents is acted on (the
// fields below), accepted with a warning in Config::warnings saying what zero does instead (unless
// set to the value at which DeepSpeed does the same), or refused as a feature zero lacks (offload,
// LAMB, ...; all of them in one error). A misspelt key, a bad value or a wrong JSON type is a
// zero::Error naming the key's path ("zero_optimization.stage: expected 0..3, got 4"); other
// unknown keys are ignored with a warning where DeepSpeed ignores them. Hugging Face "auto"
// placeholders leave the default in the field and are listed in Config::auto_keys for the caller
// to fill. docs/config.md lists every key.
// Defaults are DeepSpeed's; where zero differs, the field's comment says so and docs/config.md
// says why.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "precision/dtype.hpp"
#include "zero/compression.hpp"
#include "zero/layout.hpp"

namespace zero {

// Training precision of parameters and gradients; master weights and optimizer state are fp32.
enum class Precision { bf16, fp16, fp32 };

// adam: L2 penalty added to the gradient (torch.optim.Adam). adamw: decoupled weight decay
// (torch.optim.AdamW). DeepSpeed's "Adam" means adamw unless params.adam_w_mode is false.
// lamb: DeepSpeed's FusedLamb (Adam's direction scaled per parameter by a trust ratio). lion:
// the sign of an interpolated momentum (DeepSpeed's FusedLion). docs/optimizers.md has each.
enum class OptimizerType { adam, adamw, lamb, lion, muon };

// constant: no scheduler block. The others are DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR.
enum class ScheduleType { constant, warmup, warmup_linear_decay, warmup_cosine };

// How the warmup rises from its start to its end value (DeepSpeed's warmup_type).
enum class WarmupType { log, linear };

// ZeRO-Offload destinations (docs/offload.md): none and cpu act; nvme is refused at parse time.
enum class OffloadDevice { none, cpu, nvme };

// optimizer {type, params}. Defaults are those of DeepSpeed's FusedAdam, which a DeepSpeed
// config gets: note weight_decay 0.0, not torch.optim.AdamW's 0.01.
struct OptimizerConfig {
  OptimizerType type = OptimizerType::adamw;  // DeepSpeed's default adam_w_mode=true
  double lr = 1e-3;                           // base learning rate (the schedule scales it)
  double beta1 = 0.9;                         // first-moment decay, in [0, 1)
  double beta2 = 0.999;                       // second-moment decay, in [0, 1)
  double eps = 1e-8;                          // added to sqrt(v); > 0
  double weight_decay = 0.0;                  // FusedAdam's default; >= 0
  bool bias_correction = true;                // params.bias_correction: divide m, v by 1 - beta^t
  double max_coeff = 10.0;                    // LAMB: the trust ratio's upper clamp (FusedLamb's)
  double min_coeff = 0.01;                    // LAMB: its lower clamp; <= max_coeff
  // Muon (docs/optimizers.md): the matrices it updates take muon_lr (scheduled as lr is), the
  // rest AdamW with lr, betas, eps. muon_params: globs of the params it updates (each 2-D);
  // empty: every 2-D param whose name names no embedding or head.
  double muon_lr = 0.02;                      // Keller Jordan's MuonWithAuxAdam default
  double momentum = 0.95;                     // the EMA momentum's decay, in [0, 1)
  bool nesterov = true;
  bool match_rms_adamw = false;  // adjust_lr_fn: Moonshot's 0.2 sqrt(max(m, n)), else max(1, m/n)^0.5
  std::vector<std::string> muon_params;
  friend bool operator==(const OptimizerConfig&, const OptimizerConfig&) = default;
};

// One parameter group (zero's own key "param_groups", an array; DeepSpeed takes its groups from
// the torch optimizer instead): the params whose names match one of `params` (shell globs, as
// fnmatch: * ? [...]) take this group's weight decay and learning-rate scale, as a transformer
// trainer gives biases, norms and embeddings no decay. The first group with a matching glob
// wins; a param in no group takes optimizer.params.weight_decay and scale 1.
struct ParamGroup {
  std::vector<std::string> params;     // globs, at least one; each must match some param
  std::optional<double> weight_decay;  // unset: optimizer.params.weight_decay
  double lr_scale = 1.0;               // the scheduled lr times this; >= 0
  friend bool operator==(const ParamGroup&, const ParamGroup&) = default;
};

// scheduler {type, params}. Only the fields of the chosen type are read or written.
struct SchedulerConfig {
  ScheduleType type = ScheduleType::constant;   // no scheduler block = constant lr
  double warmup_min_lr = 0.0;                   // warmup start (WarmupLR, WarmupDecayLR)
  std::optional<double> warmup_max_lr;          // warmup end; unset = optimizer lr (see docs)
  std::int64_t warmup_num_steps = 1000;         // warmup length in optimizer steps; > 0
  WarmupType warmup_type = WarmupType::log;     // DeepSpeed's default is log
  std::optional<std::int64_t> total_num_steps;  // end of decay; required by the decaying types
  double warmup_min_ratio = 0.0;                // WarmupCosineLR: warmup start as a ratio of lr
  double cos_min_ratio = 1e-4;                  // WarmupCosineLR: final lr as a ratio of lr
  friend bool operator==(const SchedulerConfig&, const SchedulerConfig&) = default;
};

// fp16 {...}: dynamic loss scaling (fp16 training only; Config::precision says whether it is on).
struct Fp16Config {
  double loss_scale = 0.0;                // 0 = dynamic; > 0 = this static scale
  int initial_scale_power = 16;           // dynamic scaling starts at 2^this
  std::int64_t loss_scale_window = 1000;  // clean steps before the scale doubles
  int hysteresis = 2;                     // overflows tolerated before the scale halves
  bool consecutive_hysteresis = false;    // refill hysteresis after every clean step
  double min_loss_scale = 1.0;            // the scale never halves below this
  friend bool operator==(const Fp16Config&, const Fp16Config&) = default;
};

// zero_optimization {...}. Sizes are in elements, as in DeepSpeed.
struct ZeroConfig {
  int stage = 0;                                          // 0..3: what is sharded (docs/design.md)
  bool overlap_comm = false;                              // DeepSpeed: true at stage 3, else false
  std::int64_t reduce_bucket_size = kDefaultBucketElements;     // gradient elements per reduce-scatter
  std::int64_t allgather_bucket_size = kDefaultBucketElements;  // parameter elements per all-gather
  std::int64_t stage3_prefetch_bucket_size = 50'000'000;  // elements gathered ahead; 0 = none
  std::int64_t stage3_param_persistence_threshold = 100'000;     // smaller params never sharded
  std::int64_t stage3_max_live_parameters = 1'000'000'000;       // gathered elements held at once
  std::int64_t stage3_max_reuse_distance = 1'000'000'000;        // keep if reused within this
  // offload_optimizer.device (or cpu_offload): the fp32 master, optimizer state and update in
  // host memory on a device run, stages 1-3 (docs/offload.md).
  OffloadDevice offload_optimizer_device = OffloadDevice::none;
  int zero_hpz_partition_size = 1;  // ranks of the secondary (in-node) shard group; 1 = off
  // Hierarchical sharding (DeepSpeed's MiCS key, FSDP2's HSDP): the states are sharded over
  // shard groups of this many consecutive ranks and replicated across the groups; -1 (or 0):
  // one group of every rank (flat ZeRO).
  int mics_shard_size = -1;
  bool zero_quantized_gradients = false;  // ZeRO++ qgZ: int4 gradient reduction (compression.hpp)
  bool zero_quantized_weights = false;    // ZeRO++ qwZ: int8 stage-3 gathers (compression.hpp)
  // offload_param.device (or cpu_offload_param): stage 3's 16-bit param shards in host memory.
  OffloadDevice offload_param_device = OffloadDevice::none;
  // offload_*.pin_memory: the offloaded buffers in page-locked host memory (a CUDA run).
  bool offload_pin_memory = false;
  friend bool operator==(const ZeroConfig&, const ZeroConfig&) = default;
};

// The whole configuration. Batch sizes count samples; steps count optimizer steps.
struct Config {
  std::int64_t train_micro_batch_size_per_gpu = 1;   // samples per rank per forward/backward
  std::int64_t gradient_accumulation_steps = 1;      // micro-batches per optimizer step
  std::optional<std::int64_t> train_batch_size;      // if set: micro * accumulation * world
  double gradient_clipping = 0.0;                    // max global grad norm; 0 = no clipping
  OptimizerConfig optimizer;                         // optimizer {type, params}
  std::vector<ParamGroup> param_groups;              // zero's own key; see ParamGroup
  SchedulerConfig scheduler;                         // scheduler {type, params}
  Precision precision = Precision::fp32;             // from bf16.enabled / fp16.enabled
  Fp16Config fp16;                                   // loss scaling, read when fp16
  DType communication_data_type = DType::f32;        // gradient reduce dtype; fp32, not DeepSpeed's
                                                     // param dtype: bf16 sums diverge
  std::int64_t seed = 42;                            // zero's own key (not DeepSpeed's)
  ZeroConfig zero;                                   // zero_optimization {...}
  CompressionConfig compression;                     // zero's own key (zero/compression.hpp)
  std::int64_t steps_per_print = 10;                 // log every this many optimizer steps
  double comm_timeout_seconds = 600;                 // zero's own key "comm_timeout": a collective
                                                     // without progress this long fails
  std::int64_t max_consecutive_skipped_steps = 100;  // zero's own key: step() throws after this
                                                     // many skipped steps in a row; 0 = never
  std::int64_t threads = 0;  // zero's own key: threads of each rank's CPU math; 0 = OMP_NUM_THREADS,
                             // else the node's cores / its ranks (zero/compute_threads.hpp)
  // Which batch keys the text gave (DeepSpeed's batch rule derives the others; see resolve_batch;
  // train_batch_size's is train_batch_size.has_value()). Not part of the value.
  bool micro_batch_given = false;
  bool accumulation_given = false;
  // DeepSpeed's activation_checkpointing section was given: the GPT trainer recomputes each
  // block in backward (as `--recompute`; zero/config_activations.hpp). A model setting, not the
  // engine's: not part of the value.
  bool activation_checkpointing = false;
  // Keys whose value was "auto" (Hugging Face Trainer placeholders), as dotted paths in the order
  // parse_config reads them; they hold zero's defaults until the caller fills them (when a batch
  // key is "auto" it counts as not given). Not part of the value.
  std::vector<std::string> auto_keys;
  // One sentence per key that was accepted but has no effect (a DeepSpeed-only key, a stage-3
  // size below stage 3, ...). Not part of the configuration's value: operator== ignores it.
  std::vector<std::string> warnings;

  // Checks what depends on the number of ranks: train_batch_size against
  // micro * accumulation * world, and the group rules (zero::check_groups, zero/settings.hpp).
  // Throws zero::Error naming the key and the numbers.
  void validate_world(int world) const;

  // DeepSpeed's batch rule at this world size: train_batch_size = micro x accumulation x world;
  // any two given determine the third, all three given must agree. Fills the fields not given
  // and marks them given; throws zero::Error naming the keys and the numbers.
  void resolve_batch(int world);

  friend bool operator==(const Config& a, const Config& b);
};

// Largest configuration file load_config reads, and the largest comm_timeout (seconds; beyond
// it a timeout would not fit the clocks' integer ticks safely, and means "never" anyway).
inline constexpr std::int64_t kMaxConfigBytes = 16 << 20;
inline constexpr double kMaxCommTimeoutSeconds = 1e7;

// The dotted keys that may be "auto" (what Hugging Face's Trainer, Accelerate or DeepSpeed's
// autotuner fill in): parse_config records them in Config::auto_keys; "auto" elsewhere is an
// error listing every such key.
std::span<const std::string_view> auto_fillable_keys();

// Parses DeepSpeed-style JSON text (comments and trailing commas allowed). source_name (a file
// name, or e.g. "<string>") prefixes syntax errors with line and column. Throws zero::Error.
Config parse_config(std::string_view json_text, std::string_view source_name);

// Reads and parses a file; an empty path, a missing or unreadable file, anything but a regular
// file (a directory, a FIFO, /dev/zero) and a file over kMaxConfigBytes are a zero::Error naming
// the path, raised before anything is read.
Config load_config(const std::filesystem::path& path);

// Writes the configuration as DeepSpeed-style JSON (indented); parse_config of the result gives
// an equal Config. Only the scheduler parameters of the chosen type are written.
std::string to_json(const Config& config);

// Names as they appear in the JSON ("bf16", "AdamW", "WarmupCosineLR", "log", "cpu").
std::string_view name_of(Precision p);

// What a precision trains in: the working params' and the gradients' dtype.
DType working_dtype(Precision p);
// The one reader of a training dtype's name, as the JSON and the flags write it ("fp32", "bf16",
// "fp16"); nullopt for any other text.
std::optional<DType> parse_training_dtype(std::string_view name);
// The same names as a flag's value (`flag` names it in the error, "--precision"): the precision
// that trains in that dtype, or the reduce dtype. Throw zero::Error naming the flag and the text.
Precision parse_precision(std::string_view name, std::string_view flag);
DType parse_reduce_dtype(std::string_view name, std::string_view flag);
std::string_view name_of(OptimizerType t);
std::string_view name_of(ScheduleType t);  // "constant" for ScheduleType::constant
std::string_view name_of(WarmupType t);
std::string_view name_of(OffloadDevice d);

}  // namespace zero
