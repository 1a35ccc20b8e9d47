// A minimal trainer that embeds zero: linear regression y = w.x + b on synthetic data, written
// against the public header only. Run: mpirun -n 2 build/examples/linear_regression [stage]
// It exits non-zero if the loss does not fall, so the test suite runs it too.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "zero/zero.hpp"

int main(int argc, char** argv) try {
  // MPI started once (a rank that never joins ends startup after 600 s) and the communicator
  // over every rank; the World outlives the Engine that uses it.
  zero::World world({.startup_timeout_seconds = 600});
  zero::comm::Communicator& ranks = world.connect(zero::comm::Memory::host);

  // A DeepSpeed-style config; a file works the same way: zero::load_config("ds_config.json").
  zero::Config config = zero::parse_config(R"({
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
    "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.05}},
    "gradient_clipping": 1.0
  })", "<example>");
  if (argc > 1) config.zero.stage = std::atoi(argv[1]);

  // One unit with two parameters. Real models register one unit per layer.
  constexpr int kFeatures = 16;
  zero::Engine engine(config, ranks,
                      {zero::UnitSpec{"linear", {zero::ParamSpec{"weight", {kFeatures}},
                                                 zero::ParamSpec{"bias", {1}}}}});
  engine.init_params([](int, std::span<float> out) { std::fill(out.begin(), out.end(), 0.0f); });

  // The hidden truth: w_j = (j - 8) / 8, b = 0.5. Each rank draws its own samples.
  auto truth = [](int j) { return (j - 8) / 8.0f; };
  std::vector<float> x(kFeatures), w(kFeatures), gw(kFeatures);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    engine.gather(0);  // stage 3: all-gather the unit; a no-op below
    zero::convert(engine.param(0).as<const zero::bf16>(), std::span(w));
    const float b = zero::to_float(engine.param(1).as<const zero::bf16>()[0]);
    engine.release(0);

    double loss = 0, gb = 0;
    std::fill(gw.begin(), gw.end(), 0.0f);
    constexpr int kBatch = 32;
    for (int i = 0; i < kBatch; ++i) {
      const unsigned seed = 1000u * step + 100u * world.rank() + i;
      float y = 0.5f, pred = b;
      for (int j = 0; j < kFeatures; ++j) {
        x[j] = ((seed * 2654435761u + 97u * j) % 2001) / 1000.0f - 1.0f;
        y += truth(j) * x[j];
        pred += w[j] * x[j];
      }
      const float d = pred - y;  // d(0.5 d^2)/d pred
      loss += 0.5 * d * d / kBatch;
      for (int j = 0; j < kFeatures; ++j) gw[j] += d * x[j] / kBatch;
      gb += d / kBatch;
    }
    zero::convert(std::span<const float>(gw), engine.grad(0).as<zero::bf16>());
    engine.grad(1).as<zero::bf16>()[0] = zero::to_bf16(static_cast<float>(gb));
    engine.reduce_grads(0);
    // Passing this rank's loss gets the mean over the ranks back, with no collective of its own.
    const zero::StepReport report = engine.step(loss);
    if (step == 0) first = *report.loss;
    last = *report.loss;
    if (world.rank() == 0 && step % 10 == 0)
      std::printf("step %2d  loss %.5f  grad-norm %.4f\n", step, last, report.grad_norm);
  }
  const bool learned = last < 0.05 * first;
  if (world.rank() == 0)
    std::printf("loss %.5f -> %.5f (%s)\n", first, last, learned ? "learned" : "DID NOT LEARN");
  return learned ? 0 : 1;
} catch (const std::exception& e) {
  // Ends every rank: returning would leave the others waiting in a collective for this one.
  zero::comm::abort_job(zero::cat("linear_regression: error: ", e.what()), 1);
}
