// zero's GPT names <-> Hugging Face GPT-2's (models/gpt_hf_names.hpp).
#include "models/gpt_hf_names.hpp"

#include <charconv>

namespace zero::models {
namespace {

// Inside a block: zero's suffix, GPT-2's, and whether GPT-2 stores the weight transposed.
struct BlockName {
  std::string_view zero, hf;
  bool transpose;
};
constexpr BlockName kBlock[] = {
    {"ln1.weight", "ln_1.weight", false},
    {"ln1.bias", "ln_1.bias", false},
    {"attn.qkv.weight", "attn.c_attn.weight", true},
    {"attn.qkv.bias", "attn.c_attn.bias", false},
    {"attn.proj.weight", "attn.c_proj.weight", true},
    {"attn.proj.bias", "attn.c_proj.bias", false},
    {"ln2.weight", "ln_2.weight", false},
    {"ln2.bias", "ln_2.bias", false},
    {"mlp.fc.weight", "mlp.c_fc.weight", true},
    {"mlp.fc.bias", "mlp.c_fc.bias", false},
    {"mlp.proj.weight", "mlp.c_proj.weight", true},
    {"mlp.proj.bias", "mlp.c_proj.bias", false},
};
// Outside the blocks: the same orientation on both sides.
constexpr std::pair<std::string_view, std::string_view> kTop[] = {
    {"wte.weight", "wte.weight"},
    {"wpe.weight", "wpe.weight"},
    {"ln_f.weight", "ln_f.weight"},
    {"ln_f.bias", "ln_f.bias"},
    {"head.weight", "lm_head.weight"}};

// "12.attn..." after `prefix`: the layer number and the rest, or nullopt.
std::optional<std::pair<std::string_view, std::string_view>> layer_of(std::string_view name,
                                                                      std::string_view prefix,
                                                                      char after) {
  if (!name.starts_with(prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  int layer = 0;
  const auto [p, err] = std::from_chars(name.data(), name.data() + name.size(), layer);
  const auto digits = static_cast<std::size_t>(p - name.data());
  if (err != std::errc() || digits == 0 || layer < 0 || (digits > 1 && name[0] == '0') ||
      digits >= name.size() || name[digits] != after)
    return std::nullopt;
  return std::pair{name.substr(0, digits), name.substr(digits + 1)};
}

}  // namespace

std::optional<HfName> gpt_name_to_hf(std::string_view zero_name) {
  for (const auto& [z, h] : kTop)
    if (zero_name == z) return HfName{std::string(h), false};
  if (const auto l = layer_of(zero_name, "block", '.'))
    for (const auto& b : kBlock)
      if (l->second == b.zero)
        return HfName{"h." + std::string(l->first) + "." + std::string(b.hf), b.transpose};
  return std::nullopt;
}

std::optional<HfName> gpt_name_from_hf(std::string_view hf_name) {
  if (hf_name.starts_with("transformer.")) hf_name.remove_prefix(12);
  for (const auto& [z, h] : kTop)
    if (hf_name == h) return HfName{std::string(z), false};
  if (const auto l = layer_of(hf_name, "h.", '.'))
    for (const auto& b : kBlock)
      if (l->second == b.hf)
        return HfName{"block" + std::string(l->first) + "." + std::string(b.zero), b.transpose};
  return std::nullopt;
}

}  // namespace zero::models
