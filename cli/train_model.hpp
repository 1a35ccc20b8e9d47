// The models `zero train` trains, behind one interface: the reference MLP (a synthetic teacher,
// samples) and the GPT (token files, sequences). cmd_train.cpp drives either the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/gpt.hpp"
#include "models/mlp.hpp"
#include "models/tokens.hpp"
#include "zero/zero.hpp"

namespace zero::cli {

// Seconds the trainer spent since construction making its inputs (data) and in its own math
// outside engine calls (compute), and of compute, running forward again in backward (recompute).
struct TrainerTimes {
  double data_seconds = 0, compute_seconds = 0, recompute_seconds = 0;
};

class TrainModel {
 public:
  virtual ~TrainModel() = default;
  virtual std::string describe() const = 0;  // "mlp 4 x 512" / "gpt gpt-nano (4 layers, ...)"
  virtual std::string kind() const = 0;      // "mlp" / "gpt"
  virtual std::vector<UnitSpec> units() const = 0;
  virtual void init(int param, std::span<float> out) const = 0;
  // The trainer's own buffers per rank (Category::activations), as the planner is told.
  virtual std::int64_t activation_bytes() const = 0;
  virtual bool tied_head() const { return false; }
  // Micro-batch k of optimizer step `step` on `rank` of `ranks`; returns its mean loss.
  virtual double micro_batch(Engine& engine, std::int64_t step, std::int64_t k, int rank,
                             int ranks) = 0;
  virtual TrainerTimes times() const = 0;
  // Tokens per sample (1 for the MLP; seq_len for the GPT) and model FLOPs per token (0: none
  // reported): tokens/s and MFU in the report.
  virtual std::int64_t tokens_per_sample() const { return 1; }
  virtual double flops_per_token() const { return 0; }
};

// What the planner needs to predict a run of `model` under `config` on `ranks` ranks.
PlanInput plan_input_of(const Config& config, int ranks, const TrainModel& model, bool on_gpu);

// The MLP on `where` memory (the GPU path: device).
std::unique_ptr<TrainModel> make_mlp_model(const models::MlpShape& shape, std::int64_t micro,
                                           comm::Memory where);

// The GPT over a token file: shape.micro_batch sequences per micro-batch, the global batch split
// as models::BatchSplit says; `seed` shuffles the sequences and initialises the weights.
std::unique_ptr<TrainModel> make_gpt_model(const models::GptShape& shape, models::GptCompute compute,
                                           const std::string& preset, const std::string& data,
                                           std::uint64_t seed, std::int64_t accum, int ranks,
                                           comm::Memory where);

}  // namespace zero::cli
