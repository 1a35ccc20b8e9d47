// Reading and writing the "compression" key and DeepSpeed's two ZeRO++ switches
// (zero/compression.hpp), for config_read.cpp and config.cpp; and their resolution into
// Settings::compression. Internal to zero/.
#pragma once

#include <boost/json.hpp>

#include "zero/compression.hpp"
#include "zero/config.hpp"
#include "zero/json_reader.hpp"

namespace zero {

// compression {...} at the top level into c.compression.
void read_compression(const detail::ObjectReader& top, Config& c);
// zero_optimization's zero_quantized_gradients and zero_quantized_weights into `z`.
void read_zeropp_switches(const detail::ObjectReader& zero, ZeroConfig& z);
// The keys that differ from the defaults, into the JSON objects to_json writes.
void write_compression(const Config& c, boost::json::object& root, boost::json::object& zero);
// Settings::compression for a run at `stage`; throws zero::Error naming the key on a conflict.
WireCompression resolve_compression(const Config& c, bool stage3);

}  // namespace zero
