// Where a run keeps its state (cli/run_device.hpp).
#include "cli/run_device.hpp"

#include "cli/train_setup.hpp"

namespace zero::cli {
namespace {

// The emulated device's trainer: the host trainer, its buffers counted in the device's ledger
// once per engine, before its first micro-batch, where a GPU trainer records its own.
class OnEmulatedDevice final : public TrainModel {
 public:
  explicit OnEmulatedDevice(std::unique_ptr<TrainModel> inner) : inner_(std::move(inner)) {}
  std::string describe() const override { return inner_->describe(); }
  std::string kind() const override { return inner_->kind(); }
  std::vector<UnitSpec> units() const override { return inner_->units(); }
  void init(int param, std::span<float> out) const override { inner_->init(param, out); }
  std::int64_t activation_bytes() const override { return inner_->activation_bytes(); }
  bool tied_head() const override { return inner_->tied_head(); }
  double micro_batch(Engine& engine, std::int64_t step, std::int64_t k, int rank,
                     int ranks) override {
    if (recorded_in_ != &engine.ledger()) {
      engine.ledger().record_external(Category::activations, activation_bytes(),
                                      comm::Memory::device);
      recorded_in_ = &engine.ledger();
    }
    return inner_->micro_batch(engine, step, k, rank, ranks);
  }
  TrainerTimes times() const override { return inner_->times(); }
  std::int64_t tokens_per_sample() const override { return inner_->tokens_per_sample(); }
  double flops_per_token() const override { return inner_->flops_per_token(); }

 private:
  std::unique_ptr<TrainModel> inner_;
  const Ledger* recorded_in_ = nullptr;
};

}  // namespace

RunDevice resolve_device(World& world, const std::string& device) {
  if (device == "emulated") return {.emulated = true};
  return {.gpu = use_gpu(world, device)};
}

comm::Communicator& connect(World& world, const RunDevice& device, comm::Options options) {
  return world.connect(device.engine_memory(), options, device.emulated);
}

EngineOptions engine_options(const RunDevice& device) {
  EngineOptions eo;
  eo.memory = device.engine_memory();
  eo.emulate_device = device.emulated;
  return eo;
}

std::unique_ptr<TrainModel> on_device(std::unique_ptr<TrainModel> model, const RunDevice& device) {
  if (!device.emulated) return model;
  return std::make_unique<OnEmulatedDevice>(std::move(model));
}

PlanInput plan_input_on(const Config& config, int ranks, const TrainModel& model,
                        const RunDevice& device) {
  PlanInput in = plan_input_of(config, ranks, model, device.gpu || device.emulated);
  in.emulated_device = device.emulated;
  return in;
}

}  // namespace zero::cli
