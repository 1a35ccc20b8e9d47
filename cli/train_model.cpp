// The MLP and the GPT as `zero train` drives them (cli/train_model.hpp).
#include "cli/train_model.hpp"

#include <chrono>

namespace zero::cli {
namespace {

class MlpModel final : public TrainModel {
 public:
  MlpModel(const models::MlpShape& shape, std::int64_t micro, comm::Memory where)
      : shape_(shape), micro_(micro), trainer_(shape, micro, where) {}
  std::string describe() const override { return cat("mlp ", shape_.layers, " x ", shape_.width); }
  std::string kind() const override { return "mlp"; }
  std::vector<UnitSpec> units() const override { return models::mlp_units(shape_); }
  void init(int p, std::span<float> out) const override { models::mlp_init(shape_, p, out); }
  std::int64_t activation_bytes() const override {
    return models::mlp_activation_bytes(shape_, micro_);
  }
  double micro_batch(Engine& engine, std::int64_t step, std::int64_t k, int rank,
                     int ranks) override {
    const std::int64_t g = shape_.global_batch;
    return trainer_.micro_batch(engine, step * g + rank * (g / ranks) + k * micro_);
  }
  TrainerTimes times() const override {
    const auto t = trainer_.times();
    return {t.data_seconds, t.compute_seconds};
  }

 private:
  models::MlpShape shape_;
  std::int64_t micro_;
  models::MlpTrainer trainer_;
};

class GptModel final : public TrainModel {
 public:
  GptModel(const models::GptShape& shape, models::GptCompute compute, std::string preset,
           const std::string& data, std::uint64_t seed, std::int64_t accum, int ranks,
           comm::Memory where)
      : shape_(shape),
        preset_(std::move(preset)),
        seed_(seed),
        split_{ranks, static_cast<int>(accum), shape.micro_batch},
        sampler_(models::TokenFile(data), shape.seq_len, seed),
        trainer_(shape, compute, where),
        inputs_(static_cast<std::size_t>(shape.micro_batch) *
                static_cast<std::size_t>(shape.seq_len)),
        targets_(inputs_.size()) {
    sampler_.file().check_vocab(shape.vocab);
  }
  std::string describe() const override {
    return cat("gpt ", preset_, " (", shape_.layers, " layers, hidden ", shape_.hidden, ", ",
               shape_.heads, " heads, seq ", shape_.seq_len, ", vocab ", shape_.vocab, ", ",
               name_of(trainer_.compute()), " compute", shape_.recompute ? ", recompute" : "",
               ") on ", sampler_.file().path(), " (",
               sampler_.file().size(), " tokens)");
  }
  std::string kind() const override { return "gpt"; }
  std::vector<UnitSpec> units() const override { return models::gpt_units(shape_); }
  void init(int p, std::span<float> out) const override { models::gpt_init(shape_, seed_, p, out); }
  std::int64_t activation_bytes() const override { return trainer_.activation_bytes(); }
  bool tied_head() const override { return true; }
  double micro_batch(Engine& engine, std::int64_t step, std::int64_t k, int rank,
                     int /*ranks*/) override {
    const auto start = std::chrono::steady_clock::now();
    sampler_.micro_batch(step, static_cast<int>(k), rank, split_, inputs_, targets_);
    data_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return trainer_.micro_batch(engine, inputs_, targets_);
  }
  TrainerTimes times() const override {
    return {data_seconds_, trainer_.compute_seconds(), trainer_.recompute_seconds()};
  }
  std::int64_t tokens_per_sample() const override { return shape_.seq_len; }
  double flops_per_token() const override { return models::gpt_flops_per_token(shape_); }

 private:
  models::GptShape shape_;
  std::string preset_;
  std::uint64_t seed_;
  models::BatchSplit split_;
  models::TokenSampler sampler_;
  models::GptTrainer trainer_;
  std::vector<std::int32_t> inputs_, targets_;
  double data_seconds_ = 0;
};

}  // namespace

PlanInput plan_input_of(const Config& config, int ranks, const TrainModel& model, bool on_gpu) {
  PlanInput in = plan_input_from_config(config, ranks);
  in.units = model.units();
  in.activation_bytes = model.activation_bytes();
  in.tied_head = model.tied_head();
  in.model_name = model.kind();
  in.device = on_gpu;
  return in;
}

std::unique_ptr<TrainModel> make_mlp_model(const models::MlpShape& shape, std::int64_t micro,
                                           comm::Memory where) {
  return std::make_unique<MlpModel>(shape, micro, where);
}

std::unique_ptr<TrainModel> make_gpt_model(const models::GptShape& shape, models::GptCompute compute,
                                           const std::string& preset, const std::string& data,
                                           std::uint64_t seed, std::int64_t accum, int ranks,
                                           comm::Memory where) {
  return std::make_unique<GptModel>(shape, compute, preset, data, seed, accum, ranks, where);
}

}  // namespace zero::cli
