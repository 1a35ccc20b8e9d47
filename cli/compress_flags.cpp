// The compression flags (cli/compress_flags.hpp).
#include "cli/compress_flags.hpp"

#include <string>

#include "zero/zero.hpp"

namespace zero::cli {

namespace po = boost::program_options;

void add_compress_options(po::options_description& opts) {
  po::options_description c("compression (docs/compression.md)");
  // clang-format off
  c.add_options()
      ("compress-grads", po::value<std::string>()->value_name("none|int8|int4|topk"),
       "the gradient reduction's encoding: blockwise int8 or int4 (ZeRO++ qgZ), or TopK pairs "
       "(compression.gradients)")
      ("compress-weights", po::value<std::string>()->value_name("none|int8"),
       "stage 3's parameter gathers as blockwise int8 (ZeRO++ qwZ; compression.weights)")
      ("quant-block", po::value<std::int64_t>()->value_name("N"),
       "values per fp32 scale of int8/int4 blocks (compression.block_size; default 2048)")
      ("topk-ratio", po::value<double>()->value_name("R"),
       "TopK: the fraction of each segment sent, in (0, 1] (compression.topk_ratio; default 0.01)")
      ("error-feedback", po::value<std::string>()->value_name("on|off"),
       "TopK: add what was not sent to the next step's gradient (compression.error_feedback; "
       "default on)");
  // clang-format on
  opts.add(c);
}

void apply_compress_flags(const po::variables_map& vm, Config& config) {
  CompressionConfig& k = config.compression;
  if (vm.count("compress-grads")) {
    const std::string v = vm["compress-grads"].as<std::string>();
    const auto g = parse_grad_compression(v);
    if (!g) throw Error(cat("--compress-grads: expected none, int8, int4 or topk, got '", v, "'"));
    k.gradients = *g;
  }
  if (vm.count("compress-weights")) {
    const std::string v = vm["compress-weights"].as<std::string>();
    const auto w = parse_weight_compression(v);
    if (!w) throw Error(cat("--compress-weights: expected none or int8, got '", v, "'"));
    k.weights = *w;
  }
  if (vm.count("quant-block")) {
    const std::int64_t b = vm["quant-block"].as<std::int64_t>();
    if (b < 1 || b > (std::int64_t{1} << 24))
      throw Error(cat("--quant-block: expected 1..16777216 values, got ", b));
    k.block_size = b;
  }
  if (vm.count("topk-ratio")) {
    const double r = vm["topk-ratio"].as<double>();
    if (!(r > 0 && r <= 1)) throw Error(cat("--topk-ratio: expected a number in (0, 1], got ", r));
    k.topk_ratio = r;
  }
  if (vm.count("error-feedback")) {
    const std::string v = vm["error-feedback"].as<std::string>();
    if (v != "on" && v != "off")
      throw Error(cat("--error-feedback: expected on or off, got '", v, "'"));
    k.error_feedback = v == "on";
  }
}

}  // namespace zero::cli
