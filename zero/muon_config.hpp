// Reading and writing Muon's own optimizer params (docs/optimizers.md: muon_lr, momentum,
// nesterov, adjust_lr_fn, muon_params), for config_read.cpp and config.cpp. Internal to zero/.
#pragma once

#include <boost/json.hpp>

#include "zero/config.hpp"
#include "zero/json_reader.hpp"

namespace zero {

// optimizer.params' Muon keys into `o` (read only for type Muon: optimizer_params refuses them
// for the other types).
void read_muon_params(const detail::ObjectReader& p, OptimizerConfig& o);
// The Muon keys of `o` into the optimizer params to_json writes.
void write_muon_params(const OptimizerConfig& o, boost::json::object& op);

}  // namespace zero
