// The reference model: a multi-layer perceptron trained to imitate a fixed random teacher
// network. One unit per layer; working params in the engine's dtype, math in fp32 on OpenBLAS.
// Written only against zero's public header, as a user's trainer would be.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "zero/zero.hpp"

namespace zero::models {

struct MlpShape {
  int layers = 4;            // linear layers (units); tanh between them, none after the last
  int width = 256;           // every layer is width x width
  std::int64_t global_batch = 64;  // samples per optimizer step over all ranks and micro-batches
  std::uint64_t seed = 1;    // initial weights, teacher and data all derive from it
};

// The units to register: unit l holds "layer{l}.weight" [width, width] and "layer{l}.bias".
std::vector<UnitSpec> mlp_units(const MlpShape& shape);

// Initial value of param p (Kaiming-uniform-like, from the seed; the same on every rank).
void mlp_init(const MlpShape& shape, int param, std::span<float> out);

// The teacher network y = tanh(scale * T x): T (width x width, row-major) built once from the
// seed, so that a sample costs one matrix-vector product instead of hashing every weight.
class MlpTeacher {
 public:
  explicit MlpTeacher(const MlpShape& shape);
  // Input sample i (any i >= 0) as `width` floats in [-1, 1], and its target. The target depends
  // only on (seed, width, i): each output is a dot product in fp64 over 8 fixed lanes (element j
  // into lane j % 8, lanes summed in a fixed tree), never a GEMM whose blocking could depend on
  // how many samples a rank or a micro-batch holds; so every stage, rank count and micro-batch
  // split trains on bitwise the same targets.
  void sample(std::int64_t index, std::span<float> x, std::span<float> y) const;
  // Samples first .. first + count - 1, one after another in x and y (count x width floats
  // each): the same values as `count` calls of sample(), made faster.
  void samples(std::int64_t first, std::int64_t count, std::span<float> x,
               std::span<float> y) const;
  const MlpShape& shape() const { return shape_; }

 private:
  MlpShape shape_;
  std::vector<float> t_;
};

// Input sample i (any i >= 0) as `width` floats in [-1, 1], and its target from the teacher.
// The same values as MlpTeacher(shape).sample(...); builds the teacher on every call, so a caller
// that makes many samples should keep an MlpTeacher.
void mlp_sample(const MlpShape& shape, std::int64_t index, std::span<float> x, std::span<float> y);

// The trainer's own buffers for a micro-batch of `micro_batch` samples (activations of every
// layer, the fp32 weight and gradient of one layer, the loss gradient and targets): what it
// records in the engine's ledger under Category::activations, and what the planner is told.
std::int64_t mlp_activation_bytes(const MlpShape& shape, std::int64_t micro_batch);

// Runs one micro-batch through `engine`: forward (gather, compute, release per unit), loss,
// backward (gather, gradients into engine.grad, release, reduce_grads per unit, last first).
// `first` is the global index of the micro-batch's first sample; returns the mean loss over it
// (0.5 * squared error averaged over samples and outputs), unscaled.
class MlpTrainer {
 public:
  // `where`: the memory the engine keeps its state in (EngineOptions::memory). Device: the same
  // math on the GPU (weights widened to fp32, fp32 GEMMs on cuBLASLt without TF32, tanh, MSE);
  // a build without CUDA throws.
  MlpTrainer(const MlpShape& shape, std::int64_t micro_batch,
             comm::Memory where = comm::Memory::host);
  ~MlpTrainer();
  MlpTrainer(MlpTrainer&&) noexcept;
  MlpTrainer& operator=(MlpTrainer&&) noexcept;
  // The first call with an engine records mlp_activation_bytes in its ledger (activations).
  double micro_batch(Engine& engine, std::int64_t first);

  // Wall time, seconds, spent in micro_batch since construction: making the samples and their
  // targets (data), and the trainer's own math outside engine calls (compute: GEMMs, tanh, loss).
  struct Times {
    double data_seconds = 0;
    double compute_seconds = 0;
  };
  Times times() const { return times_; }

  struct Device;  // the GPU path (models/mlp_cuda.cpp)
  struct DeviceDeleter {
    void operator()(Device* d) const noexcept;
  };
  using DevicePtr = std::unique_ptr<Device, DeviceDeleter>;

 private:
  template <class Call>
  double host_micro_batch(Engine& engine, Call& call);  // the CPU path; `call` times engine calls

  DevicePtr device_;
  MlpShape shape_;
  std::int64_t batch_;
  const Ledger* recorded_in_ = nullptr;
  Times times_;
  MlpTeacher teacher_;
  std::vector<std::vector<float>> acts_;  // acts_[l]: input of layer l; acts_[L]: output
                                          // (the device path keeps only acts_[0]: the inputs)
  std::vector<float> w_, dz_, dprev_, dw_, target_;
};

// The GPU path's state and step (models/mlp_cuda.cpp; throwing stubs without CUDA).
MlpTrainer::DevicePtr make_device(const MlpShape& shape, std::int64_t micro_batch);
double device_micro_batch(MlpTrainer::Device& d, Engine& engine, const std::vector<float>& x,
                          const std::vector<float>& y);

}  // namespace zero::models
