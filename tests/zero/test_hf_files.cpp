// Hugging Face files given to `zero train --init` (cli/ckpt_io.cpp, zero/safetensors.cpp): GPT-2's
// output head is its token embedding, so a file whose lm_head.weight differs from wte.weight is
// refused rather than loaded without its head; a file written by safetensors.torch.save_model,
// which keeps lm_head.weight and drops wte as its tie, loads wte from the head; and a PyTorch
// pytorch_model.bin (or a Git LFS pointer) is named and answered with how to convert it, not
// read as a safetensors header length. Every fixture is written here: no torch needed.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "cli/ckpt_io.hpp"
#include "models/gpt.hpp"
#include "models/gpt_hf_names.hpp"
#include "tests/temp_dir.hpp"
#include "zero/zero.hpp"

namespace zero {
namespace {
namespace fs = std::filesystem;

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("zero-hf-") {}
};

// A tensor of the fixture and its values (all `value`, but `odd` at element `at` when at >= 0).
struct Tensor {
  SafetensorsEntry entry;
  float value = 0.5f;
  std::int64_t at = -1;
  float odd = 0;
};

std::string write(const fs::path& dir, const std::string& name, const std::vector<Tensor>& ts) {
  const std::string path = (dir / name).string();
  std::vector<SafetensorsEntry> entries;
  for (const auto& t : ts) entries.push_back(t.entry);
  SafetensorsWriter w(path, entries);
  for (const auto& t : ts) {
    std::int64_t n = 1;
    for (auto d : t.entry.shape) n *= d;
    std::vector<float> v(static_cast<std::size_t>(n), t.value);
    if (t.at >= 0) v[static_cast<std::size_t>(t.at)] = t.odd;
    w.write(v);
  }
  w.commit();
  return path;
}

// GPT-2's tensors for `layout`, under `prefix` ("" as the gpt2 repository names them,
// "transformer." as GPT2LMHeadModel's state_dict does), wte.weight included or not.
std::vector<Tensor> gpt2_tensors(const Layout& layout, const std::string& prefix, bool wte) {
  std::vector<Tensor> out;
  for (const auto& p : layout.params) {
    const auto hf = models::gpt_name_to_hf(p.name);
    REQUIRE(hf.has_value());
    if (hf->name == "wte.weight" && !wte) continue;
    if (hf->name == "lm_head.weight") continue;  // added by the cases that want one
    auto shape = p.shape;
    if (hf->transpose) std::swap(shape[0], shape[1]);
    out.push_back({{prefix + hf->name, DType::f32, shape}, hf->name == "wte.weight" ? 0.5f : 1.0f});
  }
  return out;
}

int param_index(const Layout& layout, const std::string& name) {
  for (std::size_t i = 0; i < layout.params.size(); ++i)
    if (layout.params[i].name == name) return static_cast<int>(i);
  FAIL("no param " << name);
  return -1;
}

const models::GptShape kShape = *models::gpt_preset("gpt-micro");

TEST_CASE("A GPT-2 file whose lm_head differs from wte is refused: the head would be dropped") {
  TempDir dir;
  const Layout layout = make_layout(models::gpt_units(kShape), {});
  const std::vector<std::int64_t> wte = {kShape.vocab, kShape.hidden};
  auto untied = gpt2_tensors(layout, "", true);
  untied.push_back({{"lm_head.weight", DType::f32, wte}, 0.5f, 7, 0.25f});
  const std::string path = write(dir.path, "untied.safetensors", untied);
  try {
    (void)cli::safetensors_fill(path, layout);
    FAIL("the untied head was accepted");
  } catch (const Error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find(path) != std::string::npos);
    CHECK(what.find("'lm_head.weight' differs from 'wte.weight' (element 7: 0.25 against 0.5)") !=
          std::string::npos);
    CHECK(what.find("untied output head") != std::string::npos);
    CHECK(what.find("del t['lm_head.weight']") != std::string::npos);  // how to load it anyway
    CHECK(what.find('\n') == std::string::npos);
  }
  // A head of another shape is a head of its own as well.
  auto other = gpt2_tensors(layout, "", true);
  other.push_back({{"lm_head.weight", DType::f32, {kShape.vocab, 8}}});
  CHECK_THROWS_WITH(cli::safetensors_fill(write(dir.path, "other.safetensors", other), layout),
                    Catch::Contains("'lm_head.weight' has shape [") &&
                        Catch::Contains("an output head of its own"));
  // The tie as GPT-2 saves it: lm_head equal to wte (bf16 here, widened exactly) loads.
  auto tied = gpt2_tensors(layout, "transformer.", true);
  tied.push_back({{"lm_head.weight", DType::bf16, wte}, 0.5f});
  const auto fill = cli::safetensors_fill(write(dir.path, "tied.safetensors", tied), layout);
  std::vector<float> got(static_cast<std::size_t>(kShape.vocab * kShape.hidden));
  fill(param_index(layout, "wte.weight"), got);
  CHECK(std::all_of(got.begin(), got.end(), [](float x) { return x == 0.5f; }));
}

TEST_CASE("A model with a head of its own reads lm_head.weight into it, untied from wte") {
  TempDir dir;
  models::GptShape shape = kShape;
  shape.tied_embeddings = false;
  const Layout layout = make_layout(models::gpt_units(shape), {});
  auto ts = gpt2_tensors(layout, "", true);
  ts.push_back({{"lm_head.weight", DType::f32, {shape.vocab, shape.hidden}}, 0.5f, 7, 0.25f});
  const auto fill = cli::safetensors_fill(write(dir.path, "untied.safetensors", ts), layout);
  std::vector<float> head(static_cast<std::size_t>(shape.vocab * shape.hidden));
  fill(param_index(layout, "head.weight"), head);
  CHECK(head[7] == 0.25f);
  CHECK(head[8] == 0.5f);
}

TEST_CASE("A save_model file (lm_head kept, wte dropped as its tie) loads wte from lm_head") {
  TempDir dir;
  const Layout layout = make_layout(models::gpt_units(kShape), {});
  auto ts = gpt2_tensors(layout, "transformer.", false);
  ts.push_back({{"lm_head.weight", DType::f32, {kShape.vocab, kShape.hidden}}, 0.5f, 3, -2.0f});
  const auto fill = cli::safetensors_fill(write(dir.path, "save_model.safetensors", ts), layout);
  std::vector<float> wte(static_cast<std::size_t>(kShape.vocab * kShape.hidden));
  fill(param_index(layout, "wte.weight"), wte);
  CHECK(wte[3] == -2.0f);
  CHECK(wte[4] == 0.5f);
  // Neither wte nor lm_head: the sentence names each place looked, once, and the tie.
  const std::string none = write(dir.path, "none.safetensors", gpt2_tensors(layout, "", false));
  CHECK_THROWS_WITH(cli::safetensors_fill(none, layout),
                    Catch::Contains("no tensor for parameter 'wte.weight' (looked for "
                                    "'wte.weight', 'transformer.wte.weight', or "
                                    "'lm_head.weight', GPT-2's head tied to it)"));
}

// A file of these bytes, then zeros up to 4 KiB.
std::string raw(const fs::path& dir, const std::string& name, const std::string& bytes) {
  const std::string path = (dir / name).string();
  std::ofstream out(path, std::ios::binary);
  out << bytes << std::string(4096 - bytes.size(), '\0');
  return path;
}

TEST_CASE("A PyTorch pytorch_model.bin is named, with how to convert it, not read as a header") {
  TempDir dir;
  const Layout layout = make_layout(models::gpt_units(kShape), {});
  // torch.save's zip (its first bytes read as a header length of 578712552184433488 bytes), and
  // the pickle an older torch.save wrote (protocol 2, then torch's magic number).
  const std::string zip =
      raw(dir.path, "pytorch_model.bin",
          std::string("PK\x03\x04\x00\x00\x08\x08\x00\x00", 10) + "archive/data.pklPK");
  const std::string pickle = raw(dir.path, "old_model.bin",
                                 std::string("\x80\x02\x8a\x0al\xfc\x9c\x46\xf9\x20\x6a\xa8", 12));
  for (const std::string& path : {zip, pickle}) {
    CAPTURE(path);
    try {
      (void)cli::safetensors_fill(path, layout);
      FAIL("the PyTorch file was accepted");
    } catch (const Error& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.find(path) != std::string::npos);
      CHECK(what.find("torch.save") != std::string::npos);
      CHECK(what.find("not a safetensors file") != std::string::npos);
      CHECK(what.find("save_pretrained(OUT_FOLDER, safe_serialization=True)") != std::string::npos);
      CHECK(what.find("save_file(") != std::string::npos);
      CHECK(what.find("578712552184433488") == std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
    }
  }
  CHECK_THROWS_WITH(SafetensorsFile(zip), Catch::Contains("a zip archive (PyTorch's torch.save"));
  CHECK_THROWS_WITH(SafetensorsFile(pickle), Catch::Contains("a Python pickle"));
  const std::string lfs =
      raw(dir.path, "model.safetensors",
          "version https://git-lfs.github.com/spec/v1\noid sha256:248dfc39\nsize 548105171\n");
  CHECK_THROWS_WITH(SafetensorsFile(lfs),
                    Catch::Contains("a Git LFS pointer") && Catch::Contains("git lfs pull"));
  // A safetensors file is still read as one (the formats are named only where the bytes cannot
  // be safetensors).
  std::string tiny("\x02\x00\x00\x00\x00\x00\x00\x00{}", 10);
  const std::string empty = (dir.path / "empty.safetensors").string();
  std::ofstream(empty, std::ios::binary) << tiny;
  CHECK(SafetensorsFile(empty).tensors().empty());
}

}  // namespace
}  // namespace zero
