// Checkpoints under mpirun (1 to 4 ranks): bitwise resume, loading at another rank count and
// stage, and one sentence for every bad checkpoint with the state left untouched (saves:
// test_checkpoint_saves.cpp).
#include "tests/zero/checkpoint_helpers.hpp"

namespace zero {
namespace {
using namespace checkpoint_test;

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

// Writes `value` over element `element` of `t` in the first piece of rank 0's file, with the
// file's checksums rewritten to match: damage that no checksum catches.
void plant(const std::string& folder, StateTensor t, std::int64_t element, float value) {
  CheckpointMeta meta = read_checkpoint_meta(folder);
  const CheckpointPiece& p = meta.pieces.at(0);
  REQUIRE(p.file == 0);
  REQUIRE(p.count > element);
  const std::string file = (fs::path(folder) / meta.files[0].name).string();
  std::vector<std::byte> bytes(static_cast<std::size_t>(fs::file_size(file)));
  std::ifstream(file, std::ios::binary)
      .read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  std::memcpy(bytes.data() + p.offset_of(t) + 4 * element, &value, 4);
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  meta.files[0].crc32c = chunk_checksums(bytes);
  std::ofstream((fs::path(folder) / kCheckpointMeta).string()) << to_json(meta);
}

TEST_CASE("A checkpoint with a negative second moment or a NaN is refused naming the parameter") {
  auto world = comm::make_mpi_communicator();
  RunSpec spec;
  spec.stage = 3;
  struct Case {
    StateTensor t;
    float value;
    const char* says;
  };
  for (const Case& k : {Case{StateTensor::exp_avg_sq, -1.0f, "holds a negative second moment"},
                        Case{StateTensor::master, std::nanf(""), "holds a value that is not finite"},
                        Case{StateTensor::exp_avg, -INFINITY, "holds a value that is not finite"}}) {
    CAPTURE(name_of(k.t));
    TempDir dir;
    {
      auto e = fresh(*world, spec);
      models::MlpTrainer t(spec.shape, micro_of(spec, world->size()));
      train(*e, t, spec, 0, 2);
      Checkpointer(*e, dir.path, {.background = false}).save();
    }
    const std::string folder = (fs::path(dir.path) / "step_00000002").string();
    const CheckpointMeta meta = read_checkpoint_meta(folder);
    const std::string param = meta.params[static_cast<std::size_t>(meta.pieces[0].param)].name;
    const std::int64_t element = meta.pieces[0].begin + 3;
    MPI_Barrier(MPI_COMM_WORLD);
    if (world->rank() == 0) plant(folder, k.t, 3, k.value);
    MPI_Barrier(MPI_COMM_WORLD);
    auto e = fresh(*world, spec);
    const std::uint64_t before = e->master_checksum();
    const std::string what = load_error(*e, dir.path);
    CHECK_THAT(what, Catch::Contains(k.says) && Catch::Contains(folder) &&
                         Catch::Contains(cat(name_of(k.t), " ")) &&
                         Catch::Contains(cat("param '", param, "'")) &&
                         Catch::Contains(cat("at its element ", element, ";")));
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

}  // namespace
}  // namespace zero
