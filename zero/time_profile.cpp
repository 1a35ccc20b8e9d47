// The time model's cluster profiles (zero/time_model.hpp): the built-in ones with their sources,
// and profile files (a JSON object of figures, or a base and the figures that differ).
#include <cmath>
#include <fstream>
#include <sstream>

#include "zero/config.hpp"
#include "zero/json_reader.hpp"
#include "zero/time_model.hpp"

namespace zero {
namespace {
constexpr double kGiB = 1073741824.0;

// Achievable link rates are 0.8 of the datasheet's per-direction rate (PCIe 4.0 x16: 25 of
// 31.5 GB/s; NVLink 3: 240 of 300, NCCL's own model caps A100 rings at 235); latencies are NCCL's
// tuning model's for rings with the Simple protocol (src/graph/tuning.cc: 8.4 us per call, per
// step 3.4 us NVLink, 5.7 us PCIe, 9.6 us network). docs/time.md gives every figure's source.
ClusterProfile a100_pcie() {
  ClusterProfile c;
  c.name = "a100-pcie";
  c.description =
      "8 x A100 80GB PCIe per node, no NVLink (PCIe 4.0 x16), one 200 Gb/s HDR InfiniBand "
      "adapter per node";
  c.peak_flops = 312e12;
  c.compute_efficiency = 0.5;
  c.memory_bytes = static_cast<std::int64_t>(80 * kGiB);
  c.hbm_bandwidth = 1935e9;
  c.hbm_efficiency = 0.8;
  c.gpus_per_node = 8;
  c.intra_bandwidth = 25e9;  // 0.8 x 31.5 GB/s (the datasheet's 64 GB/s counts both directions)
  c.inter_bandwidth = 20e9;  // 0.8 x 25 GB/s: one ConnectX-6 HDR port
  c.intra_latency = 5.7e-6;
  c.inter_latency = 9.6e-6;
  c.call_latency = 8.4e-6;
  c.sources =
      "NVIDIA A100 datasheet (312 TFLOP/s bf16 dense, 80GB HBM2e at 1,935 GB/s, PCIe Gen4 64 "
      "GB/s); NVIDIA ConnectX-6 datasheet (200 Gb/s HDR); NCCL src/graph/tuning.cc (latencies)";
  return c;
}

ClusterProfile a100_sxm() {
  ClusterProfile c = a100_pcie();
  c.name = "a100-sxm";
  c.description =
      "DGX A100: 8 x A100 SXM4 80GB per node, NVLink 3 through NVSwitch (600 GB/s per GPU), "
      "8 x 200 Gb/s HDR InfiniBand per node";
  c.hbm_bandwidth = 2039e9;
  c.intra_bandwidth = 240e9;  // 0.8 x 300 GB/s per direction
  c.inter_bandwidth = 160e9;  // 8 ports x 0.8 x 25 GB/s
  c.intra_latency = 3.4e-6;
  c.sources =
      "NVIDIA A100 datasheet (312 TFLOP/s bf16 dense, 80GB HBM2e at 2,039 GB/s, NVLink 600 "
      "GB/s); NVIDIA DGX A100 datasheet (8 x ConnectX-6 200 Gb/s); NCCL src/graph/tuning.cc";
  return c;
}

ClusterProfile h100_sxm() {
  ClusterProfile c = a100_sxm();
  c.name = "h100-sxm";
  c.description =
      "DGX H100: 8 x H100 SXM5 80GB per node, NVLink 4 (900 GB/s per GPU), 8 x 400 Gb/s NDR "
      "InfiniBand per node";
  c.peak_flops = 989e12;
  c.hbm_bandwidth = 3350e9;
  c.intra_bandwidth = 360e9;  // 0.8 x 450 GB/s per direction
  c.inter_bandwidth = 320e9;  // 8 ports x 0.8 x 50 GB/s
  c.sources =
      "NVIDIA H100 datasheet (SXM: 989 TFLOP/s bf16 dense, 80GB HBM3 at 3.35 TB/s, NVLink 900 "
      "GB/s); NVIDIA DGX H100 datasheet (8 x ConnectX-7 400 Gb/s); NCCL src/graph/tuning.cc";
  return c;
}

ClusterProfile h200() {
  ClusterProfile c = h100_sxm();
  c.name = "h200";
  c.description =
      "8 x H200 SXM 141GB per node (HGX H200), NVLink 4 (900 GB/s per GPU), 8 x 400 Gb/s NDR "
      "InfiniBand per node";
  c.memory_bytes = static_cast<std::int64_t>(141 * kGiB);
  c.hbm_bandwidth = 4800e9;
  c.sources =
      "NVIDIA H200 datasheet (989 TFLOP/s bf16 dense, 141GB HBM3e at 4.8 TB/s, NVLink 900 "
      "GB/s); NVIDIA DGX H200 datasheet (8 x ConnectX-7 400 Gb/s); NCCL src/graph/tuning.cc";
  return c;
}

std::vector<ClusterProfile> builtins() {
  return {a100_pcie(), a100_sxm(), h100_sxm(), h200()};
}

std::string names_list() {
  std::string s;
  for (const auto& n : cluster_names()) s += cat(s.empty() ? "" : ", ", n);
  return s;
}

// One numeric key of a profile file: the JSON key, its field, its unit's scale, its range.
struct Key {
  std::string_view key;
  double ClusterProfile::*field;  // nullptr: memory_bytes or gpus_per_node (read apart)
  double scale;
  bool unit_interval;     // (0, 1]; otherwise > 0, or >= 0 for latencies (scale 1e-6)
  bool optional = false;  // a file without a base may leave it out (the codec's: derived)
};
const Key kKeys[] = {
    {"peak_tflops", &ClusterProfile::peak_flops, 1e12, false},
    {"compute_efficiency", &ClusterProfile::compute_efficiency, 1, true},
    {"memory_GiB", nullptr, kGiB, false},
    {"hbm_bandwidth_GBs", &ClusterProfile::hbm_bandwidth, 1e9, false},
    {"hbm_efficiency", &ClusterProfile::hbm_efficiency, 1, true},
    {"gpus_per_node", nullptr, 1, false},
    {"intra_bandwidth_GBs", &ClusterProfile::intra_bandwidth, 1e9, false},
    {"inter_bandwidth_GBs", &ClusterProfile::inter_bandwidth, 1e9, false},
    {"intra_latency_us", &ClusterProfile::intra_latency, 1e-6, false},
    {"inter_latency_us", &ClusterProfile::inter_latency, 1e-6, false},
    {"call_latency_us", &ClusterProfile::call_latency, 1e-6, false},
    {"quantize_ns", &ClusterProfile::quantize, 1e-9, false, true},
    {"dequantize_add_ns", &ClusterProfile::dequantize_add, 1e-9, false, true},
    {"dequantize_ns", &ClusterProfile::dequantize, 1e-9, false, true},
    {"topk_select_ns", &ClusterProfile::topk_select, 1e-9, false, true},
    {"topk_sort_ns", &ClusterProfile::topk_sort, 1e-9, false, true},
};

void read_string(const detail::ObjectReader& r, std::string_view key, std::string& out) {
  if (const boost::json::value* v = r.get(key)) {
    if (!v->is_string()) detail::fail_expected(std::string(key), "a string", *v);
    out = std::string(v->get_string());
  }
}

ClusterProfile read_object(const boost::json::value& doc, const std::string& default_name) {
  std::vector<std::string> warnings, autos;
  detail::ParseLog log{warnings, autos, {}};
  std::vector<std::string_view> known = {"name", "description", "sources", "base"};
  for (const Key& k : kKeys) known.push_back(k.key);
  const detail::ObjectReader r(doc, "", std::span<const std::string_view>(known), {}, log);
  ClusterProfile c;
  std::string base;
  read_string(r, "base", base);
  if (r.has("base")) {
    const auto b = builtin_cluster(base);
    if (!b)
      detail::fail("base",
                   cat("expected a built-in profile (", names_list(), "), got \"", base, "\""));
    c = *b;
    c.description = cat(base, " with measured figures");
    c.sources = cat("the file's figures; the rest from ", base, ": ", c.sources);
  } else {
    std::string missing;
    for (const Key& k : kKeys)
      if (!k.optional && !r.has(k.key)) missing += cat(missing.empty() ? "" : ", ", k.key);
    if (!missing.empty())
      throw Error(cat("lacks ", missing, ": give every figure (docs/time.md), or \"base\": a ",
                      "built-in profile (", names_list(), ") whose figures the file overrides"));
    c.sources = "the file";
  }
  for (const Key& k : kKeys) {
    const boost::json::value* v = r.get(k.key);
    if (!v) continue;
    const std::string path(k.key);
    if (k.key == "gpus_per_node") {
      r.integer(k.key, c.gpus_per_node, 1, 1 << 20);
      continue;
    }
    const bool latency = k.scale == 1e-6;
    const double d = detail::to_number(*v, path, "a number");
    if (k.unit_interval ? !(d > 0 && d <= 1) : latency ? d < 0 : d <= 0)
      detail::fail_expected(path,
                            k.unit_interval ? "a number in (0, 1]"
                            : latency       ? "a number >= 0"
                                            : "a number > 0",
                            *v);
    if (k.field) {
      c.*k.field = d * k.scale;
    } else {  // memory_GiB
      if (d * k.scale >= 9.2e18) detail::fail_expected(path, "less than 8 EiB", *v);
      c.memory_bytes = static_cast<std::int64_t>(d * k.scale);
    }
  }
  c.name = base.empty() ? default_name : cat(default_name, " (", base, ")");
  read_string(r, "name", c.name);
  read_string(r, "description", c.description);
  read_string(r, "sources", c.sources);
  validate(c);
  return c;
}

}  // namespace

std::vector<std::string> cluster_names() {
  std::vector<std::string> names;
  for (const auto& c : builtins()) names.push_back(c.name);
  return names;
}

std::optional<ClusterProfile> builtin_cluster(std::string_view name) {
  for (auto& c : builtins())
    if (c.name == name) return c;
  return std::nullopt;
}

ClusterProfile read_cluster_profile(std::string_view json_text, const std::string& origin) {
  try {
    boost::system::error_code ec;
    const boost::json::value doc = boost::json::parse(json_text, ec);
    if (ec) throw Error(cat("is not valid JSON (", ec.message(), ")"));
    detail::refuse_duplicate_keys(json_text, "", "say each once");
    return read_object(doc, origin);
  } catch (const Error& e) {
    throw Error(cat("cluster profile ", origin, ": ", e.what()));
  }
}

ClusterProfile load_cluster_profile(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream text;
  if (!f || !(text << f.rdbuf()))
    throw Error(cat("cannot read the cluster profile file '", path, "'"));
  return read_cluster_profile(text.str(), path);
}

void validate(const ClusterProfile& c) {
  auto need = [&](bool ok, const char* field, const char* what, double got) {
    if (!ok)
      throw Error(cat("cluster profile '", c.name, "': ", field, " must be ", what, ", got ", got));
  };
  need(c.peak_flops > 0, "peak_flops", "> 0", c.peak_flops);
  need(c.compute_efficiency > 0 && c.compute_efficiency <= 1, "compute_efficiency", "in (0, 1]",
       c.compute_efficiency);
  need(c.memory_bytes > 0, "memory_bytes", "> 0", static_cast<double>(c.memory_bytes));
  need(c.hbm_bandwidth > 0, "hbm_bandwidth", "> 0", c.hbm_bandwidth);
  need(c.hbm_efficiency > 0 && c.hbm_efficiency <= 1, "hbm_efficiency", "in (0, 1]",
       c.hbm_efficiency);
  need(c.gpus_per_node >= 1, "gpus_per_node", ">= 1", c.gpus_per_node);
  need(c.intra_bandwidth > 0, "intra_bandwidth", "> 0", c.intra_bandwidth);
  need(c.inter_bandwidth > 0, "inter_bandwidth", "> 0", c.inter_bandwidth);
  for (auto [v, field] :
       {std::pair{c.intra_latency, "intra_latency"}, std::pair{c.inter_latency, "inter_latency"},
        std::pair{c.call_latency, "call_latency"}, std::pair{c.quantize, "quantize"},
        std::pair{c.dequantize_add, "dequantize_add"}, std::pair{c.dequantize, "dequantize"},
        std::pair{c.topk_select, "topk_select"}, std::pair{c.topk_sort, "topk_sort"}})
    need(v >= 0 && std::isfinite(v), field, ">= 0", v);
}

}  // namespace zero
