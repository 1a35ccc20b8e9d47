// The compression flags `zero train`, `zero compare` and `zero plan` read (zero/compression.hpp):
// each sets its key of the config's "compression" section, over what the config file gives.
#pragma once

#include <boost/program_options.hpp>

#include "zero/config.hpp"

namespace zero::cli {

// --compress-grads, --compress-weights, --quant-block, --topk-ratio, --error-feedback.
void add_compress_options(boost::program_options::options_description& opts);
// The flags given, into config.compression; a bad value is one zero::Error naming the flag.
void apply_compress_flags(const boost::program_options::variables_map& vm, Config& config);

}  // namespace zero::cli
