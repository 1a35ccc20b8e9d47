// EngineState: the narrow view a checkpoint saves from and restores into: the layout and the
// groups' coordinates, the fp32 master weights and Adam moments of this rank, the step counters
// and the loss scaler, and the small host all-gather every rank agrees through. Nothing of the
// reducer's or the gatherer's state. Internal to zero/: not part of the public API.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "precision/loss_scaler.hpp"
#include "zero/engine.hpp"

namespace zero {

class EngineState {
 public:
  explicit EngineState(Engine::Impl& impl) : s_(impl) {}

  const Config& config() const;
  const Layout& layout() const;
  int rank() const;
  int ranks() const;
  int shard_rank() const;   // this rank's position in its shard group
  int shard_ranks() const;  // the shard group's size
  // This rank writes its pieces: the first replica of its shard (every rank when flat).
  bool writes_pieces() const;
  bool counting() const;       // count_only: no state to save or load
  bool between_steps() const;  // no reduce_grads call since the last step, none in flight

  // The optimizer state: tensor t (0 master, 1 exp_avg, 2 exp_avg_sq) of `elements(t)` floats,
  // this rank's shards (stages 1-3) or everything (stage 0); tensors() of them (2 for Lion).
  // Param p's state is its first tensors(p): 2 for a matrix Muon owns (its momentum in exp_avg,
  // no exp_avg_sq: zero/muon_state.hpp).
  int tensors() const;
  int tensors(int param) const;
  bool sharded() const;
  std::int64_t elements(int t) const;
  // Where element `unit_pos` of unit u (unit coordinates) lives in tensor t (one that holds it).
  std::int64_t index(int t, int u, std::int64_t unit_pos) const;
  void download(int t, std::int64_t at, std::int64_t count, void* host) const;
  void upload(int t, const float* host, std::int64_t count);

  struct Counters {
    std::int64_t applied_steps = 0, skipped_steps = 0, consecutive_skipped = 0;
  };
  Counters counters() const;
  void restore(const Counters& c);
  std::optional<LossScaler>& scaler();

  void all_gather_host(const void* in, void* out, std::size_t count, DType dtype);
  int agreeing_ranks() const;
  void log(const std::string& line) const;
  // TopK's error-feedback residual (this rank's, host memory), or nullptr.
  Allocation* residual();
  // The working params again from the master weights (after a load).
  void params_from_master();

 private:
  Engine::Impl& s_;
};

struct CheckpointAccess {
  static EngineState state(Engine& e);
};

}  // namespace zero
