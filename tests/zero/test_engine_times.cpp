// The engine's and the trainer's clocks that `zero train` splits a step by (EngineStats
// wait_seconds and optimizer_seconds, MlpTrainer::times): a rank kept waiting by a slower one
// counts the wait, and the wait is not counted again as optimizer time. Run at 2 ranks.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "models/mlp.hpp"
#include "zero/zero.hpp"

using namespace zero;

namespace {

constexpr double kSleep = 0.2;  // seconds the last rank sleeps before a collective

std::vector<UnitSpec> two_units() {
  return {UnitSpec{"a", {ParamSpec{"a.w", {4096}}}}, UnitSpec{"b", {ParamSpec{"b.w", {1000}}}}};
}

void write_grads(Engine& e) {
  for (int p = 0; p < static_cast<int>(e.layout().params.size()); ++p) {
    TensorView g = e.grad(p);
    for (auto& x : g.as<float>()) x = 0.5f;
  }
}

void sleep_if_last(const comm::Communicator& w) {
  if (w.rank() == w.size() - 1) std::this_thread::sleep_for(std::chrono::duration<double>(kSleep));
}

}  // namespace

TEST_CASE("A rank kept waiting in reduce_grads by a slower rank counts the wait in wait_seconds") {
  auto w = comm::make_mpi_communicator();
  REQUIRE(w->size() >= 2);
  for (int stage = 0; stage <= 3; ++stage) {
    INFO("stage " << stage);
    Config c;
    c.zero.stage = stage;
    c.precision = Precision::fp32;
    Engine e(c, *w, two_units());
    e.init_params([](int, std::span<float> x) { std::fill(x.begin(), x.end(), 1.0f); });
    write_grads(e);
    w->barrier();
    const EngineStats before = e.stats();
    sleep_if_last(*w);
    for (int u = 1; u >= 0; --u) e.reduce_grads(u);  // without overlap: finished inside the call
    const double waited = e.stats().wait_seconds - before.wait_seconds;
    if (w->rank() == 0) CHECK(waited >= 0.9 * kSleep);
    if (w->rank() == w->size() - 1) CHECK(waited < 0.5 * kSleep);  // it slept; it did not wait
    CHECK(e.stats().optimizer_seconds - before.optimizer_seconds < 0.5 * kSleep);
    e.step();
  }
}

TEST_CASE("step() counts its waits as wait_seconds and only the rest as optimizer_seconds") {
  auto w = comm::make_mpi_communicator();
  REQUIRE(w->size() >= 2);
  for (int stage = 0; stage <= 3; ++stage) {
    INFO("stage " << stage);
    Config c;
    c.zero.stage = stage;
    c.precision = Precision::bf16;
    Engine e(c, *w, two_units());
    e.init_params([](int, std::span<float> x) { std::fill(x.begin(), x.end(), 1.0f); });
    for (int p = 0; p < 2; ++p) {
      TensorView g = e.grad(p);
      for (auto& x : g.as<bf16>()) x = to_bf16(0.5f);
    }
    for (int u = 1; u >= 0; --u) e.reduce_grads(u);
    w->barrier();
    const EngineStats before = e.stats();
    sleep_if_last(*w);  // rank 0 waits for it in step()'s all-gather of the norms
    const auto t0 = std::chrono::steady_clock::now();
    e.step();
    const double call =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const EngineStats after = e.stats();
    const double waited = after.wait_seconds - before.wait_seconds;
    const double optimizer = after.optimizer_seconds - before.optimizer_seconds;
    if (w->rank() == 0) CHECK(waited >= 0.9 * kSleep);
    CHECK(optimizer > 0);
    CHECK(optimizer < 0.5 * kSleep);
    CHECK(waited + optimizer <= call * 1.0001 + 1e-6);  // parts of the call, never counted twice
  }
}

TEST_CASE("The MLP trainer's data and compute time are parts of its micro-batch, waits excluded") {
  auto w = comm::make_mpi_communicator();
  REQUIRE(w->size() >= 2);
  models::MlpShape shape{.layers = 2, .width = 64, .global_batch = 8 * w->size(), .seed = 3};
  Config c;
  c.zero.stage = 2;
  c.precision = Precision::bf16;
  Engine e(c, *w, models::mlp_units(shape));
  e.init_params([&](int p, std::span<float> x) { models::mlp_init(shape, p, x); });
  models::MlpTrainer trainer(shape, 8);
  CHECK(trainer.times().data_seconds == 0);
  CHECK(trainer.times().compute_seconds == 0);
  w->barrier();
  // The last rank arrives late at the first reduction: rank 0 waits inside reduce_grads, an
  // engine call, and that wait must not show up as rank 0's compute.
  if (w->rank() == w->size() - 1) sleep_if_last(*w);
  const double waited_before = e.stats().wait_seconds;
  const auto t0 = std::chrono::steady_clock::now();
  trainer.micro_batch(e, 8 * w->rank());
  const double call = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const models::MlpTrainer::Times t = trainer.times();
  CHECK(t.data_seconds > 0);
  CHECK(t.compute_seconds > 0);
  CHECK(t.data_seconds + t.compute_seconds + (e.stats().wait_seconds - waited_before) <=
        call * 1.0001 + 1e-6);
  if (w->rank() == 0) {
    CHECK(e.stats().wait_seconds - waited_before >= 0.9 * kSleep);
    CHECK(t.compute_seconds < 0.5 * kSleep);
  }
  e.step();
}

// Keeps the samples a function of the index alone: the batched teacher (one call for a
// micro-batch) gives bitwise the values of one call per sample and of mlp_sample.
TEST_CASE("A micro-batch's samples and targets are the same made together or one by one") {
  models::MlpShape shape{.layers = 1, .width = 37, .global_batch = 1, .seed = 11};
  models::MlpTeacher teacher(shape);
  const int n = 7, W = shape.width;
  std::vector<float> x(n * W), y(n * W), x1(W), y1(W), x2(W), y2(W);
  teacher.samples(100, n, x, y);
  for (int i = 0; i < n; ++i) {
    teacher.sample(100 + i, x1, y1);
    models::mlp_sample(shape, 100 + i, x2, y2);
    for (int j = 0; j < W; ++j) {
      REQUIRE(x1[j] == x[i * W + j]);
      REQUIRE(y1[j] == y[i * W + j]);
      REQUIRE(x2[j] == x1[j]);
      REQUIRE(y2[j] == y1[j]);
    }
  }
}
