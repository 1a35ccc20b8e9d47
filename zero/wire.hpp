// How bytes travel, as values chosen once from the resolved Settings (make_reduce_path,
// make_gather_route) and executed by the GradReducer and the ParamGatherer:
//   WireEncoding   what a gradient reduction puts on the wire and sums into (fp32, or the
//                  training dtype; blockwise int8/int4 or TopK pairs: zero/wire_compress.cpp);
//                  a new encoding is a new subclass, nothing else.
//   ReducePath     the reduction's topology: flat (reduce-scatter in the shard group), or
//                  hierarchical (reduce-scatter in the shard group, then all-reduce of this
//                  rank's block across the replicate group).
//   GatherRoute    where a stage-3 unit's gather reads from: the primary shards over the shard
//                  group, or with hpZ a secondary copy made by the forward gather, gathered
//                  inside the node's group.
// Internal to zero/: not part of the public API.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "zero/engine_context.hpp"

namespace zero {

class WireEncoding {
 public:
  virtual ~WireEncoding() = default;
  // The dtype the reduced gradient is kept in: the reduce-scatter's output.
  virtual DType reduced_dtype() const = 0;
  // Starts the reduce-scatter of `in` (the packed gradients in the working dtype) over `group`,
  // this rank's summed block landing in `out` (reduced_dtype()). `at`: where the run starts in
  // this rank's shard coordinates (Layout::Unit::shard_offset of its first unit), for an
  // encoding that keeps state per element. An encoding whose bytes need decoding after they
  // arrive returns a Handle of its own State (comm::Handle::State) whose wait() waits for its
  // collectives, then decodes into `out` (decodes_on_wait()).
  virtual comm::Handle reduce_scatter(comm::Communicator& group, comm::ConstView in,
                                      comm::View out, std::int64_t at) = 0;
  // Sums `block` (reduced_dtype()) over `group`, in place, blocking.
  virtual void all_reduce(comm::Communicator& group, comm::View block) = 0;
  // `out` is written only when the reduce-scatter's handle is waited on: nothing may be queued
  // behind it that reads `out`.
  virtual bool decodes_on_wait() const { return false; }
  // State a checkpoint keeps (TopK's error-feedback residual), or nullptr.
  virtual Allocation* residual() { return nullptr; }
};

// A reduction in flight: its collectives (oldest first) and what the path still has to do once
// they are done.
struct PathWork {
  std::vector<comm::Handle> handles;
  bool across_pending = false;  // hierarchical: the replicas' all-reduce (and stage 0's gather)
  comm::View block;             // this rank's reduced block
  std::optional<comm::View> gather_to;  // stage 0: where the block's all-gather lands
};

class ReducePath {
 public:
  virtual ~ReducePath() = default;
  const WireEncoding& encoding() const { return *encoding_; }
  WireEncoding& encoding() { return *encoding_; }
  // Starts reducing `in` into this rank's `block`; with `gather_to` (stage 0), all-gathers the
  // reduced blocks there afterwards, inside the shard group. `at`: WireEncoding::reduce_scatter's.
  virtual PathWork start(comm::ConstView in, comm::View block,
                         std::optional<comm::View> gather_to, std::int64_t at) = 0;
  // Waits for the collectives start() issued.
  void wait(PathWork& w) const {
    for (auto& h : w.handles) h.wait();
  }
  // After wait(): what is left of the path (blocking).
  virtual void complete(PathWork& w) = 0;

 protected:
  ReducePath(std::unique_ptr<WireEncoding> e, comm::Communicator& shard)
      : encoding_(std::move(e)), shard_(shard) {}
  std::unique_ptr<WireEncoding> encoding_;
  comm::Communicator& shard_;
};

class GatherRoute {
 public:
  virtual ~GatherRoute() = default;
  // Starts unit u's all-gather into `full` (its padded elements); `primary` is this rank's
  // primary shard of the unit.
  virtual comm::Handle gather(int u, const Slice& primary, const Slice& full) = 0;
  // Unit u may be gathered in one collective with its primary-shard neighbours.
  virtual bool joins_primary(int u) const = 0;
  // Unit u's gather is done and `full` holds it.
  virtual void gathered(int u, const Allocation& full) = 0;
  // The params are about to change: every copy made from them is stale.
  virtual void params_changed() = 0;
  // The group it gathers inside besides the shard group (accounting), or nullptr.
  virtual comm::Communicator* own_group() const = 0;
};

// The reduction's path from the Settings: the encoding (reduce_dtype, compression.gradients) and
// the topology (replicas > 1: hierarchical).
std::unique_ptr<ReducePath> make_reduce_path(EngineContext& ctx);
// The gather's route (secondary_size > 1: hpZ; compression.weights_int8: qwZ). Takes the hpZ
// group from the context's groups.
std::unique_ptr<GatherRoute> make_gather_route(EngineContext& ctx);

// zero/wire_compress.cpp: the compressed gradient encoding Settings::compression names (not
// none), and stage 3's quantised gathers over `inner`'s primary gathers.
std::unique_ptr<WireEncoding> make_compressed_encoding(EngineContext& ctx);
std::unique_ptr<GatherRoute> make_quantized_route(EngineContext& ctx,
                                                  std::unique_ptr<GatherRoute> inner);

}  // namespace zero
