// The wire settings of `zero compare --compress` (cli/compare_settings.hpp).
#include "cli/compare_settings.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <sstream>

namespace zero::cli {
namespace {

constexpr std::string_view kGrammar =
    "give dense, fp32, bf16, int8, int4, qgZ, topk[:RATIO[:ef|:noef]] (or topk-P%[-ef|-noef]), "
    "qwZ or hpZ[:H], joined by + (qwZ+qgZ+hpZ), comma-separated";

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string> split(std::string_view text, char by) {
  std::vector<std::string> out;
  std::stringstream in{std::string(text)};
  for (std::string item; std::getline(in, item, by);) out.push_back(item);
  if (!text.empty() && text.back() == by) out.emplace_back();
  return out;
}

std::optional<double> number(std::string_view s) {
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

[[noreturn]] void bad(std::string_view item, std::string_view why) {
  throw Error(cat("--compress: '", item, "' ", why));
}

// topk, topk:R, topk:R:ef, topk:R:noef, topk:noef; topk-P%, topk-P%-ef, topk-P%-noef.
void read_topk(const std::string& part, std::string_view item, WireSetting& s) {
  if (s.gradients != GradCompression::none)
    bad(item, "names two gradient encodings; a setting has one");
  s.gradients = GradCompression::topk;
  const bool percent = part.size() > 4 && part[4] == '-';
  std::vector<std::string> args =
      part.size() > 4 ? split(std::string_view(part).substr(5), percent ? '-' : ':')
                      : std::vector<std::string>{};
  if (part.size() > 4 && part[4] != ':' && part[4] != '-') bad(item, cat("is not a setting: ", kGrammar));
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "ef" || a == "noef") {
      if (i + 1 != args.size()) bad(item, "gives ef or noef before the end");
      s.error_feedback = a == "ef";
      continue;
    }
    if (i != 0) bad(item, cat("is not a setting: ", kGrammar));
    std::string_view v = a;
    if (percent && (v.empty() || v.back() != '%'))
      bad(item, "needs its ratio as a percentage (topk-1%) or after a colon (topk:0.01)");
    if (percent) v.remove_suffix(1);
    const std::optional<double> r = number(v);
    const double ratio = r ? (percent ? *r / 100 : *r) : 0;
    if (!r || !(ratio > 0 && ratio <= 1))
      bad(item, "needs a TopK ratio in (0, 1] (a percentage in (0, 100])");
    s.topk_ratio = ratio;
  }
}

void read_hpz(const std::string& part, std::string_view item, WireSetting& s) {
  if (part == "hpz") {
    s.hpz = kDefaultHpz;
    return;
  }
  const std::optional<double> h = part.size() > 4 && part[3] == ':'
                                      ? number(std::string_view(part).substr(4))
                                      : std::nullopt;
  if (!h || *h < 2 || *h != static_cast<int>(*h) || *h > 1 << 20)
    bad(item, "needs hpZ's group size as a whole number of ranks from 2 (hpZ:2)");
  s.hpz = static_cast<int>(*h);
}

// part without prefix where it starts with it, else part.
std::string_view unprefixed(std::string_view part, std::string_view prefix) {
  return part.starts_with(prefix) ? part.substr(prefix.size()) : part;
}

// One part of a setting (between +), into s. Dtypes and encodings go by the names --reduce-dtype,
// --compress-grads and --compress-weights take; bench/compression_cluster.py's names put what
// carries them first (dense-bf16, qgZ-int8, qwZ-int8), and qgZ alone is DeepSpeed's
// zero_quantized_gradients: int4. TopK and hpZ carry arguments of their own.
void read_part(const std::string& part, std::string_view item, WireSetting& s) {
  auto grads = [&](GradCompression g) {
    if (s.gradients != GradCompression::none)
      bad(item, "names two gradient encodings; a setting has one");
    s.gradients = g;
  };
  auto dtype = [&](DType d) {
    if (s.reduce) bad(item, "names two reduction dtypes");
    s.reduce = d;
  };
  if (part == "dense") return;
  if (const auto d = parse_training_dtype(unprefixed(part, "dense-"))) return dtype(*d);
  const auto g = part == "qgz" ? std::optional(GradCompression::int4)
                               : parse_grad_compression(unprefixed(part, "qgz-"));
  if (g == GradCompression::int8 || g == GradCompression::int4) return grads(*g);
  if (part.starts_with("topk")) return read_topk(part, item, s);
  if (part == "qwz" || part == cat("qwz-", name_of(WeightCompression::int8))) {
    s.weights_int8 = true;
    return;
  }
  if (part.starts_with("hpz")) return read_hpz(part, item, s);
  bad(item, cat("is not a setting: ", kGrammar));
}

}  // namespace

std::vector<WireSetting> parse_wire_settings(std::string_view list) {
  std::vector<WireSetting> out;
  for (const std::string& item : split(list, ',')) {
    if (item.empty()) throw Error(cat("--compress: an empty setting in '", list, "'"));
    WireSetting s{.name = item};
    for (const std::string& part : split(lower(item), '+')) {
      if (part.empty()) bad(item, "has an empty part between its +");
      read_part(part, item, s);
    }
    if (s.gradients != GradCompression::topk && (s.topk_ratio || s.error_feedback))
      bad(item, "gives a TopK ratio or error feedback without topk");
    for (const WireSetting& o : out)
      if (lower(o.name) == lower(item)) bad(item, "is listed twice");
    out.push_back(std::move(s));
  }
  if (out.empty()) throw Error("--compress: the list is empty");
  return out;
}

std::string cannot_run(const WireSetting& s, int stage, int ranks) {
  const std::string what = s.weights_int8 && s.hpz ? "qwZ and hpZ" : s.weights_int8 ? "qwZ" : "hpZ";
  if ((s.weights_int8 || s.hpz) && stage != 3)
    return cat(s.name, " is not run at stage ", stage, ": ", what,
               s.weights_int8 && s.hpz ? " act" : " acts",
               " on stage 3's parameter gathers, and below stage 3 no gather precedes use");
  if (s.hpz && ranks > 0 && (s.hpz >= ranks || ranks % s.hpz != 0))
    return cat(s.name, " is not run at ", ranks, " ranks: hpZ's group of ", s.hpz,
               " ranks must divide the ranks and be fewer (a smaller group keeps a secondary copy)");
  return "";
}

Config with_setting(Config base, const WireSetting& s) {
  CompressionConfig& k = base.compression;
  k.gradients = s.gradients;
  k.weights = s.weights_int8 ? WeightCompression::int8 : WeightCompression::none;
  if (s.topk_ratio) k.topk_ratio = *s.topk_ratio;
  if (s.error_feedback) k.error_feedback = *s.error_feedback;
  base.zero.zero_quantized_gradients = false;
  base.zero.zero_quantized_weights = false;
  if (s.reduce) base.communication_data_type = *s.reduce;
  if (s.hpz) base.zero.zero_hpz_partition_size = s.hpz;
  return base;
}

std::string wire_key(const Config& c, int stage, int ranks) {
  const CompressionConfig& k = c.compression;
  const GradCompression g = c.zero.zero_quantized_gradients ? GradCompression::int4 : k.gradients;
  const bool qwz = stage == 3 && (k.weights == WeightCompression::int8 || c.zero.zero_quantized_weights);
  const int hpz = c.zero.zero_hpz_partition_size;
  std::string key = cat(name_of(c.communication_data_type), " ", name_of(g));
  if (g == GradCompression::int8 || g == GradCompression::int4 || qwz)
    key += cat(" block ", k.block_size);
  if (g == GradCompression::topk) key += cat(" ratio ", k.topk_ratio, k.error_feedback ? " ef" : " noef");
  if (qwz) key += " qwZ";
  if (stage == 3 && hpz > 1 && hpz < ranks) key += cat(" hpZ ", hpz);
  return key;
}

}  // namespace zero::cli
