// GradReducer: the gradients from the trainer's buffers to this rank's reduced (and accumulated)
// shard. Owns the gradient buffers, the buckets being filled, the reductions in flight (at most
// one with overlap_comm, as Megatron's bucket group: start_grad_sync when a bucket is full,
// finish_grad_sync when its result is needed) and the path the bytes take (zero/wire.hpp: the
// encoding and the topology over the shard and replicate groups).
// Internal to zero/: not part of the public API.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "zero/engine_context.hpp"
#include "zero/offload.hpp"
#include "zero/wire.hpp"

namespace zero {

class GradReducer {
 public:
  explicit GradReducer(EngineContext& ctx);
  ~GradReducer();  // finishes the reductions in flight (the buffers they write are freed next)
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Unit u's gradient buffer for this micro-batch, zeroed (or allocated) at its first use.
  Slice grads_of_unit(int u);
  // Unit u's gradients are complete for this micro-batch: into its bucket, and the bucket's
  // reduction started when the bucket is full.
  void reduce_grads(int u);
  // Every reduction done (step, checkpoints); buckets still waiting for units dropped.
  void finish_all();
  void drop_unissued_buckets();

  // What the step reads. The reduced gradient of `n` elements at `offset` (reduced_offset
  // coordinates), in reduced_dtype(); the fp32 sum over the micro-batches (accumulation > 1).
  DType reduced_dtype() const;
  DType reduced_data_dtype() const;  // reduced_data's: the working dtype where it aliases the grads
  const void* reduced_data(std::int64_t offset, std::int64_t n) const;
  const Allocation& accumulator() const { return accum_; }
  // Optimizer offload: the fp32 reduced (and accumulated) shard in host memory, or empty; unit
  // u's part is there once offloaded_unit(u) has returned (its copy may be in flight till then).
  const Allocation& offloaded() const { return offloaded_; }
  void offloaded_unit(int u) { downloads_.finish_unit(u); }
  int reductions(int u) const { return units_[static_cast<std::size_t>(u)].reductions; }
  const std::vector<int>& reduce_log() const { return reduce_log_; }
  bool idle() const;  // no reduce_grads call since the last step, none in flight
  Allocation* residual() { return path_->encoding().residual(); }  // TopK's, or nullptr
  void end_step();    // counts and the accumulator back to zero

 private:
  struct UnitGrads {
    Allocation grads;         // stages 2-3: its gradient buffer for this micro-batch
    bool grads_fresh = false; // the gradient buffer was zeroed for this micro-batch
    bool waiting = false;     // reduced this micro-batch; its bucket not yet issued
    bool in_flight = false;   // its gradients are in a reduction still in flight
    int reductions = 0;       // reduce_grads calls since the last step
  };
  // The gradient bucket being filled: its units' gradients copied in rank-major order (rank r's
  // shards of its units, in unit order, then rank r + 1's), the layout of one reduce-scatter.
  struct BucketFill {
    Allocation packed;
    int arrived = 0;  // units reduced into it this micro-batch
  };
  // One reduction in flight: the consecutive units [first, last] of one bucket, reduced as one
  // collective (and at stage 0 gathered back as one), with the buffers it reads and writes.
  struct Reduction {
    int first = 0;
    int last = 0;
    PathWork work;
    Allocation input;       // the packed bucket, or at stages 2-3 the one unit's gradient buffer
    Allocation block;       // stage 0: this rank's reduced blocks before the all-gather;
                            // optimizer offload: the reduced shards before they go to the host
    Allocation packed_out;  // stage 0, several units: the all-gathered blocks, rank-major
    std::int64_t issued_at = 0;  // EngineContext::trainer_calls when it was issued
  };

  void bucket_arrived(int u, const Slice& grads);
  void start_grad_sync(int first, int last, Allocation input, const Slice& in);
  void finish_grad_sync();           // the oldest: waits, unpacks and folds it, frees its buffers
  void finish_reductions_of(int u);  // until none holds unit u's gradients
  void unpack_and_accumulate(Reduction& r);
  // The reduced gradient's [offset, offset + n) into the sum over micro-batches (accumulation > 1).
  void accumulate(std::int64_t offset, std::int64_t n);
  // Stage 0 on a world of one rank, reducing in the working dtype without compression: the
  // gradient buffer is the reduced gradient; reduce_grads moves nothing.
  bool alone() const;

  EngineContext& ctx_;
  std::unique_ptr<ReducePath> path_;
  std::vector<UnitGrads> units_;
  // Gradients: full working-dtype buffer (stages 0-1), or per-unit buffers (UnitGrads::grads).
  Allocation grads_full_;
  // Reduced gradient in reduced_dtype(): full (stage 0) or this rank's shard (stages 1-3).
  // Stage 0 reducing in the working dtype: the gradient buffer itself (reduced_aliases_grads).
  Allocation reduced_;
  // fp32 sum over micro-batches (gradient_accumulation_steps > 1), shaped like the reduced one.
  Allocation accum_;
  Allocation offloaded_;  // optimizer offload: the fp32 shard on the host (replaces both above)
  GradDownloads downloads_{ctx_};  // optimizer offload: the copies into offloaded_
  std::vector<BucketFill> buckets_;  // indexed like Layout::buckets
  std::deque<Reduction> in_flight_;  // issued, not finished, oldest first
  std::vector<int> reduce_log_;      // the units passed to reduce_grads since the last step
};

}  // namespace zero
