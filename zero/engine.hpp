// Engine: the ZeRO engine a trainer drives. One engine for every stage; the stage only selects a
// row of the policy table in zero/stage_policy.hpp (what is sharded, which collective, when).
//
// A trainer registers its parameters grouped into units, then for each micro-batch:
//   forward:  gather(u); read param(p) of u's params; release(u)            (u ascending)
//   backward: gather(u); write grad(p) of u's params; release(u); reduce_grads(u)  (u descending)
// and after gradient_accumulation_steps micro-batches, step(). gather/release are no-ops below
// stage 3. Every rank must make the same calls in the same order; the engine checks that the
// ranks agree and names the rank and the unit when they do not (docs/design.md, "Call order").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/communicator.hpp"
#include "precision/bf16.hpp"
#include "precision/fp16.hpp"
#include "zero/config.hpp"
#include "base/error.hpp"
#include "zero/layout.hpp"
#include "zero/ledger.hpp"
#include "zero/settings.hpp"

namespace zero {

// A view of one parameter's (or gradient's) elements in the training dtype (bf16, fp16 or fp32).
struct TensorView {
  void* data = nullptr;
  std::int64_t numel = 0;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  comm::Memory memory = comm::Memory::host;  // device: a CUDA pointer (EngineOptions::memory)

  template <class T>
  std::span<T> as() const;  // throws zero::Error if T does not match dtype
};

// How gradients from ranks and micro-batches combine. mean: the gradient of the mean of every
// rank's and micro-batch's loss (DeepSpeed and DDP semantics). sum: their plain sum.
enum class GradReduction { mean, sum };

struct EngineOptions {
  GradReduction reduction = GradReduction::mean;  // see GradReduction
  std::int64_t align_elements = kDefaultAlignElements;  // layout alignment (elements)
  // Called with one line for every event a user should see in the log (skipped steps, loss
  // scale changes). Rank 0 only unless log_all_ranks. Default: stderr.
  std::function<void(const std::string&)> log;
  bool log_all_ranks = false;
  // Where the engine keeps its state and runs its element-wise work: host memory and the CPU
  // kernels, or device memory and the CUDA kernels. The communicator must work on the same
  // memory (MPI: host; NCCL: device). param()/grad() then give pointers in that memory.
  comm::Memory memory = comm::Memory::host;
  // Device memory: the CUDA device (-1: the current one). The compute stream is the legacy
  // default stream, the one the NCCL communicator orders against by default and the trainer's
  // kernels use unless told otherwise: one stream, so frees and reuses are ordered.
  int device = -1;
  // With memory == device: host memory and the CPU kernels stand in for the GPU. The engine runs
  // its device code path (device ledger, device-tagged views, staging) and computes bitwise what
  // the host path computes, so CI checks that path's logic without a GPU. The communicator must
  // still say memory() == device (comm/emulated_device.hpp). param()/grad() tag their views host:
  // the memory is host memory, and the trainer reading it a host trainer. Never faster; for tests
  // (`zero train --device emulated`).
  bool emulate_device = false;
  // Counts without computing: the engine allocates no memory (its buffers are address ranges
  // that are never mapped) and runs no kernel, but makes every decision and every allocation a
  // real run makes, so memory() and ledger() report what that run would hold, byte for byte.
  // Pair it with comm::make_counting_communicator (collectives that only count); with it a
  // trainer can measure its own call sequence at any model size on any machine. The views
  // param() and grad() return must not be read or written; init_params() does not call its
  // fill. zero's memory planner runs the engine this way (zero/planner.hpp).
  bool count_only = false;
};

// What step() did.
struct StepReport {
  std::int64_t step = 0;          // optimizer steps applied so far (skipped ones not counted)
  bool skipped = false;           // no update was applied
  std::string skip_reason;        // why, when skipped
  double grad_norm = 0;           // global L2 norm of the gradient, before clipping
  double clip_coefficient = 1;    // the factor the gradient was multiplied by (1 = no clip)
  double lr = 0;                  // learning rate used
  double loss_scale = 1;          // loss scale in force for this step's gradients
  // The mean over the ranks of the loss each passed to step(loss), summed in rank order (the
  // same bits on every rank); empty when step() was called without one.
  std::optional<double> loss;
};

// Where a unit's full working parameters are (stage 3). An explicit state, never inferred from
// pointers. Below stage 3, and for persistent units (numel < stage3_param_persistence_threshold),
// a unit is always gathered.
enum class UnitState : std::uint8_t {
  sharded,    // only this rank's shard exists
  gathering,  // an all-gather is in flight (a prefetch)
  gathered,   // the full unit is here
};

// What the engine has done since construction, counted on this rank (for tests and logs).
struct EngineStats {
  std::int64_t reductions = 0;  // reduce_grads calls
  // Reduce collectives issued: one per gradient bucket per micro-batch (reduce_bucket_size; a
  // bucket of one unit when each unit is larger than it).
  std::int64_t reduce_collectives = 0;
  // Reduce collectives that were still in flight when the trainer next called gather() or
  // grad(), i.e. that ran behind the trainer's computation of another unit (overlap_comm).
  // Without overlap every one is finished inside the reduce_grads call that issued it and this
  // stays 0.
  std::int64_t reductions_overlapped = 0;
  int max_reductions_in_flight = 0;  // the most in flight when a reduce_grads call returned
  // Optimizer offload: reduced shards whose copy to the host ran behind the trainer's
  // computation of another unit (started when the reduction finished, waited for later).
  std::int64_t offload_copies_overlapped = 0;
  std::int64_t applied_steps = 0;
  std::int64_t skipped_steps = 0;
  std::int64_t consecutive_skipped_steps = 0;  // the run of skips that ends at the last step()
  // Wall time, seconds, on this rank's calling thread. wait_seconds: inside engine calls issuing
  // collectives and blocked on them (the exposed communication: a reduction or gather that
  // overlap did not hide, the small all-gathers of step() and init_params).
  // optimizer_seconds: in step() outside such waits (norms, unscale, the shard update, the
  // 16-bit copy), and zeroing (stages 0-1) or allocating (2-3) a unit's gradient buffer at its
  // first grad() of a micro-batch, the optimizer's zero_grad. Together with the trainer's own
  // compute and data time they make up the step.
  double wait_seconds = 0;
  double optimizer_seconds = 0;
};

// Per-rank memory in the categories of the ZeRO analysis (bytes).
struct MemoryReport {
  std::int64_t params = 0;     // 16-bit (or fp32) working parameters, persistent
  std::int64_t grads = 0;      // gradients a stage keeps: full (0, 1) or the reduced shard (2, 3)
  std::int64_t master = 0;     // fp32 master weights
  std::int64_t optimizer = 0;  // Adam m and v
  std::int64_t activations = 0; // what the trainer recorded under Category::activations
  std::int64_t peak_total = 0; // the most held at once, all categories
  // Everything else held at that peak: peak_total - model states - activations (the fp32
  // accumulator, gradient buffers in flight, gathered units, comm staging, step scratch).
  std::int64_t buffers = 0;
  LedgerSnapshot ledger;       // every category, current and peak
  std::int64_t model_states() const { return params + grads + master + optimizer; }
};

template <class T>
std::span<T> TensorView::as() const {
  if (comm::dtype_of<std::remove_const_t<T>>::value != dtype)
    throw Error(cat("tensor holds ", name_of(dtype), ", not ",
                    name_of(comm::dtype_of<std::remove_const_t<T>>::value)));
  return {static_cast<T*>(data), static_cast<std::size_t>(numel)};
}

class Engine {
 public:
  // Computes the layout and allocates every buffer. `world` must outlive the engine. Throws
  // zero::Error on a bad config (naming the key) or when the ranks disagree on the units.
  Engine(const Config& config, comm::Communicator& world, std::vector<UnitSpec> units,
         EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Layout& layout() const;
  const Config& config() const;
  // The config resolved once for this world (zero/settings.hpp): the dtypes, the stage's policy
  // row, the groups, the bucket, prefetch and live limits. Commands read it instead of
  // re-deriving any rule from the Config.
  const Settings& settings() const;
  int stage() const;
  int rank() const;
  int ranks() const;
  // Ranks in this rank's shard group (mics_shard_size; ranks() when sharding is flat).
  int settings_shard_size() const;

  // Sets every parameter's initial value. fill(p, out) writes param p's numel fp32 values; every
  // rank must produce the same values (each keeps its shard). Call once, before training.
  // Throws zero::Error on every rank, before storing anything, if any rank's fill produced a
  // NaN or an infinity (naming the first such param, its unit and the element), or if the ranks'
  // fills differ (naming the first param that does and a rank whose values are not rank 0's).
  void init_params(const std::function<void(int param, std::span<float> out)>& fill);

  // Stage 3: all-gathers unit u (waiting for a prefetch if one is in flight) and prefetches the
  // next unit in the direction of travel. A no-op below stage 3 and for persistent units.
  void gather(int unit);
  // Stage 3: gives unit u's gathered buffer back (persistent units stay gathered).
  void release(int unit);
  // Param p's current working value; its unit must be gathered (always true below stage 3).
  TensorView param(int p) const;
  // Where unit u's working parameters are now (see UnitState).
  UnitState unit_state(int unit) const;

  // Param p's gradient buffer for this micro-batch, zeroed when its unit is first touched
  // after a reduce; write (or add) the gradient of the loss here.
  TensorView grad(int p);
  // Starts the reduction of unit u's gradients for this micro-batch. With overlap_comm it
  // returns at once and the reduce-scatter runs while the trainer computes the next unit.
  void reduce_grads(int unit);

  // Multiply the loss (or its gradient) by this before backward. 1 unless fp16.
  double loss_scale() const;

  // Waits for the reductions, then: overflow check, global-norm clipping, AdamW on each shard,
  // cast, all-gather of the new parameters (stages 1 and 2). Logs and reports a skipped step.
  // Throws zero::Error on every rank together (at stages 1-3 one 16-byte all-gather per rank
  // after the update tells every rank what any rank saw, so none is left waiting in a
  // collective; at stage 0 every rank applies the same update to the same replica, so each
  // finds the same element itself, with no exchange):
  //  - when the update would make a master weight or an Adam moment non-finite (e.g. a huge lr),
  //    naming the step and the first such param. Each element whose update was non-finite keeps
  //    its value from before the step; the others have taken the step, so the state is finite
  //    but holds a partial step (the step count does not advance): resume from a checkpoint.
  //  - after max_consecutive_skipped_steps skipped steps in a row (bf16, fp32, static fp16
  //    scale; with dynamic fp16 scaling only skips at min_loss_scale count, and the scaler
  //    itself stops when the scale cannot drop further), naming the step and the reason.
  // loss: this rank's loss for the step (e.g. its mean over the micro-batches). Passed on every
  // rank, StepReport::loss is the mean over the ranks, carried by the all-gather the step makes
  // anyway (no collective of its own, unlike an all-reduce of the loss after step()); passed on
  // some ranks and not others, zero::Error on every rank naming one of each.
  StepReport step(std::optional<double> loss = std::nullopt);

  // The fp32 master weights of param p in full (a collective at stages 1-3: every rank calls it).
  std::vector<float> gather_master(int p);
  // FNV-1a 64 over the little-endian bytes of every fp32 master weight in registration order,
  // padding excluded. A collective at stages 1-3.
  std::uint64_t master_checksum();

  EngineStats stats() const;
  MemoryReport memory() const;
  // The ledger every engine buffer is counted in. A trainer may record its own memory here
  // (ledger().record_external(Category::activations, bytes)) so the report covers the whole rank.
  Ledger& ledger();
  // Communication of this rank since construction or the last reset, over every group.
  comm::Accounting comm_accounting() const;
  // The same, by process group: inside this rank's shard group (the reduce-scatter, the param
  // all-gathers), across the replicate group (hierarchical sharding's gradient all-reduce), and
  // over the world (the step's small agreements), and with hpZ inside the node's secondary
  // group (stage 3's backward gathers). Flat ZeRO has one group: all of it but hpZ's is in
  // `shard`, the world being the shard group.
  struct GroupAccounting {
    comm::Accounting shard, replicate, world;
    comm::Accounting secondary;  // hpZ: the backward gathers, inside the node
  };
  GroupAccounting comm_accounting_by_group() const;
  void reset_comm_accounting();

  struct Impl;

 private:
  // Checkpoints save and restore through EngineState (zero/engine_state.hpp), a narrow view of
  // the model states and counters that CheckpointAccess hands them.
  friend struct CheckpointAccess;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zero
