// Exporting checkpoints to safetensors under mpirun (1 and 2 ranks): the file holds bitwise the
// master weights the engine gathers (fp32) or them rounded to nearest even (bf16), the GPT under
// Hugging Face GPT-2's names with its Conv1D weights transposed, read back by `zero train
// --init`'s fill (cli/ckpt_io.cpp) bitwise; and every bad export refused with one sentence.
#include <mpi.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "cli/ckpt_io.hpp"
#include "models/gpt.hpp"
#include "models/gpt_hf_names.hpp"
#include "tests/zero/engine_harness.hpp"
#include "tests/zero/shared_temp_dir.hpp"
#include "zero/zero.hpp"

namespace zero {
namespace {
namespace fs = std::filesystem;
using testing::make_config;
using models::GptShape;
using models::gpt_preset;
using models::gpt_units;
using testing::RunSpec;

using testing::quiet;
using TempDir = testing::SharedTempDir;

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

std::vector<float> transposed(const std::vector<float>& x, std::int64_t rows, std::int64_t cols) {
  std::vector<float> t(x.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      t[static_cast<std::size_t>(c * rows + r)] = x[static_cast<std::size_t>(r * cols + c)];
  return t;
}

// The reference MLP trained 3 steps at stage 3 and saved into `dir`; every param's master.
std::vector<std::vector<float>> trained_mlp(comm::Communicator& world, const std::string& dir) {
  RunSpec spec;
  spec.stage = 3;
  Engine e(make_config(spec), world, models::mlp_units(spec.shape), quiet());
  e.init_params([&](int p, std::span<float> out) { models::mlp_init(spec.shape, p, out); });
  const int n = world.size(), r = world.rank();
  const std::int64_t G = spec.shape.global_batch;
  models::MlpTrainer t(spec.shape, G / n);
  for (std::int64_t s = 0; s < 3; ++s) {
    t.micro_batch(e, s * G + r * (G / n));
    e.step();
  }
  Checkpointer(e, dir, {.background = false}).save();
  std::vector<std::vector<float>> out;
  for (int p = 0; p < static_cast<int>(e.layout().params.size()); ++p)
    out.push_back(e.gather_master(p));
  return out;
}

TEST_CASE("An fp32 export holds bitwise the master weights the engine gathers, in any slicing") {
  auto world = comm::make_mpi_communicator();
  TempDir dir;
  const auto master = trained_mlp(*world, dir.path);
  {  // every rank exports on its own (reading is all a checkpoint needs)
    const CheckpointMeta meta = read_checkpoint_meta(find_checkpoint(dir.path));
    CHECK(meta.ranks == world->size());
    for (std::int64_t buffer : {std::int64_t{4}, std::int64_t{100}, std::int64_t{16} << 20}) {
      CAPTURE(buffer);
      const std::string out = dir.path + "/plain" + std::to_string(world->rank()) + ".safetensors";
      const ExportReport r = export_safetensors(dir.path, out, {.buffer_bytes = buffer});
      CHECK(r.tensors == static_cast<int>(master.size()));
      CHECK(r.bytes == static_cast<std::int64_t>(fs::file_size(out)));
      SafetensorsFile f(out);
      REQUIRE(f.tensors().size() == master.size());
      for (std::size_t p = 0; p < master.size(); ++p) {
        CAPTURE(meta.params[p].name);
        CHECK(f.tensors()[p].name == meta.params[p].name);  // the checkpoint's order
        CHECK(f.tensors()[p].shape == meta.params[p].shape);
        CHECK(same_bits(f.read(meta.params[p].name), master[p]));
      }
    }
  }
}

TEST_CASE(
    "A bf16 export is the master weights rounded to nearest even; renames and transposes apply") {
  auto world = comm::make_mpi_communicator();
  TempDir dir;
  const auto master = trained_mlp(*world, dir.path);
  {
    const CheckpointMeta meta = read_checkpoint_meta(find_checkpoint(dir.path));
    ExportOptions o;
    o.dtype = DType::bf16;
    o.buffer_bytes = 256;
    o.rename = [](const CheckpointParam& p) -> std::optional<ExportName> {
      if (p.name == "layer0.bias") return std::nullopt;
      return ExportName{"m." + p.name, p.shape.size() == 2};
    };
    const std::string out = dir.path + "/b" + std::to_string(world->rank()) + ".safetensors";
    const ExportReport r = export_safetensors(dir.path, out, o);
    CHECK(r.skipped == 1);
    // The largest parameter transposed (whole, fp32), a slice, its bf16 copy, the reader's chunk.
    std::int64_t largest = 0, chunk = 0;
    for (const auto& p : meta.params) largest = std::max(largest, p.numel);
    for (const auto& f : meta.files)
      chunk = std::max(chunk, std::min(f.bytes, kCheckpointChunkBytes));
    CHECK(r.peak_buffer_bytes == 4 * largest + 256 + 128 + chunk);
    SafetensorsFile f(out);
    CHECK(f.find("m.layer0.bias") == nullptr);
    for (std::size_t p = 0; p < master.size(); ++p) {
      const CheckpointParam& cp = meta.params[p];
      if (cp.name == "layer0.bias") continue;
      CAPTURE(cp.name);
      const SafetensorsTensor* t = f.find("m." + cp.name);
      REQUIRE(t != nullptr);
      CHECK(t->dtype == "BF16");
      std::vector<float> want = master[p];
      if (cp.shape.size() == 2) {
        want = transposed(want, cp.shape[0], cp.shape[1]);
        CHECK(t->shape == std::vector<std::int64_t>{cp.shape[1], cp.shape[0]});
      }
      for (float& x : want) x = to_float(to_bf16(x));
      CHECK(same_bits(f.read(t->name), want));
    }
  }
}

TEST_CASE(
    "The GPT exports under GPT-2's names with c_attn transposed, and --init's fill reads it back "
    "bitwise") {
  auto world = comm::make_mpi_communicator();
  TempDir dir;
  const GptShape shape = *gpt_preset("gpt-micro");
  RunSpec spec;
  spec.stage = 3;
  Engine e(make_config(spec), *world, gpt_units(shape), quiet());
  e.init_params([&](int p, std::span<float> out) { models::gpt_init(shape, 5, p, out); });
  Checkpointer(e, dir.path, {.background = false}).save();
  std::vector<std::vector<float>> master;
  for (int p = 0; p < static_cast<int>(e.layout().params.size()); ++p)
    master.push_back(e.gather_master(p));
  const std::string rank = std::to_string(world->rank());

  const CheckpointMeta meta = read_checkpoint_meta(find_checkpoint(dir.path));
  ExportOptions hf;
  hf.rename = [](const CheckpointParam& p) -> std::optional<ExportName> {
    const auto n = models::gpt_name_to_hf(p.name);
    REQUIRE(n.has_value());
    return ExportName{n->name, n->transpose};
  };
  const std::string out = dir.path + "/gpt2-" + rank + ".safetensors";
  export_safetensors(dir.path, out, hf);
  SafetensorsFile f(out);
  std::set<std::string> names;
  for (const auto& t : f.tensors()) names.insert(t.name);
  const std::int64_t h = shape.hidden;
  const std::set<std::string> want = {"wte.weight",
                                      "wpe.weight",
                                      "ln_f.weight",
                                      "ln_f.bias",
                                      "h.0.ln_1.weight",
                                      "h.0.ln_1.bias",
                                      "h.0.attn.c_attn.weight",
                                      "h.0.attn.c_attn.bias",
                                      "h.0.attn.c_proj.weight",
                                      "h.0.attn.c_proj.bias",
                                      "h.0.ln_2.weight",
                                      "h.0.ln_2.bias",
                                      "h.0.mlp.c_fc.weight",
                                      "h.0.mlp.c_fc.bias",
                                      "h.0.mlp.c_proj.weight",
                                      "h.0.mlp.c_proj.bias",
                                      "h.1.ln_1.weight",
                                      "h.1.ln_1.bias",
                                      "h.1.attn.c_attn.weight",
                                      "h.1.attn.c_attn.bias",
                                      "h.1.attn.c_proj.weight",
                                      "h.1.attn.c_proj.bias",
                                      "h.1.ln_2.weight",
                                      "h.1.ln_2.bias",
                                      "h.1.mlp.c_fc.weight",
                                      "h.1.mlp.c_fc.bias",
                                      "h.1.mlp.c_proj.weight",
                                      "h.1.mlp.c_proj.bias"};
  CHECK(names == want);
  CHECK(f.find("wte.weight")->shape == std::vector<std::int64_t>{shape.vocab, h});
  CHECK(f.find("h.1.attn.c_attn.weight")->shape == std::vector<std::int64_t>{h, 3 * h});
  CHECK(f.find("h.1.attn.c_attn.bias")->shape == std::vector<std::int64_t>{3 * h});
  CHECK(f.find("h.1.mlp.c_fc.weight")->shape == std::vector<std::int64_t>{h, 4 * h});
  CHECK(f.find("h.1.mlp.c_proj.weight")->shape == std::vector<std::int64_t>{4 * h, h});
  // c_attn[i][j] (input i, output j) is zero's qkv[j][i]: output j < h is q, then k, then v.
  const int qkv = *meta.param_index("block1.attn.qkv.weight");
  const std::vector<float> c_attn = f.read("h.1.attn.c_attn.weight");
  for (std::int64_t i : {std::int64_t{0}, h / 2, h - 1})
    for (std::int64_t j : {std::int64_t{0}, h + 3, 2 * h + 7, 3 * h - 1})
      CHECK(c_attn[static_cast<std::size_t>(i * 3 * h + j)] ==
            master[static_cast<std::size_t>(qkv)][static_cast<std::size_t>(j * h + i)]);

  // --init's fill: GPT-2's names and zero's own names both read back bitwise.
  const std::string mine = dir.path + "/zero-" + rank + ".safetensors";
  export_safetensors(dir.path, mine);
  for (const std::string& file : {out, mine}) {
    CAPTURE(file);
    const auto fill = cli::safetensors_fill(file, e.layout());
    for (std::size_t p = 0; p < master.size(); ++p) {
      std::vector<float> got(master[p].size());
      fill(static_cast<int>(p), got);
      CAPTURE(meta.params[p].name);
      CHECK(same_bits(got, master[p]));
    }
  }
}

TEST_CASE("--init's fill refuses a file that is not this model, naming the file and the tensor") {
  const std::string dir =
      (fs::temp_directory_path() / ("zero-fill-" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  const Layout layout = make_layout(gpt_units(*gpt_preset("gpt-micro")), {});
  auto write = [&](const std::string& name, std::vector<SafetensorsEntry> entries) {
    const std::string path = dir + "/" + name;
    SafetensorsWriter w(path, entries);
    for (const auto& t : entries) {
      std::int64_t n = 1;
      for (auto d : t.shape) n *= d;
      w.write(std::vector<float>(static_cast<std::size_t>(n), 0.5f));
    }
    w.commit();
    return path;
  };
  std::vector<SafetensorsEntry> all;
  for (const auto& p : layout.params) {
    const auto hf = models::gpt_name_to_hf(p.name);
    auto shape = p.shape;
    if (hf->transpose) std::swap(shape[0], shape[1]);
    all.push_back({hf->name, DType::bf16, shape});
  }
  auto with = all;
  with.push_back({"h.0.attn.bias", DType::f32, {1, 1, 64, 64}});  // a GPT-2 mask: let through
  CHECK_NOTHROW(cli::safetensors_fill(write("ok.safetensors", with), layout));

  auto missing = all;
  missing.erase(missing.begin() + 5);
  const std::string m = write("missing.safetensors", missing);
  CHECK_THROWS_WITH(
      cli::safetensors_fill(m, layout),
      Catch::Contains(m) && Catch::Contains("no tensor for parameter 'block0.attn.qkv.bias'"));
  auto unflipped = all;
  std::swap(unflipped[4].shape[0], unflipped[4].shape[1]);  // c_attn as zero stores it: wrong
  const std::string u = write("unflipped.safetensors", unflipped);
  CHECK_THROWS_WITH(cli::safetensors_fill(u, layout),
                    Catch::Contains("tensor 'h.0.attn.c_attn.weight' has shape [192, 64]") &&
                        Catch::Contains("stores [in, out] as [64, 192]"));
  auto extra = all;
  extra.push_back({"h.2.ln_1.weight", DType::f32, {64}});
  CHECK_THROWS_WITH(cli::safetensors_fill(write("extra.safetensors", extra), layout),
                    Catch::Contains("tensor 'h.2.ln_1.weight' is no parameter of this model"));
  fs::remove_all(dir);
}

TEST_CASE("A bad export is one sentence and leaves no file behind") {
  auto world = comm::make_mpi_communicator();
  TempDir dir;
  trained_mlp(*world, dir.path);
  const std::string out = dir.path + "/x" + std::to_string(world->rank()) + ".safetensors";
  CHECK_THROWS_WITH(export_safetensors(dir.path + "/none", out),
                    Catch::Contains("none: no such file or folder"));
  CHECK_THROWS_WITH(export_safetensors(dir.path, dir.path), Catch::Contains("is a folder"));
  CHECK_THROWS_WITH(export_safetensors(dir.path, dir.path + "/no/x.safetensors"),
                    Catch::Contains("does not exist"));
  CHECK_THROWS_WITH(export_safetensors(dir.path, out, {.dtype = DType::f16}),
                    Catch::Contains("dtype fp16 is not supported"));
  ExportOptions same;
  same.rename = [](const CheckpointParam&) -> std::optional<ExportName> { return ExportName{"w"}; };
  CHECK_THROWS_WITH(export_safetensors(dir.path, out, same),
                    Catch::Contains("would both be named 'w'"));
  // A corrupt piece file: the checksum names it, and neither the file nor its .tmp is left.
  const std::string ckpt = find_checkpoint(dir.path);
  const std::string piece = ckpt + "/rank_00000.bin";
  MPI_Barrier(MPI_COMM_WORLD);
  if (world->rank() == 0) {
    std::fstream f(piece, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    const char byte = static_cast<char>(f.get() ^ 0x5a);  // another value, whatever was there
    f.seekp(100);
    f.put(byte);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_THROWS_WITH(export_safetensors(dir.path, out),
                    Catch::Contains("rank_00000.bin") && Catch::Contains("checksum"));
  CHECK(!fs::exists(out));
  CHECK(!fs::exists(out + ".tmp"));
}

}  // namespace
}  // namespace zero
