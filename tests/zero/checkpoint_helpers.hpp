// What the checkpoint tests share (test_checkpoint.cpp, test_checkpoint_saves.cpp): the
// reference MLP trained step by step, each param's master gathered, a fresh engine.
#pragma once

#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/zero/engine_harness.hpp"
#include "tests/zero/shared_temp_dir.hpp"
#include "zero/zero.hpp"

namespace zero::checkpoint_test {

namespace fs = std::filesystem;
using testing::make_config;
using testing::RunSpec;

using testing::quiet;
using TempDir = testing::SharedTempDir;

// Trains steps [from, to) of the reference MLP (the same samples at any rank count).
inline std::vector<double> train(Engine& e, models::MlpTrainer& t, const RunSpec& spec, std::int64_t from,
                          std::int64_t to) {
  const int n = e.ranks(), r = e.rank();
  const std::int64_t G = spec.shape.global_batch, micro = G / (n * spec.accumulation);
  std::vector<double> losses;
  for (std::int64_t s = from; s < to; ++s) {
    double loss = 0;
    for (std::int64_t k = 0; k < spec.accumulation; ++k)
      loss += t.micro_batch(e, s * G + r * (G / n) + k * micro);
    e.step();
    losses.push_back(loss);
  }
  return losses;
}

inline std::int64_t micro_of(const RunSpec& spec, int n) {
  return spec.shape.global_batch / (n * spec.accumulation);
}

inline std::vector<std::vector<float>> masters(Engine& e) {
  std::vector<std::vector<float>> out;
  for (int p = 0; p < static_cast<int>(e.layout().params.size()); ++p)
    out.push_back(e.gather_master(p));
  return out;
}

inline void init(Engine& e, const RunSpec& spec) {
  e.init_params([&](int p, std::span<float> out) { models::mlp_init(spec.shape, p, out); });
}

inline std::unique_ptr<Engine> fresh(comm::Communicator& w, const RunSpec& spec) {
  auto e = std::make_unique<Engine>(make_config(spec), w, models::mlp_units(spec.shape), quiet());
  init(*e, spec);
  return e;
}

inline std::string load_error(Engine& e, const std::string& path) {
  try {
    load_checkpoint(e, path);
  } catch (const Error& err) {
    return err.what();
  }
  return "(no error)";
}

}  // namespace zero::checkpoint_test
