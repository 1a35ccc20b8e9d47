// Checkpoints under mpirun (1 to 4 ranks): bitwise resume, loading at another rank count and
// stage, atomic saves, and one sentence for every bad checkpoint with the state left untouched.
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/zero/engine_harness.hpp"
#include "tests/zero/shared_temp_dir.hpp"
#include "zero/zero.hpp"

namespace zero {
namespace {
namespace fs = std::filesystem;
using testing::make_config;
using testing::RunSpec;

using testing::quiet;
using TempDir = testing::SharedTempDir;

// Trains steps [from, to) of the reference MLP (the same samples at any rank count).
std::vector<double> train(Engine& e, models::MlpTrainer& t, const RunSpec& spec, std::int64_t from,
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

std::int64_t micro_of(const RunSpec& spec, int n) {
  return spec.shape.global_batch / (n * spec.accumulation);
}

std::vector<std::vector<float>> masters(Engine& e) {
  std::vector<std::vector<float>> out;
  for (int p = 0; p < static_cast<int>(e.layout().params.size()); ++p)
    out.push_back(e.gather_master(p));
  return out;
}

void init(Engine& e, const RunSpec& spec) {
  e.init_params([&](int p, std::span<float> out) { models::mlp_init(spec.shape, p, out); });
}

TEST_CASE(
    "Resuming from a checkpoint gives bitwise the weights and losses of a run that never stopped") {
  auto world = comm::make_mpi_communicator();
  const int n = world->size();
  for (int stage : {0, 1, 2, 3})
    for (Precision prec : {Precision::bf16, Precision::fp32, Precision::fp16})
      for (bool background : {true, false}) {
        if (!background && prec != Precision::bf16) continue;
        RunSpec spec;
        spec.stage = stage;
        spec.precision = prec;
        spec.accumulation = stage == 2 ? 2 : 1;
        spec.lr = prec == Precision::fp16 ? 3e-3 : 1e-2;
        CAPTURE(stage, name_of(prec), background, n);
        TempDir dir;
        // 20 steps straight.
        Config config = make_config(spec);
        if (prec == Precision::fp16) config.fp16.initial_scale_power = 24;  // skips, then settles
        Engine straight(config, *world, models::mlp_units(spec.shape), quiet());
        init(straight, spec);
        models::MlpTrainer t1(spec.shape, micro_of(spec, n));
        const std::vector<double> all = train(straight, t1, spec, 0, 20);
        // 10 steps, a save, then a new engine that loads it and does the other 10.
        std::vector<double> second;
        std::int64_t saved_step = -1;
        {
          Engine first(config, *world, models::mlp_units(spec.shape), quiet());
          init(first, spec);
          models::MlpTrainer t2(spec.shape, micro_of(spec, n));
          train(first, t2, spec, 0, 10);
          saved_step = first.stats().applied_steps;
          Checkpointer ck(first, dir.path, {.background = background});
          ck.save(R"({"next_step": 10})");
          REQUIRE(ck.wait().has_value() == background);
        }
        Engine resumed(config, *world, models::mlp_units(spec.shape), quiet());
        const LoadResult loaded = load_checkpoint(resumed, dir.path);
        CHECK(loaded.step == saved_step);
        CHECK(loaded.trainer_state == R"({"next_step":10})");
        models::MlpTrainer t3(spec.shape, micro_of(spec, n));
        second = train(resumed, t3, spec, 10, 20);
        CHECK(std::vector<double>(all.begin() + 10, all.end()) == second);
        CHECK(resumed.stats().applied_steps == straight.stats().applied_steps);
        CHECK(resumed.loss_scale() == straight.loss_scale());
        CHECK(masters(resumed) == masters(straight));
        if (prec == Precision::fp16) CHECK(straight.stats().skipped_steps > 0);
      }
}

// Rank 0's masters, broadcast to every rank of the world (ranks outside `e`'s group pass null).
std::vector<std::vector<float>> broadcast_masters(Engine* e,
                                                  const std::vector<std::int64_t>& sizes) {
  std::vector<std::vector<float>> out;
  if (e) out = masters(*e);
  out.resize(sizes.size());
  for (std::size_t p = 0; p < sizes.size(); ++p) {
    out[p].resize(static_cast<std::size_t>(sizes[p]));
    MPI_Bcast(out[p].data(), static_cast<int>(sizes[p]), MPI_FLOAT, 0, MPI_COMM_WORLD);
  }
  return out;
}

TEST_CASE(
    "A checkpoint loads at another rank count and stage with bitwise the saved master weights",
    "[4ranks]") {
  auto world = comm::make_mpi_communicator();
  REQUIRE(world->size() == 4);
  const int r = world->rank();
  RunSpec spec;
  TempDir a, b, c;
  std::vector<std::int64_t> sizes;
  for (const auto& p : models::mlp_units(spec.shape))
    for (const auto& ps : p.params) {
      std::int64_t n = 1;
      for (auto d : ps.shape) n *= d;
      sizes.push_back(n);
    }
  auto engine_at = [&](comm::Communicator& group, int stage, int shard_size = -1) {
    RunSpec sp = spec;
    sp.stage = stage;
    sp.shard_size = shard_size;
    return std::make_unique<Engine>(make_config(sp), group, models::mlp_units(sp.shape), quiet());
  };
  // 4 ranks, stage 3: 5 steps, saved to a.
  auto e4 = engine_at(*world, 3);
  init(*e4, spec);
  models::MlpTrainer t4(spec.shape, micro_of(spec, 4));
  train(*e4, t4, spec, 0, 5);
  Checkpointer(*e4, a.path).save();
  const auto at_a = masters(*e4);
  // 3 ranks, stage 1: loads a bitwise, trains 3 steps, saves to b.
  auto three = world->split(r < 3 ? 0 : 1, r);
  std::unique_ptr<Engine> e3;
  if (r < 3) {
    e3 = engine_at(*three, 1);
    CHECK(load_checkpoint(*e3, a.path).step == 5);
    CHECK(masters(*e3) == at_a);
    models::MlpTrainer t3(spec.shape, micro_of(spec, 3));
    for (double loss : train(*e3, t3, spec, 5, 8)) CHECK(std::isfinite(loss));
    Checkpointer(*e3, b.path).save();
  }
  const auto at_b = broadcast_masters(e3.get(), sizes);
  CHECK(at_b != at_a);
  // 2 ranks, stage 0: loads b bitwise, trains 2 steps, saves to c.
  auto two = world->split(r < 2 ? 0 : 1, r);
  std::unique_ptr<Engine> e2;
  if (r < 2) {
    e2 = engine_at(*two, 0);
    CHECK(load_checkpoint(*e2, b.path).step == 8);
    CHECK(masters(*e2) == at_b);
    models::MlpTrainer t2(spec.shape, micro_of(spec, 2));
    train(*e2, t2, spec, 8, 10);
    Checkpointer(*e2, c.path).save();
  }
  const auto at_c = broadcast_masters(e2.get(), sizes);
  // Back to 4 ranks at stage 3, flat and hierarchical (two shard groups of 2): bitwise c.
  for (int shard_size : {-1, 2}) {
    CAPTURE(shard_size);
    auto back = engine_at(*world, 3, shard_size);
    CHECK(load_checkpoint(*back, c.path).step == 10);
    CHECK(masters(*back) == at_c);
    models::MlpTrainer tb(spec.shape, micro_of(spec, 4));
    train(*back, tb, spec, 10, 11);
    // A hierarchical save is written by the first shard group only, and loads flat.
    TempDir d;
    Checkpointer(*back, d.path).save();
    const auto saved = masters(*back);
    auto flat = engine_at(*world, 2);
    load_checkpoint(*flat, d.path);
    CHECK(masters(*flat) == saved);
  }
}

// The reference MLP under a spec, its weights set, for the error cases.
std::unique_ptr<Engine> fresh(comm::Communicator& w, const RunSpec& spec) {
  auto e = std::make_unique<Engine>(make_config(spec), w, models::mlp_units(spec.shape), quiet());
  init(*e, spec);
  return e;
}

std::string load_error(Engine& e, const std::string& path) {
  try {
    load_checkpoint(e, path);
  } catch (const Error& err) {
    return err.what();
  }
  return "(no error)";
}

TEST_CASE("A checkpoint of another model is refused naming the parameter, and nothing is loaded") {
  auto world = comm::make_mpi_communicator();
  RunSpec spec;
  spec.stage = 2;
  TempDir dir;
  {
    auto e = fresh(*world, spec);
    models::MlpTrainer t(spec.shape, micro_of(spec, world->size()));
    train(*e, t, spec, 0, 2);
    Checkpointer(*e, dir.path, {.background = false}).save();
  }
  const std::string meta = (fs::path(dir.path) / "step_00000002" / "meta.json").string();
  struct Case {
    int layers, width;
    const char* says;
  };
  for (const Case& k :
       {Case{4, 24, "the model's params 'layer3.weight', 'layer3.bias' are not in the checkpoint"},
        Case{2, 24, "the checkpoint holds params 'layer2.bias', 'layer2.weight'"},
        Case{3, 25, "param 'layer0.weight' has shape [24, 24] in the checkpoint but [25, 25]"}}) {
    CAPTURE(k.layers, k.width);
    RunSpec other = spec;
    other.shape.layers = k.layers;
    other.shape.width = k.width;
    auto e = fresh(*world, other);
    const std::uint64_t before = e->master_checksum();
    const std::string what = load_error(*e, dir.path);
    CHECK_THAT(what, Catch::Contains(k.says) && Catch::Contains(meta));
    CHECK(e->master_checksum() == before);
  }
}

TEST_CASE("A corrupt or truncated piece file is refused naming the file and the parameter") {
  auto world = comm::make_mpi_communicator();
  RunSpec spec;
  spec.stage = 3;
  for (const bool truncate : {false, true}) {
    CAPTURE(truncate);
    TempDir dir;
    {
      auto e = fresh(*world, spec);
      Checkpointer(*e, dir.path).save();
    }
    const std::string file = (fs::path(dir.path) / "step_00000000" / "rank_00000.bin").string();
    if (world->rank() == 0) {
      if (truncate) {
        fs::resize_file(file, fs::file_size(file) - 4);
      } else {
        std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(100);
        f.put('');
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    auto e = fresh(*world, spec);
    const std::uint64_t before = e->master_checksum();
    const std::string what = load_error(*e, dir.path);
    CHECK_THAT(what, Catch::Contains(file) && Catch::Contains("param 'layer0.weight'") &&
                         Catch::Contains(truncate ? "truncated" : "corrupt"));
    CHECK(e->master_checksum() == before);
  }
}

TEST_CASE("A folder without a complete checkpoint is refused in one sentence") {
  auto world = comm::make_mpi_communicator();
  auto e = fresh(*world, RunSpec{});
  TempDir dir;
  CHECK_THAT(load_error(*e, dir.path + "/nope"), Catch::Contains("no such file or folder"));
  CHECK_THAT(load_error(*e, dir.path), Catch::Contains("holds no complete checkpoint"));
  if (world->rank() == 0) fs::create_directories(fs::path(dir.path) / "step_00000007");
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_THAT(load_error(*e, dir.path), Catch::Contains("1 unfinished save is there"));
}

TEST_CASE(
    "A save that fails for a full disk names the file on every rank and keeps the last "
    "checkpoint") {
  auto world = comm::make_mpi_communicator();
  const int n = world->size();
  RunSpec spec;
  spec.stage = 1;
  for (const bool background : {true, false}) {
    CAPTURE(background);
    TempDir dir;
    auto e = fresh(*world, spec);
    models::MlpTrainer t(spec.shape, micro_of(spec, n));
    train(*e, t, spec, 0, 2);
    Checkpointer ck(*e, dir.path, {.background = background});
    ck.save();
    ck.wait();  // the hook below is read by the writer thread: this save must be on disk first
    const auto at_2 = masters(*e);
    train(*e, t, spec, 2, 4);
    // The last rank's disk fills after 100 bytes of its piece file.
    if (world->rank() == n - 1) ::setenv("ZERO_CKPT_FAIL_AFTER_BYTES", "100", 1);
    std::string what = "(no error)";
    try {
      ck.save();
      ck.wait();
    } catch (const Error& err) {
      what = err.what();
    }
    ::unsetenv("ZERO_CKPT_FAIL_AFTER_BYTES");
    char name[32];
    std::snprintf(name, sizeof name, "rank_%05d.bin", n - 1);
    CHECK_THAT(what, Catch::Contains("disk is full") && Catch::Contains(name) &&
                         Catch::Contains(cat("rank ", n - 1)));
    CHECK(find_checkpoint(dir.path) == (fs::path(dir.path) / "step_00000002").string());
    std::ifstream latest(fs::path(dir.path) / "latest");
    std::string line;
    std::getline(latest, line);
    CHECK(line == "step_00000002");
    auto again = fresh(*world, spec);
    CHECK(load_checkpoint(*again, dir.path).step == 2);
    CHECK(masters(*again) == at_2);
    // The next save succeeds and clears the unfinished one.
    ck.save();
    ck.wait();
    CHECK(find_checkpoint(dir.path) == (fs::path(dir.path) / "step_00000004").string());
    MPI_Barrier(MPI_COMM_WORLD);
    int partial = 0;
    for (const auto& entry : fs::directory_iterator(dir.path))
      partial += entry.path().filename().string().starts_with(".partial-");
    CHECK(partial == 0);
  }
}

// The hidden folders a save left in `dir`, counted once every rank is past the save.
int unfinished_saves(const std::string& dir) {
  MPI_Barrier(MPI_COMM_WORLD);
  int partial = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    partial += entry.path().filename().string().starts_with(".partial-");
  MPI_Barrier(MPI_COMM_WORLD);  // no rank starts its next save while another is listing
  return partial;
}

TEST_CASE(
    "A save that fails for lack of space removes its unfinished folder, and the next save "
    "succeeds") {
  auto world = comm::make_mpi_communicator();
  const int n = world->size();
  RunSpec spec;
  spec.stage = 1;
  for (const bool background : {true, false}) {
    CAPTURE(background);
    TempDir dir;
    auto e = fresh(*world, spec);
    models::MlpTrainer t(spec.shape, micro_of(spec, n));
    train(*e, t, spec, 0, 2);
    Checkpointer ck(*e, dir.path, {.background = background});
    ck.save();
    ck.wait();
    train(*e, t, spec, 2, 4);
    // A real limit, not the hook: the last rank may not grow a file past 256 bytes (its piece
    // file is larger, at 1 to 4 ranks), so its write fails with EFBIG as a full disk's does with
    // ENOSPC.
    rlimit before{};
    ::getrlimit(RLIMIT_FSIZE, &before);
    void (*handler)(int) = SIG_DFL;
    if (world->rank() == n - 1) {
      handler = std::signal(SIGXFSZ, SIG_IGN);  // else the kernel's SIGXFSZ ends the process
      rlimit small = before;
      small.rlim_cur = 256;
      ::setrlimit(RLIMIT_FSIZE, &small);
    }
    std::string what = "(no error)";
    try {
      ck.save();
      ck.wait();
    } catch (const Error& err) {
      what = err.what();
    }
    if (world->rank() == n - 1) {
      ::setrlimit(RLIMIT_FSIZE, &before);
      std::signal(SIGXFSZ, handler);
    }
    char name[32];
    std::snprintf(name, sizeof name, "rank_%05d.bin", n - 1);
    CHECK_THAT(what, Catch::Contains("checkpoint save failed") && Catch::Contains(name) &&
                         Catch::Contains(std::strerror(EFBIG)));
    CHECK(unfinished_saves(dir.path) == 0);
    CHECK(find_checkpoint(dir.path) == (fs::path(dir.path) / "step_00000002").string());
    ck.save();
    ck.wait();
    CHECK(find_checkpoint(dir.path) == (fs::path(dir.path) / "step_00000004").string());
    CHECK(unfinished_saves(dir.path) == 0);
  }
}

TEST_CASE("A save removes the unfinished folders a killed job left before it writes") {
  auto world = comm::make_mpi_communicator();
  RunSpec spec;
  TempDir dir;
  auto e = fresh(*world, spec);
  // What a job killed during a save leaves: a hidden folder with part of a piece file.
  if (world->rank() == 0) {
    fs::create_directories(fs::path(dir.path) / ".partial-step_00000009");
    std::ofstream(fs::path(dir.path) / ".partial-step_00000009" / "rank_00000.bin") << "part";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // The save fails on every rank (the hook: the disk is full at once), and still the old folder
  // is gone: it went before the save wrote.
  ::setenv("ZERO_CKPT_FAIL_AFTER_BYTES", "0", 1);
  Checkpointer ck(*e, dir.path, {.background = false});
  CHECK_THROWS_WITH(ck.save(), Catch::Contains("the disk is full"));
  ::unsetenv("ZERO_CKPT_FAIL_AFTER_BYTES");
  CHECK(unfinished_saves(dir.path) == 0);
}

TEST_CASE("Saves keep the newest checkpoints and point latest at the last") {
  auto world = comm::make_mpi_communicator();
  RunSpec spec;
  spec.stage = 3;
  TempDir dir;
  auto e = fresh(*world, spec);
  models::MlpTrainer t(spec.shape, micro_of(spec, world->size()));
  Checkpointer ck(*e, dir.path, {.keep = 2});
  for (int s = 0; s < 4; ++s) {
    train(*e, t, spec, s, s + 1);
    ck.save(cat("{\"step\": ", s + 1, "}"));
  }
  ck.wait();
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<std::int64_t> steps;
  for (const auto& [step, path] : list_checkpoints(dir.path)) steps.push_back(step);
  CHECK(steps == std::vector<std::int64_t>{3, 4});
  std::ifstream latest(fs::path(dir.path) / "latest");
  std::string line;
  std::getline(latest, line);
  CHECK(line == "step_00000004");
  CHECK(read_checkpoint_meta((fs::path(dir.path) / line).string()).trainer == R"({"step":4})");
}

TEST_CASE("A save between the micro-batches of a step is refused") {
  auto world = comm::make_mpi_communicator();
  RunSpec spec;
  spec.accumulation = 2;
  spec.shape.global_batch = 48;
  auto e = fresh(*world, spec);
  models::MlpTrainer t(spec.shape, micro_of(spec, world->size()));
  t.micro_batch(*e, world->rank() * micro_of(spec, world->size()));
  TempDir dir;
  Checkpointer ck(*e, dir.path);
  CHECK_THROWS_WITH(ck.save(), Catch::Contains("between optimizer steps only"));
}

}  // namespace
}  // namespace zero
