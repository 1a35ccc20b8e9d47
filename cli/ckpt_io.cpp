// safetensors_fill (cli/ckpt_io.hpp): a safetensors file checked against a model's layout, then
// read parameter by parameter as the engine initialises them.
#include "cli/ckpt_io.hpp"

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

// The tensors a GPT-2 file may hold that are no parameter: the causal masks (buffers) and the
// output head, which GPT-2 ties to wte.
bool ignorable(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
         name == "lm_head.weight";
}

}  // namespace

std::function<void(int, std::span<float>)> safetensors_fill(const std::string& path,
                                                            const Layout& layout) {
  auto file = std::make_shared<SafetensorsFile>(path);
  std::vector<Source> sources;
  std::unordered_set<std::string> used;
  for (const ParamLayout& p : layout.params) {
    Source s;
    std::string looked = "'" + p.name + "'";
    s.tensor = file->find(p.name);
    if (!s.tensor) {
      if (const auto hf = models::gpt_name_to_hf(p.name)) {
        looked += cat(" and Hugging Face GPT-2's '", hf->name, "'");
        s.tensor = file->find(hf->name);
        if (!s.tensor) s.tensor = file->find("transformer." + hf->name);
        s.transpose = s.tensor != nullptr && hf->transpose;
      }
    }
    if (!s.tensor)
      throw Error(cat(path, " has no tensor for parameter '", p.name, "' (looked for ", looked,
                      "); it holds ", file->tensors().size(), " tensors",
                      file->tensors().empty()
                          ? std::string()
                          : cat(", the first '", file->tensors()[0].name, "'")));
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
