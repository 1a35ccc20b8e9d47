// Checkpoint saves under mpirun (1 to 4 ranks): atomic, a failed save leaving nothing behind,
// what a killed job left removed, the newest kept, and a save between micro-batches refused.
#include "tests/zero/checkpoint_helpers.hpp"

namespace zero {
namespace {
using namespace checkpoint_test;

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
    CHECK(unfinished_saves(dir.path) == 0);
  }
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
