// safetensors_fill (cli/ckpt_io.hpp): a safetensors file checked against a model's layout, then
// read parameter by parameter as the engine initialises them.
#include "cli/ckpt_io.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_set>

#include "models/gpt_hf_names.hpp"

namespace zero::cli {
namespace {

// Where param p's values are: a tensor of the file, stored transposed or not.
struct Source {
  const SafetensorsTensor* tensor = nullptr;
  bool transpose = false;
};

// GPT-2's output head, tied to its token embedding: a model with no head of its own (no
// "head.weight" parameter) uses wte for both.
constexpr const char* kHfHead = "lm_head.weight";
constexpr const char* kEmbedding = "wte.weight";

// The tensors a GPT-2 file may hold that are no parameter: the causal masks (buffers).
bool ignorable(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

// The names param `name` may have in the file, zero's first, and whether GPT-2's is transposed.
std::vector<std::pair<std::string, bool>> names_of(const std::string& name) {
  std::vector<std::pair<std::string, bool>> out{{name, false}};
  if (const auto hf = models::gpt_name_to_hf(name)) {
    if (hf->name != name) out.emplace_back(hf->name, hf->transpose);
    out.emplace_back("transformer." + hf->name, hf->transpose);
  }
  return out;
}

Source find_param(const SafetensorsFile& file, const ParamLayout& p, bool tied,
                  const std::string& path) {
  std::string looked;
  for (const auto& [name, transpose] : names_of(p.name)) {
    looked += cat(looked.empty() ? "'" : ", '", name, "'");
    if (const SafetensorsTensor* t = file.find(name)) return {t, transpose};
  }
  // safetensors.torch.save_model(GPT2LMHeadModel) keeps one of two tied tensors, lm_head.weight,
  // and drops transformer.wte.weight: the head is the embedding.
  if (tied && p.name == kEmbedding) {
    looked += cat(", or '", kHfHead, "', GPT-2's head tied to it");
    if (const SafetensorsTensor* t = file.find(kHfHead)) return {t, false};
  }
  throw Error(cat(
      path, " has no tensor for parameter '", p.name, "' (looked for ", looked, "); it holds ",
      file.tensors().size(), " tensors",
      file.tensors().empty() ? std::string() : cat(", the first '", file.tensors()[0].name, "'")));
}

// The first element where tensors a and b (of one shape) differ bitwise as fp32, or -1.
std::int64_t first_difference(SafetensorsFile& file, const SafetensorsTensor& a,
                              const SafetensorsTensor& b, float& va, float& vb) {
  constexpr std::int64_t kSlice = std::int64_t{1} << 16;
  std::vector<float> x(static_cast<std::size_t>(std::min(kSlice, a.numel))), y(x.size());
  for (std::int64_t at = 0; at < a.numel; at += kSlice) {
    const auto k = static_cast<std::size_t>(std::min(kSlice, a.numel - at));
    file.read(a, at, std::span(x).first(k));
    file.read(b, at, std::span(y).first(k));
    if (std::memcmp(x.data(), y.data(), k * 4) == 0) continue;
    for (std::size_t i = 0; i < k; ++i)
      if (std::memcmp(&x[i], &y[i], 4) != 0) {
        va = x[i], vb = y[i];
        return at + static_cast<std::int64_t>(i);
      }
  }
  return -1;
}

// A file holding both wte and lm_head for a model whose head is wte: loading it is right only
// when the two are the same values (GPT-2 ties them); a head of its own would be dropped.
void check_tied_head(SafetensorsFile& file, const SafetensorsTensor& wte, const std::string& path) {
  const SafetensorsTensor* head = file.find(kHfHead);
  if (!head || head == &wte) return;
  const std::string drop =
      "zero's GPT ties its output head to wte (an untied head is not implemented), so this head "
      "would be dropped; to start from wte as the head anyway, remove 'lm_head.weight' from the "
      "file (Python: `from safetensors.torch import load_file, save_file; t = load_file('FILE'); "
      "del t['lm_head.weight']; save_file(t, 'tied.safetensors')`)";
  if (head->shape != wte.shape)
    throw Error(cat(path, ": tensor '", kHfHead, "' has shape ", shape_text(head->shape),
                    " while '", wte.name, "' has ", shape_text(wte.shape),
                    ": the file's model has an output head of its own; ", drop));
  float h = 0, w = 0;
  const std::int64_t at = first_difference(file, *head, wte, h, w);
  if (at >= 0)
    throw Error(cat(path, ": tensor '", kHfHead, "' differs from '", wte.name, "' (element ", at,
                    ": ", h, " against ", w, "): the file's model has an untied output head; ",
                    drop));
}

}  // namespace

std::function<void(int, std::span<float>)> safetensors_fill(const std::string& path,
                                                            const Layout& layout) {
  auto file = std::make_shared<SafetensorsFile>(path);
  const bool has_head = std::any_of(layout.params.begin(), layout.params.end(),
                                    [](const ParamLayout& p) { return p.name == "head.weight"; });
  std::vector<Source> sources;
  std::unordered_set<std::string> used;
  for (const ParamLayout& p : layout.params) {
    const Source s = find_param(*file, p, !has_head, path);
    const SafetensorsTensor& t = *s.tensor;
    std::vector<std::int64_t> want = p.shape;
    if (s.transpose) std::swap(want[0], want[1]);
    if (t.shape != want)
      throw Error(cat(
          path, ": tensor '", t.name, "' has shape ", shape_text(t.shape), ", but parameter '",
          p.name, "' is ", shape_text(p.shape),
          s.transpose ? cat(", which GPT-2 stores [in, out] as ", shape_text(want)) : std::string(),
          ": the file is of another model shape"));
    if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
      throw Error(cat(path, ": tensor '", t.name, "' is ", t.dtype,
                      "; initial weights are read from F32, BF16 or F16"));
    if (!has_head && p.name == kEmbedding) {
      check_tied_head(*file, t, path);
      used.insert(kHfHead);  // absent, the embedding itself, or checked equal to it
    }
    used.insert(t.name);
    sources.push_back(s);
  }
  for (const SafetensorsTensor& t : file->tensors())
    if (!used.contains(t.name) && !ignorable(t.name))
      throw Error(cat(path, ": tensor '", t.name, "' is no parameter of this model (",
                      layout.params.size(),
                      " parameters; a model of more layers, or another one?)"));

  return [file, sources = std::move(sources)](int param, std::span<float> out) {
    const Source& s = sources.at(static_cast<std::size_t>(param));
    const SafetensorsTensor& t = *s.tensor;
    if (static_cast<std::int64_t>(out.size()) != t.numel)
      throw Error(cat(file->path(), ": tensor '", t.name, "' has ", t.numel, " elements, ",
                      out.size(), " were asked for"));
    if (!s.transpose) {
      file->read(t, 0, out);
      return;
    }
    // The file's [in, out] is zero's [out, in] transposed: element (r, c) is at c * rows + r.
    std::vector<float> stored(out.size());
    file->read(t, 0, stored);
    const std::int64_t rows = t.shape[1], cols = t.shape[0];
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        out[static_cast<std::size_t>(r * cols + c)] =
            stored[static_cast<std::size_t>(c * rows + r)];
  };
}

}  // namespace zero::cli
